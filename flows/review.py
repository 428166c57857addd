"""The apply-review flow: reviewed decisions become label overrides for the next run."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from toolgrpo.data import LABEL_OVERRIDES
from toolgrpo.mining.review import overrides_from_review
from toolgrpo.tasks.mine import write_label_overrides


@flow(name="apply-review", log_prints=True)
def apply_review(reviewed: Path, overrides: Path = LABEL_OVERRIDES) -> int:
    """Merge the decisions of REVIEWED (a filled-in review_queue.csv) into OVERRIDES; returns
    how many decisions were merged. Raises `ReviewError` naming the CSV line of a bad one."""
    decisions = overrides_from_review(reviewed)
    write_label_overrides(decisions, overrides)
    print(f"{len(decisions)} reviewed decision(s) merged into {overrides}")
    return len(decisions)
