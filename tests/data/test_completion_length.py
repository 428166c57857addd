"""The cpu preset's completion length, fitted to the data (bench/grpo_throughput.py), still holds
every shipped solution whole in the tokenizer the preset builds."""

from __future__ import annotations

from toolgrpo.data import DATA_DIR
from toolgrpo.training.config import load_preset
from toolgrpo.training.model import train_tokenizer
from toolgrpo.training.samples import grpo_rows, read_samples, tokenizer_corpus


def test_cpu_completion_length_cuts_no_shipped_solution():
    config = load_preset("cpu")
    tiny = config.model.tiny
    tokenizer = train_tokenizer(
        tokenizer_corpus(grpo_rows(config)),
        vocab_size=tiny.vocab_size,
        split_digits=tiny.split_digits,
    )
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
