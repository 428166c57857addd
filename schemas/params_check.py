"""Plain params checked against their tool's JSON Schema in polars, a column at a time.

fastjsonschema (`Catalogue.params_error`) judges one params object at a time in Python, which
adds up over a million rows of distinct params (every amount and account a row's own:
docs/experiments/code-measurements.md#params-check). Most params are a flat object of plain
values — strings without escapes, numbers a float holds exactly, booleans — and most schemas
are written with a few keywords (`type`, `properties`, `required`, `additionalProperties`,
`enum`, `pattern`, bounds, lengths).
For such a schema polars proves those params valid; every other row (an escape in a string, a
nested value, a number of 16 digits, a key the schema does not name, a schema with a keyword
outside the list) goes to fastjsonschema, which also words every error message. So a row polars
passes is one fastjsonschema passes, and the messages stay fastjsonschema's.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import polars as pl

from toolgrpo.schemas.catalogue import Catalogue

_KEY = r'"[A-Za-z0-9_]+":'
_STRING = r'"[^"\\\x00-\x1f]*"'  # no escape, no control character
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
_NUMBER = rf"{_INTEGER}(?:\.[0-9]+)?"
_VALUE = rf"(?:{_STRING}|{_NUMBER}|true|false)"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")  # a key `_KEY` reads
_PLAIN = rf"^\{{(?:{_KEY}{_VALUE}(?:,{_KEY}{_VALUE})*)?\}}$"
# digits a float64 holds exactly in polars and in Python alike
_MAX_DIGITS = 15
_EXACT = 2.0**53
# keywords that only annotate (JSON Schema's and the catalogue's own `x-…` words)
_ANNOTATIONS = {"description", "title", "examples", "default", "$comment"}
_PROPERTY_KEYWORDS = {"type", "enum", "pattern", "minLength", "maxLength"}
_PROPERTY_KEYWORDS |= {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_ROOT_KEYWORDS = {"type", "properties", "required", "additionalProperties"}
_BOUNDS = {
    "minimum": lambda v, b: v >= b,
    "maximum": lambda v, b: v <= b,
    "exclusiveMinimum": lambda v, b: v > b,
    "exclusiveMaximum": lambda v, b: v < b,
}


def _keywords(schema: dict[str, Any]) -> set[str]:
    return {k for k in schema if k not in _ANNOTATIONS and not k.startswith("x-")}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < _EXACT


def _property_check(name: str, schema: object, params: pl.Expr) -> pl.Expr | None:
    """Whether the param `name`, where present, is plainly valid; None: a schema polars does
    not read (the tool's rows go to fastjsonschema)."""
    if not isinstance(schema, dict) or not _keywords(schema) <= _PROPERTY_KEYWORDS:
        return None
    kind = schema.get("type")
    text = params.str.extract(f'"{name}":({_VALUE})', 1)
    if kind == "string":
        value = text.str.slice(1, text.str.len_chars() - 2)
        check = text.str.starts_with('"')
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str) or not polars_compiles(pattern):
                return None
            # RE2 and polars read ASCII alike; other characters' classes (\w, \d) may differ
            check &= ~value.str.contains(r"[^\x00-\x7f]") & value.str.contains(pattern)
        if "enum" in schema:
            members = schema["enum"]
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                return None
            check &= value.is_in(members)
        for keyword, holds in (("minLength", pl.Expr.__ge__), ("maxLength", pl.Expr.__le__)):
            if keyword in schema:
                bound = schema[keyword]
                if not isinstance(bound, int) or isinstance(bound, bool):
                    return None
                check &= holds(value.str.len_chars(), bound)
        if _keywords(schema) & set(_BOUNDS):
            return None  # bounds on a string: not this reader's
        return check
    if kind in ("number", "integer"):
        shape = _INTEGER if kind == "integer" else _NUMBER
        digits = text.str.replace_all(r"[-.]", "").str.len_chars()
        check = text.str.contains(f"^{shape}$") & (digits <= _MAX_DIGITS)
        value = text.cast(pl.Float64, strict=False)
        for keyword, holds in _BOUNDS.items():
            if keyword in schema:
                if not _is_number(schema[keyword]):
                    return None  # draft-4's boolean exclusives, huge bounds
                check &= holds(value, float(schema[keyword]))
        if _keywords(schema) - {"type", *_BOUNDS}:
            return None
        return check
    if kind == "boolean" and _keywords(schema) == {"type"}:
        return text.is_in(["true", "false"])
    return None


@cache
def polars_compiles(pattern: str) -> bool:
    """Whether polars compiles a catalogue pattern (RE2's syntax, mostly Rust regex's)."""
    try:
        pl.select(pl.lit("").str.contains(pattern))
    except pl.exceptions.PolarsError:
        return False
    return True


def _tool_check(schema: dict[str, Any], params: pl.Expr) -> pl.Expr | None:
    """Whether a tool's params are plainly valid; None: a schema polars does not read."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if (
        schema.get("type") != "object"
        or not _keywords(schema) <= _ROOT_KEYWORDS
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not isinstance(extra, bool)
        or not all(_PLAIN_NAME.fullmatch(name) for name in properties)
        or not set(required) <= set(properties)
    ):
        return None
    # in a plain object a key's quotes and colon stand only before its value
    times = {name: params.str.count_matches(f'"{name}":', literal=True) for name in properties}
    check = params.str.contains(_PLAIN)
    if not extra:
        named = pl.sum_horizontal(times.values()) if times else pl.lit(0)
        check &= named == params.str.count_matches(_KEY)
    for name in required:
        check &= times[name] == 1
    for name, property_schema in properties.items():
        valid = _property_check(name, property_schema, params)
        if valid is None:
            return None
        check &= (times[name] == 0) | ((times[name] == 1) & valid.fill_null(False))
    return check


def plainly_valid(actions: pl.DataFrame, catalogue: Catalogue) -> pl.Series:
    """Per row of `actions` (`action_tool`, `action_params`: compact JSON text), whether polars
    proves the params valid for the tool by its catalogue schema; False where it cannot tell
    (fastjsonschema then judges the row). Each tool's check runs on that tool's rows only, all
    in one lazy query: polars reads each param's value once (a check reads it several times)."""
    indexed = actions.lazy().select("action_tool", "action_params").with_row_index("index")
    proven = [indexed.select("index", proven=pl.lit(False)).head(0)]
    for spec in catalogue.tools:
        check = _tool_check(spec.params, pl.col("action_params"))
        if check is not None:
            rows = indexed.filter(pl.col("action_tool") == spec.name)
            proven.append(rows.select("index", proven=check.fill_null(False)))
    return (
        indexed.select("index")
        .join(pl.concat(proven), on="index", how="left", maintain_order="left")
        .select(pl.col("proven").fill_null(False))
        .collect()
        .to_series()
    )
