"""The cross-fitted audit: out-of-sample predictions of every training row, for confident learning.

One SFT model per fold (`mining.folds`), each trained in its own process (`train_stage`) on the
other folds' scenarios, scores the rows it did not see. A fold model is cached like the run's
stages, on the run's training key, the fold and the fold recipe, so a nightly run on unchanged
data trains none. Writes `<out_dir>/predictions.parquet` (all folds) and, per fold, the fold's
training files, model and `eval/` (predictions and metrics of its held-out rows).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE, CacheKeyFnPolicy

from toolgrpo.evaluation.predict import EvalSettings
from toolgrpo.mining.folds import fold_config, scenario_folds
from toolgrpo.tasks.evaluate import evaluate_and_write
from toolgrpo.tasks.train import StageResult, ends_cancelled, train_stage, unless_cancelled
from toolgrpo.training.config import TrainConfig

PREDICTIONS_FILE = "predictions.parquet"


def _fold_stage(fold_dir: Path, config: TrainConfig, key: str, timeout_s: float) -> StageResult:
    """The fold's SFT stage, reused when the same key trained before and its model is on disk."""
    cached = train_stage.with_options(
        cache_policy=CacheKeyFnPolicy(cache_key_fn=lambda *_: f"audit-fold-{key}"),
        persist_result=True,
    )
    result = unless_cancelled(cached("sft", fold_dir, config, timeout_s=timeout_s))
    if not (result.model_dir / "config.json").is_file():
        result = unless_cancelled(
            cached.with_options(refresh_cache=True)("sft", fold_dir, config, timeout_s=timeout_s)
        )
    return result


# Fewer folds than this is no audit: one fold would train on every row it scores.
MIN_AUDIT_FOLDS = 2


@task(name="cross-fitted audit", cache_policy=NO_CACHE)
@ends_cancelled
def cross_fitted_audit(
    rows: pl.DataFrame,
    training_files: list[Path],
    config: TrainConfig,
    key: str,
    folds: int,
    out_dir: Path,
    timeout_s: float,
) -> pl.DataFrame | None:
    """The predictions frame of `rows` (training rows, the loader's columns), each row scored by
    the fold model that did not see its scenario; None when `folds` is below 2 (no audit).

    `training_files`: the run's training JSONL files, split into folds by scenario; `key`: the
    run's training cache key (rows, config, code); `timeout_s`: each fold stage's deadline.
    """
    if folds < MIN_AUDIT_FOLDS:
        return None
    logger = get_run_logger()
    files = {path.name: pl.read_ndjson(path) for path in training_files}
    scenarios = pl.concat([frame.select("scenario_id", "kind") for frame in files.values()])
    settings = EvalSettings()  # decoded up to the rows' longest solution + 25%
    catalogue = config.data.tool_catalogue()
    predictions = []
    for index, held_out in enumerate(scenario_folds(scenarios.iter_rows(), folds, config.seed)):
        fold_dir = out_dir / f"fold-{index + 1}-of-{folds}"
        (fold_dir / "data").mkdir(parents=True, exist_ok=True)
        paths, trained = [], 0
        for name, frame in files.items():
            kept = frame.filter(~pl.col("scenario_id").is_in(sorted(held_out)))
            paths.append(fold_dir / "data" / name)
            kept.write_ndjson(paths[-1])
            trained += kept.height
        fold = fold_config(config, *paths)
        digest = hashlib.sha256(f"{key}|{fold.weights_key()}|{sorted(held_out)}".encode())
        stage = _fold_stage(fold_dir, fold, digest.hexdigest(), timeout_s)
        scored = rows.filter(pl.col("scenario_id").is_in(sorted(held_out)))
        report = evaluate_and_write(  # mining reads the tool and its probabilities: scored
            stage.model_dir, scored, fold_dir / "eval", settings, catalogue=catalogue, mode="score"
        )
        logger.info(
            "fold %d/%d: trained on %d rows, scored %d held-out rows, tool accuracy %s",
            index + 1,
            folds,
            trained,
            scored.height,
            report.metrics.accuracy.overall,
        )
        predictions.append(pl.read_parquet(report.predictions_path))
    order = rows.select("id").with_row_index("_order")
    frame = pl.concat(predictions).join(order, on="id").sort("_order").drop("_order")
    out_dir.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(out_dir / PREDICTIONS_FILE)
    return frame
