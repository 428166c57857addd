"""Context checks on labels: each label against what its own row and scenario say.

A label can be wrong in a way its wording does not show, because the evidence is in its context:
the label's own thought and plan, the scenario's other steps, the figures a condition depends
on. Each rule reads the rows alone (no model); the data gate reports what they find as warnings
(an annotator decides) and the miner as `label inconsistency` findings. A rule that cannot read
what it needs (an unparseable solution, a figure that does not parse, a scenario whose other
rows are absent) stays silent.

The rules, by the name reports give them (`[check: name]`):

- `thought_announces_action`: the label's thought announces the tool its action calls (the
  rule `training.rewards.thought_action_consistent` applies to model output, applied to labels).
- `plan_starts_with_action`: the first item of the label's plan names the action's tool, or no
  tool: a plan lists the steps still to do, this one first.
- `step_matches_history`: a step's tool is the one the scenario's later prompts record as
  executed at that step (`Step k: <tool> → …`); the history is the execution log, not a label.
- `step_not_repeated`: a step does not redo the step its history shows was just executed: the
  same tool, with the same params when the scenario's row for that step is labelled with it
  (a second transfer with other params is a new step).
- `step_named_by_request`: the last step of a scenario without a condition does what the
  request still asks for: when the request's words (`validation.wording`) name exactly one tool
  its history has not done yet, a last step whose tool the request does not name at all is
  suspect ("Transfer 40 rupees …, then show me what's left" labelled get_transactions). Not for
  conditional scenarios, whose checks (check_balance before an order) the request leaves
  unsaid, nor for replies.
- `branch_matches_figures`: a conditional step (`condition`, or a multi-step reply) acts when the
  figures its prompt states meet the request's condition and replies when they do not: the
  balance against the amount asked; the balance against quantity × the quoted price; the quoted
  price against a buy-below or sell-above limit ("below 237", "跌破 237", "比 237 便宜").

`amounts_in` is the one parser of amounts as people write them (the catalogue's languages):
100,000 / 100k / 10万 / 13.5万 / 6 万 / 5000元 / 200块 / 50 rupees / $50 / 562.54. A currency
is not converted: a request and the balance it is compared with are in one currency.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

import polars as pl

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.schemas.problems import Problem
from toolgrpo.schemas.samples import MAX_SOLUTION_CHARS, PREVIOUS_STEPS_HEADER, condition_branch
from toolgrpo.training.rewards import thought_action_consistent, tool_keywords
from toolgrpo.validation.wording import (
    ACCOUNT,
    IDENTIFIER,
    keyword_hits,
    keyword_patterns,
    mask_identifiers,
)

THOUGHT_ANNOUNCES_ACTION = "thought_announces_action"
PLAN_STARTS_WITH_ACTION = "plan_starts_with_action"
STEP_MATCHES_HISTORY = "step_matches_history"
STEP_NOT_REPEATED = "step_not_repeated"
STEP_NAMED_BY_REQUEST = "step_named_by_request"
BRANCH_MATCHES_FIGURES = "branch_matches_figures"
REPLY_TOOL = "respond"

_SCALES = {"万": 10_000, "千": 1_000, "百": 100, "k": 1_000}
# Not after a letter or digit (the 437 of ACC437 is no amount); a CJK character may precede one.
AMOUNT = re.compile(
    r"(?<![A-Za-z0-9_.,])(?:[$¥₹]\s?)?(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?"
    r"(?:\s*(?P<scale>万|千|百|k(?![a-z])))?"
    r"(?:\s*(?:元|块|rupees?(?![a-z])|yuan(?![a-z])|dollars?(?![a-z])|rmb(?![a-z])))?",
    re.IGNORECASE,
)
_HISTORY_LINE = re.compile(r"^Step (\d+): (\S+) → (.*)$", re.MULTILINE)
_STEP_NUMBER = re.compile(r"^Step \d+:", re.MULTILINE)
# What a limit's neighbours say about the direction of a price condition.
_BELOW_BEFORE = re.compile(
    r"(?:\b(?:below|under|cheaper than|less than|lower than)|低于|跌破|不到)\s*$", re.IGNORECASE
)
_ABOVE_BEFORE = re.compile(
    r"(?:\b(?:above|over|beats?|more than|higher than|exceeds?)|高于|超过|涨过|冲上)\s*$",
    re.IGNORECASE,
)
_BELOW_AFTER = re.compile(r"^\s*(?:便宜|以下)")
_ABOVE_AFTER = re.compile(r"^\s*(?:贵|以上)")


@dataclass(frozen=True)
class Amount:
    """An amount as written and the number it means."""

    text: str
    value: float


def _amount(match: re.Match[str]) -> Amount:
    value = float(match["number"].replace(",", "") + (match["fraction"] or ""))
    scale = _SCALES[match["scale"].lower()] if match["scale"] else 1
    return Amount(match.group(0), value * scale)


def amounts_in(text: str) -> list[Amount]:
    """Every amount written in `text`, in order (`"转 10万 到 ACC042"` → one: 100,000)."""
    return [_amount(match) for match in AMOUNT.finditer(text)]


def figures_in(text: str) -> list[str]:
    """The accounts, upper-case identifiers (tickers) and amounts `text` states, as written, in
    order, the step numbers of its history left out: what an answer about it copies
    (`"转 10万 从 ACC042 到 ACC149"` → 10万, ACC042, ACC149; `"Step 2: get_quote → META 现价
    633.07"` → META, 633.07)."""
    text = _STEP_NUMBER.sub(lambda m: " " * len(m.group()), text)
    found = sorted(
        (m.start(), -m.end(), m.group())  # where two start together, the longer first
        for pattern in (ACCOUNT, AMOUNT, IDENTIFIER)
        for m in pattern.finditer(text)
        if pattern is not IDENTIFIER or len(m.group()) > 1  # "I" is no ticker
    )
    figures, end = [], 0
    for start, negative_end, figure in found:
        if start >= end:  # the ACC of ACC042 is part of the account
            figures.append(figure)
            end = -negative_end
    return figures


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def _described(amount: Amount) -> str:
    """`6 万 (60,000)`; an amount written as its number alone once."""
    number = _number(amount.value)
    return amount.text if amount.text == number else f"{amount.text} ({number})"


@dataclass(frozen=True)
class ExecutedStep:
    """One line of a prompt's `Previous steps:` history."""

    tool: str
    observation: str


def split_prompt(prompt: str) -> tuple[str, dict[int, ExecutedStep]]:
    """A prompt's request and its `Previous steps:` history, by step number."""
    request, _, history = prompt.partition(PREVIOUS_STEPS_HEADER)
    steps = {
        int(step): ExecutedStep(tool, observation)
        for step, tool, observation in _HISTORY_LINE.findall(history)
    }
    return request, steps


@dataclass(frozen=True)
class _Label:
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
    def of(cls, row: dict[str, Any]) -> _Label:
        request, history = split_prompt(row["prompt"])
        solution = first_json_object(row["solution"]) or {}
        action = solution.get("action") if isinstance(solution.get("action"), dict) else {}
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
            params=action.get("params"),
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


def _consistent(text: str, tool: str, catalogue: Catalogue) -> bool:
    """Whether `text`, read as a thought, announces `tool` or no tool."""
    answer = json.dumps({"thought": text, "action": {"tool": tool}})
    return thought_action_consistent(answer, catalogue)


def _announced(text: str, catalogue: Catalogue) -> list[str]:
    """The tools `text` announces, as `thought_action_consistent` reads a thought."""
    tools = [tool for tool in catalogue.names if _consistent(text, tool, catalogue)]
    return [] if len(tools) == len(catalogue.names) else tools


def _against_action(
    check: str, part: str, text: str, label: _Label, catalogue: Catalogue
) -> LabelInconsistency | None:
    if label.tool not in catalogue.names or _consistent(text, label.tool, catalogue):
        return None
    announced = _announced(text, catalogue)
    return label.breaks(
        check,
        f"its {part} announces {' or '.join(announced)}, its action is {label.tool}: “{text}”",
        announced[0] if len(announced) == 1 else None,
    )


def thought_announces_action(
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The label's thought announces the tool its action calls."""
    if label.thought is None:
        return None
    return _against_action(THOUGHT_ANNOUNCES_ACTION, "thought", label.thought, label, catalogue)


def plan_starts_with_action(
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The first item of the label's plan names the action's tool, or no tool."""
    if not (label.plan and isinstance(label.plan[0], str)):
        return None
    first = label.plan[0]
    return _against_action(PLAN_STARTS_WITH_ACTION, "plan's first step", first, label, catalogue)


def step_matches_history(
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
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
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
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


@cache
def _request_patterns(catalogue: Catalogue) -> dict[str, re.Pattern[str]]:
    return keyword_patterns(catalogue)


def _request_names(request: str, catalogue: Catalogue) -> dict[str, list[str]]:
    """Per tool, the words of `request` that name it (`validation.wording`)."""
    return keyword_hits(mask_identifiers(request), _request_patterns(catalogue))


def step_named_by_request(
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """The last step of a scenario without a condition does what the request still asks for."""
    last = label.step == max(scenario) and label.step > 1
    conditional = any(step.replies is not None for step in scenario.values())
    if not last or conditional or label.tool == REPLY_TOOL:
        return None
    named = _request_names(label.request, catalogue)
    remaining = sorted(set(named) - {done.tool for done in label.history.values()})
    if label.tool in named or len(remaining) != 1:
        return None
    (asked,) = remaining
    words = ", ".join(f'"{word}"' for word in dict.fromkeys(named[asked]))
    return label.breaks(
        STEP_NAMED_BY_REQUEST,
        f"the request still asks for {asked} ({words}), which its history has not "
        f"done; the last step is labelled {label.tool}, which the request does not name",
        asked,
    )


def _observed(history: dict[int, ExecutedStep], tool: str) -> str | None:
    """What the latest executed `tool` step reports (a balance, a price), as written."""
    for step in sorted(history, reverse=True):
        if history[step].tool == tool:
            return history[step].observation
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
            limits.append((_amount(match), below))
    return limits[0] if len(limits) == 1 else None


class Verdict(NamedTuple):
    """Whether a prompt's figures meet its request's condition, why, and the two figures the
    condition compares (the balance and the amount or cost; the quote and the limit)."""

    holds: bool
    why: str
    compared: tuple[float, float]


def condition_verdict(request: str, history: dict[int, ExecutedStep]) -> Verdict | None:
    """What the figures of a conditional step's prompt (its request and executed steps) say;
    None when the figures needed do not parse."""
    return figures_verdict(
        request, _observed(history, "check_balance"), _observed(history, "get_quote")
    )


def figures_verdict(
    request: str, balance_seen: str | None, quote_seen: str | None
) -> Verdict | None:
    """`condition_verdict` from the request and what the latest balance and quote steps
    report (None: no such step)."""
    balance, price = _sole_amount(balance_seen), _sole_amount(quote_seen)
    asked = amounts_in(request)
    if balance is not None and price is not None and len(asked) == 1:
        cost = asked[0].value * price.value
        holds = balance.value >= cost
        verb = "covers" if holds else "falls short of"
        why = (
            f"the balance {_described(balance)} {verb} {asked[0].text} × {price.text} = "
            f"{_number(cost)}"
        )
        return Verdict(holds, why, (balance.value, cost))
    if balance is not None and price is None and len(asked) == 1:
        holds = balance.value >= asked[0].value
        verb = "covers" if holds else "falls short of"
        why = f"the balance {_described(balance)} {verb} {_described(asked[0])}"
        return Verdict(holds, why, (balance.value, asked[0].value))
    limit = _price_limit(request) if price is not None and balance is None else None
    if limit is not None:
        (amount, below), value = limit, price.value
        holds = value < amount.value if below else value > amount.value
        side = "below" if value < amount.value else "above" if value > amount.value else "at"
        wanted = "below" if below else "above"
        why = f"the quote {price.text} is {side} the limit {amount.text} (wanted {wanted})"
        return Verdict(holds, why, (value, amount.value))
    return None


def branch_matches_figures(
    label: _Label, scenario: dict[int, _Label], catalogue: Catalogue
) -> LabelInconsistency | None:
    """A conditional step acts when the figures its prompt states meet the request's condition,
    and replies when they do not."""
    if label.replies is None:
        return None
    verdict = condition_verdict(label.request, label.history)
    if verdict is None or verdict.holds != label.replies:
        return None
    holds, why, _ = verdict
    does = "replies" if label.replies else f"acts ({label.tool})"
    return label.breaks(
        BRANCH_MATCHES_FIGURES,
        f"{why}, yet the label {does}",
        None if holds else REPLY_TOOL,
    )


RULES = (
    thought_announces_action,
    plan_starts_with_action,
    step_matches_history,
    step_not_repeated,
    step_named_by_request,
    branch_matches_figures,
)


def label_inconsistencies(
    rows: pl.DataFrame, catalogue: Catalogue | None = None, screen: bool = True
) -> list[LabelInconsistency]:
    """What every rule finds in `rows` (the loader's frame: the data contract's columns with
    `file` and `line`), in row order, then rule order; tools and keywords are `catalogue`'s
    (default: the shipped one).

    The rules read rows in Python (~0.5 ms a row), so `screen` first rules out, in polars, the
    rows a rule is certain to pass (`_screens`) and runs each rule on the rest only, with their
    whole scenarios; `screen=False` runs every rule on every row (the reference the screens are
    tested and benchmarked against: the findings are the same).
    """
    if rows.is_empty():
        return []
    catalogue = catalogue or default_catalogue()
    frame = rows.with_row_index(_ROW).with_columns(
        branch=condition_branch(pl.col("condition"), pl.col("kind"), pl.col("tool"))
    )
    rules = [rule.__name__ for rule in RULES]
    if screen:
        frame = _screens(frame, catalogue).filter(_NEEDED)
    else:
        frame = frame.with_columns(pl.lit(True).alias(rule) for rule in rules)
    read = frame.select(*_LABEL_COLUMNS, pl.concat_list(rules).alias("suspects"))
    labels = [(_Label.of(row), row["suspects"]) for row in read.iter_rows(named=True)]
    scenarios: dict[str, dict[int, _Label]] = defaultdict(dict)
    for label, _ in labels:
        scenarios[label.scenario_id].setdefault(label.step, label)
    return [
        found
        for label, suspects in labels
        for rule, suspect in zip(RULES, suspects, strict=True)
        if suspect and (found := rule(label, scenarios[label.scenario_id], catalogue)) is not None
    ]


# --- the screens: which rows a rule could flag, decided in polars -----------------------------
#
# Each screen is a necessary condition of its rule's finding, so a row it rules out is one the
# rule passes; where polars cannot read a row as Python does (below), the row goes to the rule.

_ROW = "_row"
_LABEL_COLUMNS = (
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
_NEEDED = "_needed"  # a row some rule runs on, or a row of a scenario some scenario rule reads
_SCENARIO_RULES = ("step_matches_history", "step_not_repeated", "step_named_by_request")
# Python's JSON reader refuses digit runs over 4,300 and `first_json_object` reads 20,000
# characters; a solution within the contract's length is read by polars as by Python when it
# is one JSON object (else polars reads no thought, and the rule reads the row).
_POLARS_READABLE_CHARS = MAX_SOLUTION_CHARS
# A text this long re-encodes (`_consistent`) within `first_json_object`'s 20,000 characters
# even at 12 characters per escaped character; a longer one is never consistent.
_READ_BACK_CHARS = 1_200
# The only non-ASCII characters Python's IGNORECASE matches with ASCII letters (re docs).
_FOLDED_ONTO_ASCII = "[İıſK]"


@cache
def _python_whitespace() -> str:
    """The characters `str.strip` and the regex `\\s` of Python take for whitespace."""
    return "".join(c for c in map(chr, range(0x3001)) if c.isspace())  # none lies above U+3000


@cache
def _unsure_history() -> str:
    """History characters whose class (`\\s`, `\\d`) Python and polars could disagree on:
    any whitespace but the space and newline the lines are made of, any non-ASCII digit."""
    python = "".join(rf"\x{{{ord(c):x}}}" for c in _python_whitespace() if c not in " \n")
    return rf"[{python}[\s&&[^ \n]][\d&&[^0-9]]]"


@cache
def _digits_matter(catalogue: Catalogue) -> bool:
    """Whether a keyword has an ASCII digit; otherwise every pattern a text's wording is read
    with (keywords, markers, clause breaks, negations, `\\w`, `\\b`) treats all ASCII digits
    alike, and a text reads as the same text with its digits zeroed."""
    words = [
        w for tool in catalogue.tools for lang in ("en", "zh") for w in tool.keywords.texts(lang)
    ]
    return any(c in "0123456789" for word in words for c in word)


def _wording(text: pl.Expr, catalogue: Catalogue) -> pl.Expr:
    """`text` with its ASCII digits zeroed: amounts and account numbers share one reading."""
    return text if _digits_matter(catalogue) else text.str.replace_all("[1-9]", "0")


def _may_name_another_tool(text: pl.Expr, tool: pl.Expr, catalogue: Catalogue) -> pl.Expr:
    """Whether `_consistent(text, tool)` could be False: `text` holds a keyword of another tool
    (`tool_keywords`), a letter Python folds onto ASCII, or is blank or too long to read back."""
    others = [
        (tool != name) & text.str.contains_any(sorted(words), ascii_case_insensitive=True)
        for name, words in tool_keywords(catalogue).items()
        if words
    ]
    return (
        pl.any_horizontal(others)
        | text.str.contains(_FOLDED_ONTO_ASCII)
        | (text.str.strip_chars(_python_whitespace()) == "")
        | (text.str.len_chars() > _READ_BACK_CHARS)
    )


def _inconsistent(frame: pl.DataFrame, text: str, catalogue: Catalogue) -> pl.Expr:
    """Whether column `text`, read as a thought, could contradict the row's tool: `_consistent`
    judges the texts that may name another tool, each distinct (digit-zeroed text, tool) pair
    once (zeroing digits changes no keyword hit, folded letter, blankness or length), and rows
    polars cannot read go to the rule."""
    tool = pl.col("tool")
    solution = pl.col("solution")
    # a character is at least a byte: only a long solution needs its characters counted
    too_long = (solution.str.len_bytes() > _POLARS_READABLE_CHARS) & (
        solution.str.len_chars() > _POLARS_READABLE_CHARS
    )
    pairs = (
        frame.filter(pl.col(text).is_not_null() & tool.is_in(list(catalogue.names)))
        .select(text, "tool")
        .unique()
        .with_columns(wording=_wording(pl.col(text), catalogue))
        .filter(_may_name_another_tool(pl.col("wording"), tool, catalogue))
    )
    judged = pairs.select("wording", "tool").unique()
    judged = judged.filter(
        pl.Series(
            [not _consistent(w, t, catalogue) for w, t in judged.iter_rows()], dtype=pl.Boolean
        )
    )
    contradicted = pairs.join(judged, on=["wording", "tool"], how="semi").select(text, "tool")
    rows = frame.join(contradicted, on=[text, "tool"], how="semi").get_column(_ROW)
    return pl.col(text).is_null() | too_long | pl.col(_ROW).is_in(rows.implode())


def _unnamed_last_steps(frame: pl.DataFrame, lines: pl.DataFrame, catalogue: Catalogue) -> pl.Expr:
    """Whether `step_named_by_request` could flag the row: a last step it reads whose tool its
    request does not name while exactly one tool the request names is not in its history
    (`_request_names`, each distinct digit-zeroed request judged once); rows whose history
    polars may read otherwise go to the rule."""
    step = pl.col("step")
    # a scenario as the rule reads it: each step's first row
    scenarios = (
        frame.unique(["scenario_id", "step"], keep="first")
        .group_by("scenario_id")
        .agg(last=step.max(), conditional=pl.col("branch").is_not_null().any())
    )
    rows = (
        frame.filter((step > 1) & (pl.col("tool") != REPLY_TOOL))
        .join(scenarios, on="scenario_id")
        .filter((step == pl.col("last")) & ~pl.col("conditional"))
        .select(_ROW, "tool", wording=_wording(pl.col("request"), catalogue))
    )
    requests = rows.select("wording").unique()
    named = [sorted(_request_names(wording, catalogue)) for wording in requests["wording"]]
    requests = requests.with_columns(named=pl.Series(named, dtype=pl.List(pl.String)))
    done = (
        lines.filter(pl.col("recorded_tool").is_not_null())
        .group_by(_ROW)
        .agg(done=pl.col("recorded_tool"))
    )
    judged = rows.join(requests, on="wording").join(done, on=_ROW, how="left")
    remaining = pl.col("named").list.set_difference(pl.col("done").fill_null([]))
    unnamed = judged.filter(
        ~pl.col("named").list.contains(pl.col("tool")) & (remaining.list.len() == 1)
    )
    unsure = rows.join(lines.filter("unsure"), on=_ROW, how="semi")
    suspects = pl.concat([unnamed.select(_ROW), unsure.select(_ROW)])
    return pl.col(_ROW).is_in(suspects.to_series().implode())


def _history_lines(frame: pl.DataFrame) -> pl.DataFrame:
    """Per row with a history, each step `split_prompt` reads from it (one row each):
    the step number, tool and observation, and `unsure` where the history has characters polars
    could read otherwise than Python."""
    return (
        frame.filter(pl.col("history").is_not_null())
        .select(
            _ROW,
            "scenario_id",
            "tool",
            unsure=pl.col("history").str.contains(_unsure_history()),
            line=pl.col("history").str.extract_all(f"(?m){_HISTORY_LINE.pattern}"),
        )
        .explode("line")
        .with_columns(recorded=pl.col("line").str.extract_groups(_HISTORY_LINE.pattern))
        .with_columns(
            recorded_step=pl.col("recorded").struct.field("1").cast(pl.Int64, strict=False),
            recorded_tool=pl.col("recorded").struct.field("2"),
            observation=pl.col("recorded").struct.field("3"),
        )
        # a step number beyond Int64 is one Python reads and polars does not
        .with_columns(
            unsure=pl.col("unsure")
            | (pl.col("line").is_not_null() & pl.col("recorded_step").is_null())
        )
        # a step number listed twice is its last line, as in `split_prompt`'s dict
        .unique([_ROW, "recorded_step"], keep="last", maintain_order=True)
    )


def _history_screens(frame: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Per row, whether `step_matches_history` (any row of a scenario whose histories record a
    step with another tool than a row at that step is labelled with) and `step_not_repeated`
    (its history records its own tool) could flag it; rows with characters polars could read
    otherwise than Python go to both rules."""
    # each step's distinct labels once: a scenario id shared by many rows must not make the join
    # quadratic (1M rows repeating 1,277 rows' ids asked for >23 GB)
    labelled = frame.select("scenario_id", recorded_step="step", labelled_tool="tool").unique()
    contradicted = lines.join(labelled, on=["scenario_id", "recorded_step"]).filter(
        pl.col("labelled_tool") != pl.col("recorded_tool")
    )
    unsure = lines.filter("unsure")
    scenarios = pl.concat([contradicted.select("scenario_id"), unsure.select("scenario_id")])
    repeated = pl.concat(
        [lines.filter(pl.col("recorded_tool") == pl.col("tool")).select(_ROW), unsure.select(_ROW)]
    )
    return frame.with_columns(
        step_matches_history=pl.col("scenario_id").is_in(scenarios.to_series().implode()),
        step_not_repeated=pl.col(_ROW).is_in(repeated.to_series().implode()),
    )


def _latest_observation(lines: pl.DataFrame, tool: str) -> pl.DataFrame:
    """Per row, what `_observed` reads: the observation of its history's latest `tool` step."""
    return (
        lines.filter(pl.col("recorded_tool") == tool)
        .group_by(_ROW)
        .agg(pl.col("observation").sort_by("recorded_step").last().alias(tool))
    )


def _contradicted_branches(frame: pl.DataFrame, lines: pl.DataFrame) -> pl.Expr:
    """Whether `branch_matches_figures` could flag the row: a conditional step whose figures
    (`figures_verdict` of its request and latest balance and quote, each distinct triple judged
    once) point at the branch it does not take, or whose history polars may read otherwise."""
    figures = ("request", "check_balance", "get_quote")
    conditional = frame.filter(pl.col("branch").is_not_null()).select(_ROW, "request", "branch")
    for tool in figures[1:]:
        conditional = conditional.join(_latest_observation(lines, tool), on=_ROW, how="left")
    triples = conditional.select(figures).unique()
    verdicts = [figures_verdict(*triple) for triple in triples.iter_rows()]
    holds = pl.Series("holds", [v.holds if v else None for v in verdicts], dtype=pl.Boolean)
    judged = conditional.join(triples.with_columns(holds), on=figures, nulls_equal=True)
    replies = pl.col("branch") == "condition_fails"
    suspects = pl.concat(
        [
            judged.filter(pl.col("holds") == replies).select(_ROW),
            lines.filter("unsure").select(_ROW),
        ]
    )
    return pl.col("branch").is_not_null() & pl.col(_ROW).is_in(suspects.to_series().implode())


def _screens(frame: pl.DataFrame, catalogue: Catalogue) -> pl.DataFrame:
    """`frame` with a column per rule (its name): whether the rule could flag the row, and
    `_NEEDED`: whether the rules read the row at all."""
    parts = pl.col("prompt").str.splitn(PREVIOUS_STEPS_HEADER, 2).struct
    solution = pl.col("solution")
    # each distinct solution parsed once, as `schemas.samples.parse_solution` does
    solutions = (
        frame.select("solution")
        .unique()
        .with_columns(
            thought=solution.str.json_path_match("$.thought"),
            first_planned=solution.str.json_path_match("$.plan[0]"),
        )
    )
    frame = frame.with_columns(request=parts.field("field_0"), history=parts.field("field_1")).join(
        solutions, on="solution", how="left", maintain_order="left"
    )
    lines = _history_lines(frame)
    frame = _history_screens(frame, lines).with_columns(
        thought_announces_action=_inconsistent(frame, "thought", catalogue),
        plan_starts_with_action=_inconsistent(frame, "first_planned", catalogue),
        step_named_by_request=_unnamed_last_steps(frame, lines, catalogue),
        branch_matches_figures=_contradicted_branches(frame, lines),
    )
    rules = [rule.__name__ for rule in RULES]
    frame = frame.with_columns(pl.col(rules).fill_null(False))
    scenario_read = pl.any_horizontal(_SCENARIO_RULES).any().over("scenario_id")
    return frame.with_columns((pl.any_horizontal(rules) | scenario_read).alias(_NEEDED))
