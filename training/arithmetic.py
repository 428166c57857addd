"""A reward for the arithmetic of a conditional step (off by default).

The ground-truth reward pays a conditional step ("transfer if the balance covers it") for the
labelled tool alone, so a completion that guesses the branch earns as much as one that read the
figures. This component pays only a completion whose thought states both figures the condition
compares — the budget and the amount (or quantity × reading), the reading and the limit (the
catalogue's `reports`), by value, as `schemas.figures.amounts_in` reads them — and whose action
is the branch those figures imply (a reply when they do not meet the condition). The figures
and the verdict come from the prompt (`validation.label_rules.condition_verdict`, the rule the
data gate checks labels with), never from the label. A step without a condition, or whose
figures do not parse, has nothing to check and earns the full points, so the reward's maximum
stays reachable for every prompt (NGRPO's virtual sample is scored at that maximum).

TRL's reward signature; it reads the dataset's `request` (the prompt as written, before the chat
template) and `condition` columns, which `training.grpo` adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import completion_text, first_json_object, written_action
from toolgrpo.schemas.figures import amounts_in
from toolgrpo.schemas.samples import REPLY_TOOL, split_prompt
from toolgrpo.training.rewards import DEFAULT_WEIGHTS, RewardWeights
from toolgrpo.validation.label_rules import condition_verdict


def _cents(value: float) -> int:
    return round(value * 100)


def stated_comparison(
    completion: object, request: str, condition: str | None, catalogue: Catalogue
) -> tuple[bool, bool] | None:
    """Does the completion state the figures its prompt's condition compares, and is its action
    the branch those figures imply? Told apart, reading and comparing are two different
    failures. None: nothing to check (no condition, or figures that do not parse)."""
    verdict = (
        condition_verdict(*split_prompt(request), catalogue) if condition is not None else None
    )
    if verdict is None:
        return None
    parsed = first_json_object(completion_text(completion)) or {}
    thought, tool = parsed.get("thought"), written_action(parsed).tool
    if not isinstance(thought, str) or tool is None:
        return False, False
    stated = {_cents(amount.value) for amount in amounts_in(thought)}
    figures_stated = all(_cents(figure) in stated for figure in verdict.compared)
    return figures_stated, (tool == REPLY_TOOL) != verdict.holds


def comparison_right(
    completion: object, request: str, condition: str | None, catalogue: Catalogue
) -> bool | None:
    """Does the completion state the figures its prompt's condition compares and act as they
    say? None: nothing to check (no condition, or figures that do not parse)."""
    checked = stated_comparison(completion, request, condition, catalogue)
    return None if checked is None else all(checked)


def arithmetic_reward(
    completions: Sequence[object],
    solution: Sequence[object],
    request: Sequence[str] | None = None,
    condition: Sequence[str | None] | None = None,
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
    **kwargs: Any,
) -> list[float]:
    """`weights.arithmetic` per completion whose stated comparison is right or has nothing to
    check, else 0."""
    if request is None or condition is None:
        raise ValueError(
            "arithmetic_reward needs the dataset's `request` and `condition` columns "
            "(the prompt as written and the conditional step's branch)"
        )
    if not len(completions) == len(request) == len(condition):
        raise ValueError(
            f"got {len(completions)} completions for {len(request)} requests and "
            f"{len(condition)} conditions"
        )
    catalogue = catalogue or default_catalogue()
    return [
        0.0 if comparison_right(c, r, k, catalogue) is False else weights.arithmetic
        for c, r, k in zip(completions, request, condition, strict=True)
    ]
