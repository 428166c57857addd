"""A second domain trained on one wording per intent and evaluated on the wordings it never saw.

    python bench/second_domain.py OUT [--seed 0] [--singles 900]

A team brings its own catalogue and rows, often written from a few templates. This writes the
smart-home domain of `bench/domains/smart_home.py` that way: OUT/catalogue.json, the training
rows OUT/home/one_wording.jsonl (for each tool, the single-step requests of its most frequent
wording only: "Turn off the kitchen lights.", never "Kill the lights in the kitchen.") and the
eval rows OUT/home/other_wordings.jsonl (every single-step request worded otherwise), then prints
the commands that train and evaluate each preset on them. A wording is the request with its
rooms, doors, playlists and numbers taken out.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench.…` as a script, too
from bench.domains import smart_home

_VALUES = sorted(
    [room.replace("_", " ") for room in smart_home.ROOMS] + smart_home.DOORS + smart_home.PLAYLISTS,
    key=len,
    reverse=True,
)
_VALUE = re.compile("|".join(re.escape(value) for value in _VALUES))
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def wording(request: str) -> str:
    """`request` with its values taken out: "turn off the {} lights."."""
    return _NUMBER.sub("{n}", _VALUE.sub("{}", request.lower()))


def split_by_wording(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The rows of each tool's most frequent wording, and every other row."""
    by_tool: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        by_tool[row["tool"]][wording(row["prompt"])] += 1
    taught = {counts.most_common(1)[0][0] for counts in by_tool.values()}
    train = [row for row in rows if wording(row["prompt"]) in taught]
    return train, [row for row in rows if wording(row["prompt"]) not in taught]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def main(out: Path, seed: int = 0, singles: int = 900) -> None:
    rows = smart_home.rows(seed, singles=singles, multis=0)
    train, other = split_by_wording(rows)
    out.mkdir(parents=True, exist_ok=True)
    catalogue = smart_home.write_catalogue(out / "catalogue.json")
    train_file = _write(out / "home" / "one_wording.jsonl", train)
    eval_file = _write(out / "home" / "other_wordings.jsonl", other)
    wordings = Counter(wording(row["prompt"]) for row in other)
    tools = len({row["tool"] for row in train})
    print(f"{train_file}: {len(train)} rows, {tools} tools, one wording each")
    print(f"{eval_file}: {len(other)} rows in {len(wordings)} other wordings")
    for preset in ("cpu", "pretrained"):
        print(
            f"toolgrpo run --preset {preset} --train {train_file} --eval {eval_file} "
            f"--catalogue {catalogue}"
        )


if __name__ == "__main__":
    cyclopts.run(main)
