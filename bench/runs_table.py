"""Side by side, the per-file and per-branch accuracy of finished `toolgrpo run` jobs, after SFT
and after GRPO, read from each run folder's `summary.json`, with each job's wall time by stage.

    python bench/runs_table.py "seed 0=runs/<run>" "seed 1=runs/<run>" …

Rows: each eval file, each conditional kind and branch of `eval/multistep`, and the two branches
with every kind together (right/n per run, and the share over all runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FILES = ["eval/multistep", "eval/single_step", "eval/unseen_phrasing"]
KINDS = ["check_balance", "check_balance and get_quote", "get_quote"]
BRANCHES = ["fails", "holds"]
CONDITIONS = [f"eval/multistep · after {kind} · {branch}" for kind in KINDS for branch in BRANCHES]


def right_of(summary: dict[str, Any], stage: str, key: str) -> tuple[int, int]:
    """Rows right and rows of `key` (an eval file or a conditional kind and branch)."""
    accuracy = summary["accuracy"][stage]
    share = accuracy["by_source"].get(key, accuracy["by_condition"].get(key))
    n = accuracy["n"][key]
    return round(share * n), n


def row(label: str, cells: list[tuple[int, int]]) -> str:
    right, n = sum(c[0] for c in cells), sum(c[1] for c in cells)
    shown = " | ".join(f"{r}/{k}" for r, k in cells)
    return f"| {label} | {shown} | {100 * right / n:.1f}% |"


def main(runs: dict[str, Path]) -> None:
    summaries = {name: json.loads((run / "summary.json").read_text()) for name, run in runs.items()}
    print("| | " + " | ".join(summaries) + " | over all |")
    print("|---|" + "---|" * (len(summaries) + 1))
    for stage in ("sft", "grpo"):
        for key in FILES + CONDITIONS:
            label = f"after {stage.upper()}: {key.replace('eval/multistep · ', 'multistep · ')}"
            print(row(label, [right_of(s, stage, key) for s in summaries.values()]))
        for branch in BRANCHES:
            keys = [key for key in CONDITIONS if key.endswith(branch)]
            cells = [
                (
                    sum(right_of(s, stage, k)[0] for k in keys),
                    sum(right_of(s, stage, k)[1] for k in keys),
                )
                for s in summaries.values()
            ]
            print(row(f"after {stage.upper()}: multistep · condition {branch} (every kind)", cells))
    walls = [" · ".join(f"{v:.0f}" for v in s["wall_s"].values()) for s in summaries.values()]
    print(
        "| wall (s): "
        + " · ".join(next(iter(summaries.values()))["wall_s"])
        + " | "
        + " | ".join(walls)
        + " | |"
    )
    zero = [f"{s['zero_std']['zero']}/{s['zero_std']['total']}" for s in summaries.values()]
    print("| zero-std groups | " + " | ".join(zero) + " | |")


if __name__ == "__main__":
    pairs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise SystemExit(__doc__)
    main({name: Path(run) for name, run in pairs})
