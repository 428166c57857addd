"""Context checks on labels: the label rules (`label_rules`) run on the rows their polars screens
(`screens`) cannot rule out, with the same findings as running every rule on every row; the
Python part on every usable CPU (`spread`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import polars as pl

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.samples import condition_branch
from toolgrpo.validation.gc_pause import cycle_collector_paused
from toolgrpo.validation.label_rules import LABEL_COLUMNS, RULES, Label, LabelInconsistency
from toolgrpo.validation.screens import NEEDED, PARTS_READ, ROW, screens
from toolgrpo.validation.spread import CHUNKS_PER_WORKER, Spread

# ... and from this many rows the rules read (in Python, a row at a time), they run in the
# workers too.
MIN_ROWS_FOR_CHUNKS = 2_000
_SUSPECTS = "suspects"
_SCREENED_COLUMNS = ("scenario_id", "step", "tool", "branch", "prompt", "solution")


def _findings(
    rows: list[dict[str, Any]], catalogue: Catalogue
) -> list[tuple[int, int, LabelInconsistency]]:
    """What the rules find in `rows` (whole scenarios in row order, each row with its `ROW` and
    `_SUSPECTS`: a flag per rule, whether to run it), each with its row and rule number, in row
    order, then rule order."""
    labels = [(row[ROW], Label.of(row), row[_SUSPECTS]) for row in rows]
    scenarios: dict[str, dict[int, Label]] = defaultdict(dict)
    for _, label, _ in labels:
        scenarios[label.scenario_id].setdefault(label.step, label)
    return [
        (row, number, found)
        for row, label, suspects in labels
        for number, (rule, suspect) in enumerate(zip(RULES, suspects, strict=True))
        if suspect and (found := rule(label, scenarios[label.scenario_id], catalogue)) is not None
    ]


def _findings_in_chunks(
    read: pl.DataFrame, catalogue: Catalogue, spread: Spread
) -> list[tuple[int, int, LabelInconsistency]]:
    """`_findings` of `read`'s rows, chunked by whole scenarios over `spread`'s workers, merged
    back into row order, then rule order."""
    if read.height < MIN_ROWS_FOR_CHUNKS or spread.workers == 1:
        return _findings(read.to_dicts(), catalogue)
    chunk = (pl.col("scenario_id").hash() % (spread.workers * CHUNKS_PER_WORKER)).alias("_chunk")
    parts = read.with_columns(chunk).partition_by("_chunk", include_key=False)
    found = spread.map(_findings, [(part.to_dicts(),) for part in parts], catalogue, per_worker=1)
    return sorted((finding for part in found for finding in part), key=lambda f: f[:2])


@cycle_collector_paused()
def label_inconsistencies(
    rows: pl.DataFrame,
    catalogue: Catalogue | None = None,
    screen: bool = True,
    workers: int | None = None,
) -> list[LabelInconsistency]:
    """What every rule finds in `rows` (the loader's frame: the data contract's columns with
    `file` and `line`, and the solutions' parts where the gate has parsed them), in row order,
    then rule order; tools and keywords are `catalogue`'s (default: the shipped one).

    The rules read rows in Python, a row at a time
    (docs/experiments/code-measurements.md#context-checks), so `screen` first rules out, in polars,
    the rows a rule is certain to pass (`screens`) and runs each rule on the rest only, with their
    whole scenarios; `screen=False` runs every rule on every row (the reference the screens are
    tested and benchmarked against: the findings are the same). Where there are tens of thousands of
    texts to judge, or thousands of rows to read, in Python, they are spread over `workers`
    processes (default: one per usable CPU; 1: this process only), with the same findings
    (`spread`).
    """
    if rows.is_empty():
        return []
    catalogue = catalogue or default_catalogue()
    spread = Spread(workers)
    frame = rows.with_row_index(ROW).with_columns(
        branch=condition_branch(pl.col("condition"), pl.col("kind"), pl.col("tool"))
    )
    rules = [rule.__name__ for rule in RULES]
    if screen:
        # the screens read these columns only; the rows they leave are gathered once, after
        parsed = [part for part in PARTS_READ if part in frame.columns]
        screened = screens(frame.select(ROW, *_SCREENED_COLUMNS, *parsed), catalogue, spread)
        flags = screened.filter(NEEDED).select(ROW, *rules)
        del screened
        frame = frame.join(flags, on=ROW).sort(ROW)
    else:
        frame = frame.with_columns(pl.lit(True).alias(rule) for rule in rules)
    read = frame.select(ROW, *LABEL_COLUMNS, pl.concat_list(rules).alias(_SUSPECTS))
    return [found for *_, found in _findings_in_chunks(read, catalogue, spread)]
