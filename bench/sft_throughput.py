"""Benchmark how the SFT warm start spends its time on the CPU, and whether packing would help.

The `cpu` preset's SFT is most of the main job. This measures, on the same model and rows, real
(non-padding) tokens per second of TRL's `SFTTrainer` with the preset's padded batches against
its padding-free and BFD-packing modes (same tokens per step), then where a padded step's time
goes (matmuls vs the rest, by `torch.profiler`) and the matmul rate that implies.

    python bench/sft_throughput.py [--steps 20] [--rounds 2] [--preset cpu]
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path

import cyclopts
import datasets
import torch
import transformers
from datasets import Dataset
from torch.profiler import ProfilerActivity, profile
from transformers.trainer_callback import PrinterCallback
from trl import SFTTrainer

from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config import load_preset
from toolgrpo.training.samples import sft_rows
from toolgrpo.training.sft import initial_model, sft_config

# Packed rows per batch: about the preset's 16 rows × ~150 tokens, so every mode sees the same
# tokens per optimizer step.
TOKENS_PER_STEP = 16 * 150
PROFILED_STEPS = 5


def _trainer(preset: str, mode: str, steps: int, work_dir: Path) -> SFTTrainer:
    """The pipeline's SFT trainer, in `mode`: padded (the preset), padding-free, or packed."""
    config = load_preset(preset, {"runtime.save_steps": 10**9})
    tokenizer, model = initial_model(config, work_dir)
    dataset = Dataset.from_list(
        [
            {"prompt": chat_prompt(tokenizer, row["prompt"]), "completion": row["solution"]}
            for row in sft_rows(config)
        ]
    )
    args = sft_config(config, work_dir)
    # One log line at the end: TRL's running `num_tokens` then covers every step.
    args.max_steps, args.save_strategy, args.logging_steps = steps, "no", steps
    if mode == "padding-free":
        args.padding_free, args.max_length = True, None
    elif mode.startswith("packed"):
        args.packing, args.max_length = True, int(mode.split()[1])
        args.per_device_train_batch_size = max(1, TOKENS_PER_STEP // args.max_length)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict when tqdm is off
    return trainer


def compare_modes(preset: str, steps: int, rounds: int) -> None:
    """Real tokens per second of each mode, best of `rounds` interleaved rounds."""
    modes = ["padded", "padding-free", "packed 512", "packed 256"]
    best = dict.fromkeys(modes, 0.0)
    for _ in range(rounds):
        for mode in modes:
            with tempfile.TemporaryDirectory() as work_dir:
                trainer = _trainer(preset, mode, steps, Path(work_dir))
                start = time.perf_counter()
                trainer.train()
                seconds = time.perf_counter() - start
            # TRL logs the running count of real (non-padding) tokens the model was fed.
            tokens = max(log.get("num_tokens", 0) for log in trainer.state.log_history)
            best[mode] = max(best[mode], tokens / seconds)
    print(f"{steps} SFT steps of the {preset!r} preset's model, best of {rounds} rounds:")
    for mode, rate in best.items():
        print(f"  {mode:<13} {rate:8.0f} real tokens/s  {rate / best['padded']:5.2f}x padded")


def matmul_share(preset: str) -> None:
    """Profile padded steps: the share of time in matmuls and the FLOP rate they reach."""
    config = load_preset(preset)
    with tempfile.TemporaryDirectory() as work_dir:
        _, model = initial_model(config, Path(work_dir))
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


def main(steps: int = 20, rounds: int = 2, preset: str = "cpu") -> None:
    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    threads = load_preset(preset).runtime.torch_threads
    if threads:
        torch.set_num_threads(threads)
    print(f"load average (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    compare_modes(preset, steps, rounds)
    matmul_share(preset)
    print(f"load average (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    cyclopts.run(main)
