"""The data-gate tasks: validate, count, and publish the report (files and artifacts); the
failed gate as a flow's final state, with its problem lines in the flow run's log; the gate of a
flow that trains (`data_gate`) and the gated training rows it writes.

The checks are `toolgrpo.validation` (no Prefect); this module writes report.md, failures.csv,
conflicts.csv and data_quality.json, and publishes the same as Prefect artifacts.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

import polars as pl
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from toolgrpo.reporting.data_quality import (
    MAX_LISTED_FAILURES,
    conflict_records,
    failure_records,
    render_markdown,
    render_verdict,
)
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.data_quality import DataReport
from toolgrpo.schemas.files import replace_file, write_csv_file, write_text_file
from toolgrpo.schemas.records import CONTRACT_COLUMNS
from toolgrpo.tasks.artifacts import send_artifact
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import failed_run, told_already
from toolgrpo.validation import gate
from toolgrpo.validation.gate import DataGateFailed
from toolgrpo.validation.loader import LoadedSamples
from toolgrpo.validation.read_ahead import checked_ahead

DATA_QUALITY_FILE = "data_quality.json"
# The gated rows a stage reads, by the training config field that names each file.
GATED_FILES = {
    "data.train_single_step": "single_step.jsonl",
    "data.train_multistep": "multistep.jsonl",
    "data.train_aux": "aux.jsonl",
}
# Problem lines logged to the flow run; the rest are counted (failures.csv has them all).
MAX_LOGGED_PROBLEMS = 100


@task(name="validate samples", task_run_name="validate", cache_policy=NO_CACHE)
def validate_samples(
    loaded: LoadedSamples,
    train_files: Collection[str] | None = None,
    eval_files: Collection[str] | None = None,
    catalogue: Catalogue | None = None,
) -> DataReport:
    """`validation.gate.validate_samples` as a Prefect task (the report of the check
    `validation.read_ahead.read_ahead` ran, when it checked these rows with these roles and
    catalogue)."""
    ahead = checked_ahead(loaded, train_files, eval_files, catalogue)
    if ahead is None:
        return gate.validate_samples(loaded, train_files, eval_files, catalogue)
    get_run_logger().info(
        "rows checked ahead of this task, while the command started the flow run: %.1f s",
        ahead.seconds,
    )
    return ahead.report


@task(name="count rows", task_run_name="count rows", cache_policy=NO_CACHE)
def summarise_samples(loaded: LoadedSamples) -> dict[str, dict[str, int]]:
    """`validation.gate.count_rows` as a Prefect task."""
    return gate.count_rows(loaded)


# Marks a problem line in a log record (`extra`), so that a command that prints the problem
# lines itself can keep them off its console (`flows.prefect_api.quiet_console`).
PROBLEM_LINE = "toolgrpo_problem_line"
VERDICT_ARTIFACT = "data-gate-verdict"


@task(name="data gate verdict", task_run_name="gate verdict", cache_policy=NO_CACHE)
def gate_verdict(report: DataReport) -> None:
    """The failed gate as a red task run: logs its problem lines (the first
    `MAX_LOGGED_PROBLEMS`, then how many more) at ERROR and raises `DataGateFailed`."""
    logger = get_run_logger()
    for problem in report.failures[:MAX_LOGGED_PROBLEMS]:
        logger.error("%s", problem, extra={PROBLEM_LINE: True})
    hidden = len(report.failures) - MAX_LOGGED_PROBLEMS
    if hidden > 0:
        logger.error("... and %d more problem(s): failures.csv in %s", hidden, report.run_dir)
    raise DataGateFailed(report)


def failed_gate(report: DataReport) -> State:
    """The Failed state a flow returns when `report` fails: the gate verdict task turns red with
    the problem lines in its log, the flow run gets a verdict artifact that lists the failures
    first, and the run ends red with a one-line message and no traceback; calling the flow
    raises `DataGateFailed` with the report."""
    failure = DataGateFailed(report)
    told_already(failure)
    gate_verdict(report, return_state=True)
    send_artifact(
        create_markdown_artifact,
        Path(report.run_dir or ".") / "report.md",
        key=VERDICT_ARTIFACT,
        markdown=render_verdict(report),
        description=str(failure),
    )
    return failed_run(failure)


@task(name="publish data report", task_run_name="data report", cache_policy=NO_CACHE)
def publish_data_report(
    report: DataReport, counts: dict[str, dict[str, int]], run_dir: Path
) -> DataReport:
    """Write report.md, failures.csv, conflicts.csv and data_quality.json to `run_dir` and publish
    the same as Prefect artifacts; returns the report with its counts and run folder."""
    report = report.model_copy(update={"counts": counts, "run_dir": str(run_dir)})
    markdown = render_markdown(report)
    write_text_file(run_dir / "report.md", markdown)
    failure_schema = {
        "file": pl.String,
        "line": pl.Int64,
        "id": pl.String,
        "check": pl.String,
        "message": pl.String,
    }
    write_csv_file(
        pl.DataFrame(failure_records(report.failures), schema=failure_schema),
        run_dir / "failures.csv",
    )
    conflict_schema = {k: pl.String for k in ("prompt", "id", "location", "tool")}
    write_csv_file(
        pl.DataFrame(conflict_records(report.conflicts), schema=conflict_schema),
        run_dir / "conflicts.csv",
    )
    write_text_file(
        run_dir / DATA_QUALITY_FILE,
        json.dumps(report.model_dump(mode="json"), ensure_ascii=False, indent=2),
    )

    verdict = "passed" if report.ok else "FAILED"
    send_artifact(
        create_markdown_artifact,
        run_dir / "report.md",
        key="data-quality-summary",
        markdown=markdown,
        description=f"data quality {verdict}: {report.rows_line()}",
    )
    counts_table = [
        {"dimension": dimension, "value": value, "rows": rows}
        for dimension, by_value in counts.items()
        for value, rows in by_value.items()
    ]
    send_artifact(
        create_table_artifact,
        run_dir / DATA_QUALITY_FILE,
        key="data-quality-counts",
        table=counts_table,
        description="rows by file (every row read), kind, lang, tool and step (readable rows)",
    )
    listed = report.failures[:MAX_LISTED_FAILURES]
    send_artifact(
        create_table_artifact,
        run_dir / "failures.csv",
        key="data-quality-failures",
        table=failure_records(listed),
        description=f"{len(listed)} of {len(report.failures)} problems; all in failures.csv",
    )
    send_artifact(
        create_table_artifact,
        run_dir / "conflicts.csv",
        key="data-quality-label-conflicts",
        table=conflict_records(report.conflicts),
        description=f"{len(report.conflicts)} label conflict(s): warnings for annotators",
    )
    return report


def rows_of(frame: pl.DataFrame, files: list[Path]) -> pl.DataFrame:
    """The loaded rows that were read from `files`."""
    return frame.filter(pl.col("file").is_in({str(path) for path in files}))


def write_training_rows(
    frame: pl.DataFrame, train_files: list[Path], aux_files: list[Path], data_dir: Path
) -> dict[str, Path]:
    """The gated rows (label overrides applied) as the JSONL files the stages read, by the
    training config field that names each: the single- and multi-step rows of `train_files`,
    and SFT's auxiliary rows of `aux_files` when there are any. Every contract column is kept:
    GRPO's arithmetic component reads a step's `condition`, so the run's key hashes it too."""
    train = rows_of(frame, train_files)
    parts = {
        "data.train_single_step": train.filter(pl.col("kind") == "single"),
        "data.train_multistep": train.filter(pl.col("kind") == "multi"),
    }
    if aux_files:
        parts["data.train_aux"] = rows_of(frame, aux_files)
    return {
        field: replace_file(
            data_dir / GATED_FILES[field], rows.select(CONTRACT_COLUMNS).write_ndjson
        )
        for field, rows in parts.items()
    }


def data_gate(
    train_files: list[Path],
    eval_files: list[Path],
    label_overrides: Path | None,
    catalogue: Catalogue,
    report_dir: Path,
) -> tuple[LoadedSamples, DataReport]:
    """Validate every input file against `catalogue`, an eval row found in the training files
    included (leakage), and publish the report in `report_dir`; a flow that trains stops before
    any training when it fails (`failed_gate`)."""
    if label_overrides is not None and not label_overrides.is_file():
        label_overrides = None
    loaded = load_samples([*train_files, *eval_files], label_overrides, catalogue)
    report = validate_samples(
        loaded, [str(p) for p in train_files], [str(p) for p in eval_files], catalogue
    )
    return loaded, publish_data_report(report, summarise_samples(loaded), report_dir)
