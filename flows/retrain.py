"""The main job: data gate → SFT → evaluate → GRPO (NGRPO) → evaluate → mine → report.

Training is cached on a fingerprint of the validated training rows and the training config, so a
scheduled run on unchanged data reuses the last models instead of retraining.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Literal

import polars as pl
from prefect import flow, get_run_logger
from prefect.cache_policies import CacheKeyFnPolicy
from prefect.runtime import flow_run
from pydantic import BaseModel, Field

from toolgrpo import training
from toolgrpo.data import DATA_DIR, LABEL_OVERRIDES
from toolgrpo.evaluation.predict import EvalSettings, evaluation_rows
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.reporting.run_report import before_after_rows
from toolgrpo.schemas.data_quality import DataReport
from toolgrpo.schemas.run import RunSummary, ZeroStdGroups
from toolgrpo.schemas.samples import TRAINING_COLUMNS
from toolgrpo.tasks.evaluate import evaluate_model
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.mine import mine
from toolgrpo.tasks.report import publish_headline, publish_report
from toolgrpo.tasks.runs import SHORT_HASH, files_hash, new_run_dir, run_name, tag_flow_run
from toolgrpo.tasks.train import StageResult, train_stage
from toolgrpo.tasks.validate import (
    failed_gate,
    publish_data_report,
    summarise_samples,
    validate_samples,
)
from toolgrpo.training.config import TrainConfig, load_preset
from toolgrpo.training.metrics import read_metrics
from toolgrpo.validation.loader import LoadedSamples

TRAIN_FILES = {"single": "single_step.jsonl", "multi": "multistep.jsonl"}


class RetrainParams(BaseModel):
    """The retrain flow's parameters (Prefect renders them as a form in the UI)."""

    preset: Literal["smoke", "cpu", "gpu"] = Field("cpu", description="training preset")
    train_files: list[Path] = Field(
        default=[DATA_DIR / "train" / "single_step.jsonl", DATA_DIR / "train" / "multistep.jsonl"],
        description="labelled training rows (JSONL or parquet)",
    )
    eval_files: list[Path] = Field(
        default=[
            DATA_DIR / "eval" / "single_step.jsonl",
            DATA_DIR / "eval" / "multistep.jsonl",
            DATA_DIR / "eval" / "unseen_phrasing.jsonl",
        ],
        description="held-out rows, split from training by scenario",
    )
    label_overrides: Path | None = Field(
        LABEL_OVERRIDES,
        description="reviewed label decisions applied to the rows (skipped if the file is absent)",
    )
    out: Path = Field(Path("runs"), description="each run gets a new folder here")
    config: dict[str, Any] = Field(
        default_factory=dict, description="training config fields to override (training.config)"
    )
    audit_training_rows: bool = Field(True, description="also mine the training rows")
    stage_timeout_s: float = Field(3 * 3600, gt=0, description="deadline of each training stage")


def training_code() -> list[Path]:
    """The sources of what runs inside the training process (its presets included)."""
    package = Path(training.__file__).parent
    return sorted(path for path in package.rglob("*") if path.suffix in {".py", ".yaml"})


def fingerprint(paths: list[Path], config: TrainConfig, code: list[Path] | None = None) -> str:
    """A hash of the training rows' bytes, the config fields that change the trained weights
    (`TrainConfig.weights_key`), and the training code (`training_code()` by default): a changed
    trainer retrains, as new data does."""
    digest = hashlib.sha256()
    for path in [*paths, *(training_code() if code is None else code)]:
        digest.update(path.read_bytes())
    digest.update(config.weights_key().encode())
    return digest.hexdigest()


def write_training_rows(frame: pl.DataFrame, data_dir: Path) -> list[Path]:
    """The validated training rows (overrides applied) as the JSONL files a stage reads."""
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind, name in TRAIN_FILES.items():
        path = data_dir / name
        frame.filter(pl.col("kind") == kind).select(TRAINING_COLUMNS).write_ndjson(path)
        paths.append(path)
    return paths


def data_gate(params: RetrainParams, run_dir: Path) -> tuple[LoadedSamples, DataReport]:
    """Validate every input file, an eval row found in the training files included (leakage),
    and publish the report; the flow stops before any training when it fails."""
    overrides = params.label_overrides
    if overrides is not None and not overrides.is_file():
        overrides = None
    loaded = load_samples([*params.train_files, *params.eval_files], overrides)
    report = validate_samples(
        loaded, [str(p) for p in params.train_files], [str(p) for p in params.eval_files]
    )
    return loaded, publish_data_report(
        report, summarise_samples(loaded), _subdir(run_dir, "data_quality")
    )


def cached_stage(
    stage: Literal["sft", "grpo"],
    key: str,
    run_dir: Path,
    config: TrainConfig,
    timeout_s: float,
    init_dir: Path | None = None,
) -> StageResult:
    """`train_stage`, reused when the same key (data + config) trained before and its model is
    still on disk, and resumed from the checkpoint of an unfinished run with the same key."""
    cached = train_stage.with_options(
        cache_policy=CacheKeyFnPolicy(cache_key_fn=lambda *_: f"{stage}-{key}"),
        persist_result=True,
    )
    result = cached(stage, run_dir, config, timeout_s=timeout_s, init_dir=init_dir, resume_key=key)
    if not (result.model_dir / "config.json").is_file():
        result = cached.with_options(refresh_cache=True)(
            stage, run_dir, config, timeout_s=timeout_s, init_dir=init_dir, resume_key=key
        )
    return result


def _subdir(run_dir: Path, name: str) -> Path:
    path = run_dir / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _retrain_run_name() -> str:
    """`retrain-cpu-20261201-0529`."""
    params = RetrainParams.model_validate(flow_run.parameters.get("params") or {})
    return run_name("retrain", params.preset)


@flow(name="retrain", flow_run_name=_retrain_run_name, log_prints=True)
def retrain(params: RetrainParams | None = None) -> RunSummary:
    """Gate the data, train SFT then GRPO + NGRPO, evaluate both, mine errors, publish a report.

    A failed data gate ends the run Failed before any training (calling the flow then raises
    `DataGateFailed` with the report), as does a failed training stage (`StageFailed`).
    """
    params = params or RetrainParams()
    logger = get_run_logger()
    data_hash = files_hash([*params.train_files, *params.eval_files])
    tag_flow_run(f"preset:{params.preset}", f"data:{data_hash[:SHORT_HASH]}")
    run_dir = new_run_dir(params.out, f"retrain-{params.preset}").resolve()
    logger.info("run folder: %s", run_dir)
    wall: dict[str, float] = {}

    started = time.monotonic()
    loaded, gate = data_gate(params, run_dir)
    if not gate.ok:
        return failed_gate(gate)
    train_paths = {str(p) for p in params.train_files}
    is_train = pl.col("file").is_in(train_paths)
    single_path, multi_path = write_training_rows(loaded.frame.filter(is_train), run_dir / "data")
    config = load_preset(
        params.preset,
        {
            **params.config,
            "data.train_single_step": single_path,
            "data.train_multistep": multi_path,
        },
    )
    train_rows = evaluation_rows(loaded.frame.filter(is_train), config.runtime.eval_max_rows)
    eval_rows = evaluation_rows(loaded.frame.filter(~is_train), config.runtime.eval_max_rows)
    settings = EvalSettings(max_new_tokens=config.grpo.max_completion_length)
    aux = [config.data.train_aux] if config.data.aux_share else []  # rows only SFT mixes in
    key = fingerprint([single_path, multi_path, *aux], config)
    wall["data gate"] = time.monotonic() - started

    sft = cached_stage("sft", key, run_dir, config, params.stage_timeout_s)
    grpo = cached_stage(
        "grpo", key, run_dir, config, params.stage_timeout_s, init_dir=sft.model_dir
    )
    retrained = sft.model_dir.is_relative_to(run_dir)
    if not retrained:
        logger.info(
            "data and config unchanged (fingerprint %s): reusing %s, nothing retrained",
            key[:12],
            grpo.model_dir,
        )
    wall["sft"], wall["grpo"] = (sft.wall_s, grpo.wall_s) if retrained else (0.0, 0.0)

    started = time.monotonic()
    before = evaluate_model(
        sft.model_dir, eval_rows, run_dir / "eval_sft", settings, label="evaluate sft · eval"
    )
    after = evaluate_model(
        grpo.model_dir, eval_rows, run_dir / "eval_grpo", settings, label="evaluate grpo · eval"
    )
    audit = (
        evaluate_model(
            grpo.model_dir, train_rows, run_dir / "eval_train", settings, label="audit · train"
        )
        if params.audit_training_rows
        else None
    )
    wall["evaluate"] = time.monotonic() - started

    started = time.monotonic()
    mining = mine(
        pl.read_parquet(after.predictions_path),
        pl.read_parquet(audit.predictions_path) if audit else None,
        run_dir / "mining",
    )
    wall["mine"] = time.monotonic() - started

    grpo_metrics = read_metrics(grpo.metrics_path)
    summary = RunSummary(
        preset=params.preset,
        run_dir=run_dir,
        data_hash=data_hash,
        config_hash=key,
        rows={name: count for name, count in gate.counts.get("file", {}).items()},
        retrained=retrained,
        models={"sft": sft.model_dir, "grpo": grpo.model_dir},
        accuracy={"sft": before.metrics.accuracy, "grpo": after.metrics.accuracy},
        zero_std=ZeroStdGroups.from_metrics(grpo_metrics),
        flagged_label_ambiguity=mining.ambiguity_ids,
        flagged_label_conflict=mining.conflict_ids,
        wall_s={stage: round(seconds, 1) for stage, seconds in wall.items()},
    )
    report = publish_report(summary, after.metrics, mining, grpo_metrics)
    publish_headline(summary, report)
    table = markdown_table(before_after_rows(summary.accuracy))
    logger.info("tool accuracy before and after GRPO (n: rows evaluated):\n%s", table)
    logger.info("%s; report: %s", summary.zero_std.line(), report.html)
    return summary
