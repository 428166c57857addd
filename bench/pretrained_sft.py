"""The pretrained preset's SFT levers side by side in one run: the vocabulary cut and bfloat16.

    python bench/pretrained_sft.py [--common 0,8000,20000] [--steps 24] [--every 4]

The `pretrained` preset (Gemma 3 270M from the registry, LoRA r 16) on the shipped training
rows, from the same seed, one arm per `model.common_tokens`, one with the whole vocabulary, and
the preset in float32 (`model.bf16=false`): the vocabulary's size; the seconds an SFT step takes
(the mean after the first step); the loss every `--every` steps (the curves compared); and on the
eval files' prompts, text no cut saw: how many encode to other tokens than with the whole
vocabulary, their tokens per prompt against it, and byte tokens per prompt (characters no kept
token covers). Prints the load average: on a shared machine compare rows of one run only.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import cyclopts
import torch
from transformers import AutoTokenizer, TrainerCallback

from toolgrpo.data import DATA_DIR
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.device import place_here, stage_threads
from toolgrpo.training.pretrained import resolve_base
from toolgrpo.training.sft import sft_config, sft_trainer

EVAL_FILES = sorted((DATA_DIR / "eval").glob("*.jsonl"))


class StepLog(TrainerCallback):
    """Each step's seconds and loss."""

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds: list[float] = []
        self.losses: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.started)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def eval_prompts(tokenizer: Any) -> list[str]:
    rows = [json.loads(line) for path in EVAL_FILES for line in path.read_text().splitlines()]
    return [chat_prompt(tokenizer, row["prompt"]) for row in rows]


def arm(overrides: dict[str, Any], steps: int, whole: Any) -> tuple[dict[str, Any], list[float]]:
    """One arm's row of the table, and its loss at every step."""
    config, _ = place_here(load_preset("pretrained", overrides))
    torch.set_num_threads(stage_threads(config.runtime))
    stage_dir = Path(tempfile.mkdtemp(prefix="pretrained-sft-"))
    args = sft_config(config, stage_dir)
    args.max_steps, args.save_strategy = steps, "no"
    trainer = sft_trainer(config, stage_dir, args)
    log = StepLog()
    trainer.add_callback(log)
    trainer.train()
    tokenizer = trainer.processing_class
    prompts = eval_prompts(tokenizer)
    mine = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    full = whole(prompts, add_special_tokens=False)["input_ids"]
    changed = sum(
        tokenizer.convert_ids_to_tokens(a) != whole.convert_ids_to_tokens(b)
        for a, b in zip(mine, full, strict=True)
    )
    tokens = sum(map(len, mine))
    byte_tokens = sum(
        token.startswith("<0x") for ids in mine for token in tokenizer.convert_ids_to_tokens(ids)
    )
    row = {
        "vocabulary": f"{len(tokenizer):,}",
        "dtype": "bf16" if config.model.bf16 else "fp32",
        "s/step": f"{sum(log.seconds[1:]) / max(1, len(log.seconds) - 1):.2f}",
        "eval prompts re-tokenized": f"{changed}/{len(prompts)}",
        "tokens/prompt": f"{tokens / len(mine):.1f} ({tokens / sum(map(len, full)) - 1:+.1%})",
        "byte tokens/prompt": f"{byte_tokens / len(mine):.2f}",
    }
    return row, log.losses


def main(common: str = "0,8000,20000", steps: int = 24, every: int = 4) -> None:
    whole = AutoTokenizer.from_pretrained(resolve_base(load_preset("pretrained").model.base_model))
    arms = {f"cut, common_tokens {c}": {"model.common_tokens": int(c)} for c in common.split(",")}
    arms["whole vocabulary"] = {"model.cut_vocabulary": False}
    arms["cut (preset), float32"] = {"model.bf16": False}
    rows, curves = [], {}
    for name, overrides in arms.items():
        row, curves[name] = arm(overrides, steps, whole)
        rows.append({"arm": name, **row})
        print(rows[-1], flush=True)
    print(f"\nload average {os.getloadavg()[0]:.2f}; {steps} SFT steps per arm, seed 0\n")
    print(markdown_table(rows))
    print("\nSFT loss by step\n")
    shown = range(every - 1, steps, every)
    print(
        markdown_table(
            [{"step": i + 1} | {n: f"{c[i]:.3f}" for n, c in curves.items()} for i in shown]
        )
    )


if __name__ == "__main__":
    cyclopts.run(main)
