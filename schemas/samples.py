"""The sample-row contract as pandera (polars) models: one check per rule, named in reports.

Checks are polars expressions over whole columns, far cheaper than element-wise checks
(docs/experiments/code-measurements.md#sample-contract). JSON parsing dominates the cost, and the
polars backend has no parsers, so `parse_solution` reads each solution's parts once into columns and
`ParsedSample` checks those. `str.json_path_match` returns null for malformed JSON where
`str.json_decode` raises, so one bad row never hides the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pandera.polars as pa
import polars as pl
from pandera.polars import PolarsData

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import written_action
from toolgrpo.schemas.params_check import plainly_valid
from toolgrpo.schemas.plain_solutions import read_plainly
from toolgrpo.schemas.problems import shown
from toolgrpo.schemas.records import COLUMN_TYPES, OPTIONAL_COLUMNS

KINDS = ("single", "multi")
LANGS = ("en", "zh")
# A conditional step's branch: the condition the request sets for acting holds (act) or fails
# (reply with `respond` instead).
CONDITIONS = ("holds", "fails")
# The tool a step that acts on nothing uses: a reply to the user (a failed condition's step).
REPLY_TOOL = "respond"
# The `condition` column of rows that carry no condition labels (an optional column).
NO_CONDITION = pl.lit(None, dtype=pl.String).alias("condition")
MAX_PROMPT_CHARS = 4_000
# A completion of the longest preset (350 tokens) is ~1,500 characters; the shipped solutions are
# at most ~300. Longer text is a broken export, not a label, and would bloat every report.
MAX_SOLUTION_CHARS = 4_000
MAX_ID_CHARS = 200
# One executed step in a step-k prompt's history, after a blank line and `Previous steps:`.
PREVIOUS_STEPS_HEADER = "\n\nPrevious steps:\n"


def history_line_pattern(tool: str = r"\S+") -> str:
    """The regex of one `Step k: <tool> → <observation>` line of a prompt's history (groups
    `step`, `tool`, `observation`) for the tools `tool` matches (any, by default)."""
    return rf"(?m)^Step (?P<step>\d+): (?P<tool>{tool}) → (?P<observation>.*)$"


PREVIOUS_STEP_LINE = history_line_pattern()
HISTORY_LINE = re.compile(PREVIOUS_STEP_LINE)


def condition_branch(condition: pl.Expr, kind: pl.Expr, tool: pl.Expr) -> pl.Expr:
    """`condition_holds` / `condition_fails` for a conditional step, null for any other row.

    From the row's `condition` label; without one, a multi-step reply counts as the condition
    failing (the only branch a label alone shows). `is_condition_fails` is the same rule for one
    row (the training process's); a test keeps them equal.
    """
    replies = (kind == "multi") & (tool == REPLY_TOOL)
    return (
        pl.when(condition == "holds")
        .then(pl.lit("condition_holds"))
        .when((condition == "fails") | (condition.is_null() & replies))
        .then(pl.lit("condition_fails"))
        .otherwise(None)
    )


def is_condition_fails(kind: str, tool: str, condition: str | None = None) -> bool:
    """`condition_branch` is `condition_fails` for one row."""
    if condition is not None:
        return condition == "fails"
    return kind == "multi" and tool == REPLY_TOOL


def is_conditional(kind: str, tool: str, condition: str | None = None) -> bool:
    """`condition_branch` is not null for one row (either branch)."""
    return condition == "holds" or is_condition_fails(kind, tool, condition)


def _params_error(pair: dict[str, str | None], catalogue: Catalogue) -> str | None:
    tool, params = pair["action_tool"], pair["action_params"]
    if tool not in catalogue.names or params is None:
        return None  # unknown tools and non-object params fail their own checks
    return catalogue.params_error(tool, json.loads(params))


# decoded a slice at a time: one slice's Python objects alive at once, not every solution's
_SOLUTIONS_PER_SLICE = 100_000


_NOT_AN_OBJECT = (False, None, None, None, None, None)


def _parts_of(
    solution: str | None,
) -> tuple[bool, str | None, str | None, str | None, str | None, str | None]:
    """One solution's typed parts (`solution_parts`), read by orjson. Its compact JSON is the
    text polars' JSON functions write (key order kept, shortest round-trip floats, non-ASCII as
    is), and what is not JSON for it (NaN, a lone surrogate, text after the object) is not JSON
    for polars either. orjson builds plain dicts, lists and strings: `type(…) is` tells them."""
    try:
        value = orjson.loads(solution)  # type: ignore[arg-type]  # None: not JSON either
    except orjson.JSONDecodeError:
        return _NOT_AN_OBJECT
    if type(value) is not dict:
        return _NOT_AN_OBJECT
    thought, plan = value.get("thought"), value.get("plan")
    tool, params = written_action(value)
    steps = type(plan) is list and all(type(step) is str for step in plan)
    return (
        True,
        thought if type(thought) is str else None,
        tool,
        orjson.dumps(params).decode() if type(params) is dict else None,
        orjson.dumps(plan).decode() if steps else None,
        plan[0] if steps and plan else None,
    )


_PARTS_SCHEMA = {
    "solution_is_object": pl.Boolean,
    "thought": pl.String,
    "action_tool": pl.String,
    "action_params": pl.String,
    "plan": pl.String,
    "first_planned": pl.String,
}


def _solution_parts(solutions: pl.Series) -> pl.DataFrame:
    """Per solution of `solutions`, the typed parts `parse_solution` adds, decoded by orjson
    (not six JSON paths in polars, each decoding the whole text again; and exact about types,
    where paths unquote strings)."""
    parts = pl.DataFrame(
        [_parts_of(text) for text in solutions], schema=_PARTS_SCHEMA, orient="row"
    )
    return parts.insert_column(0, solutions.alias("solution"))


def _parts_in_slices(frame: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """`_solution_parts` of each distinct solution of `frame`: those of the plain shape read by
    polars at once (`read_plainly`), then the others decoded a slice at a time
    (`_SOLUTIONS_PER_SLICE`)."""
    # a frame's unique runs over the cores, a Series' on one
    distinct = frame.select("solution").unique(maintain_order=True).get_column("solution")
    plain, others = read_plainly(distinct)
    yield plain
    for start in range(0, others.len(), _SOLUTIONS_PER_SLICE):
        yield _solution_parts(others.slice(start, _SOLUTIONS_PER_SLICE))


def _parts_by_solution(frame: pl.DataFrame) -> pl.DataFrame:
    """`_solution_parts` of each distinct solution of `frame`."""
    return pl.concat(list(_parts_in_slices(frame)), how="vertical")


def _beside(frame: pl.DataFrame, table: pl.DataFrame, on: Sequence[str]) -> pl.DataFrame:
    """`frame` with `table`'s other columns (keyed by `on`; null where no key matches) looked up
    by the key columns alone, then set beside the frame's own (a join of the whole frame would
    copy every column of every row)."""
    keys = frame.select(on)
    found = keys.join(table, on=on, how="left", maintain_order="left")
    return frame.hstack(found.drop(on).get_columns())


def solution_parts(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its solution's typed parts as columns, each null unless it has its type:
    `solution_is_object`; `thought` and `action_tool` (strings); `action_params` (an object, as
    compact JSON); `plan` (a list of strings, as compact JSON) and `first_planned` (its first
    step). Each distinct solution is parsed once."""
    return _beside(frame, _parts_by_solution(frame), ["solution"])


def parse_solution(frame: pl.DataFrame, catalogue: Catalogue | None = None) -> pl.DataFrame:
    """`frame` with the solution's typed parts (`solution_parts`) and what `catalogue` (default:
    the shipped one) says of the row's tools: `params_error` (why the params do not fit the
    tool's JSON Schema); `tool_known` (`tool` is a catalogue tool)."""
    catalogue = catalogue or default_catalogue()
    # each slice's params judged in polars on another core while this one decodes the next
    with ThreadPoolExecutor(1) as beside:
        judged = [
            beside.submit(_with_params_error, parts, catalogue) for parts in _parts_in_slices(frame)
        ]
        parts = pl.concat([future.result() for future in judged], how="vertical")
    parts = _beside(frame, parts, ["solution"])
    return parts.with_columns(tool_known=pl.col("tool").is_in(catalogue.names))


def _with_params_error(parts: pl.DataFrame, catalogue: Catalogue) -> pl.DataFrame:
    """`parts` with `params_error`. Many solutions share an action: each distinct (tool,
    params) pair is judged once, in polars where the params are plainly valid
    (`params_check`), else by fastjsonschema."""
    actions = parts.select("action_tool", "action_params").unique()
    proven = plainly_valid(actions, catalogue)
    judged = actions.filter(~proven).with_columns(
        params_error=pl.struct("action_tool", "action_params").map_elements(
            lambda pair: _params_error(pair, catalogue), return_dtype=pl.String
        )
    )
    failing = judged.filter(pl.col("params_error").is_not_null())
    return _beside(parts, failing, ["action_tool", "action_params"])


def previous_steps_listed() -> pl.Expr:
    """How many `Step i: tool → observation` lines the prompt lists."""
    return pl.col("prompt").str.count_matches(PREVIOUS_STEP_LINE)


def has_previous_steps_section() -> pl.Expr:
    return pl.col("prompt").str.contains(PREVIOUS_STEPS_HEADER, literal=True)


def normalised_prompt() -> pl.Expr:
    """The prompt lower-cased with runs of whitespace collapsed: equal for trivially equal rows.

    `normalise_prompt` is the same rule for one string (the generator's); a test keeps them equal.
    """
    # each run of whitespace becomes one space: runs of two or more, and single characters other
    # than the space (a lone space, the commonest run, is left as it is, which `\s+` would rewrite)
    collapsed = pl.col("prompt").str.to_lowercase().str.replace_all(r"\s{2,}|[^\S ]", " ")
    return collapsed.str.strip_chars()


def normalise_prompt(prompt: str) -> str:
    """`normalised_prompt` for one string."""
    return " ".join(prompt.lower().split())


class Sample(pa.DataFrameModel):
    """One labelled row: a request (with any executed steps) and the next action to take.

    Validate a collected DataFrame: on a LazyFrame pandera checks only names and dtypes.
    Extra columns (the loader's `file` and `line`) are allowed. `condition` is null on rows
    without one (the loader always provides the column).
    """

    # The columns are the record's (`records.SampleRecord`), declared there once; an optional one
    # may be null.
    __annotations__ = dict(COLUMN_TYPES)
    vars().update({name: pa.Field(nullable=True) for name in OPTIONAL_COLUMNS})

    @pa.dataframe_check
    def id_unique(cls, data: PolarsData) -> pl.LazyFrame:
        """No two rows, across all files validated together, share an id."""
        return data.lazyframe.select(pl.len().over("id") == 1)

    @pa.dataframe_check
    def kind_known(cls, data: PolarsData) -> pl.LazyFrame:
        """`kind` is "single" or "multi"."""
        return data.lazyframe.select(pl.col("kind").is_in(KINDS))

    @pa.dataframe_check
    def steps_match_kind(cls, data: PolarsData) -> pl.LazyFrame:
        """Single rows have step = n_steps = 1; multi rows n_steps >= 2 and 1 <= step <= n_steps."""
        step, n_steps, kind = pl.col("step"), pl.col("n_steps"), pl.col("kind")
        single = (kind == "single") & (step == 1) & (n_steps == 1)
        multi = (kind == "multi") & (n_steps >= 2) & step.is_between(1, n_steps)
        return data.lazyframe.select(single | multi | ~kind.is_in(KINDS))

    @pa.dataframe_check
    def lang_known(cls, data: PolarsData) -> pl.LazyFrame:
        """`lang` is "en" or "zh"."""
        return data.lazyframe.select(pl.col("lang").is_in(LANGS))

    @pa.dataframe_check
    def prompt_not_empty(cls, data: PolarsData) -> pl.LazyFrame:
        """The prompt has visible characters."""
        return data.lazyframe.select(pl.col("prompt").str.strip_chars().str.len_chars() > 0)

    @pa.dataframe_check
    def prompt_within_length(cls, data: PolarsData) -> pl.LazyFrame:
        """The prompt is at most 4,000 characters."""
        return data.lazyframe.select(pl.col("prompt").str.len_chars() <= MAX_PROMPT_CHARS)

    @pa.dataframe_check
    def solution_within_length(cls, data: PolarsData) -> pl.LazyFrame:
        """The solution is at most 4,000 characters."""
        return data.lazyframe.select(pl.col("solution").str.len_chars() <= MAX_SOLUTION_CHARS)

    @pa.dataframe_check
    def id_within_length(cls, data: PolarsData) -> pl.LazyFrame:
        """The id is at most 200 characters."""
        return data.lazyframe.select(pl.col("id").str.len_chars() <= MAX_ID_CHARS)

    @pa.dataframe_check
    def scenario_id_within_length(cls, data: PolarsData) -> pl.LazyFrame:
        """The scenario_id is at most 200 characters."""
        return data.lazyframe.select(pl.col("scenario_id").str.len_chars() <= MAX_ID_CHARS)

    @pa.dataframe_check
    def previous_steps_match_step(cls, data: PolarsData) -> pl.LazyFrame:
        """Step k's prompt lists exactly k-1 previous steps (`Step i: tool → observation`)."""
        step = pl.col("step")
        return data.lazyframe.select(
            (previous_steps_listed() == step - 1) & (has_previous_steps_section() == (step > 1))
        )

    @pa.dataframe_check
    def condition_known(cls, data: PolarsData) -> pl.LazyFrame:
        """`condition`, when given, is "holds" or "fails"."""
        condition = pl.col("condition")
        return data.lazyframe.select(condition.is_null() | condition.is_in(CONDITIONS))

    @pa.dataframe_check
    def condition_after_first_step(cls, data: PolarsData) -> pl.LazyFrame:
        """A condition is only set on a multi-step row after step 1 (it is read from a result)."""
        after_first = (pl.col("kind") == "multi") & (pl.col("step") > 1)
        return data.lazyframe.select(pl.col("condition").is_null() | after_first)

    @pa.dataframe_check
    def condition_matches_tool(cls, data: PolarsData) -> pl.LazyFrame:
        """A step whose condition fails replies (`respond`); one whose condition holds acts."""
        condition = pl.col("condition")
        replies = pl.col("tool") == REPLY_TOOL
        matches = (condition == "fails") == replies
        return data.lazyframe.select(~condition.is_in(CONDITIONS).fill_null(False) | matches)


def _not_an_object() -> pl.Expr:
    return ~pl.col("solution_is_object")


class ParsedSample(Sample):
    """A sample with its solution's typed parts (see `parse_solution`): the whole row contract."""

    solution_is_object: bool
    thought: str = pa.Field(nullable=True)
    action_tool: str = pa.Field(nullable=True)
    action_params: str = pa.Field(nullable=True)
    plan: str = pa.Field(nullable=True)
    params_error: str = pa.Field(nullable=True)
    tool_known: bool

    @pa.dataframe_check
    def tool_in_catalogue(cls, data: PolarsData) -> pl.LazyFrame:
        """`tool` names a tool of the catalogue (data/tools.json unless another is given)."""
        return data.lazyframe.select(pl.col("tool_known"))

    @pa.dataframe_check
    def solution_is_json_object(cls, data: PolarsData) -> pl.LazyFrame:
        """`solution` is a JSON object with nothing before or after it."""
        return data.lazyframe.select(pl.col("solution_is_object"))

    # The checks of the solution's parts pass on a solution that is not a JSON object: that row
    # fails `solution_is_json_object` alone, one problem line for one broken solution.

    @pa.dataframe_check
    def solution_has_thought(cls, data: PolarsData) -> pl.LazyFrame:
        """The solution's `thought` is a non-empty string."""
        visible = pl.col("thought").str.strip_chars().str.len_chars() > 0
        return data.lazyframe.select(visible.fill_null(False) | _not_an_object())

    @pa.dataframe_check
    def solution_has_action_tool(cls, data: PolarsData) -> pl.LazyFrame:
        """The solution's `action.tool` is a non-empty string."""
        named = (pl.col("action_tool").str.len_chars() > 0).fill_null(False)
        return data.lazyframe.select(named | _not_an_object())

    @pa.dataframe_check
    def solution_has_params_object(cls, data: PolarsData) -> pl.LazyFrame:
        """The solution's `action.params` is a JSON object."""
        return data.lazyframe.select(pl.col("action_params").is_not_null() | _not_an_object())

    @pa.dataframe_check
    def solution_plan_is_string_list(cls, data: PolarsData) -> pl.LazyFrame:
        """The solution's `plan` is a list of strings (possibly empty)."""
        return data.lazyframe.select(pl.col("plan").is_not_null() | _not_an_object())

    @pa.dataframe_check
    def tool_matches_solution(cls, data: PolarsData) -> pl.LazyFrame:
        """`tool` equals the solution's `action.tool` (when it has one)."""
        # A solution without an action tool fails `solution_has_action_tool` already.
        matches = pl.col("tool") == pl.col("action_tool")
        return data.lazyframe.select(matches | pl.col("action_tool").is_null())

    @pa.dataframe_check
    def params_match_schema(cls, data: PolarsData) -> pl.LazyFrame:
        """The action's params satisfy its tool's JSON Schema (required keys, types, enums...)."""
        return data.lazyframe.select(pl.col("params_error").is_null())


def check_rule(check: str) -> str:
    """The rule a check enforces, in words (the first line of its docstring)."""
    doc = getattr(getattr(ParsedSample, check, None), "__doc__", None) or check
    return doc.strip().splitlines()[0]


def check_names() -> list[str]:
    """Every row check of the contract, in the order pandera runs them."""
    return [check.name for check in ParsedSample.to_schema().checks]


def shown_column(column: str) -> pl.Expr:
    """A text column's values as `problems.shown` quotes them (cut, control characters escaped)."""
    return pl.col(column).map_elements(shown, return_dtype=pl.String)


def _length_detail(column: str, limit: int) -> pl.Expr:
    return pl.format(
        "{} has {} characters (at most {})", pl.lit(column), pl.col(column).str.len_chars(), limit
    )


# What was observed on a failing row, per check, values quoted through `shown`; evaluated on
# failing rows only.
FAILURE_DETAILS: dict[str, pl.Expr] = {
    "id_unique": pl.format('id "{}" is used by more than one row', shown_column("id")),
    "kind_known": pl.format('kind is "{}" (expected "single" or "multi")', shown_column("kind")),
    "steps_match_kind": pl.format(
        "{} row has step {} of n_steps {}", shown_column("kind"), pl.col("step"), pl.col("n_steps")
    ),
    "lang_known": pl.format('lang is "{}" (expected "en" or "zh")', shown_column("lang")),
    "tool_in_catalogue": pl.format('tool "{}" is not in the tool catalogue', shown_column("tool")),
    "prompt_not_empty": pl.lit("prompt is empty"),
    "prompt_within_length": _length_detail("prompt", MAX_PROMPT_CHARS),
    "solution_within_length": _length_detail("solution", MAX_SOLUTION_CHARS),
    "id_within_length": _length_detail("id", MAX_ID_CHARS),
    "scenario_id_within_length": _length_detail("scenario_id", MAX_ID_CHARS),
    "previous_steps_match_step": pl.when(has_previous_steps_section() == (pl.col("step") > 1))
    .then(
        pl.format(
            "step {} lists {} previous step(s) (expected {})",
            pl.col("step"),
            previous_steps_listed(),
            pl.col("step") - 1,
        )
    )
    .when(pl.col("step") > 1)
    .then(pl.format("step {} has no `Previous steps:` section", pl.col("step")))
    .otherwise(pl.lit("step 1 has a `Previous steps:` section (expected none)")),
    "condition_known": pl.format(
        'condition is "{}" (expected "holds", "fails" or none)', shown_column("condition")
    ),
    "condition_after_first_step": pl.format(
        "condition on a {} row at step {}", shown_column("kind"), pl.col("step")
    ),
    "condition_matches_tool": pl.format(
        'condition "{}" with tool "{}"', shown_column("condition"), shown_column("tool")
    ),
    "solution_is_json_object": pl.lit("solution is not a JSON object"),
    "solution_has_thought": pl.lit("solution has no non-empty string `thought`"),
    "solution_has_action_tool": pl.lit("solution has no non-empty string `action.tool`"),
    "solution_has_params_object": pl.lit("solution's `action.params` is not a JSON object"),
    "solution_plan_is_string_list": pl.lit("solution's `plan` is not a list of strings"),
    "tool_matches_solution": pl.format(
        'tool "{}" differs from the solution\'s action.tool "{}"',
        shown_column("tool"),
        shown_column("action_tool").fill_null("(none)"),
    ),
    "params_match_schema": pl.format(
        "{} params {}: {}",
        shown_column("action_tool"),
        shown_column("action_params"),
        shown_column("params_error"),
    ),
}


def request_text(prompt: str) -> str:
    """The user's request: the prompt without its `Previous steps:` history."""
    return prompt.split(PREVIOUS_STEPS_HEADER, 1)[0]


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
        for step, tool, observation in HISTORY_LINE.findall(history)
    }
    return request, steps


def sample_source(path: Path) -> str:
    """The slice name of a data file: its folder and stem, e.g. `eval/unseen_phrasing` (train/
    and eval/ both hold a single_step file)."""
    return f"{path.parent.name}/{path.stem}"
