"""The mining report: findings by category, accuracy with and without flagged rows, the queue."""

from __future__ import annotations

from collections import Counter, defaultdict

import polars as pl
from pydantic import BaseModel, Field

from toolgrpo.mining.categorise import LABEL_ISSUES, Category, Finding, categorise
from toolgrpo.mining.confident import OverlappingPair, overlapping_tool_pairs, ranked_label_issues
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.validation.context import label_inconsistencies


class FlaggedAccuracy(BaseModel):
    """Eval accuracy with and without the rows flagged as a label issue (`LABEL_ISSUES`)."""

    n_rows: int
    accuracy: float | None
    n_flagged: int
    accuracy_without_flagged: float | None


class MiningReport(BaseModel):
    """What mining found; written as findings.json, the queue as review_queue.csv/.jsonl."""

    counts: dict[str, dict[str, int]] = Field(description="split → category → rows")
    accuracy: FlaggedAccuracy
    overlapping_pairs: list[OverlappingPair]
    label_issues: dict[str, list[str]] = Field(description="split → ids cleanlab flags, ranked")
    label_issues_out_of_sample: bool = Field(
        description="cleanlab read the cross-fitted audit's probabilities for the train rows"
    )
    ambiguity_ids: list[str]
    conflict_ids: list[str]
    inconsistency_ids: list[str]
    findings: list[Finding]


def _flagged_accuracy(predictions: pl.DataFrame, flagged: set[str]) -> FlaggedAccuracy:
    correct = (pl.col("predicted_tool") == pl.col("label_tool")).fill_null(False)
    kept = predictions.filter(~pl.col("id").is_in(sorted(flagged)))

    def rate(frame: pl.DataFrame) -> float | None:
        return float(frame.select(correct.mean()).item()) if frame.height else None

    return FlaggedAccuracy(
        n_rows=predictions.height,
        accuracy=rate(predictions),
        n_flagged=predictions.height - kept.height,
        accuracy_without_flagged=rate(kept),
    )


def mine_errors(
    predictions: pl.DataFrame,
    audit: pl.DataFrame | None = None,
    catalogue: Catalogue | None = None,
    cross_fitted: pl.DataFrame | None = None,
    labels: pl.DataFrame | None = None,
) -> MiningReport:
    """Categorise eval errors and label issues.

    `audit`: the predictions frame of the training rows (the data audit), mined with the eval
    rows and used as their neighbours. `cross_fitted`: the training rows' out-of-sample
    predictions (`tasks.audit`); confident learning reads them instead of `audit`'s, and they
    stand in for `audit` when there is none. `labels`: the sample rows (the loader's frame,
    solutions included), checked against their context (`validation.context`).
    """
    catalogue = catalogue or default_catalogue()
    train = audit if audit is not None else cross_fitted
    frames = {"eval": predictions} | ({"train": train} if train is not None else {})
    scored = frames | ({"train": cross_fitted} if cross_fitted is not None else {})
    label_issues = {split: ranked_label_issues(f, catalogue) for split, f in scored.items()}
    findings = categorise(
        frames,
        catalogue,
        {i for ids in label_issues.values() for i in ids},
        label_inconsistencies(labels, catalogue) if labels is not None else (),
        scored,
    )
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for (split, category), n in Counter((f.split, f.category) for f in findings).items():
        counts[split][category.value] = n
    flagged = {f.id for f in findings if f.category in LABEL_ISSUES and f.split == "eval"}

    def ids(category: Category) -> list[str]:
        return [f.id for f in findings if f.category == category]

    return MiningReport(
        counts=dict(counts),
        accuracy=_flagged_accuracy(predictions, flagged),
        overlapping_pairs=overlapping_tool_pairs(
            pl.concat(scored.values(), how="diagonal_relaxed"), catalogue
        ),
        label_issues=label_issues,
        label_issues_out_of_sample=cross_fitted is not None,
        ambiguity_ids=ids(Category.LABEL_AMBIGUITY),
        conflict_ids=ids(Category.LABEL_CONFLICT),
        inconsistency_ids=ids(Category.LABEL_INCONSISTENCY),
        findings=findings,
    )


QUEUE_COLUMNS = [
    "id",
    "split",
    "source",
    "prompt",
    "label",
    "prediction",
    "category",
    "alternative",
    "evidence",
    "score",
    "cleanlab_issue",
    "proposed_solution",
]
# Filled in by annotators; `overrides_from_review` turns them into label overrides.
REVIEW_COLUMNS = ["decision", "reviewer", "reason"]


def review_queue(report: MiningReport) -> pl.DataFrame:
    """The findings as a table for annotators, most severe first, with empty review columns."""
    rows = [finding.model_dump(mode="json") for finding in report.findings]
    schema = {c: pl.String for c in QUEUE_COLUMNS} | {
        "score": pl.Float64,
        "cleanlab_issue": pl.Boolean,
    }
    queue = pl.DataFrame(rows, schema=schema)
    return queue.with_columns(pl.lit("").alias(column) for column in REVIEW_COLUMNS)
