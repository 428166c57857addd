"""The text a base of our own is pretrained on: numeracy and the domain's
language, never a decision.

A model built from scratch meets every figure format and every comparison for the first time in
the 225 conditional rows it is fine-tuned on. A pretrained base brings that prior; none can be
downloaded here, so `toolgrpo base build` pretrains the tiny model on this corpus first:

- **numeracy exercises** — the kinds of data/aux/numeracy.jsonl (convert an amount as written to
  digits, does a balance cover an amount, a price against a limit, quantity × price, that cost
  against a balance), `exercise_rounds` times the shipped file's counts, from another RNG stream;
- **requests and observations** — fresh draws of the training scenarios (the training rows'
  request templates with new slot values, and what each earlier step returned), prompts only:
  the base reads how people ask and how balances and quotes come back, but no thought, tool or
  plan, so SFT still teaches every decision;
- **copy drills** — more fresh draws, every step's prompt answered with the figures it states
  (accounts, tickers, amounts as written, in order: `ACC010 · 56万 · ACC149 · 4,937,231 元`).
  Trained from scratch on the task alone, the model copies no figure from its prompt: it writes
  plausible numbers instead (docs/experiments/numeracy.md, "What the model copies"). Copying is
  the skill every param and every comparison needs, and one a tiny model learns in a few hundred
  steps of drills.

The unseen-phrasing templates are never drawn (the builder only draws trained ones), and a
request that equals an eval prompt is dropped, so no eval prompt occurs in the corpus (a test).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from toolgrpo.generator.build import ScenarioBuilder
from toolgrpo.generator.numeracy import build_exercises
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.figures import figures_in
from toolgrpo.schemas.samples import normalise_prompt

FIGURE_SEPARATOR = " · "


class Passage(NamedTuple):
    """One corpus text: a user turn, and the assistant's answer when it is an exercise."""

    prompt: str
    answer: str | None


def base_corpus(
    seed: int,
    catalogue: Catalogue,
    *,
    exercise_rounds: int,
    request_rounds: int,
    copy_rounds: int = 0,
    excluded_prompts: Iterable[str] = (),
) -> list[Passage]:
    """The exercises, the scenario prompts (each scenario's last step: the request with every
    earlier observation) and the copy drills, shuffled together; prompts equal to one of
    `excluded_prompts` (after `normalise_prompt`) are left out."""
    excluded = {normalise_prompt(prompt) for prompt in excluded_prompts}
    exercises = build_exercises(seed, catalogue, rounds=exercise_rounds, stream="base-numeracy")
    passages = [Passage(row["prompt"], row["solution"]) for row in exercises]
    builder = ScenarioBuilder(seed, catalogue, unique_requests=False)

    def fresh_rows() -> list[dict[str, Any]]:
        rows = builder.single_rows("base", builder.single_jobs("train"))
        rows += builder.multi_rows("base", builder.multi_jobs("train"))
        return [row for row in rows if normalise_prompt(row["prompt"]) not in excluded]

    for _ in range(request_rounds):
        passages += [
            Passage(row["prompt"], None) for row in fresh_rows() if row["step"] == row["n_steps"]
        ]
    for _ in range(copy_rounds):
        passages += [
            Passage(row["prompt"], FIGURE_SEPARATOR.join(figures))
            for row in fresh_rows()
            if (figures := figures_in(row["prompt"]))
        ]
    builder.rng.shuffle(passages)
    return passages
