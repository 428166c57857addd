"""Context checks on labels: the label rules (`label_rules`) run on the rows their polars screens
(`screens`) cannot rule out, with the same findings as running every rule on every row."""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.samples import condition_branch
from toolgrpo.validation.label_rules import LABEL_COLUMNS, RULES, Label, LabelInconsistency
from toolgrpo.validation.screens import NEEDED, ROW, screens


def label_inconsistencies(
    rows: pl.DataFrame, catalogue: Catalogue | None = None, screen: bool = True
) -> list[LabelInconsistency]:
    """What every rule finds in `rows` (the loader's frame: the data contract's columns with
    `file` and `line`), in row order, then rule order; tools and keywords are `catalogue`'s
    (default: the shipped one).

    The rules read rows in Python (~0.5 ms a row), so `screen` first rules out, in polars, the
    rows a rule is certain to pass (`screens`) and runs each rule on the rest only, with their
    whole scenarios; `screen=False` runs every rule on every row (the reference the screens are
    tested and benchmarked against: the findings are the same).
    """
    if rows.is_empty():
        return []
    catalogue = catalogue or default_catalogue()
    frame = rows.with_row_index(ROW).with_columns(
        branch=condition_branch(pl.col("condition"), pl.col("kind"), pl.col("tool"))
    )
    rules = [rule.__name__ for rule in RULES]
    if screen:
        frame = screens(frame, catalogue).filter(NEEDED)
    else:
        frame = frame.with_columns(pl.lit(True).alias(rule) for rule in rules)
    read = frame.select(*LABEL_COLUMNS, pl.concat_list(rules).alias("suspects"))
    labels = [(Label.of(row), row["suspects"]) for row in read.iter_rows(named=True)]
    scenarios: dict[str, dict[int, Label]] = defaultdict(dict)
    for label, _ in labels:
        scenarios[label.scenario_id].setdefault(label.step, label)
    return [
        found
        for label, suspects in labels
        for rule, suspect in zip(RULES, suspects, strict=True)
        if suspect and (found := rule(label, scenarios[label.scenario_id], catalogue)) is not None
    ]
