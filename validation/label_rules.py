"""The label rules: each label against what its own row and scenario say.

A label can be wrong in a way its wording does not show, because the evidence is in its context:
the label's own thought and plan, the scenario's other steps, the figures a condition depends
on. Each rule reads the rows alone (no model); the data gate reports what they find as warnings
(an annotator decides) and the miner as `label inconsistency` findings. A rule that cannot read
what it needs (an unparseable solution, a figure that does not parse, a scenario whose other
rows are absent) stays silent.

The rules, by the name reports give them (`[check: name]`):

- `thought_announces_action`: the label's thought announces the tool its action calls (the
  rule `training.rewards.thought_action_consistent` applies to model output, applied to labels:
  the clause it commits with, "so I …", "now …", "I will …", 所以…). Where no marked clause
  names a tool, the keywords cannot tell a report from a commitment: the rule is silent when
  the thought commits in other words ("…, so I carry on") or names only steps its history
  shows done ("The reading is in, …").
- `plan_starts_with_action`: the first item of the label's plan names the action's tool, or no
  tool: a plan lists the steps still to do, this one first (read as a thought is).
- `step_matches_history`: a step's tool is the one the scenario's later prompts record as
  executed at that step (`Step k: <tool> → …`); the history is the execution log, not a label.
- `step_not_repeated`: a step does not redo the step its history shows was just executed: the
  same tool, with the same params when the scenario's row for that step is labelled with it
  (a second transfer with other params is a new step).
- `step_named_by_request`: the last step of a scenario without a condition does what the
  request still asks for: when the request's words (`common.wording`) name exactly one tool
  its history has not done yet, a last step whose tool the request does not name at all is
  suspect ("Transfer 40 rupees …, then show me what's left" labelled get_transactions), and so
  is one whose tool the request names no more often than the history has already done it
  ("Lock the patio door, then open the back door" with a second lock last). Not for
  conditional scenarios, whose checks (check_balance before an order) the request leaves
  unsaid, nor for replies.
- `branch_matches_figures`: a conditional step (`condition`, or a multi-step reply) acts when the
  figures its prompt states meet the request's condition and replies when they do not: the
  balance against the amount asked; the balance against quantity × the quoted price; the quoted
  price against a buy-below or sell-above limit ("below 237", "跌破 237", "比 237 便宜", "在 237
  之下"; not one named and then referred to, "my limit is 237: buy if the price is below it"); in a
  history with no balance or quote step (another catalogue), the latest step's reading against
  such a limit ("if the bedroom is below 19 degrees").
- `params_match_request`: the label's params take the values its request and its history's
  observations state: each param read as its JSON Schema says (`validation.stated_values`: a
  number among the amounts written within its bounds, a patterned string among the words its
  pattern matches, an enum member among the members named), and from/to params not reversed.
  Silent for a param whose value the text does not state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

from toolgrpo.common.wording import (
    announcement,
    request_names,
    thought_action_consistent,
)
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.completion import first_json_object, written_action
from toolgrpo.schemas.figures import AMOUNT, Amount, amount_of, amounts_in, described, number_text
from toolgrpo.schemas.problems import Problem
from toolgrpo.schemas.samples import (
    REPLY_TOOL,
    ExecutedStep,
    split_prompt,
)
from toolgrpo.validation.stated_values import params_contradictions

THOUGHT_ANNOUNCES_ACTION = "thought_announces_action"
PLAN_STARTS_WITH_ACTION = "plan_starts_with_action"
STEP_MATCHES_HISTORY = "step_matches_history"
STEP_NOT_REPEATED = "step_not_repeated"
STEP_NAMED_BY_REQUEST = "step_named_by_request"
BRANCH_MATCHES_FIGURES = "branch_matches_figures"
PARAMS_MATCH_REQUEST = "params_match_request"

# What a limit's neighbours say about the direction of a price condition.
_BELOW_BEFORE = re.compile(
    r"(?:\b(?:below|under|cheaper than|less than|lower than)|低于|跌破|不到)\s*$", re.IGNORECASE
)
_ABOVE_BEFORE = re.compile(
    r"(?:\b(?:above|over|beats?|more than|higher than|exceeds?)|高于|超过|涨过|冲上)\s*$",
    re.IGNORECASE,
)
_BELOW_AFTER = re.compile(r"^\s*(?:便宜|以下|之下|低)")
_ABOVE_AFTER = re.compile(r"^\s*(?:贵|以上|之上|高)")


# The columns `Label.of` reads from a row.
LABEL_COLUMNS = (
    "id",
    "file",
    "line",
    "scenario_id",
    "step",
    "tool",
    "branch",
    "prompt",
    "solution",
)


@dataclass(frozen=True)
class Label:
    """A row as the rules read it: where it is, its request and history, its parsed label."""

    id: str
    file: str
    line: int
    scenario_id: str
    step: int
    tool: str
    replies: bool | None  # a conditional step's branch: True replies, False acts, None: not one
    request: str
    history: dict[int, ExecutedStep]
    thought: str | None
    params: Any
    plan: list[Any]

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    def breaks(
        self, check: str, evidence: str, alternative: str | None = None
    ) -> LabelInconsistency:
        """This label's finding for `check`."""
        return LabelInconsistency(self.id, self.file, self.line, check, evidence, alternative)

    @classmethod
    def of(cls, row: dict[str, Any]) -> Label:
        request, history = split_prompt(row["prompt"])
        solution = first_json_object(row["solution"]) or {}
        thought, plan = solution.get("thought"), solution.get("plan")
        branch = row["branch"]
        return cls(
            id=row["id"],
            file=row["file"],
            line=row["line"],
            scenario_id=row["scenario_id"],
            step=row["step"],
            tool=row["tool"],
            replies=None if branch is None else branch == "condition_fails",
            request=request,
            history=history,
            thought=thought if isinstance(thought, str) and thought.strip() else None,
            params=written_action(solution).params,
            plan=plan if isinstance(plan, list) else [],
        )


@dataclass(frozen=True)
class LabelInconsistency:
    """A label its context contradicts: the row, the rule, the evidence, and the tool the
    context points at instead when it names one."""

    id: str
    file: str
    line: int
    check: str
    evidence: str
    alternative: str | None = None

    def problem(self) -> Problem:
        """As the data gate lists it: `file:line: id: evidence [check: rule]`."""
        return Problem(
            file=self.file,
            line=self.line,
            check=self.check,
            message=f"{self.id}: {self.evidence}",
            id=self.id,
        )


def consistent_thought(text: str, tool: str, catalogue: Catalogue) -> bool:
    """Whether `text`, read as a thought, announces `tool` or no tool."""
    answer = json.dumps({"thought": text, "action": {"tool": tool}})
    return thought_action_consistent(answer, catalogue)


def _against_action(
    check: str, part: str, text: str, label: Label, catalogue: Catalogue
) -> LabelInconsistency | None:
    if label.tool not in catalogue.names or consistent_thought(text, label.tool, catalogue):
        return None
    announced = announcement(text, catalogue)
    if not announced.tools or label.tool in announced.tools:
        return None  # a text too long or blank to read back as a thought announces nothing
    done = {step.tool for step in label.history.values()}
    if not announced.committed and (announced.marked or announced.tools <= done):
        # no marked clause names a tool: the text commits ("so I carry on") in words the
        # keywords miss, or names only steps done, which it may report ("the reading is in,
        # …"); the keywords cannot tell, so the rule stays silent
        return None
    tools = sorted(announced.tools, key=catalogue.names.index)
    return label.breaks(
        check,
        f"its {part} announces {' or '.join(tools)}, its action is {label.tool}: “{text}”",
        tools[0] if len(tools) == 1 else None,
    )


def thought_announces_action(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The label's thought announces the tool its action calls."""
    if label.thought is None:
        return None
    return _against_action(THOUGHT_ANNOUNCES_ACTION, "thought", label.thought, label, catalogue)


def plan_starts_with_action(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The first item of the label's plan names the action's tool, or no tool."""
    if not (label.plan and isinstance(label.plan[0], str)):
        return None
    first = label.plan[0]
    return _against_action(PLAN_STARTS_WITH_ACTION, "plan's first step", first, label, catalogue)


def step_matches_history(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """A step's tool is the one the scenario's later prompts record as executed at that step."""
    for step in sorted(s for s in scenario if s > label.step):
        later = scenario[step]
        recorded = later.history.get(label.step)
        if recorded is not None and recorded.tool != label.tool:
            return label.breaks(
                STEP_MATCHES_HISTORY,
                f"step {step} ({later.id}, {later.location}) records step {label.step} "
                f"as {recorded.tool} → {recorded.observation}; the label is {label.tool}",
                recorded.tool,
            )
    return None


def step_not_repeated(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """A step does not redo the step its history shows was just executed."""
    done = label.history.get(label.step - 1)
    if done is None or done.tool != label.tool:
        return None
    previous = scenario.get(label.step - 1)
    if previous is not None and previous.tool == done.tool:
        if previous.params != label.params:
            return None  # the same tool again with other params is a step of its own
        how = f"with the same params as {previous.id} ({previous.location})"
    else:
        how = "again"
    return label.breaks(
        STEP_NOT_REPEATED,
        f"calls {label.tool} {how}, though its history shows step {label.step - 1} "
        f"done: {done.tool} → {done.observation}",
    )


def step_named_by_request(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The last step of a scenario without a condition does what the request still asks for."""
    last = label.step == max(scenario) and label.step > 1
    conditional = any(step.replies is not None for step in scenario.values())
    if not last or conditional or label.tool == REPLY_TOOL:
        return None
    named = request_names(label.request, catalogue)
    done = [step.tool for step in label.history.values()]
    remaining = sorted(set(named) - set(done))
    if len(remaining) != 1:
        return None
    (asked,) = remaining
    if label.tool not in named:
        why = "which the request does not name"
    elif len(named[label.tool]) <= done.count(label.tool):
        # named as often as its history has done it: "lock the patio door, then open the back
        # door" asks for one lock, and step 1 did it
        why = "which the request names as often as its history has done it"
    else:
        return None
    words = ", ".join(f'"{word}"' for word in dict.fromkeys(named[asked]))
    return label.breaks(
        STEP_NAMED_BY_REQUEST,
        f"the request still asks for {asked} ({words}), which its history has not "
        f"done; the last step is labelled {label.tool}, {why}",
        asked,
    )


def _observed(history: dict[int, ExecutedStep], tools: Collection[str]) -> Observed | None:
    """The latest executed step of one of `tools`: its tool and what it reports, as written."""
    for step in sorted(history, reverse=True):
        if history[step].tool in tools:
            return Observed(history[step].tool, history[step].observation)
    return None


def _sole_amount(text: str | None) -> Amount | None:
    """The amount `text` states, when it states exactly one."""
    amounts = amounts_in(text) if text is not None else []
    return amounts[0] if len(amounts) == 1 else None


def _price_limit(request: str) -> tuple[Amount, bool] | None:
    """The request's price limit and whether the condition wants the price below it."""
    limits = []
    for match in AMOUNT.finditer(request):
        before, after = request[: match.start()], request[match.end() :]
        below = bool(_BELOW_BEFORE.search(before) or _BELOW_AFTER.search(after))
        above = bool(_ABOVE_BEFORE.search(before) or _ABOVE_AFTER.search(after))
        if below != above:
            limits.append((amount_of(match), below))
    return limits[0] if len(limits) == 1 else None


class Observed(NamedTuple):
    """What an executed step reported: its tool and its observation, as written."""

    tool: str
    text: str


class Verdict(NamedTuple):
    """Whether a prompt's figures meet its request's condition, why, and the two figures the
    condition compares (the budget and the amount or cost; the reading and the limit)."""

    holds: bool
    why: str
    compared: tuple[float, float]


def condition_verdict(
    request: str, history: dict[int, ExecutedStep], catalogue: Catalogue
) -> Verdict | None:
    """What the figures of a conditional step's prompt (its request and executed steps) say;
    None when the figures needed do not parse."""
    budget = _observed(history, catalogue.reporting("budget"))
    reading = _observed(history, catalogue.reporting("reading"))
    if budget is None and reading is None and history:
        latest = history[max(history)]
        reading = Observed(latest.tool, latest.observation)
    return figures_verdict(request, budget, reading)


def figures_verdict(
    request: str, budget_seen: Observed | None, reading_seen: Observed | None
) -> Verdict | None:
    """`condition_verdict` from the request and what the latest budget and reading steps
    report (the catalogue's `reports`; None: no such step). A catalogue that declares none has
    its latest step's observation read against a limit ("if the bedroom is below 19 degrees,
    …" after `read_sensor → bedroom 17.5 degrees`)."""
    budget = _sole_amount(budget_seen.text) if budget_seen else None
    reading = _sole_amount(reading_seen.text) if reading_seen else None
    asked = amounts_in(request)
    if budget is not None and budget_seen is not None and len(asked) == 1:
        the_budget = f"the {budget_seen.tool} budget {described(budget)}"
        if reading is not None and reading_seen is not None:
            cost = asked[0].value * reading.value
            holds = budget.value >= cost
            verb = "covers" if holds else "falls short of"
            why = f"{the_budget} {verb} {asked[0].text} × {reading.text} = {number_text(cost)}"
            return Verdict(holds, why, (budget.value, cost))
        holds = budget.value >= asked[0].value
        verb = "covers" if holds else "falls short of"
        return Verdict(
            holds, f"{the_budget} {verb} {described(asked[0])}", (budget.value, asked[0].value)
        )
    limit = _price_limit(request) if reading is not None and budget is None else None
    if limit is not None and reading is not None and reading_seen is not None:
        (amount, below), value = limit, reading.value
        holds = value < amount.value if below else value > amount.value
        side = "below" if value < amount.value else "above" if value > amount.value else "at"
        wanted = "below" if below else "above"
        why = (
            f"the {reading_seen.tool} reading {reading.text} is {side} the limit {amount.text} "
            f"(wanted {wanted})"
        )
        return Verdict(holds, why, (value, amount.value))
    return None


def branch_matches_figures(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """A conditional step acts when the figures its prompt states meet the request's condition,
    and replies when they do not."""
    if label.replies is None:
        return None
    verdict = condition_verdict(label.request, label.history, catalogue)
    if verdict is None or verdict.holds != label.replies:
        return None
    holds, why, _ = verdict
    does = "replies" if label.replies else f"acts ({label.tool})"
    return label.breaks(
        BRANCH_MATCHES_FIGURES,
        f"{why}, yet the label {does}",
        None if holds else REPLY_TOOL,
    )


def params_match_request(
    label: Label, scenario: dict[int, Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The label's params take the values its request and history state."""
    observations = [step.observation for _, step in sorted(label.history.items())]
    found = params_contradictions(label.tool, label.params, label.request, observations, catalogue)
    return label.breaks(PARAMS_MATCH_REQUEST, "; ".join(found)) if found else None


RULES = (
    thought_announces_action,
    plan_starts_with_action,
    step_matches_history,
    step_not_repeated,
    step_named_by_request,
    branch_matches_figures,
    params_match_request,
)
