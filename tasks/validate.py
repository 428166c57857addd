"""The data gate: validate loaded samples against the row contract, summarise, publish the report.

Failures (rows or files that break a rule) fail the gate. Label conflicts (identical normalised
prompts with different tools) are warnings, not failures: deciding which label is right is an
annotator's call, and the rows are each valid on their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pandera.errors
import polars as pl
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, computed_field

from toolgrpo.schemas.samples import (
    FAILURE_DETAILS,
    ParsedSample,
    check_names,
    check_rule,
    normalised_prompt,
    parse_solution,
)
from toolgrpo.tasks.load import LOAD_CHECK_RULES, AppliedOverride, LoadedSamples, Problem

COUNT_DIMENSIONS = ("file", "kind", "lang", "tool", "step")
# Beyond this, the markdown and the Prefect table show the first rows; the CSV has them all.
MAX_LISTED_FAILURES = 200
# Not a row rule of `Sample`: the whole table failed a structural check (should not happen for
# frames built by the loader, but a report beats a traceback).
TABLE = "(table)"


class ConflictRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    location: str
    tool: str


class LabelConflict(BaseModel):
    """Rows whose prompts are identical once normalised, labelled with different tools."""

    model_config = ConfigDict(frozen=True)
    prompt: str  # normalised
    rows: list[ConflictRow]

    @property
    def tools(self) -> list[str]:
        return sorted({row.tool for row in self.rows})


class DataReport(BaseModel):
    """The data gate's verdict: every row counted valid or invalid, with the reasons."""

    files: list[str]
    rows: int
    valid_rows: int
    invalid_rows: int
    failures: list[Problem]
    conflicts: list[LabelConflict]
    overrides: list[AppliedOverride]
    warnings: list[str]
    counts: dict[str, dict[str, int]] = {}
    run_dir: str | None = None

    @computed_field
    @property
    def ok(self) -> bool:
        """True when no file, row or override failed a check."""
        return not self.failures


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
        Problem(file=TABLE, line=None, check=str(case["check"]), message=str(case["failure_case"]))
        for case in cases.filter(pl.col("index").is_null()).iter_rows(named=True)
    ]
    located = cases.filter(pl.col("index").is_not_null()).select("check", "index")
    indexed = parsed.with_row_index("index")
    for (check,), failing in located.group_by("check", maintain_order=True):
        rows = indexed.join(failing.select(pl.col("index").cast(pl.UInt32)), on="index")
        detail = FAILURE_DETAILS.get(check, pl.lit(check_rule(check)))
        for row in rows.select("file", "line", "id", detail.alias("detail")).iter_rows(named=True):
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
            prompt=prompt,
            rows=[
                ConflictRow(id=row["id"], location=f"{row['file']}:{row['line']}", tool=row["tool"])
                for row in rows.iter_rows(named=True)
            ],
        )
        for (prompt,), rows in conflicting.group_by("prompt_key", maintain_order=True)
    ]


@cache
def _check_positions() -> dict[str, int]:
    return {name: position for position, name in enumerate(check_names())}


@task(cache_policy=NO_CACHE)
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


@task(cache_policy=NO_CACHE)
def summarise_samples(loaded: LoadedSamples) -> dict[str, dict[str, int]]:
    """Row counts by file, kind, lang, tool and step (of the rows that could be read)."""
    frame = loaded.frame
    return {
        dimension: {
            str(value): count
            for value, count in frame.group_by(dimension).len().sort(dimension).iter_rows()
        }
        for dimension in COUNT_DIMENSIONS
    }


@task(cache_policy=NO_CACHE)
def enforce_data_gate(report: DataReport) -> DataReport:
    """`report` unchanged when it passes; raises DataGateFailed (a failed task) when it does not."""
    if not report.ok:
        raise DataGateFailed(report)
    return report


def _table(rows: Iterable[Iterable[object]], header: Iterable[str]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(list(header))]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: DataReport) -> str:
    """The report as markdown: verdict, counts, failures by check, conflicts, overrides."""
    verdict = "PASSED" if report.ok else "FAILED"
    parts = [
        f"# Data quality: {verdict}",
        f"{report.valid_rows} of {report.rows} rows valid, {report.invalid_rows} invalid, "
        f"{len(report.failures)} problem(s), {len(report.conflicts)} label conflict(s) "
        f"(warnings), {len(report.overrides)} override(s) applied.",
        "Files: " + ", ".join(f"`{f}`" for f in report.files),
    ]
    for dimension, counts in report.counts.items():
        parts += [f"## Rows by {dimension}", _table(counts.items(), [dimension, "rows"])]
    by_check: dict[str, int] = {}
    for problem in report.failures:
        by_check[problem.check] = by_check.get(problem.check, 0) + 1
    if report.failures:
        rules = [
            (check, count, LOAD_CHECK_RULES.get(check) or check_rule(check))
            for check, count in by_check.items()
        ]
        parts += ["## Failures by check", _table(rules, ["check", "problems", "rule"])]
        listed = report.failures[:MAX_LISTED_FAILURES]
        parts += ["## Failures", "\n".join(f"- `{p}`" for p in listed)]
        if len(report.failures) > len(listed):
            parts.append(f"... {len(report.failures) - len(listed)} more in failures.csv")
    if report.conflicts:
        rows = [
            (c.prompt[:120], ", ".join(c.tools), ", ".join(r.location for r in c.rows))
            for c in report.conflicts
        ]
        parts += [
            "## Label conflicts (warnings, for annotators)",
            _table(rows, ["normalised prompt", "tools", "rows"]),
        ]
    if report.overrides:
        rows = [
            (o.id, o.row, f"{o.old_tool} → {o.new_tool}", o.reason, o.reviewer, o.override)
            for o in report.overrides
        ]
        parts += [
            "## Label overrides applied",
            _table(rows, ["id", "row", "label", "reason", "reviewer", "override"]),
        ]
    if report.warnings:
        parts += ["## Warnings", "\n".join(f"- {w}" for w in report.warnings)]
    return "\n\n".join(parts) + "\n"


def _failure_records(failures: list[Problem]) -> list[dict[str, object]]:
    return [
        {"file": p.file, "line": p.line, "id": p.id, "check": p.check, "message": p.message}
        for p in failures
    ]


def _conflict_records(conflicts: list[LabelConflict]) -> list[dict[str, object]]:
    return [
        {"prompt": c.prompt, "id": r.id, "location": r.location, "tool": r.tool}
        for c in conflicts
        for r in c.rows
    ]


@task(cache_policy=NO_CACHE)
def publish_data_report(
    report: DataReport, counts: dict[str, dict[str, int]], run_dir: Path
) -> DataReport:
    """Write report.md, failures.csv, conflicts.csv and summary.json to `run_dir` and publish
    the same as Prefect artifacts; returns the report with its counts and run folder."""
    report = report.model_copy(update={"counts": counts, "run_dir": str(run_dir)})
    markdown = render_markdown(report)
    (run_dir / "report.md").write_text(markdown, encoding="utf-8")
    failure_schema = {
        "file": pl.String,
        "line": pl.Int64,
        "id": pl.String,
        "check": pl.String,
        "message": pl.String,
    }
    pl.DataFrame(_failure_records(report.failures), schema=failure_schema).write_csv(
        run_dir / "failures.csv"
    )
    conflict_schema = {k: pl.String for k in ("prompt", "id", "location", "tool")}
    pl.DataFrame(_conflict_records(report.conflicts), schema=conflict_schema).write_csv(
        run_dir / "conflicts.csv"
    )
    (run_dir / "summary.json").write_text(
        json.dumps(report.model_dump(mode="json"), ensure_ascii=False, indent=2), encoding="utf-8"
    )

    create_markdown_artifact(key="data-quality-summary", markdown=markdown)
    counts_table = [
        {"dimension": dimension, "value": value, "rows": rows}
        for dimension, by_value in counts.items()
        for value, rows in by_value.items()
    ]
    create_table_artifact(key="data-quality-counts", table=counts_table)
    listed = report.failures[:MAX_LISTED_FAILURES]
    create_table_artifact(
        key="data-quality-failures",
        table=_failure_records(listed),
        description=f"{len(listed)} of {len(report.failures)} problems; all in failures.csv",
    )
    create_table_artifact(
        key="data-quality-label-conflicts", table=_conflict_records(report.conflicts)
    )
    return report
