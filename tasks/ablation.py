"""The ablation tasks: train one start, train and evaluate one arm, publish the report.

The arms, aggregation and verdict are `toolgrpo.ablation` (no Prefect); `flows/ablation.py`
fans these tasks out.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from toolgrpo.ablation.arms import (
    ARM_RECORD,
    START_RECORD,
    Arm,
    ArmRun,
    Scores,
    Start,
    StartRun,
    checkpoint_models,
    scores_of,
)
from toolgrpo.ablation.summary import AblationSummary
from toolgrpo.ablation.verdict import write_verdict
from toolgrpo.evaluation.predict import EvalSettings
from toolgrpo.reporting.ablation import ablation_markdown, results_table
from toolgrpo.reporting.plots import plot_learning_curves, png_data_uri
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.files import write_text_file
from toolgrpo.schemas.run import ZeroStdGroups
from toolgrpo.tasks.artifacts import send_artifact
from toolgrpo.tasks.evaluate import evaluate_and_write
from toolgrpo.tasks.train import Stage, recorded_key, train_stage, unless_cancelled
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.metrics import read_metrics, training_seconds


def evaluate_steps(
    models: dict[int, Path],
    samples: pl.DataFrame,
    out_dir: Path,
    settings: EvalSettings,
    catalogue: Catalogue,
) -> list[Scores]:
    """Evaluate each model (step → directory) on `samples` with the tool catalogue it was
    trained with, writing `out_dir/step-N/`."""
    scores = []
    for step, model_dir in sorted(models.items()):
        report = evaluate_and_write(
            model_dir, samples, out_dir / f"step-{step}", settings, catalogue=catalogue
        )
        scores.append(scores_of(report.metrics, step))
    return scores


def _finished_earlier(run_dir: Path, record: str, stage: Stage, resume_key: str) -> str | None:
    """The record a finished start or arm left in `run_dir` (a resumed ablation), when its stage
    trained on the same inputs (`resume_key`); None otherwise."""
    if not (run_dir / record).is_file() or recorded_key(run_dir / stage) != resume_key:
        return None  # with another key, training it again is refused, naming the folder
    get_run_logger().info("%s: finished by an earlier attempt, read back", run_dir)
    return (run_dir / record).read_text(encoding="utf-8")


@task(name="train-start", cache_policy=NO_CACHE)
def train_start(
    start: Start,
    config: TrainConfig,
    run_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings,
    timeout_s: float,
    resume_key: str,
) -> StartRun:
    """Train the SFT checkpoint of one start and seed in `run_dir` and evaluate it; read back
    one an earlier attempt finished with the same inputs (`resume_key`)."""
    if finished := _finished_earlier(run_dir, START_RECORD, "sft", resume_key):
        return StartRun.model_validate_json(finished)
    sft = unless_cancelled(
        train_stage("sft", run_dir, config, timeout_s=timeout_s, resume_key=resume_key)
    )
    catalogue = config.data.tool_catalogue()
    (scores,) = evaluate_steps({0: sft.model_dir}, samples, run_dir / "eval", settings, catalogue)
    get_run_logger().info("%s seed %d: SFT multi-step %s", start, config.seed, scores.multi)
    record = StartRun(start=start, seed=config.seed, model_dir=sft.model_dir, scores=scores)
    write_text_file(run_dir / START_RECORD, record.model_dump_json(indent=2))
    return record


@task(name="train-arm", cache_policy=NO_CACHE)
def train_arm(
    start: StartRun,
    arm: Arm,
    config: TrainConfig,
    run_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings,
    timeout_s: float,
    resume_key: str,
) -> ArmRun:
    """Train one GRPO arm from `start` in `run_dir` and evaluate every checkpoint it saved;
    read back one an earlier attempt finished with the same inputs (`resume_key`)."""
    if finished := _finished_earlier(run_dir, ARM_RECORD, "grpo", resume_key):
        return ArmRun.model_validate_json(finished)
    grpo = unless_cancelled(
        train_stage(
            "grpo",
            run_dir,
            config,
            timeout_s=timeout_s,
            init_dir=start.model_dir,
            resume_key=resume_key,
        )
    )
    stage_dir = grpo.model_dir.parent
    lines = read_metrics(grpo.metrics_path)
    curve = evaluate_steps(
        checkpoint_models(stage_dir, config.grpo.max_steps),
        samples,
        run_dir / "eval",
        settings,
        config.data.tool_catalogue(),
    )
    record = ArmRun(
        start=start.start,
        arm=arm,
        seed=config.seed,
        curve=[start.scores, *curve],
        groups=ZeroStdGroups.from_metrics(lines),
        wall_s=training_seconds(lines),
    )
    # The arm's record on its own: a resumed ablation reads a finished arm back.
    write_text_file(run_dir / ARM_RECORD, record.model_dump_json(indent=2))
    return record


class AblationReport(BaseModel):
    """Where the ablation's report went, and its verdict."""

    markdown_path: Path
    json_path: Path
    plot_path: Path
    verdict: str
    failed: list[str]


@task(name="publish-ablation", cache_policy=NO_CACHE)
def publish_ablation(summary: AblationSummary, run_dir: Path) -> AblationReport:
    """Write ablation.md / .json / .png in `run_dir`; publish the verdict and table as artifacts."""
    verdict = write_verdict(summary)
    plot = plot_learning_curves(summary, run_dir / "ablation.png")
    markdown = ablation_markdown(summary, verdict, plot)
    markdown_path = write_text_file(run_dir / "ablation.md", markdown + "\n")
    json_path = write_text_file(run_dir / "ablation.json", summary.model_dump_json(indent=2))
    send_artifact(
        create_markdown_artifact,
        markdown_path,
        markdown=markdown.replace(f"]({plot.name})", f"]({png_data_uri(plot)})"),
        key="ablation-report",
        description="SFT vs GRPO vs NGRPO: verdict and table",
    )
    send_artifact(
        create_table_artifact,
        json_path,
        table=results_table(summary),
        key="ablation-table",
        description="per start and arm",
    )
    return AblationReport(
        markdown_path=markdown_path,
        json_path=json_path,
        plot_path=plot,
        verdict=verdict,
        failed=summary.failed,
    )
