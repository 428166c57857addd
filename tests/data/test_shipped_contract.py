"""The shipped dataset passes the data gate: every row of every file valid (the auxiliary
numeracy exercises and conditional redraws too), counts as shipped."""

from __future__ import annotations

import polars as pl
import pytest

from toolgrpo.data import DATA_DIR
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import summarise_samples, validate_samples
from toolgrpo.validation.context import BRANCH_MATCHES_FIGURES, label_inconsistencies

SHIPPED = [
    "train/single_step.jsonl",
    "train/multistep.jsonl",
    "eval/single_step.jsonl",
    "eval/multistep.jsonl",
    "eval/unseen_phrasing.jsonl",
    "aux/numeracy.jsonl",
    "aux/conditional.jsonl",
]


@pytest.fixture(scope="module")
def loaded():
    paths = [DATA_DIR / name for name in SHIPPED]
    if missing := [str(p) for p in paths if not p.is_file()]:
        pytest.skip(f"shipped data not generated yet (run `toolgrpo data generate`): {missing}")
    return load_samples.fn(paths)


def test_every_shipped_row_passes_the_data_gate(loaded):
    report = validate_samples.fn(loaded)
    assert [str(p) for p in report.failures] == []
    assert report.ok and report.valid_rows == report.rows == loaded.frame.height


def test_shipped_labels_agree_with_their_context(loaded):
    """The tool-selection rows, the conditional redraws among them; the numeracy exercises reply
    about balances and prices by design (their thoughts name check_balance's words, their action
    is `respond`)."""
    labels = loaded.frame.filter(~pl.col("file").str.ends_with("aux/numeracy.jsonl"))
    assert [str(found.problem()) for found in label_inconsistencies(labels)] == []


def test_every_conditional_shipped_step_is_checked_against_its_figures(loaded):
    """Its figures parse in every format the data writes them: flipping the branch of any
    conditional step contradicts them."""
    condition = pl.col("condition")
    flipped = loaded.frame.with_columns(
        condition=pl.when(condition == "holds")
        .then(pl.lit("fails"))
        .when(condition == "fails")
        .then(pl.lit("holds"))
    )
    found = {f.id for f in label_inconsistencies(flipped) if f.check == BRANCH_MATCHES_FIGURES}
    conditional = set(loaded.frame.filter(condition.is_not_null())["id"])
    assert len(conditional) == 291 + 1800  # the shipped files' and the redraws'
    assert found == conditional


def test_train_files_hold_454_single_and_823_multi_step_rows(loaded):
    by_file = summarise_samples.fn(loaded)["file"]
    assert by_file[str(DATA_DIR / "train/single_step.jsonl")] == 454
    assert by_file[str(DATA_DIR / "train/multistep.jsonl")] == 823
