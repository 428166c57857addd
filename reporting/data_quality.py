"""The data-quality report as markdown: verdict, counts, failures by check, conflicts, overrides.

Everything that comes from the data (messages quoting a row, file names, prompts, reasons) is
escaped: the report renders as the data reads, in the run folder and in the Prefect UI alike.
"""

from __future__ import annotations

from toolgrpo.reporting.markdown import Markdown, code_span, markdown_table, markdown_text
from toolgrpo.schemas.data_quality import DataReport, LabelConflict
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.schemas.samples import check_rule
from toolgrpo.validation.gate import CROSS_FILE_RULES, invalid_rows_by_file
from toolgrpo.validation.loader import LOAD_CHECK_RULES

# Beyond this, the markdown and the Prefect table show the first rows (failures, warnings); the
# CSV and data_quality.json have them all.
MAX_LISTED_FAILURES = 200
# Problems the gate's verdict lists above everything else.
MAX_VERDICT_FAILURES = 20
# A conflict's prompt as the report's table shows it (conflicts.csv has it whole).
CONFLICT_PROMPT_CHARS = 120
# The rules of the checks that are not row rules of the contract (`check_rule` knows those).
CHECK_RULES = {**LOAD_CHECK_RULES, **CROSS_FILE_RULES}


def render_markdown(report: DataReport) -> str:
    """The report as markdown: verdict, counts, failures by check, conflicts, overrides."""
    verdict = "PASSED" if report.ok else "FAILED"
    parts = [
        f"# Data quality: {verdict}",
        f"{report.valid_rows} of {report.rows} rows valid, {report.invalid_rows} invalid, "
        f"{len(report.failures)} problem(s), {len(report.conflicts)} label conflict(s) "
        f"(warnings), {len(report.overrides)} override(s) applied.",
        "Files: " + ", ".join(code_span(f) for f in report.files),
    ]
    counts = dict(report.counts)
    if "file" in counts:
        invalid = invalid_rows_by_file(report.failures, counts["file"])
        by_file = [
            {
                "file": file,
                "rows": n,
                "valid": n - invalid[file],
                "invalid": invalid[file],
            }
            for file, n in counts.pop("file").items()
        ]
        parts += ["## Rows by file", markdown_table(by_file)]
    for dimension, by_value in counts.items():
        rows = [{dimension: value, "rows": n} for value, n in by_value.items()]
        parts += [
            f"## Rows by {dimension} ({sum(by_value.values())} readable rows)",
            markdown_table(rows),
        ]
    by_check: dict[str, int] = {}
    for problem in report.failures:
        by_check[problem.check] = by_check.get(problem.check, 0) + 1
    if report.failures:
        rules = [
            {
                "check": check,
                "problems": n,
                "rule": Markdown(CHECK_RULES.get(check) or check_rule(check)),
            }
            for check, n in by_check.items()
        ]
        parts += ["## Failures by check", markdown_table(rules)]
        parts += _listed("Failures", [code_span(p) for p in report.failures], "failures.csv")
    if report.conflicts:
        conflicts = [
            {
                "normalised prompt": shown(c.prompt, limit=CONFLICT_PROMPT_CHARS),
                "tools": ", ".join(c.tools),
                "rows": ", ".join(r.location for r in c.rows),
            }
            for c in report.conflicts
        ]
        parts += ["## Label conflicts (warnings, for annotators)", markdown_table(conflicts)]
    if report.overrides:
        overrides = [
            {
                "id": o.id,
                "row": o.row,
                "label": f"{o.old_tool} → {o.new_tool}",
                "reason": o.reason,
                "reviewer": o.reviewer,
                "override": o.override,
            }
            for o in report.overrides
        ]
        parts += ["## Label overrides applied", markdown_table(overrides)]
    if report.warnings:
        warnings = [markdown_text(w) for w in report.warnings]
        parts += _listed("Warnings", warnings, "data_quality.json (`warnings`)")
    return "\n\n".join(parts) + "\n"


def render_verdict(report: DataReport) -> str:
    """A failed gate in a few lines, failures first: the verdict, the first problems, then where
    the rest and the full report are."""
    listed = report.failures[:MAX_VERDICT_FAILURES]
    parts = [
        f"# Data gate FAILED: {report.invalid_rows} of {report.rows} rows invalid, "
        f"{len(report.failures)} problem(s)",
        "\n".join(f"- {code_span(problem)}" for problem in listed),
    ]
    more = len(report.failures) - len(listed)
    where = f" in `{report.run_dir}`" if report.run_dir else ""
    parts.append(
        (f"... and {more} more: " if more > 0 else "All problems: ")
        + f"`failures.csv`{where}; counts, checks and conflicts: the `data-quality-summary` "
        "artifact. Nothing was trained and no input was modified."
    )
    return "\n\n".join(parts) + "\n"


def _listed(title: str, items: list[str], everything_in: str) -> list[str]:
    """A section listing the first `MAX_LISTED_FAILURES` items, then how many more are where."""
    parts = [f"## {title}", "\n".join(f"- {item}" for item in items[:MAX_LISTED_FAILURES])]
    if len(items) > MAX_LISTED_FAILURES:
        parts.append(f"... {len(items) - MAX_LISTED_FAILURES} more in {everything_in}")
    return parts


def failure_records(failures: list[Problem]) -> list[dict[str, object]]:
    return [
        {"file": p.file, "line": p.line, "id": p.id, "check": p.check, "message": p.message}
        for p in failures
    ]


def conflict_records(conflicts: list[LabelConflict]) -> list[dict[str, object]]:
    return [
        {"prompt": c.prompt, "id": r.id, "location": r.location, "tool": r.tool}
        for c in conflicts
        for r in c.rows
    ]
