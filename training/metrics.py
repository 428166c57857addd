"""`train_metrics.jsonl`: one JSON line per logged step, written by a Trainer callback.

Besides what the trainer logs (loss, learning rate, TRL's reward and per-component means, reward
std), each GRPO line carries the case study's zero-std figures — groups whose completions all got
the same reward, this step and since the start — and every line carries the step time and the
step / max steps that the Prefect task turns into a progress bar; on a GPU, also the peak memory
allocated so far (GiB).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

METRICS_FILENAME = "train_metrics.jsonl"
# NGRPOTrainer's per-step group counts (training.ngrpo) → this file's names.
_GROUP_COUNTS = {
    "ngrpo/zero_std_groups": "zero_std_groups",
    "ngrpo/zero_std_tool_groups": "zero_std_tool_groups",
    "ngrpo/calibrated_groups": "calibrated_groups",
    "ngrpo/total_groups": "groups",
}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The lines of a metrics file, oldest first ([] when there is none yet)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class MetricsFileCallback(TrainerCallback):
    """Append one line per log event to `path`; on resume, drop lines past the checkpoint."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.totals = dict.fromkeys(_GROUP_COUNTS.values(), 0)
        self._last_log_time = time.perf_counter()
        self._last_log_step = 0

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


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null, so every line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
