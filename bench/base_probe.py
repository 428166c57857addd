"""What a built base does with figures: greedy answers to fresh `cover` exercises, scored.

    .venv/bin/python bench/base_probe.py BASE_DIR [BASE_DIR …] [--n 60] [--seed 7]

A `cover` exercise asks whether a balance covers an amount, both as people write them
(`余额 4,937,231 元，够付 56万 吗？`); its answer restates both as digits, then the verdict
(`需要 560000 · 余额 4937231 → 够`). For each base, side by side on the same exercises (drawn
from an RNG stream no base was trained on): how often it writes the amount's digits right, the
balance's digits right (a copy), and the verdict right; and how many of `n` fresh copy drills
(`base.copy_rounds`: a prompt answered with the figures it states) it copies exactly. A base
that cannot restate the figures cannot be the numeracy prior issue #16's lever 3 is after.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from toolgrpo.generator.base_corpus import Passage, base_corpus
from toolgrpo.generator.numeracy import build_exercises
from toolgrpo.reporting.markdown import markdown_table
from toolgrpo.schemas.catalogue import load_catalogue
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.model import load_model

FIGURES = re.compile(r"(\d+(?:\.\d+)?) · \D*?(\d+(?:\.\d+)?) → ([^，,]+)")
COVER_THOUGHT = ("Needed ", "需要 ")


def cover_exercises(n: int, seed: int) -> list[dict]:
    """`n` cover exercises from their own stream, with the reference thought."""
    rows = build_exercises(seed, load_catalogue(), stream="base-probe")
    return [
        row for row in rows if json.loads(row["solution"])["thought"].startswith(COVER_THOUGHT)
    ][:n]


def greedy(tokenizer, model, prompt: str, max_new_tokens: int) -> str:
    inputs = tokenizer(chat_prompt(tokenizer, prompt), return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(output[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def score(base: Path, rows: list[dict], drills: list[Passage]) -> dict[str, int]:
    """Amount digits, balance digits and verdict right, of `rows`, and drills copied, greedy."""
    tokenizer, model = load_model(base, load_preset("cpu").model)
    right = {"amount digits": 0, "balance digits": 0, "verdict": 0}
    for row in rows:
        expected = FIGURES.search(json.loads(row["solution"])["thought"]).groups()
        got = FIGURES.search(greedy(tokenizer, model, row["prompt"], 48))
        if got is None:
            continue
        for name, want, have in zip(right, expected, got.groups(), strict=True):
            right[name] += want == have
    copied = sum(greedy(tokenizer, model, d.prompt, 64).strip() == d.answer for d in drills)
    return right | {"copy drills": copied}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bases", nargs="+", type=Path)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = cover_exercises(args.n, args.seed)
    catalogue = load_catalogue()
    drills = base_corpus(args.seed, catalogue, exercise_rounds=0, request_rounds=0, copy_rounds=1)
    drills = drills[: args.n]
    table = [{"base": str(base), **score(base, rows, drills)} for base in args.bases]
    print(f"{len(rows)} fresh cover exercises and {len(drills)} copy drills, greedy; right of each")
    print(markdown_table(table))


if __name__ == "__main__":
    main()
