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
from functools import cache, lru_cache
from typing import Any, NamedTuple

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import completion_text, first_json_object

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
# Markers of the step a thought commits to, strongest first: "now" (a later step may recall what
# was done first), "first" (step 1 announces its order), then the words that move on to a
# following step ("deposit done, then transfer", "因为余额不足，所以无法转账").
_STEP_MARKERS = (
    re.compile(r"\b(?:now|next)\b|现在|接下来|下一步", re.IGNORECASE),
    re.compile(r"\bfirst(?:ly)?\b|首先|先", re.IGNORECASE),
    re.compile(r"\b(?:then|so|therefore)\b|然后|再|接着|所以|因此", re.IGNORECASE),
)
# Clauses end at punctuation and start at a word that moves on to a following step.
_CLAUSE_BREAK = re.compile(
    r"[,.;:!?\n，。；：！？、]|(?=\b(?:then|so|therefore)\b|然后|再|接着|所以|因此)", re.IGNORECASE
)
# A keyword right after a negation names what the thought will not do.
_NEGATION_BEFORE = re.compile(
    r"(?:不能|不可以|无法|没法|不|\b(?:cannot|can't|can not|won't|unable to|not|don't))\s*$",
    re.IGNORECASE,
)
# Phrases that contain a keyword but name no tool ("in order to" is not an order).
_NOT_A_TOOL = ("in order to",)


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


class _KeywordScanner(NamedTuple):
    pattern: re.Pattern[str]
    tools_by_keyword: dict[str, set[str]]


@cache
def _keyword_scanner(catalogue: Catalogue) -> _KeywordScanner:
    """One pattern over every tool's catalogue keywords (en and zh), longest first.

    Longest first makes overlapping keywords name the more specific tool: 股价 (get_quote)
    before 股 (place_order), "not enough" (respond) before "enough" (check_balance).
    """
    tools_by_keyword: dict[str, set[str]] = {phrase: set() for phrase in _NOT_A_TOOL}
    english: set[str] = set(_NOT_A_TOOL)
    for tool in catalogue.tools:
        for language in ("en", "zh"):
            for word in tool.keywords.texts(language):
                tools_by_keyword.setdefault(word.lower(), set()).add(tool.name)
                if language == "en":
                    english.add(word.lower())
    alternatives = [
        (r"\b" if word in english else "") + re.escape(word)
        for word in sorted(tools_by_keyword, key=len, reverse=True)
    ]
    return _KeywordScanner(re.compile("|".join(alternatives), re.IGNORECASE), tools_by_keyword)


def tool_keywords(catalogue: Catalogue) -> dict[str, frozenset[str]]:
    """Per tool, the keywords (lower-cased) whose occurrence names it (`_tools_named`)."""
    words: dict[str, set[str]] = {name: set() for name in catalogue.names}
    for word, tools in _keyword_scanner(catalogue).tools_by_keyword.items():
        for tool in tools:
            words[tool].add(word)
    return {tool: frozenset(found) for tool, found in words.items()}


@cache
def _tool_names(catalogue: Catalogue) -> frozenset[str]:
    return frozenset(catalogue.names)


def _action_tool(answer: object) -> str | None:
    action = answer.get("action") if isinstance(answer, dict) else None
    tool = action.get("tool") if isinstance(action, dict) else None
    return tool if isinstance(tool, str) else None


@lru_cache(maxsize=4096)  # a batch repeats each solution num_generations times
def _labelled_tool(solution: str) -> str | None:
    return _action_tool(first_json_object(solution))


def _expected_tool(solution: object) -> str | None:
    return _labelled_tool(solution) if isinstance(solution, str) else _action_tool(solution)


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
    action = parsed.get("action")
    action = action if isinstance(action, dict) else {}
    tool = action.get("tool")
    tool = tool if isinstance(tool, str) and tool in _tool_names(catalogue) else None

    if tool is None:
        tool_points = 0.0
    elif tool == _expected_tool(solution):
        tool_points = weights.tool
    else:
        tool_points = weights.valid_wrong_tool

    params = action.get("params")
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


def _tools_named(text: str, catalogue: Catalogue) -> set[str]:
    """Tools whose keywords occur in `text`, except negated ones ("不能转账" names no transfer)."""
    scanner = _keyword_scanner(catalogue)
    return {
        tool
        for found in scanner.pattern.finditer(text)
        if not _NEGATION_BEFORE.search(text, max(0, found.start() - 12), found.start())
        for tool in scanner.tools_by_keyword[found.group().lower()]
    }


def _announced_tools(thought: str, catalogue: Catalogue) -> set[str]:
    """The tools the thought commits to now (see `thought_action_consistent`)."""
    clauses = _CLAUSE_BREAK.split(thought)
    for marker in _STEP_MARKERS:
        marked = next((i for i, clause in enumerate(clauses) if marker.search(clause)), None)
        if marked is None:
            continue
        # "First, check the balance": the step's tool may sit in the clause after the marker.
        for clause in clauses[marked:]:
            if named := _tools_named(clause, catalogue):
                return named
    return _tools_named(thought, catalogue)


def thought_action_consistent(completion: object, catalogue: Catalogue | None = None) -> bool:
    """Does the action carry out the step the thought announces (read with the keywords of
    `catalogue`, default the shipped one)? Unparseable → False.

    The rule: split the thought into clauses (at punctuation, and before "then"/然后/再/所以 …);
    the current step is the first clause marked "now"/"next"/现在/接下来, else "first"/先/首先,
    else "then"/"so"/然后/再/所以 (or, if that clause names no tool, the next one that does). A
    clause names the tools whose catalogue keywords (en/zh) occur in it, longest keyword first.
    Without a marker, every tool the thought names counts. Thought and action agree when the
    thought names no tool or names the action's tool. The case study's failure, "需要先查余额"
    (check the balance first) with action transfer_funds, announces check_balance: False.
    """
    parsed = first_json_object(completion_text(completion))
    if parsed is None:
        return False
    thought = parsed.get("thought")
    action = parsed.get("action")
    tool = action.get("tool") if isinstance(action, dict) else None
    if not (isinstance(thought, str) and thought.strip() and isinstance(tool, str)):
        return False
    catalogue = catalogue or default_catalogue()
    if tool not in _tool_names(catalogue):
        return False
    announced = _announced_tools(thought, catalogue)
    return not announced or tool in announced


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
            expected is not None and _action_tool(first_json_object(completion_text(c))) == expected
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
