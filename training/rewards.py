"""The ground-truth reward: compare a completion with its labelled answer, never raise.

Every function here has TRL's reward signature, `f(completions, solution, **kwargs) -> list[float]`:
`completions` are strings or conversational lists, `solution` is the dataset column holding the
labelled answer as a JSON string. Pass `ground_truth_reward` alone (the default), or the three
components as separate `reward_funcs` so TRL logs each one's mean (`rewards/tool_reward/mean`);
their sum is `ground_truth_reward`. Other weights or another tool catalogue:
`functools.partial(f, weights=RewardWeights(...), catalogue=...)` (TRL logs a partial under the
wrapped name).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, NamedTuple

from toolgrpo.common.wording import catalogue_tools, thought_action_consistent
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import completion_text, first_json_object, written_action

# case study: LOGIC_KEYWORDS. English matched case-insensitively as whole words, Chinese anywhere.
LOGIC_WORDS_EN = (
    "first",
    "then",
    "before",
    "because",
    "therefore",
    "need to",
    "in order to",
    "since",
)
LOGIC_WORDS_ZH = ("先", "首先", "然后", "因为", "所以", "之前", "需要", "为了")

_LOGIC_WORD = re.compile(
    r"\b(?:" + "|".join(re.escape(w) for w in LOGIC_WORDS_EN) + r")\b|" + "|".join(LOGIC_WORDS_ZH),
    re.IGNORECASE,
)


def _points(default: float, description: str) -> Any:
    """A weight with the description the training config lists (`grpo.reward_points.*`)."""
    return field(default=default, metadata={"description": description})


@dataclass(frozen=True)
class RewardWeights:
    """Points per component; the defaults are the case study's (maximum 1.0)."""

    tool: float = _points(0.5, "points for the labelled tool (case study)")
    valid_wrong_tool: float = _points(
        0.1, "points for another catalogue tool: keeps the format incentive (case study)"
    )
    params: float = _points(0.2, "points for params that satisfy the chosen tool's schema")
    thought: float = _points(0.15, "points for a non-empty thought")
    logic_word: float = _points(0.05, "points for a logic word in the thought (case study)")
    plan: float = _points(0.10, "points for a non-empty plan of non-empty strings")
    arithmetic: float = _points(
        0.0,
        "points for a conditional step whose thought states the two figures its condition "
        "compares and whose action follows them; 0: off, not scored",
    )

    def __post_init__(self) -> None:
        negative = [f.name for f in fields(self) if getattr(self, f.name) < 0]
        if negative:
            raise ValueError(f"reward weights must be >= 0, got negative {negative}")
        if self.valid_wrong_tool > self.tool:
            raise ValueError(
                f"valid_wrong_tool ({self.valid_wrong_tool}) must not exceed tool ({self.tool}): "
                "a wrong tool would pay more than the right one"
            )

    @property
    def max_reward(self) -> float:
        parts = (self.tool, self.params, self.thought, self.logic_word, self.plan, self.arithmetic)
        return round(sum(parts), 6)


DEFAULT_WEIGHTS = RewardWeights()


class RewardBreakdown(NamedTuple):
    tool: float
    params: float
    reasoning: float

    @property
    def total(self) -> float:
        return round(self.tool + self.params + self.reasoning, 6)


@lru_cache(maxsize=4096)  # a batch repeats each solution num_generations times
def _labelled_tool(solution: str) -> str | None:
    return written_action(first_json_object(solution)).tool


def _expected_tool(solution: object) -> str | None:
    return _labelled_tool(solution) if isinstance(solution, str) else written_action(solution).tool


def score_completion(
    completion: object,
    solution: object,
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
) -> RewardBreakdown:
    """Points for tool, params and reasoning+plan (tools and params of `catalogue`, default the
    shipped one); whatever cannot be parsed earns nothing."""
    parsed = first_json_object(completion_text(completion))
    if parsed is None:
        return RewardBreakdown(0.0, 0.0, 0.0)
    catalogue = catalogue or default_catalogue()
    tool, params = written_action(parsed)
    tool = tool if tool in catalogue_tools(catalogue) else None

    if tool is None:
        tool_points = 0.0
    elif tool == _expected_tool(solution):
        tool_points = weights.tool
    else:
        tool_points = weights.valid_wrong_tool

    params_ok = isinstance(params, dict) and catalogue.params_valid(tool, params)
    params_points = weights.params if tool is not None and params_ok else 0.0

    reasoning_points = 0.0
    thought = parsed.get("thought")
    if isinstance(thought, str) and thought.strip():
        reasoning_points += weights.thought
        if _LOGIC_WORD.search(thought):
            reasoning_points += weights.logic_word
    plan = parsed.get("plan")
    if isinstance(plan, list) and plan and all(isinstance(s, str) and s.strip() for s in plan):
        reasoning_points += weights.plan
    return RewardBreakdown(tool_points, params_points, round(reasoning_points, 6))


def _log_consistency(
    completions: Sequence[object], catalogue: Catalogue | None, kwargs: dict[str, Any]
) -> None:
    """Log the share of consistent thoughts through TRL's `log_metric` when training passes it."""
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and completions:
        consistent = sum(thought_action_consistent(c, catalogue) for c in completions)
        log_metric("thought_action_consistent", consistent / len(completions))


def _log_tool_accuracy(
    completions: Sequence[object], solution: Sequence[object], kwargs: dict[str, Any]
) -> None:
    """Log the share of completions naming the labelled tool through TRL's `log_metric`."""
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and completions:
        right = sum(
            expected is not None
            and written_action(first_json_object(completion_text(c))).tool == expected
            for c, expected in zip(completions, map(_expected_tool, solution), strict=True)
        )
        log_metric("tool_accuracy", right / len(completions))


def _breakdowns(
    completions: Sequence[object],
    solution: Sequence[object],
    weights: RewardWeights,
    catalogue: Catalogue | None,
) -> list[RewardBreakdown]:
    if len(completions) != len(solution):
        raise ValueError(
            f"got {len(completions)} completions but {len(solution)} solutions: "
            "the dataset needs a `solution` column, one labelled answer per prompt"
        )
    return [
        score_completion(c, s, weights, catalogue)
        for c, s in zip(completions, solution, strict=True)
    ]


def ground_truth_reward(
    completions: Sequence[object],
    solution: Sequence[object],
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
    **kwargs: Any,
) -> list[float]:
    """Tool + params + reasoning points per completion, in [0, weights.max_reward]."""
    _log_consistency(completions, catalogue, kwargs)
    return [b.total for b in _breakdowns(completions, solution, weights, catalogue)]


def tool_reward(
    completions: Sequence[object],
    solution: Sequence[object],
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
    **kwargs: Any,
) -> list[float]:
    """The tool component: labelled tool, another catalogue tool, or nothing; also logs the share
    of completions with the labelled tool (the progress line's tool accuracy)."""
    points = [b.tool for b in _breakdowns(completions, solution, weights, catalogue)]
    _log_tool_accuracy(completions, solution, kwargs)
    return points


def params_reward(
    completions: Sequence[object],
    solution: Sequence[object],
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
    **kwargs: Any,
) -> list[float]:
    """The params component: params valid for the chosen tool's schema."""
    return [b.params for b in _breakdowns(completions, solution, weights, catalogue)]


def reasoning_reward(
    completions: Sequence[object],
    solution: Sequence[object],
    weights: RewardWeights = DEFAULT_WEIGHTS,
    catalogue: Catalogue | None = None,
    **kwargs: Any,
) -> list[float]:
    """The reasoning + plan component; also logs the thought/action consistency rate."""
    _log_consistency(completions, catalogue, kwargs)
    return [b.reasoning for b in _breakdowns(completions, solution, weights, catalogue)]


COMPONENT_REWARDS = (tool_reward, params_reward, reasoning_reward)
