"""Can the cpu preset's architecture, trained from scratch, learn to compare two digit strings,
and in which written form? Issue #16's conditional steps fail at the comparison itself: thoughts
that state both figures (`需要 560000 · 余额 4937231 → 够`) act against them half the time.

    .venv/bin/python bench/comparison_probe.py [--steps 3000] [--every 500] [--forms plain,padded]

Each form trains a fresh Qwen2 of the preset's shape (hidden 256, 4 layers, 4 heads; one token
per digit, as `model.tiny.split_digits` tokenizes) on comparison drills `NEEDED · BALANCE →`
answered `Y` (the balance covers it) or `N`, the loss on the answer only, and reports the
greedy verdict on 2,000 fresh pairs every `--every` steps, split into pairs of different lengths
(decided by counting digits) and of equal length (decided by the first digit that differs;
half of them share a prefix of 1 to all-but-one digits, the hard case), and on 2,000 pairs drawn
as the scenarios draw them (`task-like`: an amount in one of `generator.numeracy`'s written
styles, a balance from `generator.scenarios.covered_balance`, 1.1–12× the amount or 0.05–0.92×
of it) — the pairs issue #16's conditional steps compare. Forms:

- `plain`: the digits as the thoughts restate them (`560000 · 4937231 →`);
- `padded`: both zero-padded to 10 digits (`0000560000 · 0004937231 →`), so equal places sit
  at a fixed distance and the comparison is the first differing place.

Training pairs are `generator.numeracy.comparison_pair`'s (the comparison drills
`bench/numeracy_levers.py --arms comparisons` mixes into SFT): figures of 1–9 digits, lengths
uniform, half the pairs of equal length, the two verdicts balanced. One torch thread; the
model is the preset's shape, built here with a vocabulary of the probe's 16 characters.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from toolgrpo.generator.numeracy import WRITTEN_STYLES, comparison_pair
from toolgrpo.generator.scenarios import covered_balance

VOCAB = ["<pad>", *"0123456789", " ", "·", "→", "Y", "N"]
TOKEN = {text: index for index, text in enumerate(VOCAB)}
WIDTH = 10


def task_pair(rng: random.Random) -> tuple[int, int]:
    """(needed, balance) as a scenario's conditional step draws them, either verdict."""
    needed = rng.choice(WRITTEN_STYLES[rng.choice(["en", "zh"])])(rng).value
    return needed, covered_balance(rng, needed, covers=rng.random() < 0.5)


def written(needed: int, balance: int, form: str) -> str:
    if form == "padded":
        return f"{needed:0{WIDTH}d} · {balance:0{WIDTH}d} →"
    return f"{needed} · {balance} →"


def encode(text: str) -> list[int]:
    return [TOKEN[char] for char in text]


def batch(pairs: list[tuple[int, int]], form: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts with their answer appended, and labels on the answer only."""
    rows = [[*encode(written(n, b, form)), TOKEN["Y" if b >= n else "N"]] for n, b in pairs]
    length = max(map(len, rows))
    ids = torch.tensor([[0] * (length - len(row)) + row for row in rows])
    labels = torch.full_like(ids, -100)
    labels[:, -1] = ids[:, -1]
    return ids, labels


def model(seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(VOCAB),
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return Qwen2ForCausalLM(config)


def accuracy(net: Qwen2ForCausalLM, pairs: list[tuple[int, int]], form: str) -> dict[str, float]:
    """Greedy verdict (Y vs N logit) right, overall and by whether the lengths differ."""
    ids, labels = batch(pairs, form)
    mask = (ids != 0).long()
    with torch.no_grad():
        logits = net(input_ids=ids[:, :-1], attention_mask=mask[:, :-1]).logits[:, -1]
    said_yes = logits[:, TOKEN["Y"]] > logits[:, TOKEN["N"]]
    right = said_yes == (labels[:, -1] == TOKEN["Y"])
    same = torch.tensor([len(str(n)) == len(str(b)) for n, b in pairs])
    return {
        "all": right.float().mean().item(),
        "different lengths": right[~same].float().mean().item(),
        "equal lengths": right[same].float().mean().item(),
    }


def train(form: str, steps: int, every: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(f"{seed}-train")
    held_out = [comparison_pair(random.Random(f"{seed}-eval-{i}")) for i in range(2000)]
    task_like = [task_pair(random.Random(f"{seed}-task-{i}")) for i in range(2000)]
    net = model(seed)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 100))
    curve, started = [], time.perf_counter()
    for step in range(1, steps + 1):
        net.train()
        ids, labels = batch([comparison_pair(rng) for _ in range(64)], form)
        loss = net(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % every == 0:
            net.eval()
            point = {"step": step, "loss": loss.item(), **accuracy(net, held_out, form)}
            point["task-like"] = accuracy(net, task_like, form)["all"]
            point["seconds"] = time.perf_counter() - started
            curve.append(point)
            print(form, " · ".join(f"{k} {v:.3f}" for k, v in point.items()), flush=True)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--forms", default="plain,padded")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    forms = args.forms.split(",")
    curves = {form: train(form, args.steps, args.every, args.seed) for form in forms}
    columns = ["all", "different lengths", "equal lengths", "task-like"]
    print("\n| form | step | drills seen | right | different lengths | equal | task-like |")
    print("|---|---|---|---|---|---|---|")
    for form, curve in curves.items():
        for p in curve:
            shares = " | ".join(f"{p[column]:.1%}" for column in columns)
            print(f"| {form} | {p['step']} | {p['step'] * 64:,} | {shares} |")


if __name__ == "__main__":
    main()
