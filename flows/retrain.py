"""The main job: data gate → SFT → evaluate → GRPO (NGRPO) → evaluate → mine → report.

Training is cached on a fingerprint of the validated training rows, the tool catalogue and the
training config, so a scheduled run on unchanged data reuses the last models instead of
retraining.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

import polars as pl
from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import Field

from toolgrpo.data import DATA_DIR, LABEL_OVERRIDES
from toolgrpo.evaluation.predict import EvalSettings, PredictionMode, evaluation_rows
from toolgrpo.flows.prefect_api import record_process
from toolgrpo.flows.retrain_parameters import RetrainOverrides
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.reporting.run_report import before_after_rows
from toolgrpo.schemas.catalogue import DEFAULT_CATALOGUE, load_catalogue
from toolgrpo.schemas.files import replace_file
from toolgrpo.schemas.run import RunSummary, ZeroStdGroups
from toolgrpo.tasks.audit import MIN_AUDIT_FOLDS, cross_fitted_audit
from toolgrpo.tasks.cache_locks import training_cache, training_locks
from toolgrpo.tasks.evaluate import EvalReport, evaluate_model
from toolgrpo.tasks.mine import mine
from toolgrpo.tasks.report import publish_headline, publish_report
from toolgrpo.tasks.runs import (
    SHORT_HASH,
    cancelled_run,
    clear_earlier_attempts,
    failed_run,
    files_hash,
    new_run_dir,
    run_name,
    tag_flow_run,
)
from toolgrpo.tasks.train import (
    StageCancelled,
    StageResult,
    fingerprint,
    train_stage,
    unless_cancelled,
)
from toolgrpo.tasks.validate import data_gate, failed_gate, rows_of, write_training_rows
from toolgrpo.training import Preset
from toolgrpo.training.config import ConfigError, TrainConfig
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.metrics import read_metrics

CATALOGUE_FILE = "catalogue.json"
# Every retrain run's tags, from the CLI or a deployment (which adds its own name).
RETRAIN_TAGS = ("toolgrpo", "training")
SHIPPED_EVAL_FILES = [
    DATA_DIR / "eval" / "single_step.jsonl",
    DATA_DIR / "eval" / "multistep.jsonl",
    DATA_DIR / "eval" / "unseen_phrasing.jsonl",
]


def keep_catalogue(catalogue: Path | None, run_dir: Path) -> Path:
    """A copy of the catalogue file (default: the shipped one) in the run folder, which the
    stages read: the run keeps the catalogue it was trained and evaluated with."""
    source = catalogue or DEFAULT_CATALOGUE
    return replace_file(run_dir / CATALOGUE_FILE, lambda path: shutil.copyfile(source, path))


def cached_stage(
    stage: Literal["sft", "grpo"],
    key: str,
    run_dir: Path,
    config: TrainConfig,
    timeout_s: float,
    init_dir: Path | None = None,
) -> StageResult:
    """`train_stage`, reused when the same key (data + config) trained before and its model is
    still on disk, and resumed from the checkpoint of an unfinished run with the same key. While
    another run trains the same key, this one waits for it and reuses its model."""
    if holder := training_locks().holder_process(f"{stage}-{key}"):
        get_run_logger().info(
            "%s: another run (process %s) is training the same data and config; waiting for "
            "it to finish, to reuse its model",
            stage,
            holder,
        )
    cached = train_stage.with_options(cache_policy=training_cache(stage, key), persist_result=True)
    result = unless_cancelled(
        cached(stage, run_dir, config, timeout_s=timeout_s, init_dir=init_dir, resume_key=key)
    )
    if not (result.model_dir / "config.json").is_file():
        result = unless_cancelled(
            cached.with_options(refresh_cache=True)(
                stage, run_dir, config, timeout_s=timeout_s, init_dir=init_dir, resume_key=key
            )
        )
    return result


def _retrain_run_name() -> str:
    """`retrain-cpu-20261201-0529`."""
    return run_name("retrain", flow_run.parameters.get("preset", "cpu"))


class StageClock:
    """The wall time of each stage of a run, in seconds, as `RunSummary.wall_s` keeps it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - started, 1)


@flow(
    name="retrain",
    flow_run_name=_retrain_run_name,
    log_prints=True,
    on_running=[record_process],
)
def retrain(
    preset: Preset = "cpu",
    train_files: list[Path] | None = None,
    eval_files: list[Path] = SHIPPED_EVAL_FILES,
    catalogue: Path | None = None,
    label_overrides: Path | None = LABEL_OVERRIDES,
    config: RetrainOverrides | None = None,
    out: Path = Path("runs"),
    audit_training_rows: bool = True,
    audit_folds: Annotated[int, Field(ge=0)] = 0,
    stage_timeout_s: Annotated[float, Field(gt=0)] = 3 * 3600,
) -> RunSummary:
    """Gate the data, train SFT then GRPO + NGRPO, evaluate both, mine errors, publish a report.

    A failed data gate ends the run Failed before any training (calling the flow then raises
    `DataGateFailed` with the report), as does a failed training stage (`StageFailed`).

    Args:
        preset: the training preset (smoke: a plumbing check; cpu: the main job, a tiny model
            built locally; pretrained: Gemma 3 270M from the package registry on the CPU, its
            vocabulary cut to the data's, LoRA; gpu: a pretrained base model of yours, LoRA,
            bf16)
        train_files: labelled training rows (JSONL or parquet); empty: the preset's
            (data.train_single_step, data.train_multistep: for the cpu preset the shipped
            single-step rows and the multi-step rows with each comparison written out, in
            data/aux/walked/)
        eval_files: held-out rows, split from the training rows by scenario
        catalogue: the tool catalogue (JSON) the rows, rewards and evaluation use; empty: the
            shipped data/tools.json. The run folder keeps a copy (catalogue.json).
        label_overrides: reviewed label decisions applied to the rows (skipped if the file is
            absent)
        config: training config fields to override, by section (e.g. grpo.max_steps); a field
            left empty keeps the preset's value
        out: each run gets a new folder here
        audit_training_rows: also evaluate the GRPO model on the training rows and mine them
        audit_folds: fold models scoring the training rows out of sample, for mining; 0 or 1:
            none. Each costs an SFT run on top of the main job; it changes none of the run's
            weights
        stage_timeout_s: deadline of each training stage, in seconds
    """
    logger = get_run_logger()
    tag_flow_run(*RETRAIN_TAGS, f"preset:{preset}")
    clear_earlier_attempts()
    overrides = config.dotted() if config else {}
    try:
        requested = load_preset(preset, overrides)
    except ConfigError as error:  # a combination of fields the form cannot check alone
        return failed_run(error)  # type: ignore[return-value]  # a flow fails by returning its Failed state (Prefect's way)
    train_files = train_files or requested.data.training_files()
    own_rows = requested.for_training_files(train_files, aux_given="data.train_aux" in overrides)
    if own_rows is not requested:
        logger.info(
            "training on your own rows: the preset's auxiliary rows (%s) are not mixed in; set "
            "data.train_aux (and data.aux_share) to rows of your domain to mix some in",
            ", ".join(map(str, requested.data.train_aux)),
        )
        requested = own_rows
    # the rows SFT mixes in (data.train_aux) are training data too: hashed, gated and written
    # with them
    aux = requested.data.mixed_in_aux()
    data_hash = files_hash([*train_files, *aux, *eval_files])
    tag_flow_run(f"data:{data_hash[:SHORT_HASH]}")
    run_dir = new_run_dir(out, f"retrain-{preset}").resolve()
    logger.info("run folder: %s", run_dir)
    wall = StageClock()

    with wall.stage("data gate"):
        catalogue_copy = keep_catalogue(catalogue, run_dir)
        tools = load_catalogue(catalogue_copy)
        loaded, gate = data_gate(
            [*train_files, *aux], eval_files, label_overrides, tools, run_dir / "data_quality"
        )
        if not gate.ok:
            return failed_gate(gate)  # type: ignore[return-value]  # a flow fails by returning its Failed state (Prefect's way)
        gated = write_training_rows(loaded.frame, train_files, aux, run_dir / "data")
        train_config = with_overrides(requested, {**gated, "data.catalogue": catalogue_copy})
        max_rows = train_config.runtime.eval_max_rows
        train_rows = evaluation_rows(rows_of(loaded.frame, train_files), max_rows)
        eval_rows = evaluation_rows(rows_of(loaded.frame, eval_files), max_rows)
        key = fingerprint(list(gated.values()), train_config)

    try:
        sft = cached_stage("sft", key, run_dir, train_config, stage_timeout_s)
        grpo = cached_stage("grpo", key, run_dir, train_config, stage_timeout_s, sft.model_dir)
    except StageCancelled as stopped:
        return cancelled_run(stopped)  # type: ignore[return-value]  # Prefect's way, as above
    training = {stage.stage: stage.in_run(run_dir) for stage in (sft, grpo)}
    retrained = any(stage.trained_here for stage in training.values())
    if not retrained:
        logger.info(
            "data and config unchanged (fingerprint %s): reusing %s, nothing retrained",
            key[:12],
            grpo.model_dir,
        )
    else:
        for name, stage in training.items():
            logger.info("%s: %s", name, stage.line())
    wall.seconds |= {name: stage.wall_s for name, stage in training.items()}

    settings = EvalSettings()  # answers decoded up to the rows' longest solution + 25%

    def evaluate(
        model_dir: Path, rows: pl.DataFrame, name: str, label: str, mode: PredictionMode = "decode"
    ) -> EvalReport:
        return evaluate_model(model_dir, rows, run_dir / name, settings, label, tools, mode)

    with wall.stage("evaluate"):
        before = evaluate(sft.model_dir, eval_rows, "eval_sft", "evaluate sft · eval")
        after = evaluate(grpo.model_dir, eval_rows, "eval_grpo", "evaluate grpo · eval")
        audit = (
            # mining reads the tool and its probabilities only: scored, not decoded whole
            evaluate(grpo.model_dir, train_rows, "eval_train", "audit · train", mode="score")
            if audit_training_rows
            else None
        )

    cross_fitted = None
    if audit_folds >= MIN_AUDIT_FOLDS:  # no task run at all when the audit is off
        with wall.stage("cross-fitted audit"):
            try:
                cross_fitted = unless_cancelled(
                    cross_fitted_audit(
                        train_rows,
                        [gated["data.train_single_step"], gated["data.train_multistep"]],
                        train_config,
                        key,
                        audit_folds,
                        run_dir / "audit",
                        stage_timeout_s,
                    )
                )
            except StageCancelled as stopped:
                return cancelled_run(stopped)  # type: ignore[return-value]  # Prefect's way

    with wall.stage("mine"):
        mining = mine(
            pl.read_parquet(after.predictions_path),
            pl.read_parquet(audit.predictions_path) if audit else None,
            run_dir / "mining",
            tools,
            cross_fitted=cross_fitted,
            labels=loaded.frame,
        )

    grpo_metrics = read_metrics(grpo.metrics_path)
    summary = RunSummary(
        preset=preset,
        run_dir=run_dir,
        data_hash=data_hash,
        config_hash=key,
        overrides=overrides,
        rows={name: count for name, count in gate.counts.get("file", {}).items()},
        retrained=retrained,
        training=training,
        models={"sft": sft.model_dir, "grpo": grpo.model_dir},
        accuracy={"sft": before.metrics.accuracy, "grpo": after.metrics.accuracy},
        zero_std=ZeroStdGroups.from_metrics(grpo_metrics),
        flagged_label_ambiguity=mining.ambiguity_ids,
        flagged_label_conflict=mining.conflict_ids,
        wall_s=wall.seconds,
    )
    report = publish_report(summary, after.metrics, mining, grpo_metrics)
    publish_headline(summary, report)
    table = markdown_table(before_after_rows(summary.accuracy))
    logger.info("tool accuracy before and after GRPO (n: rows evaluated):\n%s", table)
    logger.info("%s; report: %s", summary.zero_std.line(), report.html)
    return summary
