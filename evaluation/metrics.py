"""Metrics of a predictions frame: tool accuracy overall and by slice, format rates, confusion.

Slices: kind, step, language, labelled tool, data file, and the two branches of a conditional
step (the condition holds: act; it fails: reply), also per data file and per what the condition
compares (an amount with the balance, an order's cost with the balance, a price with a limit).
"""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.run import Headline, step_row
from toolgrpo.schemas.samples import (
    NO_CONDITION,
    PREVIOUS_STEP_LINE,
    condition_branch,
    history_line_pattern,
)

UNPARSED = "(none)"


class SliceMetrics(BaseModel):
    """Rates on one slice of the rows (None where the slice is empty)."""

    slice: str
    value: str
    n: int
    accuracy: float | None
    json_valid: float | None
    params_valid: float | None
    params_exact: float | None
    consistent: float | None = Field(description="share of parseable outputs")


def _executed(prompt: pl.Expr, tool: str) -> pl.Expr:
    """Does the prompt's `Previous steps:` history list a call of `tool`?"""
    return prompt.str.contains(history_line_pattern(tool))


def comparison_kind(prompt: pl.Expr, catalogue: Catalogue) -> pl.Expr:
    """What a conditional step's condition reads, named by the tools that reported it: the
    catalogue's budget and reading tools (`reports`) its history called (`check_balance and
    get_quote`); in a catalogue that declares none, the latest step's tool (`read_sensor`).
    Null: its history called none of them."""
    reporting = [*catalogue.reporting("budget"), *catalogue.reporting("reading")]
    if not reporting:
        latest = prompt.str.extract_all(PREVIOUS_STEP_LINE).list.last()
        return latest.str.extract(PREVIOUS_STEP_LINE, 2)  # its `tool` group
    called = [pl.when(_executed(prompt, tool)).then(pl.lit(tool)) for tool in reporting]
    kind = pl.concat_str(called, separator=" and ", ignore_nulls=True)
    return pl.when(kind != "").then(kind)


def condition_row(source: str, kind: str | None, branch: str) -> str:
    """The row name of one file's conditional steps of one kind and branch:
    `eval/multistep · after check_balance · holds`."""
    fails_or_holds = branch.removeprefix("condition_")
    return f"{source} · after {kind} · {fails_or_holds}" if kind else f"{source} · {fails_or_holds}"


class Confusion(BaseModel):
    """Counts by labelled tool (rows) and predicted tool (columns; `(none)` = no valid tool)."""

    labels: list[str]
    predicted: list[str]
    counts: list[list[int]]

    def count(self, label: str, predicted: str) -> int:
        return self.counts[self.labels.index(label)][self.predicted.index(predicted)]


class EvalMetrics(BaseModel):
    """Everything evaluation reports; written as metrics.json."""

    n_rows: int
    answers_decoded: bool = Field(
        True,
        description="false: rows scored up to the tool slot (the audit); the predicted tool is "
        "the most probable one and the JSON, params and consistency rates are not measured",
    )
    accuracy: Headline
    slices: list[SliceMetrics]
    confusion: Confusion


RATES = {
    "accuracy": pl.col("correct"),
    "json_valid": pl.col("parsed_ok"),
    "params_valid": pl.col("params_valid"),
    "params_exact": pl.col("params_exact"),
    # Among parseable outputs: an unparseable one has no thought to compare (JSON validity
    # already counts it).
    "consistent": pl.col("consistent").filter(pl.col("parsed_ok")),
}
# Slices reported besides `overall`, in report order.
_SLICE_COLUMNS = ["kind", "step", "lang", "label_tool", "source", "branch"]


def _with_outcome(predictions: pl.DataFrame, catalogue: Catalogue) -> pl.DataFrame:
    if "condition" not in predictions.columns:  # written before the contract had conditions
        predictions = predictions.with_columns(NO_CONDITION)
    return predictions.with_columns(
        correct=(pl.col("predicted_tool") == pl.col("label_tool")).fill_null(False),
        branch=condition_branch(pl.col("condition"), pl.col("kind"), pl.col("label_tool")),
        comparison=comparison_kind(pl.col("prompt"), catalogue),
        step=pl.col("step").cast(pl.String),
    )


def _slice_rows(frame: pl.DataFrame, name: str) -> list[SliceMetrics]:
    rows = frame.filter(pl.col(name).is_not_null()) if name != "overall" else frame
    key = pl.col(name) if name != "overall" else pl.lit("all")
    table = (
        rows.group_by(key.alias("value"))
        .agg(pl.len().alias("n"), *[rate.mean().alias(metric) for metric, rate in RATES.items()])
        .sort("value")
    )
    return [SliceMetrics(slice=name, **row) for row in table.iter_rows(named=True)]


def _rate(frame: pl.DataFrame) -> float | None:
    return frame.select(pl.col("correct").mean()).item() if frame.height else None


def compute_metrics(predictions: pl.DataFrame, catalogue: Catalogue | None = None) -> EvalMetrics:
    """Tool accuracy overall and by slice, format rates, scenario accuracy, confusion matrix."""
    catalogue = catalogue or default_catalogue()
    frame = _with_outcome(predictions, catalogue)
    multi = frame.filter(pl.col("kind") == "multi")
    pooled = {
        "overall": frame,
        "single": frame.filter(pl.col("kind") == "single"),
        "multi": multi,
        "condition_fails": frame.filter(pl.col("branch") == "condition_fails"),
        "condition_holds": frame.filter(pl.col("branch") == "condition_holds"),
        "scenario": multi.group_by("scenario_id").agg(pl.col("correct").all()),
    }
    steps = {
        int(step): frame.filter(pl.col("step") == step)
        for step in sorted(frame["step"].unique().to_list(), key=int)
    }
    sources = {
        source: frame.filter(pl.col("source") == source)
        for source in sorted(frame["source"].unique().to_list())
    }
    conditions = {
        condition_row(source, kind, branch): rows
        for (source, kind, branch), rows in sorted(
            frame.filter(pl.col("branch").is_not_null()).group_by("source", "comparison", "branch"),
            key=lambda group: [part or "" for part in group[0]],  # a null kind first
        )
    }
    headline = Headline(
        **{name: _rate(rows) for name, rows in pooled.items()},
        by_step={step: _rate(rows) for step, rows in steps.items()},
        by_source={source: _rate(rows) for source, rows in sources.items()},
        by_condition={name: _rate(rows) for name, rows in conditions.items()},
        n={
            **{name: rows.height for name, rows in pooled.items()},
            **{step_row(step): rows.height for step, rows in steps.items()},
            **{source: rows.height for source, rows in sources.items()},
            **{name: rows.height for name, rows in conditions.items()},
        },
    )
    slices = [
        metrics for name in ["overall", *_SLICE_COLUMNS] for metrics in _slice_rows(frame, name)
    ]
    return EvalMetrics(
        n_rows=frame.height,
        answers_decoded=frame.height == 0 or frame["parsed_ok"].is_not_null().any(),
        accuracy=headline,
        slices=slices,
        confusion=confusion_matrix(frame, catalogue),
    )


def confusion_matrix(predictions: pl.DataFrame, catalogue: Catalogue) -> Confusion:
    """Labelled × predicted tool counts; output without a catalogue tool counts as `(none)`."""
    predicted_names = [*catalogue.names, UNPARSED]
    predicted = (
        pl.when(pl.col("predicted_tool").is_in(catalogue.names))
        .then(pl.col("predicted_tool"))
        .otherwise(pl.lit(UNPARSED))
    )
    counts = predictions.group_by("label_tool", predicted.alias("predicted")).len()
    lookup = {(r["label_tool"], r["predicted"]): r["len"] for r in counts.iter_rows(named=True)}
    return Confusion(
        labels=catalogue.names,
        predicted=predicted_names,
        counts=[[lookup.get((lab, p), 0) for p in predicted_names] for lab in catalogue.names],
    )
