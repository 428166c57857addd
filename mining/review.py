"""Reviewed decisions → label overrides: what annotators decided in the review queue."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from toolgrpo.mining.report import REVIEW_COLUMNS
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.schemas.overrides import LabelOverride


class ReviewError(ValueError):
    """A reviewed queue that cannot become overrides; the message names file, line and field."""


KEEP = "keep"


def overrides_from_review(path: Path, catalogue: Catalogue | None = None) -> list[LabelOverride]:
    """Overrides (`schemas.overrides.LabelOverride`) from a review queue CSV annotators filled in.

    `decision` is `keep` (the label stands) or the right tool, `reviewer` says who decided.
    A relabel carries `proposed_solution` (the model's answer, editable) when it calls the
    decided tool; otherwise the loader keeps the row's params if they fit the new tool.
    Rows without a decision are not reviewed yet and are skipped.
    """
    catalogue = catalogue or default_catalogue()
    with Path(path).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        needed = {"id", "label", "proposed_solution", *REVIEW_COLUMNS}
        missing = needed - set(reader.fieldnames or [])
        if missing:
            raise ReviewError(f"{path}: review columns missing: {sorted(missing)}")
        return [
            _override(row, f"{path}:{line}", catalogue)
            for line, row in enumerate(reader, start=2)
            if (row["decision"] or "").strip()
        ]


def _override(row: dict[str, str], where: str, catalogue: Catalogue) -> LabelOverride:
    decision, reviewer = row["decision"].strip(), (row["reviewer"] or "").strip()
    if not reviewer:
        raise ReviewError(f"{where}: id {row['id']}: a decision needs a reviewer")
    if decision in (KEEP, row["label"]):
        tool, solution = row["label"], None
    elif decision not in catalogue.names:
        raise ReviewError(f"{where}: id {row['id']}: decision {decision!r} is not a tool or 'keep'")
    else:
        tool, solution = decision, (row["proposed_solution"] or "").strip() or None
        parsed = first_json_object(solution)
        action = parsed.get("action") if parsed else None
        if not isinstance(action, dict) or action.get("tool") != decision:
            solution = None  # an answer for another tool: not the reviewer's decision
        elif (error := catalogue.params_error(decision, action.get("params"))) is not None:
            raise ReviewError(f"{where}: id {row['id']}: proposed_solution params: {error}")
    return LabelOverride(
        id=row["id"],
        tool=tool,
        solution=solution,
        reason=(row["reason"] or "").strip(),
        reviewer=reviewer,
    )


def merged_overrides(existing: str, overrides: Iterable[LabelOverride]) -> str:
    """The overrides file's text with `overrides` merged into `existing` (its old text): one
    line per id, the latest decision wins."""
    merged: dict[str, LabelOverride] = {}
    for line in existing.splitlines():
        if line.strip():
            old = LabelOverride.model_validate_json(line)
            merged[old.id] = old
    for override in overrides:
        merged[override.id] = override
    return "".join(o.model_dump_json(exclude_none=True) + "\n" for o in merged.values())
