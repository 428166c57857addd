"""The parts of plainly written solutions, read by polars over the whole column.

Decoding every distinct solution with orjson costs more Python, on one core, than regex passes
(docs/experiments/code-measurements.md#plain-solutions). Most solutions are written by a JSON
library in one plain shape: `{"thought": …, "action": {"tool": …, "params": {…}}, "plan": […]}`
with `json.dumps`'s separators or compact ones, strings without escapes, params a flat object of
plain values. Such a solution's parts are slices of its text: a regular expression cuts the
parts out, others tell whether each part has the plain shape, and polars writes the params and
the plan compactly by removing the separators' spaces. Every other solution (an escape, another
key order, a nested value, a number orjson would write otherwise, a key written twice) is left
to orjson, so the parts are the same either way.
"""

from __future__ import annotations

import polars as pl

# A string's text with nothing to unescape (JSON allows no raw control character in one).
_TEXT = r'[^"\\\x00-\x1f]*'
_STRING = f'"{_TEXT}"'
# Numbers orjson writes back exactly as written: integers within 15 digits; decimals within
# 15 significant digits, without trailing zeros, and not so small that it writes an exponent.
_INTEGER = r"(?:0|-?[1-9][0-9]{0,14})"
_DECIMAL = r"-?(?:[1-9][0-9]{0,7}\.(?:0|[0-9]{0,6}[1-9])|0\.0{0,4}[1-9](?:[0-9]{0,5}[1-9])?)"
_VALUE = f"(?:{_STRING}|{_INTEGER}|{_DECIMAL}|true|false|null)"
# A key of word characters: each key, and nothing else, is a quote, word characters, a quote and
# a colon, so polars counts them to find a key written twice.
_KEY = r'"[A-Za-z0-9_]+":'
_PAIR = f"{_KEY} ?{_VALUE}"
_STEPS = f"(?:{_STRING}(?:, ?{_STRING})*)?"
# The plain shape of each part `_PARTS` cuts out: the thought and tool strings have nothing to
# unescape, the params are plain pairs, the plan plain strings. A solution has the plain shape
# (`{"thought": STRING, "action": {"tool": STRING, "params": {PAIR, …}}, "plan": [STRING, …]}`)
# exactly when its parts do: the shape's separators are `_PARTS`'s, and `_PARTS` cuts a text one
# way only. Checking the parts costs less CPU than matching the whole shape.
_ESCAPED = r"[\\\x00-\x1f]"
_PLAIN_PARAMS = rf"^\{{(?:{_PAIR}(?:, ?{_PAIR})*)?\}}$"
_PLAIN_STEPS = f"^{_STEPS}$"
# The parts of a plain solution. Looser than the shape (any value without a quote, brace or
# space is taken for a number), so that each character leaves one way to go on: the regex engine
# then captures in one pass, faster than with the shape's own pattern.
_LOOSE_VALUE = r'(?:"[^"]*"|[^",} ]+)'
_LOOSE_PAIR = rf'"[^"]*": ?{_LOOSE_VALUE}'
_PARTS = (
    r'^\{"thought": ?"(?P<thought>[^"]*)", ?"action": ?\{"tool": ?"(?P<tool>[^"]*)", ?'
    rf'"params": ?(?P<params>\{{(?:{_LOOSE_PAIR}(?:, ?{_LOOSE_PAIR})*)?\}})\}}, ?'
    r'"plan": ?\[(?P<steps>(?:"[^"]*"(?:, ?"[^"]*")*)?)\]\}$'
)
# Where removing the separators' spaces would change a string: a value starting with ": " or
# ending with ", ", a step that is ", " (each also matches a few plain strings: those solutions
# go to orjson).
_SPACES_IN_PARAMS_TEXT = r'": ?": |, "[,}]'
_SPACES_IN_STEPS_TEXT = r'", "(?:,|$)'


def read_plainly(solutions: pl.Series) -> tuple[pl.DataFrame, pl.Series]:
    """The parts of the plain solutions among `solutions`, as `samples.solution_parts` has them
    (`solution`, `solution_is_object`, `thought`, `action_tool`, `action_params` and `plan` as
    compact JSON, `first_planned`); and the other solutions."""
    found, keys = pl.col("found"), pl.col("keys")
    params, steps = found.struct.field("params"), found.struct.field("steps")
    thought, tool = found.struct.field("thought"), found.struct.field("tool")
    read = (
        solutions.to_frame("solution")
        .lazy()
        .with_columns(found=pl.col("solution").str.extract_groups(_PARTS))
        .with_columns(
            shaped=~thought.str.contains(_ESCAPED)
            & ~tool.str.contains(_ESCAPED)
            & params.str.contains(_PLAIN_PARAMS)
            & steps.str.contains(_PLAIN_STEPS),
            keys=params.str.extract_all(_KEY),
            spaced=params.str.contains(_SPACES_IN_PARAMS_TEXT)
            | steps.str.contains(_SPACES_IN_STEPS_TEXT),
        )
        .with_columns(
            plain=(
                pl.col("shaped") & ~pl.col("spaced") & (keys.list.n_unique() == keys.list.len())
            ).fill_null(False)
        )
        .collect()
    )
    plain = read.filter("plain").select(
        "solution",
        solution_is_object=pl.lit(True),
        thought=thought,
        action_tool=tool,
        action_params=params.str.replace_all('": ', '":', literal=True).str.replace_all(
            ', "', ',"', literal=True
        ),
        plan=pl.concat_str(
            pl.lit("["), steps.str.replace_all('", "', '","', literal=True), pl.lit("]")
        ),
        first_planned=steps.str.extract(f'^"({_TEXT})"', 1),
    )
    return plain, read.filter(~pl.col("plain")).get_column("solution")
