"""The mining tasks: mine predictions and write the review queue; write reviewed overrides.

The work is `toolgrpo.mining` (no Prefect); this module writes the files annotators read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from toolgrpo.mining.report import MiningReport, mine_errors, review_queue
from toolgrpo.mining.review import merged_overrides
from toolgrpo.reporting.mining import findings_markdown
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.overrides import LabelOverride


def write_mining(report: MiningReport, out_dir: Path) -> dict[str, Path]:
    """review_queue.csv / .jsonl, findings.json and findings.md in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "queue_csv": out_dir / "review_queue.csv",
        "queue_jsonl": out_dir / "review_queue.jsonl",
        "findings_json": out_dir / "findings.json",
        "findings_md": out_dir / "findings.md",
    }
    queue = review_queue(report)
    queue.write_csv(paths["queue_csv"])
    queue.write_ndjson(paths["queue_jsonl"])
    paths["findings_json"].write_text(report.model_dump_json(indent=2), encoding="utf-8")
    paths["findings_md"].write_text(findings_markdown(report) + "\n", encoding="utf-8")
    return paths


@task(name="mine errors", task_run_name="mine", cache_policy=NO_CACHE)
def mine(
    predictions: pl.DataFrame,
    audit: pl.DataFrame | None,
    out_dir: Path,
    catalogue: Catalogue | None = None,
) -> MiningReport:
    """Mine eval predictions (and the training audit) and write the review queue to `out_dir`."""
    report = mine_errors(predictions, audit, catalogue)
    write_mining(report, out_dir)
    return report


@task(name="write label overrides", cache_policy=NO_CACHE)
def write_label_overrides(overrides: Iterable[LabelOverride], path: Path) -> Path:
    """Merge `overrides` into the JSONL file at `path` (created if absent)."""
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(merged_overrides(existing, overrides), encoding="utf-8")
    return path
