"""Auxiliary numeracy exercises (data/aux/numeracy.jsonl) for a model with no pretrained prior.

A conditional step is decided by comparing two figures written differently (56万 against
"4,937,231 元", 200 × 562.54 against 98,404). These exercises practise those moves with the
figures written out as plain digits (docs/experiments/numeracy.md), worded in
data/phrases/numeracy.yaml: `convert` an amount as people write it (10万, 100k, $1.2M, 5,000
rupees) to digits, `cover` (is a balance at least an amount), `limit` (a price against a limit),
`multiply` a quantity by a price with the place-value steps written out, and `afford` (that
product against a balance). Each is a single-step row answered with `respond`, so it passes the
sample contract as it is; the rows are never counted among the 454 / 823 training rows and only
SFT mixes them in (`data.aux_share`). They are drawn from their own RNG, so the shipped
scenarios do not depend on them.

`comparison_drills` words many more `cover` exercises with both figures already plain digits
and drawn to make the comparison itself the lesson (equal lengths, shared leading digits): the
conditional steps fail at comparing two digit strings once they are read
(docs/experiments/numeracy.md).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from toolgrpo.generator.phrases import (
    LANGS,
    Exercise,
    Lang,
    NumeracyPhrases,
    Verdict,
    numeracy_phrases,
    vocabulary,
)
from toolgrpo.generator.scenarios import covered_balance, market_price, price_against_limit
from toolgrpo.generator.slots import balance_text, digits, price_text
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.samples import normalise_prompt

EXERCISES_FILE = "aux/numeracy.jsonl"


class Written(NamedTuple):
    """An amount as written, its value, and the working that turns the one into the other."""

    text: str
    value: int
    working: str


def _scaled(mantissa: float, scale: int, text: str) -> Written:
    value = round(mantissa * scale)
    return Written(text, value, f"{text} = {digits(mantissa)} × {scale} = {value}")


def _separated(value: int, text: str) -> Written:
    return Written(text, value, f"{text} → {value}")


# The ways people and statements write an amount, per language: a unit to multiply out (k, M,
# 万) or separators and a currency word to drop.
WRITTEN_STYLES: dict[Lang, tuple[Callable[[random.Random], Written], ...]] = {
    "en": (
        lambda rng: _scaled(m := rng.randint(2, 500) / 2, 1000, f"{digits(m)}k"),
        lambda rng: _scaled(m := rng.randint(1, 90) / 10, 1_000_000, f"${digits(m)}M"),
        lambda rng: _separated(v := rng.randint(1000, 9_999_999), f"{v:,}"),
        lambda rng: _separated(v := rng.randint(100, 99_999), f"{v:,} rupees"),
    ),
    "zh": (
        lambda rng: _scaled(m := rng.randint(2, 800) / 2, 10_000, f"{digits(m)}万"),
        lambda rng: _scaled(m := rng.randint(1, 500), 10_000, f"{m} 万"),
        lambda rng: _separated(v := rng.randint(100, 99_999), f"{v}元"),
        lambda rng: _separated(v := rng.randint(1000, 9_999_999), f"{v:,} 元"),
        lambda rng: _separated(v := rng.randint(10, 9_999), f"{v}块"),
    ),
}


def product_working(quantity: int, price: float) -> str:
    """`150 × 633.07 = 100 × 633.07 + 50 × 633.07 = 63307 + 31653.5 = 94960.5`: the quantity
    split by place value, each part multiplied, the parts added."""
    shown = price_text(price)
    parts = [int(d) * 10**k for k, d in enumerate(reversed(str(quantity))) if d != "0"][::-1]
    total = digits(quantity * price)
    if len(parts) == 1:
        return f"{quantity} × {shown} = {total}"
    terms = " + ".join(f"{part} × {shown}" for part in parts)
    products = " + ".join(digits(part * price) for part in parts)
    return f"{quantity} × {shown} = {terms} = {products} = {total}"


def _verdict(phrases: NumeracyPhrases, verdict: Verdict, lang: Lang) -> dict[str, str]:
    answer: Literal["yes", "no"] = "yes" if verdict in ("enough", "below", "above") else "no"
    return {
        "verdict": phrases.verdicts[verdict].say(lang, {}),
        "answer": phrases.answers[answer].say(lang, {}),
    }


def _figures(exercise: Exercise, rng: random.Random, lang: Lang) -> dict[str, object]:
    """The placeholders of one exercise: the figures drawn and the working that relates them."""
    phrases = numeracy_phrases()
    if exercise == "convert":
        amount = rng.choice(WRITTEN_STYLES[lang])(rng)
        return {"amount": amount.text, "digits": amount.value, "working": amount.working}
    if exercise == "cover":
        amount, covers = rng.choice(WRITTEN_STYLES[lang])(rng), rng.random() < 0.5
        balance = covered_balance(rng, amount.value, covers)
        return {
            "amount": amount.text,
            "amount_digits": amount.value,
            "balance": balance_text(balance, lang),
            "balance_digits": balance,
            **_verdict(phrases, "enough" if covers else "short", lang),
        }
    if exercise == "limit":
        limit, above = rng.randint(10, 900), rng.random() < 0.5
        price = price_against_limit(rng, limit, above)
        return {
            "price": price_text(price),
            "limit": limit,
            **_verdict(phrases, "above" if above else "below", lang),
        }
    quantity, price = rng.choice(vocabulary().quantities), market_price(rng)
    figures = {
        "quantity": quantity,
        "price": price_text(price),
        "cost_digits": digits(quantity * price),
        "working": product_working(quantity, price),
    }
    if exercise == "multiply":
        return figures
    covers = rng.random() < 0.5
    balance = covered_balance(rng, quantity * price, covers)
    return {
        **figures,
        "balance": balance_text(balance, lang),
        "balance_digits": balance,
        **_verdict(phrases, "enough" if covers else "short", lang),
    }


COMPARISON_DIGITS = 9  # the longest figure a drill compares: scenario balances reach 9 digits


def _figure(rng: random.Random, length: int, prefix: str = "") -> str:
    """A `length`-digit figure without a leading zero that starts with `prefix`."""
    first = prefix or str(rng.randint(1, 9))
    return (first + "".join(str(rng.randint(0, 9)) for _ in range(length - len(first))))[:length]


def _any_comparison(rng: random.Random) -> tuple[int, int]:
    """(needed, balance) of 1 to `COMPARISON_DIGITS` digits: half of different lengths (decided
    by counting digits), half of equal length (decided by the first digit that differs), half of
    those sharing 1 to all-but-one leading digits."""
    needed_length = rng.randint(1, COMPARISON_DIGITS)
    if rng.random() < 0.5:
        lengths = [n for n in range(1, COMPARISON_DIGITS + 1) if n != needed_length]
        balance_length = rng.choice(lengths)
        return int(_figure(rng, needed_length)), int(_figure(rng, balance_length))
    needed = _figure(rng, needed_length)
    shared = rng.randint(1, needed_length - 1) if needed_length > 1 and rng.random() < 0.5 else 0
    return int(needed), int(_figure(rng, needed_length, needed[:shared]))


def comparison_pair(rng: random.Random) -> tuple[int, int]:
    """(needed, balance) as `_any_comparison` draws them, the balance covering the amount (≥)
    or not with equal chance."""
    covers = rng.random() < 0.5
    while True:
        needed, balance = _any_comparison(rng)
        if (balance >= needed) == covers:
            return needed, balance


def comparison_drills(
    seed: int,
    count: int,
    *,
    stream: str = "comparisons",
    restate: Callable[[int, int], tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """`count` `cover` exercises whose figures are plain digits (`comparison_pair`), half in
    each language: the request, then the thought `Needed 560000 · balance 4937231 → enough`;
    `restate` writes the two figures of the thought in another form (e.g. zero-padded: `Needed
    0000560000 · balance 0004937231`), the request and reply as they are."""
    rng = random.Random(f"{stream}-{seed}")
    phrases = numeracy_phrases()
    wording = phrases.cover
    rows = []
    for index in range(count):
        lang = LANGS[index % 2]
        needed, balance = comparison_pair(rng)
        verdict: Verdict = "enough" if balance >= needed else "short"
        needed_text, balance_text = (
            restate(needed, balance) if restate else (str(needed), str(balance))
        )
        figures = {"amount": needed, "amount_digits": needed_text, "balance": balance}
        figures |= {"balance_digits": balance_text, **_verdict(phrases, verdict, lang)}
        prompt = rng.choice(wording.requests.of(lang)).format(**figures)
        said = (
            phrase.say(lang, figures) for phrase in (wording.thought, wording.plan, wording.reply)
        )
        rows.append(_exercise_row(f"aux-c-{index + 1:05d}", lang, prompt, *said))
    return rows


def _exercise_row(
    row_id: str, lang: Lang, prompt: str, thought: str, plan: str, reply: str
) -> dict[str, Any]:
    """A single-step `respond` row in the shipped rows' key order."""
    action = {"tool": "respond", "params": {"message": reply}}
    solution = {"thought": thought, "action": action, "plan": [plan]}
    return {
        "id": row_id,
        "scenario_id": row_id,
        "kind": "single",
        "lang": lang,
        "step": 1,
        "n_steps": 1,
        "prompt": prompt,
        "solution": json.dumps(solution, ensure_ascii=False),
        "tool": "respond",
    }


def build_exercises(
    seed: int, catalogue: Catalogue, *, rounds: int = 1, stream: str = "numeracy"
) -> list[dict[str, Any]]:
    """Every exercise of numeracy.yaml's counts (`rounds` times each), shuffled, each request
    unique; raises if a reply breaks the respond tool's params schema. `stream` names the RNG
    (the shipped file's is "numeracy"; another use draws other figures)."""
    rng = random.Random(f"{stream}-{seed}")  # its own stream: the shipped scenarios ignore it
    phrases, seen = numeracy_phrases(), set()
    drawn: list[tuple[Lang, str, str, str, str]] = []
    for exercise, n in phrases.rows.items():
        wording = phrases.of(exercise)
        for index in range(n * rounds):
            lang = LANGS[index % 2]
            for _ in range(500):
                template = rng.choice(wording.requests.of(lang))
                figures = _figures(exercise, rng, lang)
                prompt = template.format(**figures)
                if normalise_prompt(prompt) not in seen:
                    break
            else:
                raise RuntimeError(f"cannot draw a unique {exercise} exercise from {template!r}")
            seen.add(normalise_prompt(prompt))
            thought, plan, reply = (
                phrase.say(lang, figures)
                for phrase in (wording.thought, wording.plan, wording.reply)
            )
            drawn.append((lang, prompt, thought, plan, reply))
    rng.shuffle(drawn)
    rows = [
        _exercise_row(f"aux-n-{number:04d}", *exercise) for number, exercise in enumerate(drawn, 1)
    ]
    for row in rows:
        params = json.loads(row["solution"])["action"]["params"]
        error = catalogue.params_error("respond", params)
        if error is not None:
            raise ValueError(f"generated exercise {row['id']}: invalid respond params: {error}")
    return rows
