"""SFT arms side by side, each then evaluated greedily: the accuracy half of an SFT lever.

An arm is the `cpu` preset with dotted overrides; each trains the pipeline's own SFT stage
(`python -m toolgrpo.training sft`) in its own folder and is evaluated on the shipped eval files.
Two arms run at a time, one torch thread each. Prints one table of `right/n` per eval file and
per conditional kind and branch, and each arm's SFT wall time (on a shared machine, compare
those only between arms run together).

    .venv/bin/python bench/sft_arms.py --arm "5 epochs:sft.num_train_epochs=5" \
        --arm "4 epochs, lr 3e-3:sft.num_train_epochs=4,sft.learning_rate=3e-3" [--out DIR]

`bench/numeracy_levers.py` runs its data arms through the same functions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cyclopts
import polars as pl
import yaml

from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.metrics import compute_metrics
from toolgrpo.evaluation.predict import EvalSettings, predict, sample_source
from toolgrpo.schemas.catalogue import default_catalogue
from toolgrpo.schemas.completion import completion_text, first_json_object
from toolgrpo.schemas.samples import split_prompt
from toolgrpo.training.arithmetic import stated_comparison
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.validation.label_rules import condition_verdict

EVAL_FILES = [
    DATA_DIR / "eval" / f"{name}.jsonl" for name in ("single_step", "multistep", "unseen_phrasing")
]
SFT_WALL = "SFT wall time (s)"
PARAMS_EXACT = "exact params, all eval rows"
FIGURES_STATED = "conditional steps stating both figures"
COMPARISON_STATED = "conditional steps stating both figures and acting on them"
# of those stating both figures, by whether the figures' whole parts differ in length (decided by
# counting digits) or not (decided digit by digit)
ACTED_BY_LENGTH = {
    True: "… acting on them, of those stating figures of different lengths",
    False: "… acting on them, of those stating figures of equal lengths",
}
DECIDING_PAIR = "… writing the deciding pair of digits, of those writing a pair (equal lengths)"
# the last pair of digits a thought compares before its verdict (`3 < 5` decided, `0<7` walked)
WRITTEN_PAIR = re.compile(r"(\d) ?[<>] ?(\d)(?!.*\d ?[<>] ?\d)")


def eval_frame(max_rows: int | None) -> pl.DataFrame:
    """The eval files' rows (at most `max_rows` of each), with their `source`."""
    rows = []
    for path in EVAL_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()[:max_rows]
        rows += [
            {"condition": None} | json.loads(line) | {"source": sample_source(path)}
            for line in lines
        ]
    # a few rows may hold no conditional step: keep the column a string column all the same
    return pl.DataFrame(rows).with_columns(pl.col("condition").cast(pl.String))


def train_and_evaluate(
    arm_dir: Path, overrides: dict[str, Any], threads: int, eval_rows: int | None
) -> dict[str, str]:
    """Train the `cpu` preset with `overrides` in `arm_dir`, evaluate its SFT model, and return
    its `right/n` cells by row name (plus the SFT wall time)."""
    arm_dir.mkdir(parents=True, exist_ok=True)
    config = load_preset("cpu", {**overrides, "runtime.torch_threads": threads})
    config_file = config.write(arm_dir / "given_config.json")
    env = os.environ | {"OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "toolgrpo.training", "sft", "--run-dir", str(arm_dir)]
    started = time.perf_counter()
    with (arm_dir / "sft.log").open("w") as log:
        subprocess.run(
            [*command, "--config", str(config_file)], check=True, stdout=log, stderr=log, env=env
        )
    wall_s = time.perf_counter() - started
    predictions = predict(
        arm_dir / "sft" / "model", eval_frame(eval_rows), EvalSettings(torch_threads=threads)
    )
    predictions.write_parquet(arm_dir / "predictions.parquet")
    return prediction_cells(predictions) | {SFT_WALL: f"{wall_s:.0f}"}


def prediction_cells(predictions: pl.DataFrame) -> dict[str, str]:
    """`right/n` per eval file and conditional kind and branch, then `copying_cells`."""
    accuracy = compute_metrics(predictions).accuracy
    cells = {
        row: f"{round(value * accuracy.n[row])}/{accuracy.n[row]}" if value is not None else "–"
        for row, value in accuracy.rows().items()
        if row.startswith("eval/")
    }
    return cells | copying_cells(predictions)


def copying_cells(predictions: pl.DataFrame) -> dict[str, str]:
    """What the model copies from its prompts: the exact params of the labelled tool, the
    conditional steps whose thought states the figures compared, and those that also act on
    them (issue #16's arithmetic check, `training.arithmetic.stated_comparison`), split by
    whether the two figures' lengths differ; of the equal-length ones whose thought writes a pair
    of digits (`decided`, `walked` forms), how many wrote the pair that decides."""
    catalogue = default_catalogue()
    conditional = predictions.filter(pl.col("condition").is_not_null())
    stated = acted_on = 0
    by_length = {row: [0, 0] for row in ACTED_BY_LENGTH.values()}  # acted on, stated
    pairs = [0, 0]  # the deciding pair, a pair written
    for row in conditional.iter_rows(named=True):
        checked = stated_comparison(row["completion"], row["prompt"], row["condition"], catalogue)
        figures, acted = checked or (False, False)
        if not figures:
            continue
        stated, acted_on = stated + 1, acted_on + acted
        verdict = condition_verdict(*split_prompt(row["prompt"]), catalogue)
        compared = verdict.compared if verdict else (0.0, 0.0)
        wholes = [str(int(figure)) for figure in compared]
        equal_lengths = len(wholes[0]) == len(wholes[1])
        tally = by_length[ACTED_BY_LENGTH[not equal_lengths]]
        tally[0], tally[1] = tally[0] + acted, tally[1] + 1
        written = _written_pair(row["completion"])
        if written and equal_lengths:
            deciding = next((set(p) for p in zip(*wholes, strict=True) if p[0] != p[1]), None)
            pairs[0], pairs[1] = pairs[0] + (set(written) == deciding), pairs[1] + 1
    return (
        {
            PARAMS_EXACT: f"{predictions['params_exact'].sum()}/{predictions.height}",
            FIGURES_STATED: f"{stated}/{conditional.height}",
            COMPARISON_STATED: f"{acted_on}/{conditional.height}",
        }
        | {row: f"{acted}/{count}" for row, (acted, count) in by_length.items()}
        | {DECIDING_PAIR: f"{pairs[0]}/{pairs[1]}"}
    )


def _written_pair(completion: object) -> tuple[str, str] | None:
    """The last pair of digits the completion's thought compares before its verdict, if any."""
    thought = (first_json_object(completion_text(completion)) or {}).get("thought")
    if not isinstance(thought, str):
        return None
    match = WRITTEN_PAIR.search(thought.partition("→")[0])
    return match.groups() if match else None


def run_side_by_side(arms: list[str], run: Callable[[str], dict[str, str]], title: str) -> None:
    """Run the arms two at a time and print their cells as one markdown table."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        cells = dict(zip(arms, pool.map(run, arms), strict=True))
    rows = list(dict.fromkeys(row for arm in arms for row in cells[arm]))
    print(title)
    print("| rows | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for row in rows:
        print(f"| {row} | " + " | ".join(cells[arm].get(row, "–") for arm in arms) + " |")


def parse_settings(settings: str) -> dict[str, Any]:
    """`field=value,field=value` (values read as YAML) as dotted overrides."""
    overrides = {}
    for setting in filter(None, settings.split(",")):
        field, _, value = setting.partition("=")
        overrides[field.strip()] = yaml.safe_load(value)
    return overrides


def parse_arm(text: str) -> tuple[str, dict[str, Any]]:
    """`NAME:field=value,field=value` as the name and its overrides."""
    name, _, settings = text.partition(":")
    return name.strip(), parse_settings(settings)


def main(
    arm: list[str],
    threads: int = 1,
    eval_rows: int | None = None,
    out: Path = Path("/tmp/sft-arms"),
) -> None:
    """Train and evaluate each arm, two at a time, and print the table.

    Args:
        arm: `NAME:field=value,…` (repeatable); an arm with no settings is the preset.
        threads: torch threads per arm.
        eval_rows: rows per eval file (quick runs).
        out: where the arms' folders go.
    """
    arms = dict(parse_arm(text) for text in arm)

    def run(name: str) -> dict[str, str]:
        folder = out / re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")
        return train_and_evaluate(folder, arms[name], threads, eval_rows)

    title = "SFT only, cpu preset with each arm's settings (seed 0 unless an arm sets `seed`)"
    run_side_by_side(list(arms), run, title)


if __name__ == "__main__":
    cyclopts.run(main)
