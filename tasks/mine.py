"""The mining tasks: mine predictions and write the review queue; write reviewed overrides.

The work is `toolgrpo.mining` (no Prefect); this module writes the files annotators read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from toolgrpo.mining.miner import MiningReport, mine_errors, review_queue
from toolgrpo.mining.review import ReviewError, merged_overrides
from toolgrpo.reporting.mining import findings_markdown
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.files import (
    exclusive_lock,
    replace_file,
    write_csv_file,
    write_text_file,
)
from toolgrpo.schemas.label_overrides import LabelOverride
from toolgrpo.validation.loader import read_overrides


def write_mining(report: MiningReport, out_dir: Path) -> dict[str, Path]:
    """review_queue.csv / .jsonl, findings.json and findings.md in `out_dir`."""
    paths = {
        "queue_csv": out_dir / "review_queue.csv",
        "queue_jsonl": out_dir / "review_queue.jsonl",
        "findings_json": out_dir / "findings.json",
        "findings_md": out_dir / "findings.md",
    }
    queue = review_queue(report)
    write_csv_file(queue, paths["queue_csv"])
    replace_file(paths["queue_jsonl"], queue.write_ndjson)
    write_text_file(paths["findings_json"], report.model_dump_json(indent=2))
    write_text_file(paths["findings_md"], findings_markdown(report) + "\n")
    return paths


@task(name="mine errors", task_run_name="mine", cache_policy=NO_CACHE)
def mine(
    predictions: pl.DataFrame,
    audit: pl.DataFrame | None,
    out_dir: Path,
    catalogue: Catalogue | None = None,
    cross_fitted: pl.DataFrame | None = None,
    labels: pl.DataFrame | None = None,
) -> MiningReport:
    """Mine eval predictions (and the training audit, its cross-fitted probabilities, the labels'
    context: see `mine_errors`) and write the review queue to `out_dir`."""
    report = mine_errors(predictions, audit, catalogue, cross_fitted, labels)
    write_mining(report, out_dir)
    return report


@task(name="write label overrides", cache_policy=NO_CACHE)
def write_label_overrides(overrides: Iterable[LabelOverride], path: Path) -> Path:
    """Merge `overrides` into the JSONL file at `path` (created if absent), replaced whole.

    The read, merge and replace hold the file's exclusive lock: two reviewers applying at once
    both keep their decisions (the second waits, saying so). Raises `ReviewError` naming the
    lines of an existing file that cannot be read back (a half-written line, a duplicate id): it
    is left as it is, for a person to fix.
    """

    def say_waiting() -> None:
        print(f"waiting for another apply-review to finish writing {path}")

    with exclusive_lock(path, on_wait=say_waiting):
        existing: dict[str, tuple[int, LabelOverride]] = {}
        if path.exists():
            existing, problems = read_overrides(path)
            if problems:
                raise ReviewError(problems)
        kept = (override for _, override in existing.values())
        return write_text_file(path, merged_overrides(kept, overrides))
