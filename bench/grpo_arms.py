"""GRPO arms side by side from one SFT model, each then evaluated greedily: the accuracy half of
a GRPO lever (a reward component, a learning rate, …).

An arm is the `cpu` preset with dotted overrides; each runs the pipeline's own GRPO stage
(`python -m toolgrpo.training grpo --init MODEL`) in its own folder, one process of one torch
thread, two arms at a time, and is evaluated on the shipped eval files. Prints the table of
`bench/sft_arms.py` (right/n per eval file and conditional kind and branch, exact params, stated
comparisons) with the SFT model as its first column.

    .venv/bin/python bench/grpo_arms.py --model runs/<run>/sft/model \\
        --arm "GRPO" --arm "arithmetic 0.2:grpo.reward_points.arithmetic=0.2"
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cyclopts
from sft_arms import eval_frame, parse_arm, prediction_cells, run_side_by_side

from toolgrpo.evaluation.predict import EvalSettings, predict
from toolgrpo.training.config import GRPO_LAYOUT_UNSET
from toolgrpo.training.config_overrides import load_preset

GRPO_WALL = "GRPO wall time (s)"


def evaluate(model: Path, folder: Path, eval_rows: int | None) -> dict[str, str]:
    """`right/n` cells of `model` on the eval files, its predictions kept in `folder`."""
    predictions = predict(model, eval_frame(eval_rows), EvalSettings(torch_threads=1))
    predictions.write_parquet(folder / "predictions.parquet")
    return prediction_cells(predictions)


def train_and_evaluate(
    arm_dir: Path, model: Path, overrides: dict[str, Any], eval_rows: int | None
) -> dict[str, str]:
    """GRPO from `model` with the `cpu` preset and `overrides` in `arm_dir`, then its cells."""
    arm_dir.mkdir(parents=True, exist_ok=True)
    fields = {**overrides, **GRPO_LAYOUT_UNSET, "runtime.torch_threads": 1}
    config_file = load_preset("cpu", fields).write(arm_dir / "given_config.json")
    command = [sys.executable, "-m", "toolgrpo.training", "grpo", "--run-dir", str(arm_dir)]
    command += ["--init", str(model), "--config", str(config_file)]
    started = time.perf_counter()
    with (arm_dir / "grpo.log").open("w") as log:
        env = os.environ | {"OMP_NUM_THREADS": "1"}
        subprocess.run(command, check=True, stdout=log, stderr=log, env=env)
    wall_s = time.perf_counter() - started
    return evaluate(arm_dir / "grpo" / "model", arm_dir, eval_rows) | {GRPO_WALL: f"{wall_s:.0f}"}


def main(
    model: Path,
    arm: list[str],
    eval_rows: int | None = None,
    out: Path = Path("/tmp/grpo-arms"),
) -> None:
    """Evaluate the SFT model, train and evaluate each arm two at a time, print the table.

    Args:
        model: the SFT model every arm starts from.
        arm: `NAME:field=value,…` (repeatable); an arm with no settings is the preset's GRPO.
        eval_rows: rows per eval file (quick runs).
        out: where the arms' folders go.
    """
    arms = dict(parse_arm(text) for text in arm)
    start = "SFT model (step 0)"

    def run(name: str) -> dict[str, str]:
        folder = out / re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")
        if name == start:
            folder.mkdir(parents=True, exist_ok=True)
            return evaluate(model, folder, eval_rows)
        return train_and_evaluate(folder, model, arms[name], eval_rows)

    title = f"GRPO from {model}, cpu preset with each arm's settings (seed 0 unless set)"
    run_side_by_side([start, *arms], run, title)


if __name__ == "__main__":
    cyclopts.run(main)
