"""The shipped dataset passes the data gate: every row of every file valid (the auxiliary
numeracy exercises, conditional redraws and paraphrased rows too), counts as shipped; so do the
cpu preset's training rows (data/aux/walked/) with the eval files."""

from __future__ import annotations

import polars as pl
import pytest

from toolgrpo.data import DATA_DIR
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import summarise_samples, validate_samples
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.label_rules import BRANCH_MATCHES_FIGURES

SHIPPED = [
    "train/single_step.jsonl",
    "train/multistep.jsonl",
    "eval/single_step.jsonl",
    "eval/multistep.jsonl",
    "eval/unseen_phrasing.jsonl",
    "aux/numeracy.jsonl",
    "aux/conditional.jsonl",
    "aux/phrasings.jsonl",
]
EVAL = [name for name in SHIPPED if name.startswith("eval/")]
# The cpu preset's rows: the multi-step training rows walked, the walked drills and paraphrases.
WALKED = [
    "train/single_step.jsonl",
    "aux/walked/multistep.jsonl",
    "aux/walked/comparisons.jsonl",
    "aux/walked/phrasings.jsonl",
]
FILE_SETS = {"shipped": SHIPPED, "cpu preset": [*WALKED, *EVAL]}
# Rows that reply about balances and prices by design: their thoughts name check_balance's words,
# their action is `respond`.
EXERCISE_FILES = ("aux/numeracy.jsonl", "aux/walked/comparisons.jsonl")
# Conditional steps: the shipped files' 291 (225 of them training), the 1,800 redraws, the
# paraphrased rows' 180.
CONDITIONAL_STEPS = {"shipped": 291 + 1800 + 180, "cpu preset": 291 + 180}


@pytest.fixture(scope="module", params=FILE_SETS)
def file_set(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def loaded(file_set):
    paths = [DATA_DIR / name for name in FILE_SETS[file_set]]
    if missing := [str(p) for p in paths if not p.is_file()]:
        pytest.skip(f"shipped data not generated yet (run `toolgrpo data generate`): {missing}")
    return load_samples.fn(paths)


def test_every_shipped_row_passes_the_data_gate(loaded):
    report = validate_samples.fn(loaded)
    assert [str(p) for p in report.failures] == []
    assert report.ok and report.valid_rows == report.rows == loaded.frame.height


def test_shipped_labels_agree_with_their_context(loaded):
    """The tool-selection rows, the conditional redraws and walked steps among them; not the
    exercises (`EXERCISE_FILES`)."""
    exercise = pl.any_horizontal(pl.col("file").str.ends_with(name) for name in EXERCISE_FILES)
    labels = loaded.frame.filter(~exercise)
    assert [str(found.problem()) for found in label_inconsistencies(labels)] == []


def test_every_conditional_shipped_step_is_checked_against_its_figures(loaded, file_set):
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
    conditional = loaded.frame.filter(condition.is_not_null())
    assert conditional.height == CONDITIONAL_STEPS[file_set]
    # but the paraphrases that name a limit and then refer to it ("below it", "低于这个价")
    unread = conditional.filter(~pl.col("id").is_in(found))
    assert unread.height == 12
    assert unread["prompt"].str.contains(r"(?:below|above) it\.|这个价").all()


def test_train_files_hold_454_single_and_823_multi_step_rows(loaded, file_set):
    by_file = summarise_samples.fn(loaded)["file"]
    multistep = "train/multistep.jsonl" if file_set == "shipped" else "aux/walked/multistep.jsonl"
    assert by_file[str(DATA_DIR / "train/single_step.jsonl")] == 454
    assert by_file[str(DATA_DIR / multistep)] == 823
