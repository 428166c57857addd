"""The evaluation task: predict on sample rows, measure, and write the files people read.

The work is `toolgrpo.evaluation` (no Prefect); this module writes predictions.parquet,
metrics.json and metrics.md, and wraps that as a Prefect task.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from toolgrpo.evaluation.device import eval_device
from toolgrpo.evaluation.metrics import EvalMetrics, compute_metrics
from toolgrpo.evaluation.predict import DEFAULT_SETTINGS, EvalSettings, predict
from toolgrpo.reporting.evaluation import metrics_markdown


class EvalReport(BaseModel):
    """Where an evaluation wrote its files, and its metrics."""

    model_dir: Path
    predictions_path: Path
    metrics_path: Path
    metrics: EvalMetrics


def write_evaluation(
    predictions: pl.DataFrame, metrics: EvalMetrics, model_dir: Path, out_dir: Path
) -> EvalReport:
    """predictions.parquet, metrics.json and metrics.md in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions_path = out_dir / "predictions.parquet"
    metrics_path = out_dir / "metrics.json"
    predictions.write_parquet(predictions_path)
    metrics_path.write_text(metrics.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "metrics.md").write_text(metrics_markdown(metrics) + "\n", encoding="utf-8")
    return EvalReport(
        model_dir=model_dir,
        predictions_path=predictions_path,
        metrics_path=metrics_path,
        metrics=metrics,
    )


def evaluate_and_write(
    model_dir: Path, samples: pl.DataFrame, out_dir: Path, settings: EvalSettings
) -> EvalReport:
    """Predict on `samples` on the model's device (`evaluation.device`), compute the metrics,
    write both to `out_dir`."""
    device = eval_device(model_dir, settings.device)
    print(f"evaluating {model_dir} into {out_dir}: {device.describe()}")
    predictions = predict(model_dir, samples, settings, device=device)
    return write_evaluation(predictions, compute_metrics(predictions), Path(model_dir), out_dir)


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_model(
    model_dir: Path,
    samples: pl.DataFrame,
    out_dir: Path,
    settings: EvalSettings = DEFAULT_SETTINGS,
) -> EvalReport:
    """`evaluate_and_write` as a Prefect task."""
    return evaluate_and_write(model_dir, samples, out_dir, settings)
