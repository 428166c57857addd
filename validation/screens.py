"""The label rules' screens: which rows a rule could flag, decided in polars over whole columns.

Each screen is a necessary condition of its rule's finding, so a row it rules out is one the
rule passes; where polars cannot read a row as Python does (below), the row goes to the rule.
What a screen must read in Python (which texts are amounts, which words name a tool or an enum
member) it reads once per distinct *shape* of a text — its digits zeroed — since no such reading
depends on the digits' values; polars then reads the values themselves.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import polars as pl

from toolgrpo.common.wording import FOLDED_ONTO_ASCII, request_names, tool_keywords
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.figures import AMOUNT, Amount, amounts_in
from toolgrpo.schemas.params_check import polars_compiles
from toolgrpo.schemas.samples import (
    MAX_SOLUTION_CHARS,
    PREVIOUS_STEP_LINE,
    PREVIOUS_STEPS_HEADER,
    REPLY_TOOL,
    has_previous_steps_section,
    solution_parts,
)
from toolgrpo.validation.label_rules import (
    RULES,
    Label,
    Observed,
    consistent_thought,
    figures_verdict,
    params_match_request,
)
from toolgrpo.validation.spread import Spread
from toolgrpo.validation.stated_values import (
    ASCII_WORD,
    FROM,
    TO,
    ParamReading,
    directions_before,
    is_change,
    param_readings,
    with_unit,
)

ROW = "_row"
# the solution's parts the screens read (`schemas.samples.solution_parts`): the data gate has
# parsed them already; other callers' rows are parsed here
PARTS_READ = ("thought", "action_params", "first_planned")
NEEDED = "_needed"  # a row some rule runs on, or a row of a scenario some scenario rule reads
_SCENARIO_RULES = ("step_matches_history", "step_not_repeated", "step_named_by_request")
# Python's JSON reader refuses digit runs over 4,300 and `first_json_object` reads 20,000
# characters; a solution within the contract's length is read by polars as by Python when it
# is one JSON object (else polars reads no thought, and the rule reads the row).
_POLARS_READABLE_CHARS = MAX_SOLUTION_CHARS
# A text this long re-encodes (`consistent_thought`) within `first_json_object`'s 20,000 characters
# even at 12 characters per escaped character; a longer one is never consistent.
_READ_BACK_CHARS = 1_200


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


def _rows_with(frame: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """The rows of `frame` whose values in `keys`' columns are a row of `keys` (a semi join),
    with no row hashed where `keys` has none: on clean data, most screens find nothing."""
    if keys.is_empty():
        return frame.clear()
    return frame.join(keys, on=keys.columns, how="semi")


def _prompt_part(field: str) -> pl.Expr:
    """The prompt's request (`field_0`) or history (`field_1`, null where it has none), as
    `split_prompt` cuts them. Each screen cuts them from the rows it reads, so they are not two
    columns of every row held through all the screens
    (docs/experiments/code-measurements.md#screens)."""
    return pl.col("prompt").str.splitn(PREVIOUS_STEPS_HEADER, 2).struct.field(field)


def _may_name_another_tool(text: pl.Expr, tool: str, catalogue: Catalogue) -> pl.Expr:
    """Whether `consistent_thought(text, tool)` could be False: `text` holds a keyword of a tool
    other than `tool` (`tool_keywords`), a letter Python folds onto ASCII, or is blank or too
    long to read back."""
    others = sorted(
        {word for name, words in tool_keywords(catalogue).items() if name != tool for word in words}
    )
    named = text.str.contains_any(others, ascii_case_insensitive=True) if others else pl.lit(False)
    return (
        named
        | text.str.contains(FOLDED_ONTO_ASCII)
        | (text.str.strip_chars(_python_whitespace()) == "")
        | (text.str.len_chars() > _READ_BACK_CHARS)
    )


def _contradicts(wording: str, tool: str, catalogue: Catalogue) -> bool:
    """Whether `wording`, read as a thought, contradicts `tool` (`consistent_thought`)."""
    return not consistent_thought(wording, tool, catalogue)


def _names(wording: str, catalogue: Catalogue) -> list[str]:
    """The tools `wording`, read as a request, names (`request_names`), sorted, each as often
    as it is named."""
    return sorted(tool for tool, words in request_names(wording, catalogue).items() for _ in words)


def _figures_hold(request: str, budget_seen: str | None, reading_seen: str | None) -> bool | None:
    """Whether the figures meet the request's condition (`figures_verdict`); None: unread."""
    budget, reading = (
        None if text is None else Observed("", text) for text in (budget_seen, reading_seen)
    )
    verdict = figures_verdict(request, budget, reading)
    return None if verdict is None else verdict.holds


def _inconsistent(frame: pl.DataFrame, text: str, catalogue: Catalogue, spread: Spread) -> pl.Expr:
    """Whether column `text`, read as a thought, could contradict the row's tool:
    `consistent_thought` judges the texts that may name another tool, each distinct
    (digit-zeroed text, tool) pair once (zeroing digits changes no keyword hit, folded letter,
    blankness or length: the pairs are scanned as such), and rows polars cannot read go to the
    rule."""
    tool = pl.col("tool")
    solution = pl.col("solution")
    # a character is at least a byte: only the long solutions have their characters counted
    # (polars evaluates both sides of an `&` on every row)
    long = frame.filter(solution.str.len_bytes() > _POLARS_READABLE_CHARS)
    too_long = long.filter(solution.str.len_chars() > _POLARS_READABLE_CHARS).get_column(ROW)
    # each wording once: zeroed over every row and made unique in one lazy pass, cheaper than
    # making the texts unique first (a two-column key) and zeroing those: far fewer wordings
    # than thoughts
    worded = frame.lazy().select(ROW, "tool", wording=_wording(pl.col(text), catalogue))
    known = pl.col("wording").is_not_null() & tool.is_in(list(catalogue.names))
    wordings = worded.filter(known).select("wording", "tool").unique().collect()
    by_tool = wordings.partition_by("tool", as_dict=True)
    judged = pl.concat(
        [wordings.head(0)]
        + [
            rows.filter(_may_name_another_tool(pl.col("wording"), name, catalogue))
            for (name,), rows in by_tool.items()
        ]
    )
    contradicts = spread.map(_contradicts, list(judged.iter_rows()), catalogue)
    judged = judged.filter(pl.Series(contradicts, dtype=pl.Boolean))
    found = frame.select(ROW).clear()
    if not judged.is_empty():  # the texts are zeroed again: on clean data, none contradicts
        found = worded.join(judged.lazy(), on=["wording", "tool"], how="semi").collect()
    read = pl.concat([too_long, found.get_column(ROW)])  # the rows the rule reads
    return pl.col(text).is_null() | pl.col(ROW).is_in(read.implode())


def _times(rows: pl.DataFrame, tools: str) -> pl.DataFrame:
    """Per row, how often its list column `tools` holds the row's tool (`<tools>_times`)."""
    listed = rows.select(ROW, "tool", pl.col(tools).fill_null([])).explode(tools)
    return listed.group_by(ROW).agg((pl.col(tools) == pl.col("tool")).sum().alias(f"{tools}_times"))


def _unnamed_last_steps(
    frame: pl.DataFrame, lines: pl.DataFrame, catalogue: Catalogue, spread: Spread
) -> pl.Expr:
    """Whether `step_named_by_request` could flag the row: a last step it reads whose tool its
    request does not name, or names no more often than its history has done it, while exactly
    one tool the request names is not in its history (`request_names`, each distinct
    digit-zeroed request judged once); rows whose history polars may read otherwise go to the
    rule."""
    step = pl.col("step")
    later = (
        frame.lazy()
        .select(ROW, "scenario_id", "step", "tool", "prompt")
        .filter((step > 1) & (pl.col("tool") != REPLY_TOOL))
    )
    # a scenario as the rule reads it: each step's first row; only the scenarios with a row the
    # rule reads (less CPU and memory than all of them)
    # lazily: the engine runs the unique and the group-by in one pass
    scenarios = (
        frame.lazy()
        .select("scenario_id", "step", "branch")
        .join(later.select("scenario_id"), on="scenario_id", how="semi", maintain_order="left")
        .unique(["scenario_id", "step"], keep="first")
        .group_by("scenario_id")
        .agg(last=step.max(), conditional=pl.col("branch").is_not_null().any())
    )
    rows = (
        later.join(scenarios, on="scenario_id")
        .filter((step == pl.col("last")) & ~pl.col("conditional"))
        .select(ROW, "tool", wording=_wording(_prompt_part("field_0"), catalogue))
        .collect()
    )
    requests = rows.select("wording").unique()
    named = spread.map(_names, list(requests.iter_rows()), catalogue)
    # gathered from a long table: a list column built from Python's lists costs more per list
    names = _long([[(tool,) for tool in tools] for tools in named], {"named": pl.String})
    names = names.group_by("text_id").agg("named")
    requests = requests.with_row_index("text_id").join(names, on="text_id", how="left")
    done = (
        lines.filter(pl.col("recorded_tool").is_not_null())
        .group_by(ROW)
        .agg(done=pl.col("recorded_tool"))
    )
    judged = rows.join(requests, on="wording").join(done, on=ROW, how="left")
    remaining = pl.col("named").list.set_difference(pl.col("done").fill_null([]))
    judged = judged.filter(remaining.list.len() == 1)
    unnamed = judged.join(_times(judged, "named"), on=ROW).join(_times(judged, "done"), on=ROW)
    unnamed = unnamed.filter(pl.col("named_times") <= pl.col("done_times"))
    unsure = rows.join(lines.filter("unsure"), on=ROW, how="semi")
    suspects = pl.concat([unnamed.select(ROW), unsure.select(ROW)])
    return pl.col(ROW).is_in(suspects.to_series().implode())


def _history_lines(frame: pl.DataFrame) -> pl.DataFrame:
    """Per row with a history, each step `split_prompt` reads from it (one row each):
    the step number, tool and observation, and `unsure` where the history has characters polars
    could read otherwise than Python."""
    return (
        frame.lazy()  # the engine splits the regexes over the cores, an eager call runs on one
        .filter(has_previous_steps_section())
        .select(ROW, "scenario_id", "tool", history=_prompt_part("field_1"))
        .select(
            ROW,
            "scenario_id",
            "tool",
            unsure=pl.col("history").str.contains(_unsure_history()),
            line=pl.col("history").str.extract_all(PREVIOUS_STEP_LINE),
        )
        .explode("line")
        # a line found is `Step <digits>: <tool> → <observation>`, and neither the digits nor
        # the tool (`\S+`) holds ": " or " → ": cut where they first stand, not matched again
        .with_columns(numbered=pl.col("line").str.splitn(": ", 2))
        .with_columns(
            recorded_step=pl.col("numbered").struct.field("field_0").str.slice(len("Step ")),
            recorded=pl.col("numbered").struct.field("field_1").str.splitn(" → ", 2),
        )
        .with_columns(
            recorded_step=pl.col("recorded_step").cast(pl.Int64, strict=False),
            recorded_tool=pl.col("recorded").struct.field("field_0"),
            observation=pl.col("recorded").struct.field("field_1"),
        )
        # a step number beyond Int64 is one Python reads and polars does not
        .with_columns(
            unsure=pl.col("unsure")
            | (pl.col("line").is_not_null() & pl.col("recorded_step").is_null())
        )
        .drop("line", "numbered", "recorded")  # copies of the history's text, read
        # a step number listed twice is its last line, as in `split_prompt`'s dict
        .filter(pl.struct(ROW, "recorded_step").is_last_distinct())
        .collect()
    )


def _history_screens(frame: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Per row, whether `step_matches_history` (any row of a scenario whose histories record a
    step with another tool than a row at that step is labelled with) and `step_not_repeated`
    (its history records its own tool) could flag it; rows with characters polars could read
    otherwise than Python go to both rules."""
    steps = ["scenario_id", "recorded_step"]
    recorded = lines.lazy().select(*steps, "recorded_tool")
    # the labels of the steps some history records (less CPU and memory than every step's), each
    # step's distinct labels once: a scenario id shared by many rows must not make the join
    # quadratic (docs/experiments/code-measurements.md#screens)
    labelled = (
        frame.lazy()
        .select("scenario_id", recorded_step="step", labelled_tool="tool")
        .join(recorded.select(steps), on=steps, how="semi")
        .unique()
    )
    contradicted = (
        recorded.join(labelled, on=steps)
        .filter(pl.col("labelled_tool") != pl.col("recorded_tool"))
        .collect()  # lazily: the unique and the join in one pass
    )
    unsure = lines.filter("unsure")
    scenarios = pl.concat([contradicted.select("scenario_id"), unsure.select("scenario_id")])
    repeated = pl.concat(
        [lines.filter(pl.col("recorded_tool") == pl.col("tool")).select(ROW), unsure.select(ROW)]
    )
    return frame.with_columns(
        step_matches_history=pl.col("scenario_id").is_in(scenarios.to_series().implode()),
        step_not_repeated=pl.col(ROW).is_in(repeated.to_series().implode()),
    )


def _latest_observation(lines: pl.DataFrame, tools: tuple[str, ...], name: str) -> pl.DataFrame:
    """Per row, what `_observed` reads: the observation of its history's latest step of one of
    `tools`, as column `name`."""
    return (
        lines.filter(pl.col("recorded_tool").is_in(tools))
        .group_by(ROW)
        .agg(pl.col("observation").sort_by("recorded_step").last().alias(name))
    )


# The digits of a figure polars reads as Python does: plain ASCII digits, this many at most
# before and after the point, convert to the same float in both (each correctly rounded); any
# other figure goes to `figures_verdict`.
_MAX_FIGURE_DIGITS = 15
_NON_ASCII_DIGIT = re.compile(r"(?![0-9])\d")
# Where a shape's amount is (`_figure_at`) and, for a request, its sole amount and price limit.
_AMOUNT_FIELDS = {"start": pl.Int64, "end": pl.Int64, "scale": pl.Float64}
_REQUEST_FIELDS = {
    "asked": pl.Int64,
    **{f"asked_{name}": dtype for name, dtype in _AMOUNT_FIELDS.items()},
    **{f"limit_{name}": dtype for name, dtype in _AMOUNT_FIELDS.items()},
    "below": pl.Boolean,
}


def _figure_at(match: re.Match[str]) -> tuple[int, int, float | None]:
    """Where an `AMOUNT` match's number (with its fraction) starts and ends, and its scale:
    `amount_of` reads the value as that text's float times the scale (None: a scale that does
    not read alone; the figure then goes to `figures_verdict`)."""
    end = match.end("fraction") if match["fraction"] else match.end("number")
    return match.start("number"), end, _scale(match["scale"] or "")


@cache
def _scale(written: str) -> float | None:
    """What `amount_of` multiplies a figure written with this scale by (None: no scale that
    reads alone)."""
    scaled = amounts_in(f"1{written}") if written else [Amount("1", 1.0)]
    return scaled[0].value if len(scaled) == 1 else None


def _sole_figure(shape: str) -> tuple[int | None, int | None, float | None]:
    """`_figure_at` of the one amount `shape` states, as `_sole_amount` reads an observation."""
    matches = list(AMOUNT.finditer(shape))
    return _figure_at(matches[0]) if len(matches) == 1 else (None, None, None)


def _request_figures(shape: str) -> tuple[Any, ...]:
    """What `figures_verdict` reads from a request of this shape (digits zeroed: which texts
    are amounts, and which is a price limit, never depends on the digits' values): how many
    amounts, the sole one's place, and the price limit's place and direction. The limit is
    found by asking `figures_verdict` itself: with amount i made non-zero and a reading of 0, it
    compares the reading with a non-zero limit only where amount i is the limit, and the
    condition holds only when it wants the price below."""
    matches = list(AMOUNT.finditer(shape))
    asked = _figure_at(matches[0]) if len(matches) == 1 else (None, None, None)
    limit: tuple[Any, ...] = (None, None, None, None)
    # every amount reads 0, each digit staying ASCII or not (the regexes tell them apart)
    zeros = _NON_ASCII_DIGIT.sub("\u0660", shape)
    for match in matches:
        first = match.start("number")
        one = "1" if zeros[first] == "0" else "\u0661"
        verdict = figures_verdict(
            f"{zeros[:first]}{one}{zeros[first + 1 :]}", None, Observed("", "0")
        )
        if verdict is not None and verdict.compared[1] != 0:
            limit = (*_figure_at(match), verdict.holds)
            break
    return len(matches), *asked, *limit


def _shapes(column: pl.Expr) -> pl.Expr:
    """`column` with its ASCII digits zeroed: texts of one shape have their amounts in the
    same places."""
    return column.str.replace_all("[1-9]", "0")


def _figure_values(text: str, place: str) -> pl.Expr:
    """The value `amount_of` reads from column `text` at the place `{place}_start`, …, or null
    where polars might read it otherwise than Python (not plain digits, too many)."""
    start = pl.col(f"{place}_start")
    digits = pl.col(text).str.slice(start, pl.col(f"{place}_end") - start).str.replace_all(",", "")
    most = _MAX_FIGURE_DIGITS
    plain = digits.str.contains(f"^[0-9]{{1,{most}}}(?:\\.[0-9]{{1,{most}}})?$")
    value = digits.cast(pl.Float64, strict=False) * pl.col(f"{place}_scale")
    return pl.when(plain).then(value)


def _with_shape_info(
    frame: pl.DataFrame,
    text: str,
    fields: dict[str, Any],
    read: Any,
    spread: Spread,
    prefix: str = "",
) -> pl.DataFrame:
    """`frame` with, per row, what `read` (in Python, by `spread`, each distinct shape of
    column `text` once) says of its shape, as columns `fields` (named with `prefix`)."""
    frame = frame.lazy().with_columns(shape=_shapes(pl.col(text))).collect()
    shapes = frame.select("shape").unique().drop_nulls()
    info = pl.DataFrame(
        spread.map(read, list(shapes.iter_rows())),
        schema={f"{prefix}{name}": dtype for name, dtype in fields.items()},
        orient="row",
    )
    shapes = pl.concat([shapes, info], how="horizontal")
    return frame.join(shapes, on="shape", how="left", maintain_order="left").drop("shape")


def _figures_holding(conditional: pl.DataFrame, spread: Spread) -> pl.DataFrame:
    """`conditional` (a request, the latest budget and reading seen) with `holds`:
    `figures_verdict(...).holds` (null: no verdict), read by polars from each text's shape
    (`_request_figures`, `_sole_figure`), and by `figures_verdict` where polars might read a
    figure otherwise."""
    frame = _with_shape_info(conditional, "request", _REQUEST_FIELDS, _request_figures, spread)
    for role, name in (("budget", "balance"), ("reading", "price")):
        frame = _with_shape_info(frame, role, _AMOUNT_FIELDS, _sole_figure, spread, f"{name}_")
    values = {
        place: _figure_values(text, place)
        for text, place in [
            ("request", "asked"),
            ("request", "limit"),
            ("budget", "balance"),
            ("reading", "price"),
        ]
    }
    frame = (
        frame.lazy()
        .with_columns(**{f"{place}_value": value for place, value in values.items()})
        .collect()
    )
    balance, price, asked, limit = (
        pl.col(f"{place}_value") for place in ("balance", "price", "asked", "limit")
    )
    has_balance, has_price = (
        pl.col("balance_start").is_not_null(),
        pl.col("price_start").is_not_null(),
    )
    one_asked = pl.col("asked") == 1
    has_limit = pl.col("limit_start").is_not_null()
    holds = (
        pl.when(has_balance & has_price & one_asked)
        .then(balance >= asked * price)
        .when(has_balance & ~has_price & one_asked)
        .then(balance >= asked)
        .when(has_price & ~has_balance & has_limit)
        .then(pl.when(pl.col("below")).then(price < limit).otherwise(price > limit))
    )
    # every figure the case reads is one polars read
    read = (
        pl.when(has_balance & one_asked)
        .then(balance.is_not_null() & asked.is_not_null() & (price.is_not_null() | ~has_price))
        .when(has_price & ~has_balance & has_limit)
        .then(price.is_not_null() & limit.is_not_null())
        .otherwise(True)
    )
    frame = frame.with_columns(holds=holds, read=read)
    figures = ["request", "budget", "reading"]
    unread = frame.filter(~pl.col("read")).select(figures).unique()
    answers = spread.map(_figures_hold, list(unread.iter_rows()))
    unread = unread.with_columns(python=pl.Series(answers, dtype=pl.Boolean))
    frame = frame.join(unread, on=figures, how="left", nulls_equal=True, maintain_order="left")
    return frame.with_columns(
        holds=pl.when(pl.col("read")).then(pl.col("holds")).otherwise(pl.col("python"))
    )


def _contradicted_branches(
    frame: pl.DataFrame, lines: pl.DataFrame, catalogue: Catalogue, spread: Spread
) -> pl.Expr:
    """Whether `branch_matches_figures` could flag the row: a conditional step whose figures
    (`figures_verdict` of its request and latest budget and reading — without either, the latest
    step's observation as the reading — read in polars by `_figures_holding`) point at the branch
    it does not take, or whose history polars may read otherwise."""
    conditional = frame.filter(pl.col("branch").is_not_null()).select(
        ROW, "branch", request=_prompt_part("field_0")
    )
    for role in ("budget", "reading"):
        observed = _latest_observation(lines, catalogue.reporting(role), role)
        conditional = conditional.join(observed, on=ROW, how="left")
    latest = lines.group_by(ROW).agg(latest=pl.col("observation").sort_by("recorded_step").last())
    neither = pl.col("budget").is_null() & pl.col("reading").is_null()
    conditional = (
        conditional.join(latest, on=ROW, how="left")
        .with_columns(reading=pl.when(neither).then(pl.col("latest")).otherwise("reading"))
        .drop("latest")
    )
    judged = _figures_holding(conditional, spread)
    replies = pl.col("branch") == "condition_fails"
    suspects = pl.concat(
        [
            judged.filter(pl.col("holds") == replies).select(ROW),
            lines.filter("unsure").select(ROW),
        ]
    )
    return pl.col("branch").is_not_null() & pl.col(ROW).is_in(suspects.to_series().implode())


def _params_flagged(prompt: str, solution: str, tool: str, catalogue: Catalogue) -> bool:
    """Whether `params_match_request` flags a row of this prompt, solution and tool."""
    fixed = {"id": "", "file": "", "line": 0, "scenario_id": "", "step": 1, "branch": None}
    row = fixed | {"prompt": prompt, "solution": solution, "tool": tool}
    return params_match_request(Label.of(row), {}, catalogue) is not None


# What `stated_values` reads from a request's text, as polars columns: where its ASCII words
# stand, a number param's amounts, an enum param's members named (with their directions).
# (a row per word, amount or member, built by polars from the tuples: faster than lists of structs)
_WORDS = {"start": pl.Int64, "end": pl.Int64}
_DIRECTIONS = {FROM: pl.Boolean, TO: pl.Boolean}
_AMOUNTS = {"start": pl.Int64, "end": pl.Int64, "scale": pl.Float64}
_MEMBERS = {"member": pl.String, FROM: pl.Boolean, TO: pl.Boolean}
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name a JSON path reads as written
_TOKEN_VALUE = r"^[A-Za-z0-9_]{1,64}$"  # a value `_occurrences` finds only as a whole word
# The `ASCII_WORD`s with no word character (`\w`: `_occurrences`'s `\b`) on either side
_WHOLE_ASCII_WORD = re.compile(rf"(?<!\w){ASCII_WORD.pattern}(?!\w)")
_WORD_CHARACTER = r"^[A-Za-z0-9_]$"  # one of `ASCII_WORD`'s characters
_REPEAT_COUNT = re.compile(r"(?<=[^(|\\])\{[0-9]+(?:,[0-9]*)?\}")  # `{3}`, `{0,3}`, `{2,}`


def _directions(text: str, start: int) -> tuple[bool, bool]:
    """Whether the words before `start` mark what stands there as where something goes from,
    and to (`stated_values.directions_before`, as the rule reads them)."""
    given = directions_before(text, start)
    return FROM in given, TO in given


def _reads_digits(pattern: str) -> bool:
    """Whether regex `pattern` may match a text otherwise once its ASCII digits are zeroed: it
    writes a digit other than in a repeat count (`{0,3}`; a brace after `(`, `|`, a backslash or
    at the start is read as written). `\\d`, `\\w`, `\\b` treat all ASCII digits alike."""
    return any(c in "0123456789" for c in _REPEAT_COUNT.sub("", pattern))


def _request_reads(
    text: str, readings: tuple[ParamReading, ...], words: bool
) -> tuple[list[Any], ...]:
    """What the params rule reads from a request (or its shape: which texts are amounts, words
    or members never depends on the digits' values): if `words`, where each ASCII word `\b`
    finds whole stands; then per number param its amounts (`_figure_at`) that are not a change
    and carry a unit if it has units, per enum param the members named with their directions."""
    tokens = [match.span() for match in _WHOLE_ASCII_WORD.finditer(text)] if words else []
    reads: list[list[tuple[Any, ...]]] = [tokens]
    amounts = (
        [m for m in AMOUNT.finditer(text) if not is_change(text, m.start(), m.end())]
        if any(r.kind == "number" for r in readings)
        else []
    )
    for reading in readings:
        if reading.kind == "number":
            reads.append(
                [
                    _figure_at(m)
                    for m in amounts
                    if reading.units is None or with_unit(text, m.start(), m.end(), reading.units)
                ]
            )
        elif reading.kind == "enum":
            members = []
            for member, pattern in reading.members:
                if reading.role is None:  # named or not; no direction read
                    if pattern.search(text):
                        members.append((member, False, False))
                    continue
                marks = [_directions(text, m.start()) for m in pattern.finditer(text)]
                if marks:
                    members.append((member, any(m[0] for m in marks), any(m[1] for m in marks)))
            reads.append(members)
    return tuple(reads)


def _long(reads: list[list[tuple[Any, ...]]], schema: dict[str, Any]) -> pl.DataFrame:
    """Each text's items (`reads[i]`: tuples of `schema`'s fields) as rows keyed by `text_id`
    (i): a table polars joins, built from the rows by polars."""
    ids = pl.Series("text_id", [i for i, items in enumerate(reads) for _ in items], pl.UInt32)
    items = [item for items in reads for item in items]
    return pl.DataFrame(items, schema=schema, orient="row").insert_column(0, ids)


def _stated_otherwise(
    rows: pl.DataFrame, readings: tuple[ParamReading, ...], spread: Spread
) -> pl.DataFrame:
    """The rows (one tool's: `_row`, `request`, `solution`) whose params `params_match_request`
    could find contradicted, read in polars: a param whose value the request states otherwise
    (a number among its amounts in bounds, a word its pattern matches, an enum member named),
    or a from/to param whose value the request marks with the other direction; rows polars may
    read otherwise go to the rule."""
    if any(r.kind == "pattern" and not polars_compiles(r.pattern.pattern) for r in readings) or any(
        not _PARAM_NAME.fullmatch(r.name) for r in readings
    ):
        return rows.select(ROW)
    # the members' and units' words: with no digit, a request reads as its shape
    said = [p.pattern for r in readings for _, p in r.members]
    said += [r.units.pattern for r in readings if r.units is not None]
    digits_matter = any(_reads_digits(pattern) for pattern in said)
    text = pl.col("request") if digits_matter else _shapes(pl.col("request"))
    kept = [r for r in readings if r.kind in ("number", "enum")]
    # where a from/to param's value stands is read from the request's words
    words = any(r.role is not None and r.kind != "enum" for r in readings)
    rows = rows.with_columns(
        text=text if kept or words else pl.lit(None, pl.String)  # else no text is read
    ).hstack(_param_values(rows.get_column("action_params"), readings).get_columns())
    texts = rows.select("text").unique() if kept or words else rows.select("text").head(0)
    reads = spread.map(_request_reads, list(texts.iter_rows()), tuple(kept), words)
    texts = texts.with_row_index("text_id")
    rows = rows.join(texts, on="text", how="left").drop("text", "action_params")
    tables = {"words": _long([read[0] for read in reads], _WORDS)}
    for i, r in enumerate(kept, start=1):
        schema = _AMOUNTS if r.kind == "number" else _MEMBERS
        tables[r.name] = _long([read[i] for read in reads], schema)
    suspects: list[pl.DataFrame] = []
    for r in readings:
        value = pl.col(f"value_{r.name}")
        # a value polars does not read where the solution names the param: the rule reads it
        # (the solutions searched only where no value was read: few rows)
        unread = pl.col("solution").str.contains(f'"{r.name}"', literal=True)
        suspects.append(rows.filter(value.is_null()).filter(unread).select(ROW))
        if r.kind == "pattern":
            suspects.append(_words_otherwise(rows, r, value))
        elif r.kind == "enum":
            named = rows.select(ROW, "text_id", given=value).join(tables[r.name], on="text_id")
            stated = named.group_by(ROW).agg((pl.col("member") == pl.col("given")).any())
            suspects.append(stated.filter(~pl.col("member").fill_null(False)).select(ROW))
        elif r.kind == "number":
            suspects.append(_amounts_otherwise(rows, r, value, tables[r.name]))
    role_readings = [r for r in readings if r.role is not None]
    suspects.append(_reversed_candidates(rows, role_readings, tables, texts, spread))
    return pl.concat(suspects).unique()


def _param_values(params: pl.Series, readings: tuple[ParamReading, ...]) -> pl.DataFrame:
    """Each reading's value in `params` (JSON objects, each key written once:
    `solution_parts`) as text, `value_<name>` (null: none), each object decoded once rather
    than matched by a JSON path per param (a pass over the column each). A number comes out as
    the decoder writes it (`1000.0` as `1000`, the same float): the rule reads a number as a
    float, and words, members and directions in strings alone. A value that is an array or an object
    fails the decoding: then each param is matched by path."""
    try:
        decoded = params.str.json_decode(pl.Struct({r.name: pl.String for r in readings}))
    except pl.exceptions.ComputeError:
        paths = [params.str.json_path_match(f"$.{r.name}").alias(r.name) for r in readings]
        return pl.DataFrame(paths).select(pl.all().name.prefix("value_"))
    return decoded.struct.unnest().select(pl.all().name.prefix("value_"))


def _written_as_a_word(text: pl.Expr, value: pl.Expr) -> pl.Expr:
    """Whether `value` is one of `text`'s ASCII words (`ASCII_WORD`) where `text` first writes
    it: a word on its own, with no word character on either side (false where it is written
    otherwise first, though a later place may be a word). A literal search and the character on
    each side: no word of the text is cut out. Places count characters, as polars' `str.find`
    (polars >= 2.2) and `str.slice` do."""
    at = text.str.find(value, literal=True).cast(pl.Int64)
    before = pl.when(at > 0).then(text.str.slice(at - 1, 1)).otherwise(pl.lit(""))
    after = text.str.slice(at + value.str.len_chars(), 1)
    return (
        value.str.contains(_TOKEN_VALUE)
        & at.is_not_null()
        & ~before.str.contains(_WORD_CHARACTER)
        & ~after.str.contains(_WORD_CHARACTER)
    )


def _words_otherwise(rows: pl.DataFrame, reading: ParamReading, value: pl.Expr) -> pl.DataFrame:
    """Rows whose patterned param is none of the request's words its pattern matches, while some
    word matches (`stated_words`). A value that is itself such a word of the request is stated:
    most are found as written on their own (`_written_as_a_word`), and only the other rows have
    their words cut out and matched."""
    pattern = reading.pattern.pattern
    found = _written_as_a_word(pl.col("request"), value) & value.str.contains(pattern)
    # a lazy column, not a filter's predicate: polars then searches each request once, not at
    # each use of the place found
    unfound = rows.lazy().with_columns(_found=found.fill_null(False)).filter(~pl.col("_found"))
    rows = unfound.drop("_found").collect()
    words = pl.col("request").str.extract_all(ASCII_WORD.pattern)
    stated = rows.filter(~(words.list.contains(value) & value.str.contains(pattern)))
    matched = words.list.eval(pl.element().filter(pl.element().str.contains(pattern)))
    return stated.filter((matched.list.len() > 0) & ~matched.list.contains(value)).select(ROW)


def _amounts_otherwise(
    rows: pl.DataFrame, reading: ParamReading, value: pl.Expr, amounts: pl.DataFrame
) -> pl.DataFrame:
    """Rows whose number param is none of the amounts (`amounts`: per request text) its request
    states within its bounds, or with an amount polars may read otherwise than Python."""
    spans = (
        rows.lazy()
        .select(ROW, "request", "text_id", given=value.cast(pl.Float64, strict=False))
        .join(amounts.lazy().rename({k: f"amount_{k}" for k in _AMOUNTS}), on="text_id")
    )
    spans = spans.select(ROW, "given", amount=_figure_values("request", "amount"))
    amount, given = pl.col("amount"), pl.col("given")
    low, high = pl.lit(reading.low), pl.lit(reading.high)
    in_bounds = (amount >= low if reading.low_inclusive else amount > low) & (
        amount <= high if reading.high_inclusive else amount < high
    )
    if reading.integer:
        in_bounds = in_bounds & (amount == amount.floor())
    # `math.isclose`'s relative tolerance, a hair tighter: what polars calls close, Python does
    close = (amount - given).abs() <= 0.999e-9 * pl.max_horizontal(amount.abs(), given.abs())
    spans = spans.select(
        ROW,
        unread=amount.is_null(),
        stated=in_bounds.fill_null(False),
        matched=(in_bounds & close).fill_null(False),
    )
    judged = spans.group_by(ROW).agg(pl.all().any())
    suspects = judged.filter(pl.col("unread") | (pl.col("stated") & ~pl.col("matched")))
    return suspects.select(ROW).collect()


def _reversed_candidates(
    rows: pl.DataFrame,
    readings: list[ParamReading],
    tables: dict[str, pl.DataFrame],
    texts: pl.DataFrame,
    spread: Spread,
) -> pl.DataFrame:
    """Rows `_reversed` could flag: a from/to param's value the request writes only after the
    other direction's word, while the other direction's param is written and not marked with its
    own. Where a direction has more than one param, any value marked with the other's word; and a
    value `_occurrences` may find where the request's words do not (not one ASCII word, of an
    enum's members none) goes to the rule."""
    marks = {}
    suspects = [rows.select(ROW).head(0)]
    for r in readings:
        value = pl.col(f"value_{r.name}")
        given = rows.select(ROW, "request", "text_id", value.alias("given"))
        if r.kind == "enum":
            members = [member for member, _ in r.members]
            suspects.append(rows.filter(value.is_not_null() & ~value.is_in(members)).select(ROW))
            found = given.join(tables[r.name], on="text_id")
            found = found.filter(pl.col("member") == pl.col("given"))
        else:
            odd = value.is_not_null() & ~value.str.contains(_TOKEN_VALUE)
            suspects.append(rows.filter(odd).select(ROW))
            length = pl.col("end") - pl.col("start")
            found = given.join(tables["words"], on="text_id")
            # the words of the value's length first: a number compared, not a text cut out
            found = found.filter(length == pl.col("given").str.len_chars())
            found = found.filter(
                pl.col("request").str.slice(pl.col("start"), length) == pl.col("given")
            )
            # the directions read before the words that are a value only (a request's other
            # words, most of them, are never asked), each (text, word) once
            at = found.select("text_id", "start").unique().join(texts, on="text_id")
            directions = spread.map(_directions, list(at.select("text", "start").iter_rows()))
            at = at.drop("text").hstack(pl.DataFrame(directions, schema=_DIRECTIONS, orient="row"))
            found = found.join(at, on=["text_id", "start"])
        marks[r.name] = found.group_by(ROW).agg(
            pl.col(FROM).any().alias(f"{r.name}_{FROM}"), pl.col(TO).any().alias(f"{r.name}_{TO}")
        )
    roles = {r.name: r.role for r in readings}
    for r in readings:
        other = TO if r.role == FROM else FROM
        partners = [name for name, role in roles.items() if role == other]
        own_mark, other_mark = pl.col(f"{r.name}_{r.role}"), pl.col(f"{r.name}_{other}")
        if len(partners) != 1 or sum(role == r.role for role in roles.values()) != 1:
            suspects.append(marks[r.name].filter(other_mark).select(ROW))  # the rule decides
            continue
        (partner,) = partners
        # written (found) and not marked with its own direction
        unmarked = marks[partner].filter(~pl.col(f"{partner}_{other}")).select(ROW)
        reversed_ = marks[r.name].filter(other_mark & ~own_mark).join(unmarked, on=ROW, how="semi")
        suspects.append(reversed_.select(ROW))
    return pl.concat(suspects)


def _contradicted_params(frame: pl.DataFrame, catalogue: Catalogue, spread: Spread) -> pl.Expr:
    """Whether `params_match_request` flags the row: the rows whose params polars finds the
    request stating otherwise (`_stated_otherwise`), each distinct (prompt, solution, tool)
    of them judged by the rule once (it reads nothing else)."""
    suspects = [pl.DataFrame(schema={ROW: frame.schema[ROW]})]
    narrow = frame.select(ROW, "tool", "prompt", "solution", "action_params")
    for tool, readings in param_readings(catalogue).items():
        checked = tuple(r for r in readings if r.kind is not None or r.role is not None)
        if not checked:
            continue
        # one tool's rows at a time: all tools' at once would be held throughout the screen
        of_tool = narrow.filter(pl.col("tool") == tool).select(
            ROW, "solution", "action_params", request=_prompt_part("field_0")
        )
        if of_tool.is_empty():
            continue
        # each distinct (request, solution) once: repeated rows cost what their texts cost
        pair = ["request", "solution"]
        pairs = of_tool.unique(subset=pair).drop(ROW).with_row_index(ROW)
        found = pairs.join(_stated_otherwise(pairs, checked, spread), on=ROW, how="semi")
        suspects.append(_rows_with(of_tool, found.select(pair)).select(ROW))
    keys = ["prompt", "solution", "tool"]
    candidates = _rows_with(frame.select(ROW, *keys), pl.concat(suspects))
    distinct = candidates.select(keys).unique()
    judged = spread.map(_params_flagged, list(distinct.iter_rows()), catalogue)
    flagged = pl.Series(judged, dtype=pl.Boolean)
    rows = _rows_with(candidates, distinct.filter(flagged)).get_column(ROW)
    return pl.col(ROW).is_in(rows.implode())


def screens(
    frame: pl.DataFrame, catalogue: Catalogue, spread: Spread | None = None
) -> pl.DataFrame:
    """`frame` with a column per rule (its name): whether the rule could flag the row (every
    row for a rule with no screen here), and `NEEDED`: whether the rules read the row at all;
    the texts the screens judge in Python judged by `spread`'s workers (default: in this
    process)."""
    spread = spread or Spread(1)
    if not set(PARTS_READ) <= set(frame.columns):  # all parsed here, none kept twice
        frame = solution_parts(frame.drop(PARTS_READ, strict=False))
    # the longest screen on a thread of its own: its polars runs while the others' Python reads
    # texts, and the other way round
    with ThreadPoolExecutor(1) as beside:
        params = beside.submit(_contradicted_params, frame, catalogue, spread)
        lines = _history_lines(frame)
        flags = {
            "thought_announces_action": _inconsistent(frame, "thought", catalogue, spread),
            "plan_starts_with_action": _inconsistent(frame, "first_planned", catalogue, spread),
            "step_named_by_request": _unnamed_last_steps(frame, lines, catalogue, spread),
            "branch_matches_figures": _contradicted_branches(frame, lines, catalogue, spread),
        }
        frame = _history_screens(frame, lines)
        flags["params_match_request"] = params.result()
    frame = frame.with_columns(**flags)
    rules = [rule.__name__ for rule in RULES]
    # a rule with no screen yet reads every row: a new rule needs none to be right
    unscreened = [rule for rule in rules if rule not in frame.columns]
    frame = frame.with_columns(pl.lit(True).alias(rule) for rule in unscreened)
    frame = frame.with_columns(pl.col(rules).fill_null(False))
    read = frame.filter(pl.any_horizontal(_SCENARIO_RULES)).get_column("scenario_id").unique()
    scenario_read = pl.col("scenario_id").is_in(read.implode())
    return frame.with_columns((pl.any_horizontal(rules) | scenario_read).alias(NEEDED))
