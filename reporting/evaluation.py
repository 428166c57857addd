"""Evaluation metrics as tables (Prefect table artifacts) and markdown (metrics.md, reports)."""

from __future__ import annotations

from typing import Any

from toolgrpo.evaluation.metrics import RATES, EvalMetrics
from toolgrpo.reporting.markdown import Markdown, markdown_table, percent


def metrics_tables(metrics: EvalMetrics) -> dict[str, list[dict[str, Any]]]:
    """The metrics as tables (lists of row dicts) for Prefect table artifacts and markdown."""
    headline = metrics.accuracy
    summary = [
        {"metric": name, "n": headline.n.get(name, "–"), "accuracy": percent(value)}
        for name, value in headline.rows().items()
    ]
    slices = [
        {
            "slice": s.slice,
            "value": s.value,
            "n": s.n,
            **{metric: percent(getattr(s, metric)) for metric in RATES},
        }
        for s in metrics.slices
    ]
    confusion = [
        {
            Markdown("label \\ predicted"): label,
            **dict(zip(metrics.confusion.predicted, row, strict=True)),
        }
        for label, row in zip(metrics.confusion.labels, metrics.confusion.counts, strict=True)
    ]
    return {"accuracy": summary, "slices": slices, "confusion": confusion}


def metrics_markdown(metrics: EvalMetrics) -> str:
    """The metrics as markdown: headline accuracies, slices, confusion matrix."""
    tables = metrics_tables(metrics)
    return "\n\n".join(
        [
            f"## Tool accuracy ({metrics.n_rows} rows)",
            markdown_table(tables["accuracy"]),
            "## By slice",
            markdown_table(tables["slices"]),
            "## Confusion matrix (rows: label, columns: prediction)",
            markdown_table(tables["confusion"]),
        ]
    )
