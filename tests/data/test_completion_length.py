"""The cpu preset's completion length, fitted to the data (bench/grpo_throughput.py), still holds
every shipped solution whole in the tokenizer the preset builds (`training.sft.tiny_model`)."""

from __future__ import annotations

from toolgrpo.data import DATA_DIR
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.samples import read_samples
from toolgrpo.training.sft import tiny_model


def test_cpu_completion_length_cuts_no_shipped_solution():
    config = load_preset("cpu")
    tokenizer, _ = tiny_model(config)
    limit = config.grpo.max_completion_length
    too_long = [
        (path.name, row["id"], length)
        # what GRPO samples and evaluation decodes (the numeracy exercises are SFT-only)
        for path in sorted([*DATA_DIR.glob("train/*.jsonl"), *DATA_DIR.glob("eval/*.jsonl")])
        for row in read_samples(path)
        # + 1: the end-of-turn token closes every completion
        if (length := len(tokenizer(row["solution"])["input_ids"]) + 1) > limit
    ]
    assert not too_long, f"solutions longer than grpo.max_completion_length {limit}: {too_long}"
