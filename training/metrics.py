"""`train_metrics.jsonl`: one JSON line per logged step, written by a Trainer callback, and a
progress line a person can read every few steps.

Besides what the trainer logs (loss, learning rate, TRL's reward and per-component means, reward
std), each GRPO line carries the case study's zero-std figures — groups whose completions all got
the same reward, this step and since the start — and every line carries the step time and the
step / max steps that the Prefect task turns into a progress bar; on a GPU, also the peak memory
allocated so far (GiB). The progress lines (`sft step 120/480 · loss 0.83 · 2.1 s/step · ETA 9m`)
go to stdout, which the Prefect task streams into the flow run's log.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

METRICS_FILENAME = "train_metrics.jsonl"
# About this many progress lines per stage, whatever its length (and always the last step).
PROGRESS_LINES = 20
# NGRPOTrainer's per-step group counts (training.ngrpo) → this file's names.
_GROUP_COUNTS = {
    "ngrpo/zero_std_groups": "zero_std_groups",
    "ngrpo/zero_std_tool_groups": "zero_std_tool_groups",
    "ngrpo/calibrated_groups": "calibrated_groups",
    "ngrpo/total_groups": "groups",
}


def duration(seconds: float) -> str:
    """`45s`, `9m`, `2h 05m`."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours}h {minutes:02d}m"


def progress_line(
    what: str,
    done: int,
    total: int,
    seconds_each: float,
    details: Sequence[str] = (),
    unit: str = "step",
) -> str:
    """`sft step 120/480 · loss 0.83 · 2.1 s/step · ETA 9m`: how far, the numbers that matter,
    the pace, and when it ends at that pace."""
    pace = [f"{seconds_each:.1f} s/{unit}", f"ETA {duration(seconds_each * (total - done))}"]
    return " · ".join([f"{what} {unit} {done}/{total}", *details, *pace])


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The lines of a metrics file, oldest first ([] when there is none yet)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def training_seconds(lines: list[dict[str, Any]]) -> float:
    """The time a stage's kept steps took, from each line's per-step time: a stage resumed
    after a kill counts the steps of every attempt that led to its model, not only the last."""
    seconds, previous = 0.0, 0
    for line in lines:
        if "step_time_s" in line:
            seconds += line["step_time_s"] * (line["step"] - previous)
        previous = line["step"]
    return round(seconds, 1)


class MetricsFileCallback(TrainerCallback):
    """Append one line per log event to `path`; on resume, drop lines past the checkpoint. Every
    few steps, print a progress line for the stage named `label` (default: `path`'s folder)."""

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = path
        self.label = label or path.parent.name
        self.totals = dict.fromkeys(_GROUP_COUNTS.values(), 0)
        self._last_log_time = time.perf_counter()
        self._last_log_step = 0
        self._begin_time, self._begin_step = self._last_log_time, 0
        self._stepping = False
        self._next_progress_step = 0
        self._tool_accuracy = _RunningMean()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero:
            return
        kept = [line for line in read_metrics(self.path) if line["step"] <= state.global_step]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(line) + "\n" for line in kept), encoding="utf-8")
        # NGRPOTrainer's own cumulative counts restart with the process; these survive a resume.
        for name in self.totals:
            self.totals[name] = kept[-1].get(f"{name}_total", 0) if kept else 0
        self._last_log_time = time.perf_counter()
        self._last_log_step = state.global_step
        self._begin_step = state.global_step
        self._stepping = False
        self._next_progress_step = state.global_step + 1

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The pace is timed from the first step this process runs: what comes between the start
        and it (a resume loading its optimiser and skipping the batches it trained) is no step's
        time, and counted in one it would make a resumed run's first ETA hours long."""
        if not self._stepping:
            self._stepping = True
            self._last_log_time = self._begin_time = time.perf_counter()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        now = time.perf_counter()
        steps = state.global_step - self._last_log_step
        line: dict[str, Any] = {"step": state.global_step, "max_steps": state.max_steps}
        line.update({key: _jsonable(value) for key, value in logs.items()})
        if steps > 0:
            line["step_time_s"] = round((now - self._last_log_time) / steps, 3)
        if torch.cuda.is_initialized():
            line["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        for logged, name in _GROUP_COUNTS.items():
            if logs.get(logged) is not None:
                # TRL averages a metric over the steps since the last log: scale back to a count.
                count = round(logs[logged] * max(steps, 1))
                self.totals[name] += count
                line[name] = count
                line[f"{name}_total"] = self.totals[name]
        self._last_log_time, self._last_log_step = now, state.global_step
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
        if logs.get("tool_accuracy") is not None:
            self._tool_accuracy.add(logs["tool_accuracy"], max(steps, 1))
        at_end = state.global_step >= state.max_steps
        if "loss" in logs and (state.global_step >= self._next_progress_step or at_end):
            print(self._progress_line(line, state), flush=True)
            self._next_progress_step = state.global_step + max(1, state.max_steps // PROGRESS_LINES)

    def _progress_line(self, line: dict[str, Any], state: TrainerState) -> str:
        """The step, loss (SFT) or reward, zero-std share and tool accuracy so far (GRPO), pace."""
        done_here = state.global_step - self._begin_step
        seconds_each = (time.perf_counter() - self._begin_time) / max(done_here, 1)
        if "reward" not in line:
            details = [f"loss {_shown(line['loss'], '.3f')}"]
        else:
            details = [f"reward {_shown(line['reward'], '.2f')}"]
            if self.totals["groups"]:
                share = self.totals["zero_std_groups"] / self.totals["groups"]
                details.append(f"zero-std {100 * share:.0f}% of groups")
            if self._tool_accuracy.count:
                details.append(f"tool accuracy so far {100 * self._tool_accuracy.mean:.0f}%")
        return progress_line(self.label, state.global_step, state.max_steps, seconds_each, details)


class _RunningMean:
    """A mean over logged values, each weighted by the steps it averages."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, value: float, weight: int) -> None:
        self.total += value * weight
        self.count += weight

    @property
    def mean(self) -> float:
        return self.total / self.count


def _shown(value: float | None, spec: str) -> str:
    return "nan" if value is None else format(value, spec)


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null, so every line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
