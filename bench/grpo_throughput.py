"""Benchmark RL samples per CPU-minute: prompts and completions per minute of the GRPO stage.

Every arm is the pipeline's own GRPO stage (`python -m toolgrpo.training grpo`: TRL's
`GRPOTrainer` through `NGRPOTrainer`, TRL's loss) from the same SFT model with the same seed,
the `cpu` preset with one lever changed or several combined:

- more prompts per generation, two ways: `grpo.steps_per_generation` (one generation batch of
  `prompts_per_step × steps_per_generation` prompts feeds that many optimiser steps, the
  prompts per step stay the same; TRL then runs one more forward pass over the batch for the
  old policy's log-probabilities), or more `grpo.prompts_per_step` (one larger step per
  generation, no extra pass, fewer steps for the same prompts);
- reusing each generation for several updates (`grpo.num_iterations`);
- `max_completion_length` fitted to the data: the longest shipped solution in the model's tokens
  (+ end of turn) plus a quarter, instead of 350 for answers of ~65 tokens;
- threads vs processes: one process of 2 torch threads against 2 independent processes of one
  thread each (their prompts per minute summed; a DDP run would add a gradient all-reduce), beside
  one process of one thread (today's arm and the other levers run so).

Each arm runs whole generation cycles until it has sampled at least `--prompts` fresh prompts; its
rate is over those cycles (the step times the stage itself logs). The arms run in this process
after one untimed warm-up run, except the 2-process arm, whose processes each run one untimed
cycle first.
The arms run interleaved (A B C … A B C …) `--repeats` times and the table shows each arm's
median, so a machine whose load drifts slows every arm alike.

    python bench/grpo_throughput.py [--model RUN/sft/model] [--prompts 4] [--repeats 2]

Without `--model` it first trains the `cpu` preset's SFT warm start into `--work-dir` (about
10 minutes on 2 idle cores) and reuses it on the next run.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cyclopts
import datasets
import torch
import transformers
from transformers import AutoTokenizer

from toolgrpo.training.config import GRPO_LAYOUT_UNSET, TrainConfig
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.grpo import run_grpo
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics
from toolgrpo.training.samples import read_samples

PRESET = "cpu"
# The fitted length: the longest solution (with its end-of-turn token) plus this share, rounded
# up to a multiple of LENGTH_ROUNDING.
LENGTH_MARGIN = 0.25
LENGTH_ROUNDING = 16
WORK_DIR = Path(tempfile.gettempdir()) / "toolgrpo-grpo-bench"


@dataclass(frozen=True, eq=False)  # hashed by identity: the table's row keys
class Arm:
    """One setting of the GRPO stage: overrides of the preset, run in `processes` side by side."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    processes: int = 1


@dataclass(frozen=True)
class Measurement:
    """What one run of an arm sampled and how fast."""

    prompts_per_minute: float
    mean_reward: float
    tool_accuracy: float
    mean_length: float
    clipped_share: float


def solution_files(config: TrainConfig) -> list[Path]:
    """Every shipped file whose solutions the model must be able to write in full."""
    eval_dir = config.data.train_single_step.parent.parent / "eval"
    return [
        config.data.train_single_step,
        config.data.train_multistep,
        *sorted(eval_dir.glob("*.jsonl")),
    ]


def fitted_completion_length(model_dir: Path, config: TrainConfig) -> tuple[int, int]:
    """The longest shipped solution in the model's tokens (end of turn included) and the
    completion length fitted to it; raises if the fitted length would cut any solution."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lengths = [
        len(tokenizer(row["solution"])["input_ids"]) + 1
        for path in solution_files(config)
        for row in read_samples(path)
    ]
    longest = max(lengths)
    fitted = LENGTH_ROUNDING * math.ceil(longest * (1 + LENGTH_MARGIN) / LENGTH_ROUNDING)
    cut = sum(length > fitted for length in lengths)
    if cut:
        raise AssertionError(f"a fitted length of {fitted} tokens would cut {cut} solutions")
    return longest, fitted


def arms(fitted: int) -> list[Arm]:
    """Today's GRPO settings first (the ratios' denominator), then each lever and combinations,
    on one torch thread each, and the threads-vs-processes pair for the fitted length.

    One thread is the baseline because it is the faster way to run the preset on a loaded
    machine (2 threads spin-wait on each other when a core is taken) and the fair one beside a
    2-process arm: the pair shows what the second core adds either way."""
    one = {"runtime.torch_threads": 1}
    fit = {**one, "grpo.max_completion_length": fitted}
    gen16 = {**fit, "grpo.steps_per_generation": 4}
    return [
        Arm("today (4 prompts/gen, len 350)", one),
        Arm(f"len {fitted}", fit),
        Arm(f"len {fitted} + 16 prompts/gen", gen16),
        Arm(
            f"len {fitted} + 16 prompts/step (one step per gen)",
            {**fit, "grpo.prompts_per_step": 16},
        ),
        Arm(f"len {fitted} + 16 prompts/gen + 2 updates/gen", {**gen16, "grpo.num_iterations": 2}),
        Arm(f"len {fitted}, 1 proc x 2 threads", {**fit, "runtime.torch_threads": 2}),
        Arm(f"len {fitted}, 2 procs x 1 thread (summed)", fit, processes=2),
    ]


def cycle_shape(config: TrainConfig) -> tuple[int, int]:
    """Prompts per generation batch, and optimiser steps per generation batch."""
    grpo = config.grpo
    steps_per_generation = grpo.steps_per_generation or 1
    return grpo.prompts_per_step * steps_per_generation, steps_per_generation * grpo.num_iterations


def arm_config(arm: Arm, min_prompts: int, seed: int) -> tuple[TrainConfig, int, int]:
    """The arm's config with steps for whole generation cycles of at least `min_prompts` fresh
    prompts; also the steps not timed and the prompts that are. A process of its own first
    runs one cycle untimed (its first calls); this process is warm (`main`'s warm-up run)."""
    # The preset's DDP layout for GRPO is undone: an arm is one process as its name says
    # (bench/processes.py measures DDP).
    config = load_preset(PRESET, {**GRPO_LAYOUT_UNSET, **arm.overrides, "seed": seed})
    prompts, steps = cycle_shape(config)
    cycles = max(1, math.ceil(min_prompts / prompts))
    untimed = steps if arm.processes > 1 else 0
    overrides = {"grpo.max_steps": untimed + steps * cycles, "runtime.save_steps": 10**6}
    return with_overrides(config, overrides), untimed, cycles * prompts


def _mean(lines: list[dict[str, Any]], key: str) -> float:
    values = [line[key] for line in lines if line.get(key) is not None]
    return statistics.fmean(values) if values else math.nan


def start_stage(config: TrainConfig, model_dir: Path, run_dir: Path) -> subprocess.Popen:
    """The pipeline's GRPO stage in its own process (as the retrain flow starts it), logging to
    `run_dir/stage.log`."""
    run_dir.mkdir(parents=True)
    config_file = config.write(run_dir / "bench_config.json")
    command = [sys.executable, "-m", "toolgrpo.training", "grpo", "--run-dir", str(run_dir)]
    command += ["--config", str(config_file), "--init", str(model_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": str(config.runtime.torch_threads or os.cpu_count())}
    with (run_dir / "stage.log").open("w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def run_side_by_side(configs: list[TrainConfig], model_dir: Path, work_dir: Path) -> list[Path]:
    """One GRPO stage per config, all at once, each in its own process; their run folders."""
    started = []
    for config in configs:
        run_dir = Path(tempfile.mkdtemp(dir=work_dir, prefix="arm-")) / "run"
        started.append((start_stage(config, model_dir, run_dir), run_dir))
    for process, run_dir in started:
        if process.wait():
            tail = (run_dir / "stage.log").read_text().splitlines()[-15:]
            raise RuntimeError("the GRPO stage failed:\n" + "\n".join(tail))
    return [run_dir for _, run_dir in started]


def run_here(config: TrainConfig, model_dir: Path, work_dir: Path) -> Path:
    """The GRPO stage in this process (no start-up to wait for); its run folder."""
    run_dir = Path(tempfile.mkdtemp(dir=work_dir, prefix="arm-"))
    torch.set_num_threads(config.runtime.torch_threads or os.cpu_count())
    with contextlib.redirect_stdout(io.StringIO()):  # the stage's progress lines
        run_grpo(run_dir, config, model_dir)
    return run_dir


def measure(arm: Arm, model_dir: Path, work_dir: Path, min_prompts: int) -> Measurement:
    """Run the arm once (its processes side by side) and read the rate from the step times."""
    configs = [arm_config(arm, min_prompts, seed=index) for index in range(arm.processes)]
    if arm.processes == 1:
        run_dirs = [run_here(configs[0][0], model_dir, work_dir)]
    else:
        run_dirs = run_side_by_side([config for config, _, _ in configs], model_dir, work_dir)
    rates, measured = [], []
    for (_, untimed_steps, prompts), run_dir in zip(configs, run_dirs, strict=True):
        metrics = read_metrics(run_dir / "grpo" / METRICS_FILENAME)
        # Step lines only: the closing line (train_runtime …) repeats the last step, untimed.
        lines = [line for line in metrics if line["step"] > untimed_steps and "step_time_s" in line]
        rates.append(prompts / sum(line["step_time_s"] for line in lines) * 60)
        measured += lines
    return Measurement(
        prompts_per_minute=sum(rates),
        mean_reward=_mean(measured, "reward"),
        tool_accuracy=_mean(measured, "tool_accuracy"),
        mean_length=_mean(measured, "completions/mean_length"),
        clipped_share=_mean(measured, "completions/clipped_ratio"),
    )


def sft_model(work_dir: Path) -> Path:
    """The cpu preset's SFT warm start, trained into `work_dir` unless an earlier run left it."""
    run_dir = work_dir / "sft-run"
    model_dir = run_dir / "sft" / "model"
    if not (model_dir / "config.json").is_file():
        print(f"no --model: training the {PRESET} preset's SFT warm start in {run_dir} (~10 min)")
        command = [sys.executable, "-m", "toolgrpo.training", "sft", "--run-dir", str(run_dir)]
        subprocess.run([*command, "--preset", PRESET], check=True, stdout=subprocess.DEVNULL)
    return model_dir


def print_table(results: dict[Arm, list[Measurement]], num_generations: int) -> None:
    baseline = statistics.median(m.prompts_per_minute for m in next(iter(results.values())))
    print(
        f"{'arm':<54} {'prompts/min':>11} {'compl./min':>10} {'x today':>7} "
        f"{'reward':>6} {'tool acc':>8} {'length':>6} {'clipped':>7}"
    )
    for arm, runs in results.items():
        rate = statistics.median(m.prompts_per_minute for m in runs)
        print(
            f"{arm.name:<54} {rate:11.1f} {rate * num_generations:10.0f} {rate / baseline:7.2f} "
            f"{statistics.fmean(m.mean_reward for m in runs):6.3f} "
            f"{statistics.fmean(m.tool_accuracy for m in runs):8.1%} "
            f"{statistics.fmean(m.mean_length for m in runs):6.1f} "
            f"{statistics.fmean(m.clipped_share for m in runs):7.1%}"
        )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(
    model: Path | None = None,
    prompts: int = 4,
    repeats: int = 2,
    work_dir: Path = WORK_DIR,
) -> None:
    """Print prompts and completions per minute of each arm, medians of `repeats` interleaved
    rounds, and the ratio to today's preset.

    Args:
        model: an SFT model of the cpu preset (`RUN/sft/model`); default: train one in work_dir.
        prompts: fresh prompts each arm samples after its warm-up cycle, per run.
        repeats: interleaved rounds over all arms.
        work_dir: where the runs (and a trained SFT model) go.
    """
    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    work_dir.mkdir(parents=True, exist_ok=True)
    model_dir = model or sft_model(work_dir)
    if not (model_dir / "config.json").is_file():
        sys.exit(f"error: {model_dir}: no model (config.json) to start GRPO from")
    preset = load_preset(PRESET)
    longest, fitted = fitted_completion_length(model_dir, preset)
    print(
        f"longest shipped solution: {longest} tokens (end of turn included); fitted "
        f"max_completion_length {fitted} cuts none (the preset's: "
        f"{preset.grpo.max_completion_length})"
    )
    print(f"load average (1/5/15 min): {_load()} on {os.cpu_count()} cores")
    warm_up = load_preset(
        PRESET, {**GRPO_LAYOUT_UNSET, "grpo.max_steps": 1, "runtime.torch_threads": 1}
    )
    run_here(warm_up, model_dir, work_dir)  # first calls of torch and TRL, not timed
    results: dict[Arm, list[Measurement]] = {arm: [] for arm in arms(fitted)}
    for round_number in range(1, repeats + 1):
        for arm in results:
            results[arm].append(measure(arm, model_dir, work_dir, prompts))
        # After every round, so that a stopped run still reports the rounds it finished.
        print(f"\nload average (1/5/15 min): {_load()}; median of {round_number} interleaved")
        print(f"round(s) of >= {prompts} fresh prompts per arm:")
        print_table(results, preset.grpo.num_generations)


if __name__ == "__main__":
    cyclopts.run(main)
