"""The gate's checks: every loaded row against the row contract, label conflicts, row counts.

Failures (rows or files that break a rule) fail the gate. Label conflicts (identical normalised
prompts with different tools) are warnings, not failures: deciding which label is right is an
annotator's call, and the rows are each valid on their own.
"""

from __future__ import annotations

from functools import cache

import pandera.errors
import polars as pl

from toolgrpo.schemas.data_quality import ConflictRow, DataReport, LabelConflict
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.schemas.samples import (
    FAILURE_DETAILS,
    MAX_PROMPT_CHARS,
    ParsedSample,
    check_names,
    check_rule,
    normalised_prompt,
    parse_solution,
    shown_column,
)
from toolgrpo.validation.loader import LoadedSamples

COUNT_DIMENSIONS = ("file", "kind", "lang", "tool", "step")
# Not a row rule of `Sample`: the whole table failed a structural check (should not happen for
# frames built by the loader, but a report beats a traceback).
TABLE = "(table)"


class DataGateFailed(RuntimeError):
    """Raised to stop a pipeline before training when the data gate fails; carries the report."""

    def __init__(self, report: DataReport) -> None:
        where = f"; report: {report.run_dir}" if report.run_dir else ""
        super().__init__(
            f"data gate failed: {report.invalid_rows} of {report.rows} rows invalid, "
            f"{len(report.failures)} problem(s){where}"
        )
        self.report = report

    def __reduce__(self):  # Prefect pickles exceptions into task states
        return type(self), (self.report,)


def schema_failures(frame: pl.DataFrame) -> list[Problem]:
    """Every (row, check) that breaks the row contract, located by the frame's file and line."""
    parsed = parse_solution(frame)
    try:
        ParsedSample.validate(parsed, lazy=True)
    except pandera.errors.SchemaErrors as errors:
        cases = errors.failure_cases
    else:
        return []
    problems = [
        Problem(
            file=TABLE, line=None, check=str(case["check"]), message=shown(case["failure_case"])
        )
        for case in cases.filter(pl.col("index").is_null()).iter_rows(named=True)
    ]
    located = cases.filter(pl.col("index").is_not_null()).select("check", "index")
    indexed = parsed.with_row_index("index")
    for (check,), failing in located.group_by("check", maintain_order=True):
        rows = indexed.join(failing.select(pl.col("index").cast(pl.UInt32)), on="index")
        detail = FAILURE_DETAILS.get(check, pl.lit(check_rule(check)))
        details = rows.select("file", "line", shown_column("id"), detail.alias("detail"))
        for row in details.iter_rows(named=True):
            message = row["detail"] or check_rule(check)
            problems.append(
                Problem(
                    file=row["file"], line=row["line"], check=check, message=message, id=row["id"]
                )
            )
    return problems


def find_label_conflicts(frame: pl.DataFrame) -> list[LabelConflict]:
    """Groups of rows with the same normalised prompt but different tools."""
    conflicting = (
        frame.with_columns(prompt_key=normalised_prompt())
        .filter(pl.col("tool").n_unique().over("prompt_key") > 1)
        .sort("prompt_key", "file", "line")
    )
    return [
        LabelConflict(
            prompt=shown(prompt, limit=MAX_PROMPT_CHARS),
            rows=[
                ConflictRow(
                    id=shown(row["id"]),
                    location=f"{row['file']}:{row['line']}",
                    tool=shown(row["tool"]),
                )
                for row in rows.iter_rows(named=True)
            ],
        )
        for (prompt,), rows in conflicting.group_by("prompt_key", maintain_order=True)
    ]


@cache
def _check_positions() -> dict[str, int]:
    return {name: position for position, name in enumerate(check_names())}


def validate_samples(loaded: LoadedSamples) -> DataReport:
    """Check every loaded row against the contract (all failures collected) and find conflicts."""
    file_positions = {file: position for position, file in enumerate(loaded.files)}

    def report_order(problem: Problem) -> tuple[int, str, int, int]:
        """Files as given (overrides after), lines, then checks in the order they run."""
        file = file_positions.get(problem.file, len(file_positions))
        check = _check_positions().get(problem.check, -1)  # loader checks first
        return file, problem.file, problem.line or 0, check

    failures = sorted([*loaded.problems, *schema_failures(loaded.frame)], key=report_order)
    invalid = len({(p.file, p.line) for p in failures if p.file in file_positions and p.line})
    return DataReport(
        files=loaded.files,
        rows=loaded.rows_read,
        valid_rows=loaded.rows_read - invalid,
        invalid_rows=invalid,
        failures=failures,
        conflicts=find_label_conflicts(loaded.frame),
        overrides=loaded.overrides,
        warnings=loaded.warnings,
    )


def count_rows(loaded: LoadedSamples) -> dict[str, dict[str, int]]:
    """Row counts by file, kind, lang, tool and step (of the rows that could be read), each
    value as `shown` (a 10 MB tool name is counted, not repeated)."""
    counts: dict[str, dict[str, int]] = {dimension: {} for dimension in COUNT_DIMENSIONS}
    for dimension, by_value in counts.items():
        for value, count in loaded.frame.group_by(dimension).len().sort(dimension).iter_rows():
            by_value[shown(value)] = by_value.get(shown(value), 0) + count
    return counts
