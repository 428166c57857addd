"""Load sample files (JSONL or parquet) into one polars frame that remembers each row's file:line.

A line that cannot become a row (broken JSON, not an object, invalid UTF-8, a missing field, a
wrong type) is reported as a `Problem` and counted, never dropped silently. Files are only read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.errors import validation_problems
from toolgrpo.schemas.overrides import AppliedOverride, LabelOverride
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.schemas.samples import RECORD_SCHEMA, SampleRecord

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
    FILE_READABLE: "The file can be read (not a folder; a .parquet file is valid parquet).",
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


def _jsonl_lines(path: Path, file: str) -> Iterator[tuple[int, str | Problem]]:
    """(line number, text) for each non-blank line; a Problem where the bytes are not UTF-8."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                # utf-8-sig: tolerate the byte-order mark some editors write
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start : error.start + 1]
                message = f"line is not valid UTF-8 (byte {error.start}: {byte!r})"
                yield number, Problem(file=file, line=number, check=VALID_UTF8, message=message)


def _read_jsonl(path: Path, file: str) -> Iterator[tuple[int, SampleRecord | list[Problem]]]:
    for number, text in _jsonl_lines(path, file):
        if isinstance(text, Problem):
            yield number, [text]
            continue
        try:
            yield number, SampleRecord.model_validate_json(text)
        except ValidationError as error:
            yield number, _record_problems(file, number, error, _json_or_none(text))


def _read_parquet(path: Path, file: str) -> Iterator[tuple[int, SampleRecord | list[Problem]]]:
    for number, row in enumerate(pl.read_parquet(path).iter_rows(named=True), start=1):
        try:
            yield number, SampleRecord.model_validate(row)
        except ValidationError as error:
            yield number, _record_problems(file, number, error, row)


def _read_file(path: Path) -> tuple[list[dict[str, Any]], int, list[Problem]]:
    """A file's readable records (with file and line), how many rows it had, and its problems."""
    file = str(path)
    if not path.exists():
        return [], 0, [Problem(file=file, line=None, check=FILE_EXISTS, message="no such file")]
    if path.is_dir():
        message = "is a folder, not a JSONL or parquet file: pass the files in it"
        return [], 0, [Problem(file=file, line=None, check=FILE_READABLE, message=message)]
    reader = _read_parquet if path.suffix == ".parquet" else _read_jsonl
    records, problems, rows = [], [], 0
    try:
        for number, record in reader(path, file):
            rows += 1
            if isinstance(record, SampleRecord):
                records.append({"file": file, "line": number, **record.model_dump()})
            else:
                problems.extend(record)
    except (OSError, pl.exceptions.PolarsError) as error:
        message = f"cannot read: {type(error).__name__}: {shown(error)}"
        problems.append(Problem(file=file, line=None, check=FILE_READABLE, message=message))
    if rows == 0 and not problems:
        problems.append(Problem(file=file, line=None, check=FILE_NOT_EMPTY, message="no rows"))
    return records, rows, problems


def read_overrides(path: Path) -> tuple[dict[str, tuple[int, LabelOverride]], list[Problem]]:
    """Overrides by row id with their line, and the problems of the overrides file itself."""
    file = str(path)
    if not path.exists():
        return {}, [Problem(file=file, line=None, check=FILE_EXISTS, message="no such file")]
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


def load_samples(
    paths: Sequence[Path], overrides: Path | None = None, catalogue: Catalogue | None = None
) -> LoadedSamples:
    """Every row of `paths` as one frame with `file` and `line`, plus what could not be read.

    `overrides` (JSONL of `LabelOverride`) relabels the rows with matching ids (their params
    checked against `catalogue`, default the shipped one).
    """
    records, file_rows, problems = [], {}, []
    for path in paths:
        file_records, rows, file_problems = _read_file(Path(path))
        records.extend(file_records)
        file_rows[str(path)] = file_rows.get(str(path), 0) + rows
        problems.extend(file_problems)
    frame = pl.DataFrame(records, schema={"file": pl.String, "line": pl.Int64, **RECORD_SCHEMA})
    applied, warnings = [], []
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
