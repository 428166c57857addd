"""`toolgrpo ablate`: does NGRPO earn its place? SFT vs GRPO vs NGRPO (zero-std) vs NGRPO (all).

Each start (SFT on single-step rows only, on those plus 10% of the multi-step scenarios, and the
preset's default warm start) is trained once per seed; from each, one GRPO arm per advantage
estimator with the same seeds, steps and data. Arms run as separate Prefect tasks, `workers` at a
time, and every saved checkpoint is evaluated on the held-out rows. The report (verdict, table,
learning curves) goes to the run folder and to artifacts. `toolgrpo ablate-report` merges
ablations run apart (a seed per day or machine) into one such report.

The tasks run on a thread pool of this process, or on a Dask cluster (`dask`: a local one, or a
team's scheduler) through prefect-dask, the optional extra `toolgrpo[dask]`: each arm's training
and evaluation then run on a Dask worker. A remote cluster's workers need the package and the
same paths (eval files, `out`) on a shared filesystem.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolgrpo.ablation.arms import (
    ARMS,
    STARTS,
    AblationError,
    Arm,
    Start,
    arm_config,
    start_config,
)
from toolgrpo.ablation.merge import merge_summaries, read_summary
from toolgrpo.ablation.summary import AblationSummary, aggregate_arms
from toolgrpo.common.cpus import usable_cpus
from toolgrpo.data import DATA_DIR, LABEL_OVERRIDES
from toolgrpo.evaluation.predict import EvalSettings, evaluation_rows
from toolgrpo.flows.prefect_api import record_process
from toolgrpo.schemas.catalogue import CatalogueError
from toolgrpo.schemas.errors import validation_problems
from toolgrpo.schemas.files import write_text_file
from toolgrpo.tasks.ablation import AblationReport, publish_ablation, train_arm, train_start
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.train import fingerprint, stop_training_processes, stoppable_training
from toolgrpo.tasks.validate import data_gate, failed_gate, rows_of, write_training_rows
from toolgrpo.training.config import ConfigError
from toolgrpo.training.config_overrides import load_preset

HELD_OUT = [DATA_DIR / "eval" / "single_step.jsonl", DATA_DIR / "eval" / "multistep.jsonl"]


# How long the flow waits on its arms at a time (a Ctrl-C is seen in between).
WAIT_S = 1.0


class AblationParams(BaseModel):
    """What `toolgrpo ablate` runs: preset, seeds, steps, arms, starts and parallelism."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    preset: str = "cpu"
    seeds: int = Field(3, ge=1, description="seeds per start and arm: the preset's seed, +1, …")
    steps: int | None = Field(None, gt=0, description="GRPO steps per arm; None: the preset's")
    eval_every: int | None = Field(None, gt=0, description="None: a third of the steps")
    arms: list[Arm] = Field(default_factory=lambda: list(ARMS), min_length=1)
    starts: list[Start] = Field(default_factory=lambda: list(STARTS), min_length=1)
    workers: int = Field(2, ge=1, description="arms trained at once (Dask: local workers)")
    dask: str | None = Field(
        None,
        description="None: a thread pool here; 'local': a local Dask cluster of `workers` "
        "processes; else a Dask scheduler's address (tcp://host:8786)",
    )
    out: Path = Path("runs")
    eval_files: list[Path] = Field(default_factory=lambda: list(HELD_OUT), min_length=1)
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="training config fields applied to every stage"
    )
    catalogue: Path | None = Field(
        None, description="the tool catalogue (JSON) to train and evaluate with; None: the shipped"
    )
    # A busy 2-core machine ran the cpu preset's SFT ~10x slower than a quiet one.
    stage_timeout_s: float = Field(7200.0, gt=0)
    resume: Path | None = Field(
        None,
        description="an earlier ablation's run folder to finish, started with the same settings: "
        "its finished starts and arms are read back, the others resume from their checkpoints",
    )

    def training_overrides(self) -> dict[str, Any]:
        """`overrides` of every stage, with the catalogue when one is given."""
        return self.overrides | ({"data.catalogue": self.catalogue} if self.catalogue else {})


# In an ablation's run folder: the params it was started with, which `resume` must repeat.
PARAMS_FILE = "ablation_params.json"
# The params that may differ on resume: where and how widely it runs, not what it trains.
RESUMABLE_CHANGES = frozenset({"workers", "dask", "out", "resume", "stage_timeout_s"})


def _resume_problem(params: AblationParams) -> str | None:
    """Why `params.resume` cannot be finished with `params`, or None."""
    folder = params.resume
    if folder is None:
        return None
    try:
        started = AblationParams.model_validate_json((folder / PARAMS_FILE).read_bytes())
    except OSError:
        return f"resume: {folder} is not an ablation's run folder (no {PARAMS_FILE})"
    except ValidationError as error:
        return f"resume: {folder / PARAMS_FILE}: {validation_problems(error)}"
    ours, theirs = (
        p.model_dump(mode="json", exclude=set(RESUMABLE_CHANGES)) for p in (params, started)
    )
    differing = [name for name in ours if ours[name] != theirs[name]]
    said = ", ".join(f"{name} {ours[name]!r} (started with {theirs[name]!r})" for name in differing)
    return f"resume: {folder} was started with other settings: {said}" if differing else None


def parse_params(**values: Any) -> AblationParams:
    """Validated params, with the preset and overrides checked before anything trains; raises
    `AblationError` with one readable line per problem."""
    try:
        params = AblationParams(**values)
        load_preset(params.preset, params.training_overrides()).data.tool_catalogue()
    except ValidationError as error:
        raise AblationError(f"invalid ablation settings: {validation_problems(error)}") from None
    except (ConfigError, CatalogueError) as error:
        raise AblationError(str(error)) from None
    for name in ("arms", "starts"):
        chosen = getattr(params, name)
        if len(set(chosen)) != len(chosen):
            raise AblationError(f"{name}: {chosen} names one twice")
    missing = [str(path) for path in params.eval_files if not path.is_file()]
    if missing:
        raise AblationError(f"eval files not found: {', '.join(missing)}")
    if params.dask is not None and importlib.util.find_spec("prefect_dask") is None:
        raise AblationError("dask: prefect-dask is not installed: pip install 'toolgrpo[dask]'")
    if problem := _resume_problem(params):
        raise AblationError(problem)
    return params


def _failure(what: str, future: PrefectFuture) -> str:
    """`what`: the first line of why its task did not complete."""
    message = future.state.message or future.state.name or "no message"
    return f"{what}: {message.strip().splitlines()[0]}"


@flow(name="ablation", log_prints=True, on_running=[record_process])
def ablation(params: AblationParams) -> AblationReport:
    """Gate the data, train the starts, then every arm from each, evaluate, aggregate and
    publish. A failed data gate ends the run Failed before any training (calling the flow then
    raises `DataGateFailed` with the report)."""
    started = time.monotonic()
    logger = get_run_logger()
    threads = max(1, usable_cpus() // params.workers)
    base = load_preset(params.preset, params.training_overrides())
    steps = params.steps or base.grpo.max_steps
    eval_every = params.eval_every or max(1, steps // 3)
    seeds = [base.seed + i for i in range(params.seeds)]
    settings = EvalSettings(max_new_tokens=base.grpo.max_completion_length, torch_threads=threads)
    timeout_s = params.stage_timeout_s
    run_dir = params.resume or new_run_dir(params.out, "ablation")
    if params.resume is None:
        write_text_file(run_dir / PARAMS_FILE, params.model_dump_json(indent=2))
    logger.info(
        "ablation in %s: %d steps, eval every %d, seeds %s", run_dir, steps, eval_every, seeds
    )

    # The main job's gate on every row a stage reads (SFT's auxiliary rows included); the stages
    # then train on the gated rows, reviewed label overrides applied, as the main job does.
    train_files = base.data.training_files()
    aux = base.data.mixed_in_aux()
    loaded, gate = data_gate(
        [*train_files, *aux],
        params.eval_files,
        LABEL_OVERRIDES,
        base.data.tool_catalogue(),
        run_dir / "data_quality",
    )
    if not gate.ok:
        return failed_gate(gate)  # type: ignore[return-value]  # a flow fails by returning its Failed state (Prefect's way)
    gated = write_training_rows(loaded.frame, train_files, aux, run_dir / "data")
    overrides = params.training_overrides() | gated
    samples = evaluation_rows(rows_of(loaded.frame, params.eval_files), base.runtime.eval_max_rows)

    # Every start is submitted before any arm: task threads take work in submission order, so
    # starts train side by side and an arm only ever waits for a start that is already running.
    configs = {
        (start, seed): start_config(params.preset, start, seed, threads, overrides)
        for seed in seeds
        for start in params.starts
    }
    # Each start and arm keyed by its training and eval rows, config and code: a resumed
    # ablation reads back or resumes only what those same inputs trained and scored.
    rows = [*gated.values(), *params.eval_files]
    starts = {
        (start, seed): train_start.submit(
            start,
            config,
            run_dir / start / f"seed-{seed}",
            samples,
            settings,
            timeout_s,
            resume_key=fingerprint(rows, config),
        )
        for (start, seed), config in configs.items()
    }
    arm_configs = {
        (start, seed, arm): arm_config(config, arm, steps, eval_every)
        for (start, seed), config in configs.items()
        for arm in params.arms
    }
    arms = {
        (start, seed, arm): train_arm.submit(  # type: ignore[call-overload]  # a future for its result
            starts[start, seed],
            arm,
            config,
            run_dir / start / f"seed-{seed}" / arm,
            samples,
            settings,
            timeout_s,
            resume_key=fingerprint(rows, config),
        )
        for (start, seed, arm), config in arm_configs.items()
    }
    # In short waits on one future at a time, as a Ctrl-C reaches this thread only between them;
    # then (or on SIGTERM) the arms' trainers are stopped here, before the flow's end waits for
    # the arms' threads. Not Prefect's `wait(futures, timeout=)`: in the main thread it times
    # out with SIGALRM, which can land inside an API call.
    pending = [*starts.values(), *arms.values()]
    try:
        while pending:
            pending[0].wait(timeout=WAIT_S)
            pending = [future for future in pending if not _done(future)]
    except BaseException:
        stop_training_processes()
        raise
    wait([*starts.values(), *arms.values()])  # all done: each one's final state, read once

    failed = [
        _failure(f"{start} seed {seed} (SFT)", future)
        for (start, seed), future in starts.items()
        if not future.state.is_completed()
    ]
    failed += [
        _failure(f"{start} seed {seed} {arm}", future)
        for (start, seed, arm), future in arms.items()
        if not future.state.is_completed() and starts[start, seed].state.is_completed()
    ]
    runs = [future.result() for future in arms.values() if future.state.is_completed()]
    if not runs:
        raise AblationError(f"no arm finished: {'; '.join(failed)}")
    summary = AblationSummary(
        preset=params.preset,
        steps=steps,
        eval_every=eval_every,
        seeds=seeds,
        eval_rows=samples.height,
        multi_rows=samples.filter(pl.col("kind") == "multi").height,
        arms=aggregate_arms(runs),
        runs=runs,
        failed=failed,
        wall_s=round(time.monotonic() - started, 1),
        overrides=params.training_overrides(),
    )
    report = publish_ablation(summary, run_dir)
    print(report.verdict)
    return report


@flow(name="ablation-report", log_prints=True)
def ablation_report(summaries: list[Path], out: Path = Path("runs")) -> AblationReport:
    """One report across ablations run apart (each `summaries` entry an ablation.json or its run
    folder): merged, aggregated across their seeds and published as `ablation` does, in a new
    folder under `out`. Raises `AblationError` (the run ends Failed) when they are not one
    experiment or a summary cannot be read."""
    merged = merge_summaries({str(path): read_summary(path) for path in summaries})
    report = publish_ablation(merged, new_run_dir(out, "ablation-report"))
    print(report.verdict)
    return report


def _done(future: PrefectFuture[Any]) -> bool:
    """Whether the task behind `future` has ended, asked of its thread's or Dask's own future
    (no API call)."""
    wrapped = getattr(future, "wrapped_future", None)
    return wrapped.done() if wrapped is not None else future.state.is_final()


def task_runner(params: AblationParams) -> TaskRunner:
    """`workers` threads of this process, or the Dask cluster `params.dask` names."""
    if params.dask is None:
        return ThreadPoolTaskRunner(max_workers=params.workers)
    from prefect_dask import DaskTaskRunner

    if params.dask == "local":
        # One thread per worker process: each task is one training stage and its evaluations.
        return DaskTaskRunner(cluster_kwargs={"n_workers": params.workers, "threads_per_worker": 1})
    return DaskTaskRunner(address=params.dask)


def run_ablation(params: AblationParams) -> AblationReport:
    """The ablation flow on `task_runner(params)`."""
    runner = task_runner(params)
    with stoppable_training():  # the flow's end has waited for its arms' threads
        return ablation.with_options(task_runner=runner)(params)  # type: ignore[arg-type]  # Prefect types it invariantly
