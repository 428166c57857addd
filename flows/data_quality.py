"""The data-quality flow: load sample files, check every row, publish the report."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.validate import (
    DataReport,
    publish_data_report,
    summarise_samples,
    validate_samples,
)


@flow(name="data-quality")
def data_quality(
    files: list[Path], out: Path = Path("runs"), overrides: Path | None = None
) -> DataReport:
    """Validate FILES (JSONL or parquet) against the row contract; report in a new folder of OUT.

    The report's `ok` says whether every row passed. Label conflicts are warnings.
    """
    samples = load_samples(files, overrides)
    report = validate_samples(samples)
    counts = summarise_samples(samples)
    return publish_data_report(report, counts, new_run_dir(out, "data-quality"))
