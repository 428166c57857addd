"""The apply-review flow: reviewed decisions become label overrides for the next run."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from toolgrpo.data import LABEL_OVERRIDES, SHIPPED_SAMPLES
from toolgrpo.mining.review import overrides_from_review
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.mine import write_label_overrides


@flow(name="apply-review", log_prints=True)
def apply_review(
    reviewed: Path,
    overrides: Path = LABEL_OVERRIDES,
    data: list[Path] = SHIPPED_SAMPLES,
    allow_unknown: bool = False,
) -> int:
    """Merge the decisions of REVIEWED (a filled-in review_queue.csv) into OVERRIDES; returns
    how many decisions were merged.

    Each decision is checked against its row in DATA as the next data gate will check it; an id
    of no row is refused unless ALLOW_UNKNOWN. Raises `ReviewError` naming the CSV (or overrides
    file) line of every problem, and then writes nothing.
    """
    rows = load_samples(data).frame
    decisions = overrides_from_review(reviewed, rows, allow_unknown=allow_unknown)
    write_label_overrides(decisions, overrides)
    print(f"{len(decisions)} reviewed decision(s) merged into {overrides}")
    return len(decisions)
