"""Benchmark threads against processes for both training stages on a small CPU.

Each arm runs the very command the training task starts (`python -m toolgrpo.training`, or
`accelerate launch` with TRL's DDP config — gloo on the CPU — for several processes) on the
`cpu` preset, for a fixed number of optimiser steps at the same global batch:

- one process of `--cores` torch threads (the preset's SFT);
- `--cores` DDP processes of one thread each: SFT's per-process batch divided by the process
  count (the same 16 rows per step), GRPO's completions split over the processes (the trainer
  does that itself, the same prompts per step) — the preset's GRPO (`runtime.grpo`).

Reported per arm: the stage's own step times (median seconds per step after the first two, and
rows or prompts per second from them), and the wall time of the whole command, whose difference
from the steps is start-up (imports, the tiny tokenizer, accelerate's rendezvous) and the final
save. The arms run interleaved (A B A B …) `--repeats` times; the table shows medians.

    python bench/processes.py --model RUN/sft/model [--sft-steps 30] [--grpo-steps 4] [--repeats 2]

`--model` is the SFT model GRPO starts from (any run's `sft/model`); without it only SFT runs.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cyclopts

from toolgrpo.tasks.train import stage_command
from toolgrpo.training.config import CONFIG_FILENAME, GRPO_LAYOUT_UNSET, TrainConfig
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics
from toolgrpo.training.samples import sft_rows

PRESET = "cpu"
UNTIMED_STEPS = 2  # the first steps pay for lazy initialisation


@dataclass(frozen=True)
class Arm:
    """How a stage runs: overrides of the preset's runtime (and SFT's per-process batch)."""

    name: str
    processes: int
    threads: int
    overrides: dict[str, Any] = field(default_factory=dict)


def arms(cores: int) -> list[Arm]:
    """One process of `cores` threads against `cores` one-thread processes."""
    batch = load_preset(PRESET).sft.per_device_train_batch_size
    if batch % cores:
        raise SystemExit(
            f"the preset's SFT micro-batch of {batch} rows does not split over {cores}"
        )
    return [
        Arm(f"1 process x {cores} threads", 1, cores),
        Arm(
            f"{cores} processes (DDP) x 1 thread",
            cores,
            1,
            {"sft.per_device_train_batch_size": batch // cores},
        ),
    ]


@dataclass
class Timing:
    """One run of one arm: its step times and the command's wall time."""

    step_s: float
    wall_s: float
    steps: int


def stage_config(stage: str, arm: Arm, steps: int) -> TrainConfig:
    """The preset with `arm`'s runtime, run for `steps` optimiser steps, no checkpoints."""
    overrides: dict[str, Any] = {
        **GRPO_LAYOUT_UNSET,
        "runtime.num_processes": arm.processes,
        "runtime.torch_threads": arm.threads,
        "runtime.save_steps": 10**9,
        **arm.overrides,
    }
    config = load_preset(PRESET, overrides)
    if stage == "grpo":
        return with_overrides(config, {"grpo.max_steps": steps})
    rows_per_step = config.sft.rows_per_process_step * arm.processes
    steps_per_epoch = math.ceil(len(sft_rows(config)) / rows_per_step)
    return with_overrides(config, {"sft.num_train_epochs": steps / steps_per_epoch})


def run_arm(stage: str, arm: Arm, steps: int, model: Path | None, work_dir: Path) -> Timing:
    """Run the stage once in a fresh run folder and read its step times."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{stage}-", dir=work_dir))
    config = stage_config(stage, arm, steps)
    config.write(run_dir / CONFIG_FILENAME)
    command = stage_command(stage, run_dir, config, model if stage == "grpo" else None)
    started = time.perf_counter()
    with (run_dir / "output.log").open("w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall_s = time.perf_counter() - started
    lines = read_metrics(run_dir / stage / METRICS_FILENAME)
    times = [line["step_time_s"] for line in lines if "step_time_s" in line]
    return Timing(statistics.median(times[UNTIMED_STEPS:]), wall_s, len(times))


def main(
    model: Path | None = None,
    sft_steps: int = 30,
    grpo_steps: int = 4,
    repeats: int = 2,
    cores: int = 2,
    work_dir: Path | None = None,
) -> None:
    """Time each stage's arms side by side and print the table.

    Args:
        model: the SFT model GRPO starts from; None runs SFT only.
        sft_steps: SFT optimiser steps per run (16 rows each).
        grpo_steps: GRPO optimiser steps per run (the preset's prompts per step each).
        repeats: interleaved rounds; the table shows medians.
        cores: threads of the one-process arm, processes of the other.
        work_dir: where the run folders go (default: a temporary folder).
    """
    work_dir = work_dir or Path(tempfile.mkdtemp(prefix="bench-processes-"))
    stages = {"sft": sft_steps} | ({"grpo": grpo_steps} if model is not None else {})
    preset = load_preset(PRESET)
    per_step = {"sft": preset.sft.rows_per_process_step, "grpo": preset.grpo.prompts_per_step}
    unit = {"sft": "rows/s", "grpo": "prompts/min"}
    timings: dict[tuple[str, str], list[Timing]] = {}
    for _ in range(repeats):
        for stage, steps in stages.items():
            for arm in arms(cores):
                timing = run_arm(stage, arm, steps, model, work_dir)
                timings.setdefault((stage, arm.name), []).append(timing)
                print(
                    f"{stage} · {arm.name}: {timing.step_s:.3f} s/step, wall {timing.wall_s:.1f} s"
                )
    print(f"\n{PRESET} preset, {repeats} interleaved rounds, medians; run folders in {work_dir}\n")
    print("| stage | arm | s/step | rate | × first arm | wall of the command (s) | steps |")
    print("|---|---|---|---|---|---|---|")
    for stage in stages:
        first_rate = None
        for arm in arms(cores):
            runs = timings[(stage, arm.name)]
            step_s = statistics.median(run.step_s for run in runs)
            rate = per_step[stage] / step_s * (60 if stage == "grpo" else 1)
            first_rate = first_rate or rate
            wall_s = statistics.median(run.wall_s for run in runs)
            print(
                f"| {stage} | {arm.name} | {step_s:.3f} | {rate:.1f} {unit[stage]} "
                f"| {rate / first_rate:.2f}× | {wall_s:.1f} | {runs[0].steps} |"
            )


if __name__ == "__main__":
    cyclopts.run(main)
