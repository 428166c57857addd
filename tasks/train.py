"""Train one stage (SFT or GRPO) in its own process, watched from a Prefect task.

The stage runs as `python -m toolgrpo.training …` (one process) or `accelerate launch
--config_file … -m toolgrpo.training …` (several processes or GPUs: DDP, DeepSpeed or FSDP as
`runtime.accelerate_config` names), so a crash there cannot take the flow down and the same task
drives a CPU, a GPU or many. The config is placed on this machine's device first
(`training.device`): a fallback to the CPU is logged, a device or engine the machine lacks stops
the task with one line before anything starts. The task streams the child's output into the run
log (its progress lines at info level, its per-step records at debug), turns the metrics file
into a progress artifact, enforces its own deadline (Prefect's timeouts cannot interrupt a
blocking call) by killing the child's process group, and raises with the last lines of output
when the child fails. Running the task again — or a Prefect retry — resumes from the checkpoint;
given a `resume_key`, so does a new run with the same inputs, from the checkpoint an unfinished
earlier run left in a sibling run folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, ClassVar, Literal, NamedTuple, ParamSpec, TypeVar

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.exceptions import TerminationSignal
from prefect.runtime import flow_run
from pydantic import BaseModel

from toolgrpo import training
from toolgrpo.schemas.files import write_text_file
from toolgrpo.schemas.run import StageTraining
from toolgrpo.tasks.progress import ProgressArtifact
from toolgrpo.tasks.run_state import FlowRunWatch
from toolgrpo.tasks.runs import cancelled_task
from toolgrpo.training.config import (
    CONFIG_FILENAME,
    ConfigError,
    TrainConfig,
    accelerate_config_file,
)
from toolgrpo.training.device import place_here
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics
from toolgrpo.training.orphans import child_environment
from toolgrpo.training.stage import last_checkpoint, saved_checkpoints

Stage = Literal["sft", "grpo", "base"]
TAIL_LINES = 30
PROGRESS_INTERVAL_S = 5.0
KILL_GRACE_S = 10.0
# Exit status of `python -m toolgrpo.training` for unusable input (bad config, missing data):
# retrying cannot help.
INPUT_ERROR_STATUS = 2
# In a stage folder: the key of the inputs it trains on, so a later run can resume it.
RESUME_KEY_FILE = "resume_key.txt"
# What a stage needs of an earlier attempt to resume: the tiny model's tokenizer (SFT) and the
# metrics so far; with the last checkpoint.
CARRIED_OVER = ("init", METRICS_FILENAME)
# Per-step records of the child: the Trainer's own dict of every logged metric, and NGRPO's
# zero-std line. train_metrics.jsonl keeps them and the progress lines sum them up, so the run
# log gets them at debug level only.
PER_STEP_RECORD = re.compile(r"^\{'|^toolgrpo\.training\.ngrpo: Zero std: ")
# A line of output that says why a process stopped: our one-line errors, a raised exception.
CAUSE_LINE = re.compile(r"^(error: |\w+(\.\w+)*(Error|Exception|Interrupt)\b)")


def training_code() -> list[Path]:
    """The sources of what runs inside the training process (its presets included)."""
    package = Path(training.__file__).parent
    return sorted(path for path in package.rglob("*") if path.suffix in {".py", ".yaml"})


def fingerprint(paths: list[Path], config: TrainConfig, code: list[Path] | None = None) -> str:
    """A hash of the training rows' bytes, the tool catalogue's (`config.data.catalogue`), the
    config fields that change the trained weights (`TrainConfig.weights_key`), and the training
    code (`training_code()` by default): a changed trainer or catalogue retrains, as new data
    does."""
    digest = hashlib.sha256()
    for path in [*paths, config.data.catalogue, *(training_code() if code is None else code)]:
        digest.update(path.read_bytes())
    digest.update(config.weights_key().encode())
    return digest.hexdigest()


class StageFailed(RuntimeError):
    """The training process failed or ran past its deadline; the message ends with its output."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


class StageCancelled(RuntimeError):
    """The flow run was cancelled (from the Prefect UI) while the stage trained: the trainer was
    stopped; the message says at which step and how a later run goes on."""


Params = ParamSpec("Params")
Value = TypeVar("Value")


def ends_cancelled(work: Callable[Params, Value]) -> Callable[Params, Value | State]:
    """A task function whose run ends Cancelled, not Failed, when a Cancel stops it
    (`StageCancelled`): it returns `cancelled_task`'s state, which its caller reads with
    `unless_cancelled`."""

    @functools.wraps(work)
    def stoppable(*args: Params.args, **kwargs: Params.kwargs) -> Value | State:
        try:
            return work(*args, **kwargs)
        except StageCancelled as stopped:
            return cancelled_task(stopped)

    return stoppable


def unless_cancelled(outcome: Value | State) -> Value:
    """The value of a task made with `ends_cancelled`; `StageCancelled` when a Cancel stopped it."""
    if isinstance(outcome, State):
        raise StageCancelled(outcome.message or "cancelled")
    return outcome


class StageResult(BaseModel):
    """Where a finished stage left its model and metrics, and how long it took."""

    stage: Stage
    model_dir: Path
    metrics_path: Path
    steps: int
    max_steps: int
    resumed_from_step: int
    wall_s: float

    def in_run(self, run_dir: Path) -> StageTraining:
        """What this stage did in the run of `run_dir`: a result of another run's folder is a
        cached model reused here."""
        here = self.model_dir.is_relative_to(run_dir)
        return StageTraining(
            trained_here=here,
            steps=self.steps,
            resumed_from_step=self.resumed_from_step if here else 0,
            wall_s=self.wall_s if here else 0.0,
        )


def free_port() -> int:
    """A TCP port no process listens on now: stages started side by side (ablation arms, two
    runs on one node) must not meet on accelerate's default rendezvous port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stage_command(
    stage: Stage, run_dir: Path, config: TrainConfig, init_dir: Path | None
) -> list[str]:
    """The command line of the training process: accelerate for several processes, with the
    config file of `runtime.accelerate_config`; the process count and precision come from the
    training config and override the file's."""
    runtime = config.runtime
    if runtime.num_processes > 1:
        launcher = [sys.executable, "-m", "accelerate.commands.launch"]
        launcher += ["--config_file", str(accelerate_config_file(runtime.accelerate_config))]
        launcher += ["--num_processes", str(runtime.num_processes)]
        launcher += ["--mixed_precision", "bf16" if config.model.bf16 else "no"]
        launcher += ["--main_process_port", str(free_port())]
        launcher += ["-m", "toolgrpo.training"]
    else:
        launcher = [sys.executable, "-m", "toolgrpo.training"]
    command = [*launcher, stage, "--run-dir", str(run_dir)]
    return [*command, "--init", str(init_dir)] if init_dir is not None else command


def _read_into(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Forward each line of the child's output; None marks the end."""
    for line in iter(stream.readline, ""):
        lines.put(line.rstrip("\n"))
    lines.put(None)


class Supervised:
    """The training processes this process supervises now (ablation arms: several, from
    threads), and whether the command is stopping, after which no stage starts or retries.
    Class attributes, so that a task pickled for a Dask worker refers to them by name."""

    live: ClassVar[set[subprocess.Popen]] = set()
    stopping: ClassVar[bool] = False


def stop_training_processes() -> None:
    """Stop every training process this process supervises and start no other, as a command
    that is interrupted (Ctrl-C, SIGTERM) must: the threads that supervise them then end, and
    the command with them, instead of waiting on training that goes on. Holds until the
    enclosing `stoppable_training` block ends."""
    Supervised.stopping = True
    for process in list(Supervised.live):
        _terminate_group(process)
    for process in list(Supervised.live):
        _kill_group(process)


@contextlib.contextmanager
def stoppable_training() -> Iterator[None]:
    """The span in which `stop_training_processes` keeps stages from starting: a flow and the
    task threads it waits for. After it, stages start again, for the next flow of a process
    that runs several (a test session, a notebook)."""
    try:
        yield
    finally:
        Supervised.stopping = False


def _terminate_group(process: subprocess.Popen) -> None:
    """Ask the child and everything it started (its own session) to stop: SIGTERM."""
    with contextlib.suppress(ProcessLookupError):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)


def _kill_group(process: subprocess.Popen) -> None:
    """Stop the child and everything it started (its own session): TERM, then KILL."""
    if process.poll() is not None:
        return
    try:
        _terminate_group(process)
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def _progress(metrics_path: Path) -> tuple[int, int]:
    """(step, max_steps) of the last metrics line, (0, 0) before the first one."""
    try:
        metrics = read_metrics(metrics_path)
    except (OSError, ValueError):  # a line being written
        return 0, 0
    last = metrics[-1] if metrics else {}
    return last.get("step", 0), last.get("max_steps", 0)


def recorded_key(stage_dir: Path) -> str | None:
    """The resume key a stage folder's checkpoints were saved under, None when it has none."""
    key_file = stage_dir / RESUME_KEY_FILE
    return key_file.read_text(encoding="utf-8") if key_file.is_file() else None


def _unfinished_attempt(stage: Stage, run_dir: Path, resume_key: str) -> Path | None:
    """The last complete checkpoint of `stage` that an unfinished run with the same inputs
    (`resume_key`) left in a sibling of `run_dir`; the furthest on, if several did."""
    checkpoints: dict[int, Path] = {}
    for sibling in run_dir.parent.iterdir():
        stage_dir = sibling / stage
        if sibling == run_dir or (stage_dir / "model").exists():
            continue
        if recorded_key(stage_dir) == resume_key:
            checkpoints.update(saved_checkpoints(stage_dir))
    return checkpoints[max(checkpoints)] if checkpoints else None


def _continue_unfinished_run(stage: Stage, run_dir: Path, resume_key: str) -> None:
    """Record `resume_key` in the stage folder; first, when the stage has no checkpoint of its
    own, copy in the last one of an unfinished run with that key (`_unfinished_attempt`) and what
    resuming from it needs (`CARRIED_OVER`). Copies, not links: the child rewrites its metrics
    file in place, and the earlier run's folder must stay as it was. Checkpoints of its own saved
    under another key raise `ConfigError`: resuming them would mix two trainings."""
    stage_dir = run_dir / stage
    own = last_checkpoint(stage_dir)
    if own and recorded_key(stage_dir) not in (None, resume_key):
        raise ConfigError(
            f"{stage_dir} holds checkpoints of other inputs (the rows, config or training code "
            "changed since they were saved): resume it with those, or train in a new run folder"
        )
    earlier = None if own else _unfinished_attempt(stage, run_dir, resume_key)
    if earlier is not None:
        get_run_logger().info("%s: resuming from %s, left by an unfinished run", stage, earlier)
        for name in (earlier.name, *CARRIED_OVER):
            source = earlier.parent / name
            if source.is_dir():
                shutil.copytree(source, stage_dir / name, dirs_exist_ok=True)
            elif source.is_file():
                shutil.copy2(source, stage_dir / name)
    write_text_file(stage_dir / RESUME_KEY_FILE, resume_key)


def _cause(tail: deque[str]) -> str:
    """`: <the last line of output that says why the process stopped>`, or nothing."""
    causes = [line for line in tail if CAUSE_LINE.match(line)]
    return f": {causes[-1].removeprefix('error: ')}" if causes else ""


def _resume_hint(stage_dir: Path, resume_key: str | None) -> str:
    """How the stage goes on from where it stopped, for the failure message."""
    checkpoint = last_checkpoint(stage_dir)
    if checkpoint is None:
        return "no checkpoint was saved, so a re-run starts the stage over"
    again = "re-run the same command (or flow run)" if resume_key else f"re-run it in {stage_dir}"
    return f"{again} to resume from its last checkpoint, {checkpoint}"


class _Ending(NamedTuple):
    """How a supervised stage ended: its last lines of output (per-step records left out), and
    whether it ran past its deadline or was stopped (why: a Cancel, the command stopping);
    neither, it exited by itself."""

    tail: deque[str]
    timed_out: bool
    stopped: str | None


def _supervise(
    process: subprocess.Popen,
    stage: Stage,
    metrics_path: Path,
    deadline: float,
    watch: FlowRunWatch,
    progress: ProgressArtifact,
) -> _Ending:
    """Relay the stage's output to the run's log (per-step records at DEBUG), keep its progress
    artifact current, and stop it at `deadline` or when `watch` sees the flow run cancelled.
    Whatever happens here, the stage's process group is gone (and `watch` closed) when this
    returns."""
    logger = get_run_logger()
    Supervised.live.add(process)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_into, args=(process.stdout, lines), daemon=True).start()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    timed_out, cancelled_by_runner = False, None
    next_progress = time.monotonic()
    try:
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            if line is None:  # output closed: the child is exiting
                break
            if line:
                per_step = PER_STEP_RECORD.match(line)
                if not per_step:  # the failure message quotes the tail: causes, not metrics
                    tail.append(line)
                logger.log(logging.DEBUG if per_step else logging.INFO, "%s | %s", stage, line)
            now = time.monotonic()
            if now >= next_progress:
                step, max_steps = _progress(metrics_path)
                if max_steps:
                    progress.update(100.0 * step / max_steps, f"{stage}: step {step}/{max_steps}")
                next_progress = now + PROGRESS_INTERVAL_S
            if now >= deadline:
                timed_out = True
                break
            if watch.stop_requested():
                break
        if not timed_out and not watch.stop_requested():
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    except TerminationSignal:  # under `serve` or a worker, Cancel arrives as SIGTERM
        _kill_group(process)
        if not (cancelled_by_runner := watch.stopped_by_cancel()):
            raise  # another stop: the engine reports the run Crashed
    finally:
        # Also on cancellation or any error here: never leave a training process behind.
        _kill_group(process)
        Supervised.live.discard(process)
        watch.close()
    return _Ending(tail, timed_out, watch.stop_requested() or cancelled_by_runner)


def _retry_unless_input_error(task, task_run, state) -> bool:
    """Retry a crash (it resumes from the checkpoint), not a bad config, a timeout, a cancel, or
    anything in a command that is stopping."""
    if Supervised.stopping:
        return False
    try:
        state.result()
    except StageFailed as error:
        return error.returncode not in (INPUT_ERROR_STATUS, None)
    except ConfigError:
        return False
    except Exception:
        return True
    return False


def _prefect_tags() -> dict[str, str]:
    """The flow run a stage belongs to, as tags for a tracking backend (MLflow)."""
    if not flow_run.id:
        return {}
    return {
        "prefect.flow_run": flow_run.name,
        "prefect.flow_run_id": flow_run.id,
        "prefect.tags": ",".join(flow_run.tags),
    }


@task(
    name="train-stage",
    task_run_name="{stage}",
    cache_policy=NO_CACHE,
    retries=1,
    retry_delay_seconds=5,
    retry_condition_fn=_retry_unless_input_error,
)
@ends_cancelled
def train_stage(
    stage: Stage,
    run_dir: Path,
    config: TrainConfig,
    timeout_s: float = 3600.0,
    init_dir: Path | None = None,
    resume_key: str | None = None,
) -> StageResult:
    """Run one training stage in `run_dir` as a subprocess and return where its model is.

    The config, placed on this machine's device, is written to `<run_dir>/train_config.json`
    for the child to read. Raises `ConfigError` when the machine cannot run it, `StageFailed`
    (with the last lines of output) when the child exits non-zero or runs past `timeout_s`; a
    Cancel or the command stopping ends it Cancelled (read the value with `unless_cancelled`,
    which raises `StageCancelled` then). A second call on the same `run_dir` resumes from the
    last checkpoint. With a `resume_key` (a hash of the stage's data, config and code), a first
    call in a new run folder resumes from the checkpoint of an unfinished run with the same key
    in a sibling folder. A crash is retried once (it resumes
    from its last checkpoint); a bad config, a timeout or a Cancel is not.
    """
    logger = get_run_logger()
    config, note = place_here(config)
    if note is not None:
        logger.warning("%s: %s", stage, note)
    run_dir = Path(run_dir).resolve()
    stage_dir = run_dir / stage
    metrics_path = stage_dir / METRICS_FILENAME
    if resume_key is not None:  # first: a refused folder is left as it was
        run_dir.mkdir(parents=True, exist_ok=True)
        _continue_unfinished_run(stage, run_dir, resume_key)
    if config.runtime.run_name is None and flow_run.name:  # tracked under the flow run's name
        config = config.model_copy(
            update={"runtime": config.runtime.model_copy(update={"run_name": flow_run.name})}
        )
    tracking = config.tracking_environment(stage_dir, _prefect_tags())
    config.write(run_dir / CONFIG_FILENAME)
    resumed_from_step = max(saved_checkpoints(stage_dir), default=0)
    command = stage_command(stage, run_dir, config.for_stage(stage), init_dir)
    logger.info("starting %s: %s", stage, " ".join(command))

    if Supervised.stopping:
        raise StageCancelled(f"{stage}: not started: the command is stopping")
    progress = ProgressArtifact(f"train-{stage}-progress", f"{stage} steps")
    watch = FlowRunWatch(stage)
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,  # one process group to kill, accelerate's workers included
        env={**os.environ, "PYTHONUNBUFFERED": "1", **tracking, **child_environment()},
    )
    ending = _supervise(process, stage, metrics_path, started + timeout_s, watch, progress)
    wall_s = round(time.monotonic() - started, 1)
    if ending.stopped:
        step, _ = _progress(metrics_path)
        raise StageCancelled(
            f"{stage}: {ending.stopped}: training stopped at step {step} after {wall_s:.0f} s; "
            f"{_resume_hint(stage_dir, resume_key)}"
        )
    output = "\n".join(ending.tail)
    if ending.timed_out:
        raise StageFailed(
            f"{stage} stage ran past its {timeout_s:.0f}s deadline and was stopped; "
            f"{_resume_hint(stage_dir, resume_key)}. Last output:\n{output}",
            returncode=None,
        )
    if process.returncode != 0:
        resume = (
            ""
            if process.returncode == INPUT_ERROR_STATUS
            else f"; {_resume_hint(stage_dir, resume_key)}"
        )
        raise StageFailed(
            f"{stage} stage failed (exit status {process.returncode}) after {wall_s}s"
            f"{_cause(ending.tail)}{resume}. Last output:\n{output}",
            returncode=process.returncode,
        )
    step, max_steps = _progress(metrics_path)
    progress.update(100.0, f"{stage}: done, {step}/{max_steps} steps")
    return StageResult(
        stage=stage,
        model_dir=stage_dir / "model",
        metrics_path=metrics_path,
        steps=step,
        max_steps=max_steps,
        resumed_from_step=resumed_from_step,
        wall_s=wall_s,
    )
