"""Benchmark how the SFT warm start spends its time on the CPU, and which levers shorten it.

The `cpu` preset's SFT is most of the main job. This measures, on the same rows, training rows
per second of TRL's `SFTTrainer` for each lever against one padded batch of 16 random rows per
step with the system prompt as one token (the preset before `batch_rebalance`): the system
prompt as BPE pieces (`model.tiny.system_prompt_token`), TRL's padding-free and BFD-packing
modes (same tokens per step), `torch_compile`, each step's rows in length-sorted micro-batches
(`sft.train_sampling_strategy: batch_rebalance`), the chat and answer frames' constant pieces as
one token each on top of that (`model.tiny.frame_tokens`); then where a padded step's time goes
(matmuls vs the rest, by `torch.profiler`) and the matmul rate that implies.

    python bench/sft_throughput.py [--steps 20] [--rounds 2] [--preset cpu] [--only NAME ...]
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cyclopts
import datasets
import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from transformers.trainer_callback import PrinterCallback

from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.samples import sft_rows
from toolgrpo.training.sft import SFTTrainerSeeded, initial_model, sft_config, sft_trainer

# Packed rows per batch: about the preset's 16 rows × ~150 tokens, so every mode sees the same
# tokens per optimizer step.
TOKENS_PER_STEP = 16 * 150
PROFILED_STEPS = 5


@dataclass(frozen=True)
class Arm:
    """One way to run the preset's SFT: config overrides, then changes to TRL's `SFTConfig`."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    trl: dict[str, Any] = field(default_factory=dict)


# Each step's 16 random rows as one padded batch (the preset before `batch_rebalance`).
RANDOM_16 = {
    "sft.per_device_train_batch_size": 16,
    "sft.gradient_accumulation_steps": 1,
    "sft.train_sampling_strategy": "random",
}
BASE = "system prompt as one token, one padded batch"
ARMS = [
    Arm("system prompt as BPE pieces", {"model.tiny.system_prompt_token": False, **RANDOM_16}),
    Arm(BASE, RANDOM_16),
    Arm("padding-free", RANDOM_16, {"padding_free": True, "max_length": None}),
    Arm("packed 256", RANDOM_16, {"packing": True, "max_length": 256}),
    Arm("torch.compile", RANDOM_16, {"torch_compile": True}),
    # The same 16 random rows per optimizer step, split by length into micro-batches that are
    # each padded only to their own longest row (transformers' `batch_rebalance` sampler).
    *(
        Arm(
            f"batch rebalance, {split} micro-batches",
            {
                "sft.per_device_train_batch_size": 16 // split,
                "sft.gradient_accumulation_steps": split,
                "sft.train_sampling_strategy": "batch_rebalance",
            },
        )
        for split in (2, 4)
    ),
]
# Constant pieces of the chat frame and the answer's JSON as one token each (every one, or all
# but the answer's opening), on top of the preset's 4 micro-batches (ARMS[-1]): fewer tokens per
# row, the same rows per step.
ARMS += [
    Arm(
        f"frame tokens {pieces}, 4 micro-batches",
        {**ARMS[-1].overrides, "model.tiny.frame_tokens": pieces},
    )
    for pieces in ("all", "all_but_opening")
]


def _trainer(preset: str, arm: Arm, steps: int, work_dir: Path) -> tuple[SFTTrainerSeeded, float]:
    """The pipeline's SFT trainer with `arm`'s changes, and its mean tokens per row."""
    config = load_preset(preset, {"runtime.save_steps": 10**9, **arm.overrides})
    args = sft_config(config, work_dir)
    # One log line at the end: TRL's running `num_tokens` then covers every step.
    args.max_steps, args.save_strategy, args.logging_steps = steps, "no", steps
    for name, value in arm.trl.items():
        setattr(args, name, value)
    if args.packing:  # as many tokens per step as the padded batches hold
        args.per_device_train_batch_size = max(1, TOKENS_PER_STEP // args.max_length)
    trainer = sft_trainer(config, work_dir, args)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict when tqdm is off
    tokenizer = trainer.processing_class
    texts = [chat_prompt(tokenizer, row["prompt"]) + row["solution"] for row in sft_rows(config)]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return trainer, sum(lengths) / len(lengths)


def compare_arms(preset: str, steps: int, rounds: int, arms: list[Arm]) -> None:
    """Training rows per second of each arm (real tokens fed over the arm's mean tokens per row),
    and real (non-padding) tokens per second, best of `rounds` interleaved rounds."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for arm in arms:
            with tempfile.TemporaryDirectory() as work_dir:
                trainer, row_tokens = _trainer(preset, arm, steps, Path(work_dir))
                start = time.perf_counter()
                trainer.train()
                seconds = time.perf_counter() - start
            # TRL logs the running count of real (non-padding) tokens the model was fed.
            tokens = max(log.get("num_tokens", 0) for log in trainer.state.log_history)
            rates = (tokens / row_tokens / seconds, tokens / seconds)
            best[arm.name] = max(best.get(arm.name, (0.0, 0.0)), rates)
    base = best[BASE][0]
    print(f"{steps} SFT steps of the {preset!r} preset's model, best of {rounds} rounds:")
    print(f"  {'arm':<46} {'rows/s':>7} {'real tokens/s':>14} {'vs one batch':>13}")
    for name, (rows_rate, token_rate) in best.items():
        print(f"  {name:<46} {rows_rate:7.1f} {token_rate:14.0f} {rows_rate / base:12.2f}x")


def matmul_share(preset: str) -> None:
    """Profile padded steps: the share of time in matmuls and the FLOP rate they reach."""
    config = load_preset(preset, RANDOM_16)
    with tempfile.TemporaryDirectory() as work_dir:
        _, model = initial_model(config, Path(work_dir), sft_config(config, Path(work_dir)))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch_size = config.sft.per_device_train_batch_size
    batch = torch.randint(3, config.model.tiny.vocab_size, (batch_size, 190))

    def step() -> None:
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(PROFILED_STEPS):
            step()
    events = profiler.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in {"aten::mm", "aten::addmm"})
    linear = sum(p.numel() for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n)
    linear += model.get_output_embeddings().weight.numel()  # tied with the input embedding
    flops = PROFILED_STEPS * 6 * linear * batch.numel()  # forward + backward
    print(
        f"padded step ({batch_size} × 190 tokens): matmuls {matmul / total:.0%} of the "
        f"time, {flops / (matmul / 1e6) / 1e9:.0f} GFLOP/s in them on {torch.get_num_threads()} "
        "threads"
    )


def main(
    steps: int = 20, rounds: int = 2, preset: str = "cpu", only: list[str] | None = None
) -> None:
    """Time the arms side by side, then profile a padded step.

    Args:
        steps: optimiser steps per arm and round.
        rounds: interleaved rounds; each arm's best counts.
        preset: the preset whose SFT is measured.
        only: run only the arms whose names contain one of these, and no profile (the one-batch
            arm always runs: the ratios are against it).
    """
    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    threads = load_preset(preset).runtime.torch_threads
    if threads:
        torch.set_num_threads(threads)
    print(f"load average (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    arms = [a for a in ARMS if a.name == BASE or any(part in a.name for part in only or [""])]
    compare_arms(preset, steps, rounds, arms)
    if only is None:
        matmul_share(preset)
    print(f"load average (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    cyclopts.run(main)
