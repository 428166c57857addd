"""The evaluation task: predict on sample rows, measure, and write the files people read.

The work is `toolgrpo.evaluation` (no Prefect); this module writes predictions.parquet,
metrics.json and metrics.md, and wraps that as a Prefect task that shows its progress (log lines
and a progress artifact) and logs the accuracy it measured.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from toolgrpo.evaluation.device import eval_device
from toolgrpo.evaluation.metrics import EvalMetrics, compute_metrics
from toolgrpo.evaluation.predict import DEFAULT_SETTINGS, EvalSettings, PredictionMode, predict
from toolgrpo.reporting.evaluation import metrics_markdown, metrics_tables
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.files import replace_file, write_text_file
from toolgrpo.tasks.progress import ProgressArtifact
from toolgrpo.training.metrics import progress_line

# At most one progress line this often (and always the last batch).
PROGRESS_INTERVAL_S = 15.0


class EvalReport(BaseModel):
    """Where an evaluation wrote its files, and its metrics."""

    model_dir: Path
    predictions_path: Path
    metrics_path: Path
    metrics: EvalMetrics


# What metrics.md says first when the answers were not decoded (`predict` mode `score`).
SCORED_NOTE = (
    "Scored, not decoded: each answer was decoded up to its tool slot only; the predicted tool is "
    "the most probable catalogue tool there, and JSON, params and consistency are not measured (–)."
)


def write_evaluation(
    predictions: pl.DataFrame, metrics: EvalMetrics, model_dir: Path, out_dir: Path
) -> EvalReport:
    """predictions.parquet, metrics.json and metrics.md in `out_dir`."""
    predictions_path = replace_file(out_dir / "predictions.parquet", predictions.write_parquet)
    metrics_path = write_text_file(out_dir / "metrics.json", metrics.model_dump_json(indent=2))
    note = "" if metrics.answers_decoded else SCORED_NOTE + "\n\n"
    write_text_file(out_dir / "metrics.md", note + metrics_markdown(metrics) + "\n")
    return EvalReport(
        model_dir=model_dir,
        predictions_path=predictions_path,
        metrics_path=metrics_path,
        metrics=metrics,
    )


def evaluate_and_write(
    model_dir: Path,
    samples: pl.DataFrame,
    out_dir: Path,
    settings: EvalSettings,
    on_progress: Callable[[int, int], None] | None = None,
    catalogue: Catalogue | None = None,
    mode: PredictionMode = "decode",
) -> EvalReport:
    """Predict on `samples` on the model's device (`evaluation.device`) with the tools of
    `catalogue` (default: the shipped ones), compute the metrics, write both to `out_dir`.
    `mode` `score`: tools scored, answers not decoded whole (what mining's training audit
    needs; see `predict`)."""
    device = eval_device(model_dir, settings.device)
    print(f"evaluating ({mode}) {model_dir} into {out_dir}: {device.describe()}")
    predictions = predict(
        model_dir, samples, settings, catalogue, device=device, on_progress=on_progress, mode=mode
    )
    metrics = compute_metrics(predictions, catalogue)
    return write_evaluation(predictions, metrics, Path(model_dir), out_dir)


def _progress_reporter(label: str) -> Callable[[int, int], None]:
    """Log `label row 32/408 · 0.9 s/row · ETA 5m` after the first batch, then every
    `PROGRESS_INTERVAL_S` and at the end, and follow the same in a progress artifact."""
    logger = get_run_logger()
    key = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    artifact = ProgressArtifact(f"{key}-progress", f"{label}: rows decoded")
    started = time.monotonic()
    last_line = started - PROGRESS_INTERVAL_S

    def report(done: int, total: int) -> None:
        nonlocal last_line
        now = time.monotonic()
        artifact.update(100.0 * done / total, f"{label}: {done}/{total} rows")
        if now - last_line >= PROGRESS_INTERVAL_S or done == total:
            logger.info("%s", progress_line(label, done, total, (now - started) / done, unit="row"))
            last_line = now

    return report


@task(name="evaluate", task_run_name="{label}", cache_policy=NO_CACHE)
def evaluate_model(
    model_dir: Path,
    samples: pl.DataFrame,
    out_dir: Path,
    settings: EvalSettings = DEFAULT_SETTINGS,
    label: str = "evaluate",
    catalogue: Catalogue | None = None,
    mode: PredictionMode = "decode",
) -> EvalReport:
    """`evaluate_and_write` as a Prefect task named `label` (e.g. `evaluate sft · eval`), with its
    progress in the log and a progress artifact, and its accuracy table in the log."""
    progress = _progress_reporter(label)
    report = evaluate_and_write(model_dir, samples, out_dir, settings, progress, catalogue, mode)
    accuracy = markdown_table(metrics_tables(report.metrics)["accuracy"])
    get_run_logger().info("%s: tool accuracy (n: rows evaluated)\n%s", label, accuracy)
    return report
