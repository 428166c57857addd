"""Issue #16's levers, each alone and together: SFT of the cpu preset, then greedy evaluation.

    .venv/bin/python bench/numeracy_levers.py [--epochs 6] [--aux-share 0.2] [--threads 1]
        [--arms baseline,digits,exercises,both] [--eval-rows N] [--out /tmp/numeracy-levers]

Arms: `baseline` trains on the training rows as they were before the reasoning wrote the figures
as digits (read from git at `--baseline-rev`), `digits` on the shipped rows (lever 1),
`exercises` on the baseline rows plus the numeracy exercises at `--aux-share` (lever 2), `both`
on the shipped rows plus the exercises. Only the training rows differ: every arm runs this
checkout's code and evaluates on this checkout's eval files (their prompts are the same at both
revisions). Prints one table: per-file accuracy and the conditional steps per comparison kind
and branch, as right/n. Two arms run at a time, one torch thread each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.metrics import compute_metrics
from toolgrpo.evaluation.predict import EvalSettings, predict, sample_source
from toolgrpo.training.config import load_preset

BASELINE_REV = "81b843a"  # the last commit before the reasoning restated figures as digits
TRAIN_FILES = ("single_step.jsonl", "multistep.jsonl")
EVAL_FILES = [
    DATA_DIR / "eval" / f"{name}.jsonl" for name in ("single_step", "multistep", "unseen_phrasing")
]
ARMS = {"baseline": (False, False), "digits": (True, False), "exercises": (False, True)}
ARMS["both"] = (True, True)


def _training_files(arm_dir: Path, digits: bool, rev: str) -> dict[str, Path]:
    """The arm's training files: the shipped ones, or those of `rev` written into `arm_dir`."""
    if digits:
        return {name: DATA_DIR / "train" / name for name in TRAIN_FILES}
    files = {}
    for name in TRAIN_FILES:
        text = subprocess.run(
            ["git", "show", f"{rev}:data/train/{name}"],
            cwd=DATA_DIR.parent,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        files[name] = arm_dir / name
        files[name].write_text(text, encoding="utf-8")
    return files


def _eval_frame(max_rows: int | None) -> pl.DataFrame:
    rows = []
    for path in EVAL_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()[:max_rows]
        rows += [
            {"condition": None} | json.loads(line) | {"source": sample_source(path)}
            for line in lines
        ]
    # a few rows may hold no conditional step: keep the column a string column all the same
    return pl.DataFrame(rows).with_columns(pl.col("condition").cast(pl.String))


def run_arm(name: str, args: argparse.Namespace) -> dict[str, str]:
    """Train the arm's SFT model in `<out>/<name>`, evaluate it, and return its `right/n` cells."""
    digits, exercises = ARMS[name]
    arm_dir = args.out / name
    arm_dir.mkdir(parents=True, exist_ok=True)
    files = _training_files(arm_dir, digits, args.baseline_rev)
    config = load_preset(
        "cpu",
        {
            "data.train_single_step": files["single_step.jsonl"],
            "data.train_multistep": files["multistep.jsonl"],
            "data.aux_share": args.aux_share if exercises else 0.0,
            "sft.num_train_epochs": args.epochs,
            "runtime.torch_threads": args.threads,
        },
    )
    config_file = config.write(arm_dir / "given_config.json")
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
    with (arm_dir / "sft.log").open("w") as log:
        command = [sys.executable, "-m", "toolgrpo.training", "sft", "--run-dir", str(arm_dir)]
        subprocess.run(
            [*command, "--config", str(config_file)], check=True, stdout=log, stderr=log, env=env
        )
    predictions = predict(
        arm_dir / "sft" / "model",
        _eval_frame(args.eval_rows),
        EvalSettings(torch_threads=args.threads),
    )
    predictions.write_parquet(arm_dir / "predictions.parquet")
    accuracy = compute_metrics(predictions).accuracy
    return {
        row: f"{round(value * accuracy.n[row])}/{accuracy.n[row]}" if value is not None else "–"
        for row, value in accuracy.rows().items()
        if row.startswith("eval/")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--epochs", type=float, default=load_preset("cpu").sft.num_train_epochs)
    parser.add_argument("--aux-share", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-rows", type=int, default=None, help="rows per eval file (quick)")
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument("--out", type=Path, default=Path("/tmp/numeracy-levers"))
    args = parser.parse_args()
    arms = args.arms.split(",")
    with ThreadPoolExecutor(max_workers=2) as pool:
        cells = dict(zip(arms, pool.map(lambda arm: run_arm(arm, args), arms), strict=True))
    rows = list(dict.fromkeys(row for arm in arms for row in cells[arm]))
    print(f"SFT only, cpu preset, {args.epochs:g} epochs, aux share {args.aux_share:g}, seed 0")
    print("| rows | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for row in rows:
        print(f"| {row} | " + " | ".join(cells[arm].get(row, "–") for arm in arms) + " |")


if __name__ == "__main__":
    main()
