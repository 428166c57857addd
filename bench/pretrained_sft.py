"""What cutting the pretrained base's vocabulary saves, and what it costs on text it never saw.

    python bench/vocabulary.py [--common 0,8000,20000] [--steps 8] [--full/--no-full]

For the `pretrained` preset (Gemma 3 270M from the registry, LoRA r 16, bf16 where the CPU
computes it natively) on the shipped training rows, one arm per `model.common_tokens` and one
with the whole vocabulary, side by side: the vocabulary's size, the seconds an SFT step takes
(TRL's SFT, the preset's batches, the mean of `--steps` steps after one warm-up step), and on
the eval files' prompts (text the cut never saw): how many prompts encode to other tokens than
with the whole vocabulary, their tokens per prompt against the whole vocabulary's, and byte
tokens per prompt (characters no kept token covers). Prints the load average: on a shared
machine compare rows of one run.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import cyclopts
import torch
from transformers import AutoTokenizer, TrainerCallback

from toolgrpo.data import DATA_DIR
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.device import place_here, stage_threads
from toolgrpo.training.overrides import load_preset
from toolgrpo.training.pretrained import resolve_base
from toolgrpo.training.sft import sft_config, sft_trainer

EVAL_FILES = sorted((DATA_DIR / "eval").glob("*.jsonl"))


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.started = 0.0
        self.seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.started)


def eval_prompts(tokenizer) -> list[str]:
    rows = [json.loads(line) for path in EVAL_FILES for line in path.read_text().splitlines()]
    return [chat_prompt(tokenizer, row["prompt"]) for row in rows]


def arm(overrides: dict, steps: int, full_tokenizer) -> dict[str, object]:
    config, _ = place_here(load_preset("pretrained", overrides))
    torch.set_num_threads(stage_threads(config.runtime))
    stage_dir = Path(tempfile.mkdtemp(prefix="vocabulary-"))
    args = sft_config(config, stage_dir)
    args.max_steps, args.save_strategy = steps + 1, "no"
    trainer = sft_trainer(config, stage_dir, args)
    times = StepTimes()
    trainer.add_callback(times)
    trainer.train()
    tokenizer = trainer.processing_class
    prompts = eval_prompts(tokenizer)
    full = full_tokenizer(prompts, add_special_tokens=False)["input_ids"]
    mine = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    changed = sum(
        tokenizer.convert_ids_to_tokens(a) != full_tokenizer.convert_ids_to_tokens(b)
        for a, b in zip(mine, full, strict=True)
    )
    byte_tokens = sum(
        t.startswith("<0x") for ids in mine for t in tokenizer.convert_ids_to_tokens(ids)
    )
    tokens = sum(map(len, mine))
    return {
        "vocabulary": f"{len(tokenizer):,}",
        "s/step": f"{sum(times.seconds[1:]) / steps:.2f}",
        "eval prompts re-tokenized": f"{changed}/{len(prompts)}",
        "tokens/prompt": f"{tokens / len(mine):.1f} ({tokens / sum(map(len, full)) - 1:+.1%})",
        "byte tokens/prompt": f"{byte_tokens / len(mine):.2f}",
        "dtype": "bf16" if config.model.bf16 else "fp32",
    }


def main(common: str = "0,8000,20000", steps: int = 8, full: bool = True) -> None:
    base = resolve_base(load_preset("pretrained").model.base_model or "")
    full_tokenizer = AutoTokenizer.from_pretrained(base)
    rows = []
    for count in [int(c) for c in common.split(",")]:
        rows.append(
            {
                "arm": f"cut, common_tokens {count}",
                **arm({"model.common_tokens": count}, steps, full_tokenizer),
            }
        )
        print(rows[-1], flush=True)
    if full:
        rows.append(
            {
                "arm": "whole vocabulary",
                **arm({"model.cut_vocabulary": False}, steps, full_tokenizer),
            }
        )
    print(f"\nload average {os.getloadavg()[0]:.2f}; {steps} steps per arm\n")
    print(markdown_table(rows))


if __name__ == "__main__":
    cyclopts.run(main)
