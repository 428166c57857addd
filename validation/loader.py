"""Load sample files (JSONL or parquet) into one polars frame that remembers each row's file:line.

A line that cannot become a row (broken JSON, not an object, invalid UTF-8, a missing field, a
wrong type) is reported as a `Problem` and counted, never dropped silently. Files are only read.

Polars reads the rows natively (faster than pydantic line by line: `bench/validate.py`), but its
readers coerce (`5` read as the string "5"), keep the first of two equal keys and raise on the
whole file for one broken line. So natively read rows are only those whose text is plainly a row:
a flat JSON object with each contract key once and of its JSON type (`_plain_row`), or a parquet
row with typed, non-null columns. Every other line or row goes through pydantic, so each
problem message is the one the line-by-line reader gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.errors import validation_problems
from toolgrpo.schemas.inputs import input_problem
from toolgrpo.schemas.label_overrides import AppliedOverride, LabelOverride
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.schemas.records import RECORD_SCHEMA, SampleRecord
from toolgrpo.validation.gc_pause import cycle_collector_paused

# The names of the checks that run while reading, as they appear in reports.
FILE_EXISTS = "file_exists"
FILE_READABLE = "file_readable"
FILE_NOT_EMPTY = "file_not_empty"
VALID_UTF8 = "valid_utf8"
VALID_JSON = "valid_json"
JSON_OBJECT = "json_object"
REQUIRED_FIELDS = "required_fields"
FIELD_TYPES = "field_types"
OVERRIDE_VALID = "override_valid"
OVERRIDE_UNIQUE = "override_unique"
OVERRIDE_APPLICABLE = "override_applicable"
LOAD_CHECK_RULES = {
    FILE_EXISTS: "The file exists.",
    FILE_READABLE: (
        "The file can be read: a regular file (not a folder, pipe or device), not compressed; "
        "a .parquet file is valid parquet."
    ),
    FILE_NOT_EMPTY: "The file has at least one row.",
    VALID_UTF8: "Every line is UTF-8 text.",
    VALID_JSON: "Every line is valid JSON.",
    JSON_OBJECT: "Every line is a JSON object.",
    REQUIRED_FIELDS: "A row has every field of the contract.",
    FIELD_TYPES: "Each field has its JSON type: strings, and integers for step and n_steps.",
    OVERRIDE_VALID: "An override has id, tool, reason, reviewer (strings) and maybe a solution.",
    OVERRIDE_UNIQUE: "An id is overridden at most once.",
    OVERRIDE_APPLICABLE: "An override without a solution leaves params valid for the new tool.",
}

_JSON_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


FRAME_SCHEMA = pl.Schema([("file", pl.String), ("line", pl.Int64), *RECORD_SCHEMA.items()])
_STRING_FIELDS = [name for name, dtype in RECORD_SCHEMA.items() if dtype == pl.String]
_REQUIRED = [name for name, spec in SampleRecord.model_fields.items() if spec.is_required()]
_OPTIONAL = [name for name in RECORD_SCHEMA if name not in _REQUIRED]
_REQUIRED_STRINGS = [name for name in _REQUIRED if name in _STRING_FIELDS]
_REQUIRED_INTEGERS = [name for name in _REQUIRED if name not in _STRING_FIELDS]
# Integer dtypes whose every value is an int64, as pydantic reads it.
_INT64_DTYPES = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32)
# `bytes.strip()` whitespace, as a regex class: a line of only these is blank (not a row). A line
# never holds "\n".
_BLANK = r" \t\r\x0b\x0c"

# A flat JSON object whose values are strings, integers that fit int64, or null, and whose keys
# have no escapes. Strings exclude surrogate escapes (pydantic rejects a lone one), raw control
# characters and U+FFFD (what a byte that is not UTF-8 was read as). Other JSON (floats, booleans,
# nesting) is valid but not plain: pydantic reads it.
_WS = r"[ \t\r]*"
_STRING = (
    r'"(?:[^"\\\x00-\x1f\x{FFFD}]|\\["\\/bfnrt]'
    r'|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))*"'
)
_KEY = r'"[^"\\\x00-\x1f]*"'
_INTEGER = r"-?(?:0|[1-9][0-9]{0,17})"
_MEMBER = f"{_KEY}{_WS}:{_WS}(?:{_STRING}|{_INTEGER}|null)"
_FLAT_OBJECT = f"^{_WS}\\{{{_WS}{_MEMBER}{_WS}(?:,{_WS}{_MEMBER}{_WS})*\\}}{_WS}$"


def _canonical_row() -> str:
    """A regex for a row as writers usually write it: the contract's keys, in its order, each of
    its JSON type (an optional one maybe missing or null), and nothing else. One pass of it
    proves all that `_plain_row` checks."""
    members = []
    for position, (name, dtype) in enumerate(RECORD_SCHEMA.items()):
        value = _STRING if dtype == pl.String else _INTEGER
        separator = f"{_WS},{_WS}" if position else ""
        if name in _OPTIONAL:
            members.append(f'(?:{separator}"{re.escape(name)}"{_WS}:{_WS}(?:{value}|null))?')
        else:
            members.append(f'{separator}"{re.escape(name)}"{_WS}:{_WS}{value}')
    return f"^{_WS}\\{{{_WS}{''.join(members)}{_WS}\\}}{_WS}$"


_CANONICAL_ROW = _canonical_row()


def _members(names: Sequence[str], value: str = "") -> str:
    """A regex for a member whose key is one of `names` and whose value starts with `value`. In a
    flat object with escape-free keys, each match is one such member: an unescaped `"` only
    delimits strings, and a string followed by `:` is a key."""
    return f'"(?:{"|".join(map(re.escape, names))})"{_WS}:{_WS}{value}'


# A contract member of its JSON type; the value's first character tells, in a flat object.
_TYPED_MEMBER = "|".join(
    [
        _members(_REQUIRED_STRINGS, '"'),
        _members(_REQUIRED_INTEGERS, "-?[0-9]"),
        _members(_OPTIONAL, '(?:"|null)'),
    ]
)


def _plain_row(text: pl.Expr) -> pl.Expr:
    """Whether each line is plainly a row, one polars reads as pydantic would: a flat object
    (`_FLAT_OBJECT`) whose contract members all have their JSON type (strings; integers; a string
    or null for an optional field), no optional one twice, and as many as there are required
    fields plus optional ones. Required fields are also checked non-null once read: with that,
    each appears exactly once."""
    contract_members = text.str.count_matches(_members(list(RECORD_SCHEMA)))
    typed_members = text.str.count_matches(_TYPED_MEMBER)
    optional_members = text.str.count_matches(_members(_OPTIONAL))
    return (
        text.str.contains(_FLAT_OBJECT)
        & (contract_members == typed_members)
        & (contract_members == len(_REQUIRED) + optional_members)
        & (optional_members <= 1)
    )


@dataclass(frozen=True)
class LoadedSamples:
    """What the loader read: the rows that fit the record types, plus every problem found."""

    files: list[str]  # as given, in order
    frame: pl.DataFrame  # `file`, `line` and the contract's columns, in file order
    rows_read: int  # every non-blank line or parquet row, readable or not
    file_rows: dict[str, int] = field(default_factory=dict)  # rows_read of each file
    problems: list[Problem] = field(default_factory=list)
    overrides: list[AppliedOverride] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _describe(value: Any) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _record_problems(file: str, line: int, error: ValidationError, row: Any) -> list[Problem]:
    """One problem per thing wrong with a record (`row`, as parsed): its JSON, its shape, its
    missing fields, its field types."""
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return [
            Problem(file=file, line=line, check=VALID_JSON, message=f"not JSON: {first['msg']}")
        ]
    if first["loc"] == ():
        shape = _describe(first["input"])
        message = f"line is {shape}, not a JSON object"
        return [Problem(file=file, line=line, check=JSON_OBJECT, message=message)]
    row_id = shown(row["id"]) if isinstance(row, dict) and isinstance(row.get("id"), str) else None
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
    problems = []
    if missing:
        message = f"missing field(s): {', '.join(missing)}"
        problems.append(
            Problem(file=file, line=line, check=REQUIRED_FIELDS, message=message, id=row_id)
        )
    for e in errors:
        if e["type"] != "missing":
            name = ".".join(str(part) for part in e["loc"])
            value = shown(repr(e["input"]))
            message = f"field {name} is {_describe(e['input'])} {value}: {e['msg']}"
            problems.append(
                Problem(file=file, line=line, check=FIELD_TYPES, message=message, id=row_id)
            )
    return problems


# A reader's rows: each one's line (or row) number, and its record or its problems.
_Rows = Iterator[tuple[int, SampleRecord | list[Problem]]]


def _jsonl_lines(
    path: Path, file: str, only: Container[int] | None = None
) -> Iterator[tuple[int, str | Problem]]:
    """(line number, text) for each non-blank line (of the numbers in `only`, if given); a Problem
    where the bytes are not UTF-8."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if (only is not None and number not in only) or not raw.strip():
                continue
            try:
                # utf-8-sig: tolerate the byte-order mark some editors write
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start : error.start + 1]
                message = f"line is not valid UTF-8 (byte {error.start}: {byte!r})"
                yield number, Problem(file=file, line=number, check=VALID_UTF8, message=message)


def _read_jsonl(path: Path, file: str, only: Container[int] | None = None) -> _Rows:
    """Each non-blank line (of `only`, if given) as a record or its problems, line by line."""
    for number, text in _jsonl_lines(path, file, only):
        if isinstance(text, Problem):
            yield number, [text]
            continue
        try:
            yield number, SampleRecord.model_validate_json(text)
        except ValidationError as error:
            yield number, _record_problems(file, number, error, _json_or_none(text))


def _parquet_rows(rows: Iterator[tuple[int, dict[str, Any]]], file: str) -> _Rows:
    for number, row in rows:
        try:
            yield number, SampleRecord.model_validate(row)
        except ValidationError as error:
            yield number, _record_problems(file, number, error, row)


def _read_parquet(path: Path, file: str) -> _Rows:
    yield from _parquet_rows(enumerate(pl.read_parquet(path).iter_rows(named=True), start=1), file)


def _frame(read: _Rows, file: str) -> tuple[pl.DataFrame, int, list[Problem]]:
    """The records of `read` as a frame with file and line, how many rows it read, and the
    problems of the others."""
    records, problems, rows = [], [], 0
    for number, record in read:
        rows += 1
        if isinstance(record, SampleRecord):
            records.append({"file": file, "line": number, **record.model_dump()})
        else:
            problems.extend(record)
    return pl.DataFrame(records, schema=FRAME_SCHEMA), rows, problems


def _with_location(rows: pl.DataFrame, file: str) -> pl.DataFrame:
    """`rows` (`line` and the contract's columns) in the loader's frame schema."""
    return rows.select(pl.lit(file).alias("file"), "line", *RECORD_SCHEMA).cast(FRAME_SCHEMA)


def _decoded(data: bytes, lines: pl.DataFrame) -> pl.DataFrame:
    """`line` and the contract's columns of `lines` (`_plain_lines`), read by polars where
    `plain` (null elsewhere). A file whose every line is a plain row or blank goes whole to
    polars' NDJSON reader, faster than `json_decode` line by line: it skips the blank lines, so
    with a row for each line the rows are the lines' (a BOM or a byte that is not UTF-8 makes a
    line not plain)."""
    if lines.get_column("plain").all():
        try:
            read = pl.read_ndjson(data, schema=RECORD_SCHEMA)
        except pl.exceptions.ComputeError:  # a blank line it does not skip (`\x0b`, `\x0c`)
            read = None
        if read is not None and read.height == lines.height:
            return read.insert_column(0, lines.get_column("line"))
    return _decoded_line_by_line(data, lines)


def _decoded_line_by_line(data: bytes, lines: pl.DataFrame) -> pl.DataFrame:
    """`_decoded` with each plain line's text read again, whole, and decoded on its own."""
    texts = pl.read_lines(data, name="text", row_index_name="line", row_index_offset=1)
    return (
        texts.lazy()  # split over the cores, as in `_plain_lines`
        .join(lines.lazy(), on="line", maintain_order="left")
        .select(
            "line",
            pl.when("plain")
            .then(pl.col("text"))
            .str.json_decode(pl.Struct(RECORD_SCHEMA))
            .alias("row"),
        )
        .unnest("row")
        .collect()
    )


def _plain_lines(data: bytes) -> pl.DataFrame:
    """Each non-blank line's `line` number and whether it is `plain`ly a row (`_plain_row`;
    a canonical row is). The lines are streamed: their text is never copied whole (a second copy
    of the file's text beside its bytes: docs/experiments/code-measurements.md#loader), only the
    texts of the lines that are not canonical rows are kept, to be checked."""
    blank = pl.col("text").str.contains(f"^[{_BLANK}]*$")
    canonical = pl.col("text").str.contains(_CANONICAL_ROW)
    kinds = (
        pl.scan_lines(data, name="text", row_index_name="line", row_index_offset=1)
        .filter(~blank)
        .with_columns(canonical=canonical)
        .with_columns(text=pl.when(~pl.col("canonical")).then("text"))
        .collect(engine="streaming")
    )
    # polars checks the others more slowly, pydantic reads those it does not find plain
    others = kinds.lazy().filter(~pl.col("canonical")).select("line", "text")
    plain_others = others.filter(_plain_row(pl.col("text"))).collect().get_column("line")
    plain = pl.col("canonical") | pl.col("line").is_in(plain_others.implode())
    return kinds.select("line", plain=plain)


def _read_jsonl_natively(path: Path, file: str) -> tuple[pl.DataFrame, int, _Rows]:
    """The plain lines (`_plain_row`) read by polars, how many rows the file has, and
    `_read_jsonl` for the others."""
    data = path.read_bytes()  # Python's read, so an unreadable file fails as it always did
    try:
        lines = _plain_lines(data)
    except pl.exceptions.ComputeError:  # some byte is not UTF-8: its line is not plain
        data = data.decode("utf-8", "replace").encode()
        lines = _plain_lines(data)
    try:
        decoded = _decoded(data, lines)
    except pl.exceptions.ComputeError:  # polars disagrees with the plain-row rule: trust pydantic
        return pl.DataFrame(schema=FRAME_SCHEMA), lines.height, _read_jsonl(path, file)
    plain = lines.get_column("plain")
    native = plain & decoded.select(pl.all_horizontal(pl.col(_REQUIRED).is_not_null())).to_series()
    by_pydantic = set(lines.filter(~native)["line"])
    reader = _read_jsonl(path, file, by_pydantic) if by_pydantic else iter(())
    if not native.all():  # else a filter copies every row
        decoded = decoded.filter(native)
    return _with_location(decoded, file), lines.height, reader


def _read_parquet_natively(path: Path, file: str) -> tuple[pl.DataFrame, int, _Rows]:
    """The rows with a value in each required column, taken by polars when the columns have
    the contract's types; how many rows the file has; and `_read_parquet`'s reading of the
    others (all of them when a column has another type)."""
    table = pl.read_parquet(path)
    schema = table.schema
    typed = all(
        name in schema
        and (schema[name] == pl.String if name in _STRING_FIELDS else schema[name] in _INT64_DTYPES)
        for name in _REQUIRED
    ) and all(schema.get(name, pl.Null) in (pl.String, pl.Null) for name in _OPTIONAL)
    if not typed:
        rows = enumerate(table.iter_rows(named=True), start=1)
        return pl.DataFrame(schema=FRAME_SCHEMA), table.height, _parquet_rows(rows, file)
    complete = table.select(pl.all_horizontal(pl.col(_REQUIRED).is_not_null())).to_series()
    contract = table.select(
        *[name for name in RECORD_SCHEMA if name in schema],
        *[pl.lit(None, pl.String).alias(name) for name in _OPTIONAL if name not in schema],
    )
    native = contract.with_row_index("line", offset=1).filter(complete)
    numbers = (~complete).arg_true() + 1
    incomplete = zip(numbers, table.filter(~complete).iter_rows(named=True), strict=True)
    return _with_location(native, file), table.height, _parquet_rows(incomplete, file)


def _read_file(path: Path, line_by_line: bool) -> tuple[pl.DataFrame, int, list[Problem]]:
    """A file's readable rows (with file and line), how many rows it had, and its problems."""
    file = str(path)
    empty = pl.DataFrame(schema=FRAME_SCHEMA)
    if not path.exists():
        return empty, 0, [Problem(file=file, line=None, check=FILE_EXISTS, message="no such file")]
    if path.is_dir():
        message = "is a folder, not a JSONL or parquet file: pass the files in it"
        return empty, 0, [Problem(file=file, line=None, check=FILE_READABLE, message=message)]
    if unreadable := input_problem(path):
        return empty, 0, [Problem(file=file, line=None, check=FILE_READABLE, message=unreadable)]
    parquet = path.suffix == ".parquet"
    try:
        if line_by_line:
            frame, rows, problems = _frame(
                (_read_parquet if parquet else _read_jsonl)(path, file), file
            )
        else:
            read_natively = _read_parquet_natively if parquet else _read_jsonl_natively
            frame, rows, others = read_natively(path, file)
            by_pydantic, _, problems = _frame(others, file)
            if by_pydantic.height:
                frame = pl.concat([frame, by_pydantic]).sort("line")
    except (OSError, pl.exceptions.PolarsError) as error:
        message = f"cannot read: {type(error).__name__}: {shown(error)}"
        return empty, 0, [Problem(file=file, line=None, check=FILE_READABLE, message=message)]
    if rows == 0 and not problems:
        problems.append(Problem(file=file, line=None, check=FILE_NOT_EMPTY, message="no rows"))
    return frame, rows, problems


def read_overrides(path: Path) -> tuple[dict[str, tuple[int, LabelOverride]], list[Problem]]:
    """Overrides by row id with their line, and the problems of the overrides file itself."""
    file = str(path)
    if not path.exists():
        return {}, [Problem(file=file, line=None, check=FILE_EXISTS, message="no such file")]
    if message := input_problem(path):
        return {}, [Problem(file=file, line=None, check=FILE_READABLE, message=message)]
    overrides: dict[str, tuple[int, LabelOverride]] = {}
    problems = []
    for number, text in _jsonl_lines(path, file):
        if isinstance(text, Problem):
            problems.append(text)
            continue
        try:
            override = LabelOverride.model_validate_json(text)
        except ValidationError as error:
            reasons = validation_problems(error, whole="line")
            problems.append(Problem(file=file, line=number, check=OVERRIDE_VALID, message=reasons))
            continue
        if override.id in overrides:
            first = overrides[override.id][0]
            message = f"id {shown(repr(override.id))} is already overridden on line {first}"
            problems.append(Problem(file=file, line=number, check=OVERRIDE_UNIQUE, message=message))
            continue
        overrides[override.id] = (number, override)
    return overrides, problems


def _relabelled_solution(
    solution: str, override: LabelOverride, catalogue: Catalogue
) -> tuple[str | None, str | None]:
    """(new solution, None) or (None, why the override cannot be applied)."""
    if override.solution is not None:
        return override.solution, None
    # The same advice for an overrides file and a review CSV, which names the field differently.
    full_solution = (
        f"give a full `solution` calling {shown(override.tool)} "
        "(in a review CSV: `proposed_solution`)"
    )
    try:
        parsed = json.loads(solution)
        params = parsed["action"]["params"]
        parsed["action"]["tool"] = override.tool
    except (ValueError, TypeError, KeyError):
        return None, f"the row's solution has no action to relabel; {full_solution}"
    error = catalogue.params_error(override.tool, params)
    if error is not None:
        return (
            None,
            f"the row's params do not fit {shown(override.tool)} ({error}); {full_solution}",
        )
    return json.dumps(parsed, ensure_ascii=False), None


def apply_overrides(
    frame: pl.DataFrame,
    overrides: dict[str, tuple[int, LabelOverride]],
    source: str,
    catalogue: Catalogue | None = None,
) -> tuple[pl.DataFrame, list[AppliedOverride], list[Problem], list[str]]:
    """`frame` with `overrides` (by row id: the line of `source` it is on, and the override)
    applied to the rows with their ids; the overrides applied, the problems of those that cannot
    be, and warnings for those that match no row."""
    problems = []
    matching = frame.filter(pl.col("id").is_in(list(overrides))).select(
        "id", "file", "line", "tool", "solution"
    )
    applied, replacements = [], []
    for row in matching.iter_rows(named=True):
        number, override = overrides[row["id"]]
        solution, error = _relabelled_solution(
            row["solution"], override, catalogue or default_catalogue()
        )
        if error is not None:
            problems.append(
                Problem(
                    file=source,
                    line=number,
                    check=OVERRIDE_APPLICABLE,
                    message=error,
                    id=shown(row["id"]),
                )
            )
            continue
        replacements.append({"id": row["id"], "tool": override.tool, "solution": solution})
        applied.append(
            AppliedOverride(
                id=shown(row["id"]),
                row=f"{row['file']}:{row['line']}",
                override=f"{source}:{number}",
                old_tool=shown(row["tool"]),
                new_tool=shown(override.tool),
                reason=shown(override.reason),
                reviewer=shown(override.reviewer),
            )
        )
    unmatched = sorted(set(overrides) - set(matching["id"]))
    warnings = [
        f"{source}:{overrides[i][0]}: override for id {shown(repr(i))} matches no row"
        for i in unmatched
    ]
    if replacements:
        replacement = pl.DataFrame(
            replacements, schema={k: pl.String for k in ("id", "tool", "solution")}
        )
        frame = frame.update(replacement, on="id")
    return frame, applied, problems, warnings


@cycle_collector_paused()
def load_samples(
    paths: Sequence[Path],
    overrides: Path | None = None,
    catalogue: Catalogue | None = None,
    *,
    line_by_line: bool = False,
) -> LoadedSamples:
    """Every row of `paths` as one frame with `file` and `line`, plus what could not be read.

    `overrides` (JSONL of `LabelOverride`) relabels the rows with matching ids (their params
    checked against `catalogue`, default the shipped one). `line_by_line` reads every row with
    pydantic, without the native readers (for tests and benchmarks that compare the two).
    """
    frames: list[pl.DataFrame] = []
    file_rows: dict[str, int] = {}
    problems: list[Problem] = []
    for path in paths:
        frame, rows, file_problems = _read_file(Path(path), line_by_line)
        frames.append(frame)
        file_rows[str(path)] = file_rows.get(str(path), 0) + rows
        problems.extend(file_problems)
    frame = pl.concat([pl.DataFrame(schema=FRAME_SCHEMA), *frames])
    applied: list[AppliedOverride] = []
    warnings: list[str] = []
    if overrides is not None:
        by_id, file_problems = read_overrides(Path(overrides))
        frame, applied, override_problems, warnings = apply_overrides(
            frame, by_id, str(overrides), catalogue
        )
        problems.extend([*file_problems, *override_problems])
    return LoadedSamples(
        files=[str(p) for p in paths],
        frame=frame,
        rows_read=sum(file_rows.values()),
        file_rows=file_rows,
        problems=problems,
        overrides=applied,
        warnings=warnings,
    )
