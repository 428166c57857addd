"""Train one stage (SFT or GRPO) in its own process, watched from a Prefect task.

The stage runs as `python -m toolgrpo.training …` (one process) or `accelerate launch
--config_file … -m toolgrpo.training …` (several processes or GPUs: DDP, DeepSpeed or FSDP as
`runtime.accelerate_config` names), so a crash there cannot take the flow down and the same task
drives a CPU, a GPU or many. The config is placed on this machine's device first
(`training.device`): a fallback to the CPU is logged, a device or engine the machine lacks stops
the task with one line before anything starts. The task streams the child's output into the run log,
turns the metrics file into a progress artifact, enforces its own deadline (Prefect's timeouts
cannot interrupt a blocking call) by killing the child's process group, and raises with the last
lines of output when the child fails. Running the task again — or a Prefect retry — resumes from
the checkpoint.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Literal

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from toolgrpo.training.config import (
    CONFIG_FILENAME,
    ConfigError,
    TrainConfig,
    accelerate_config_file,
)
from toolgrpo.training.device import place_here
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics
from toolgrpo.training.stage import saved_checkpoints

Stage = Literal["sft", "grpo"]
TAIL_LINES = 30
PROGRESS_INTERVAL_S = 5.0
KILL_GRACE_S = 10.0
# Exit status of `python -m toolgrpo.training` for unusable input (bad config, missing data):
# retrying cannot help.
INPUT_ERROR_STATUS = 2


class StageFailed(RuntimeError):
    """The training process failed or ran past its deadline; the message ends with its output."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


class StageResult(BaseModel):
    """Where a finished stage left its model and metrics, and how long it took."""

    stage: Stage
    model_dir: Path
    metrics_path: Path
    steps: int
    max_steps: int
    resumed_from_step: int
    wall_s: float


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


def _kill_group(process: subprocess.Popen) -> None:
    """Stop the child and everything it started (its own session): TERM, then KILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
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


def _update_progress(artifact_id, progress: float, description: str) -> None:
    """Best effort: a slow or unreachable Prefect API must not fail a training stage (seen
    here: an API read timeout on a loaded 2-core box restarted a stage)."""
    try:
        update_progress_artifact(artifact_id, progress=progress, description=description)
    except Exception as error:  # httpx timeouts and API errors alike
        get_run_logger().warning("progress artifact not updated: %s", error)


def _retry_unless_input_error(task, task_run, state) -> bool:
    """Retry a crash (it resumes from the checkpoint), not a bad config or a timeout."""
    try:
        state.result()
    except StageFailed as error:
        return error.returncode not in (INPUT_ERROR_STATUS, None)
    except ConfigError:
        return False
    except Exception:
        return True
    return False


@task(
    name="train-stage",
    cache_policy=NO_CACHE,
    retries=1,
    retry_delay_seconds=5,
    retry_condition_fn=_retry_unless_input_error,
)
def train_stage(
    stage: Stage,
    run_dir: Path,
    config: TrainConfig,
    timeout_s: float = 3600.0,
    init_dir: Path | None = None,
) -> StageResult:
    """Run one training stage in `run_dir` as a subprocess and return where its model is.

    The config, placed on this machine's device, is written to `<run_dir>/train_config.json`
    for the child to read. Raises `ConfigError` when the machine cannot run it, `StageFailed`
    (with the last lines of output) when the child exits non-zero or runs past `timeout_s`; a
    second call on the same `run_dir` resumes from the last checkpoint.
    """
    logger = get_run_logger()
    config, note = place_here(config)
    if note is not None:
        logger.warning("%s: %s", stage, note)
    run_dir = Path(run_dir).resolve()
    stage_dir = run_dir / stage
    metrics_path = stage_dir / METRICS_FILENAME
    config.write(run_dir / CONFIG_FILENAME)
    resumed_from_step = max(saved_checkpoints(stage_dir), default=0)
    command = stage_command(stage, run_dir, config, init_dir)
    logger.info("starting %s: %s", stage, " ".join(command))

    artifact_id = create_progress_artifact(
        progress=0.0, key=f"train-{stage}-progress", description=f"{stage} steps"
    )
    started = time.monotonic()
    deadline = started + timeout_s
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,  # one process group to kill, accelerate's workers included
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_into, args=(process.stdout, lines), daemon=True).start()
    timed_out = False
    next_progress = started
    try:
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            if line is None:  # output closed: the child is exiting
                break
            if line:
                tail.append(line)
                logger.info("%s | %s", stage, line)
            now = time.monotonic()
            if now >= next_progress:
                step, max_steps = _progress(metrics_path)
                if max_steps:
                    _update_progress(
                        artifact_id, 100.0 * step / max_steps, f"{stage}: step {step}/{max_steps}"
                    )
                next_progress = now + PROGRESS_INTERVAL_S
            if now >= deadline:
                timed_out = True
                break
        if not timed_out:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Also on cancellation or any error here: never leave a training process behind.
        _kill_group(process)

    wall_s = round(time.monotonic() - started, 1)
    output = "\n".join(tail)
    if timed_out:
        raise StageFailed(
            f"{stage} stage ran past its {timeout_s:.0f}s deadline and was stopped; re-run to "
            f"resume from the last checkpoint. Last output:\n{output}",
            returncode=None,
        )
    if process.returncode != 0:
        raise StageFailed(
            f"{stage} stage failed (exit status {process.returncode}) after {wall_s}s. "
            f"Last output:\n{output}",
            returncode=process.returncode,
        )
    step, max_steps = _progress(metrics_path)
    _update_progress(artifact_id, 100.0, f"{stage}: done, {step}/{max_steps} steps")
    return StageResult(
        stage=stage,
        model_dir=stage_dir / "model",
        metrics_path=metrics_path,
        steps=step,
        max_steps=max_steps,
        resumed_from_step=resumed_from_step,
        wall_s=wall_s,
    )
