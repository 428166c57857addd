"""The data-quality flow: load sample files, check every row, publish the report; a failing row or
file turns the flow run red, with its problem lines in the run's log."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from toolgrpo.schemas.catalogue import catalogue_at
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import (
    SHORT_HASH,
    clear_earlier_attempts,
    files_hash,
    new_run_dir,
    run_name,
    tag_flow_run,
)
from toolgrpo.tasks.validate import (
    DataReport,
    failed_gate,
    publish_data_report,
    summarise_samples,
    validate_samples,
)

# Every data-quality run's tags, from the CLI or a deployment (which adds its own name).
DATA_QUALITY_TAGS = ("toolgrpo", "data-quality")


def _data_quality_run_name() -> str:
    """`data-quality-5-files-20261201-0529`."""
    given = flow_run.parameters
    count = sum(len(given.get(name) or []) for name in ("files", "train_files", "eval_files"))
    return run_name("data-quality", f"{count}-files")


@flow(name="data-quality", flow_run_name=_data_quality_run_name)
def data_quality(
    files: list[Path] | None = None,
    out: Path = Path("runs"),
    overrides: Path | None = None,
    train_files: list[Path] | None = None,
    eval_files: list[Path] | None = None,
    catalogue: Path | None = None,
) -> DataReport:
    """Validate labelled rows against the row contract and the tool catalogue; report in a new
    folder of `out`.

    The roles matter for leakage: an eval row whose scenario_id or normalised prompt is in a
    training row fails; files of unknown role only warn when they share rows with another file.
    Label conflicts are warnings. Once the report is written, any failing row or file ends the
    run Failed (calling the flow then raises `DataGateFailed` with the report).

    Args:
        files: row files (JSONL or parquet) of no particular role
        out: each report gets a new folder here (report.md, failures.csv, data_quality.json)
        overrides: reviewed label decisions applied to the rows (skipped if the file is absent)
        train_files: training rows: an eval row found in them fails the check
        eval_files: held-out rows, split from the training rows by scenario
        catalogue: the tool catalogue (JSON) the rows are checked against; empty: the shipped
            data/tools.json
    """
    clear_earlier_attempts()
    train_files, eval_files = train_files or [], eval_files or []
    paths = [*(files or []), *train_files, *eval_files]
    tools = catalogue_at(catalogue)
    samples = load_samples(paths, overrides, tools)
    # sha256 releases the GIL: the tag's hash runs while the rows are checked (a command has
    # read and checked them ahead, `validation.read_ahead`; a deployment's run checks them here)
    checking = validate_samples.submit(
        samples, list(map(str, train_files)), list(map(str, eval_files)), tools
    )
    tag_flow_run(*DATA_QUALITY_TAGS, f"data:{files_hash(paths)[:SHORT_HASH]}")
    checked = checking.result()
    counts = summarise_samples(samples)
    report = publish_data_report(checked, counts, new_run_dir(out, "data-quality").resolve())
    return report if report.ok else failed_gate(report)  # type: ignore[return-value]  # a flow fails by returning its Failed state (Prefect's way)
