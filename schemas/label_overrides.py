"""Label overrides: reviewers' corrections (data/label_overrides.jsonl) and where they applied."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LabelOverride(BaseModel):
    """A reviewer's correction of one row's label (a line of data/label_overrides.jsonl)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    id: str
    tool: str
    solution: str | None = None  # a full solution JSON; default: the old one with the tool swapped
    reason: str
    reviewer: str


class AppliedOverride(BaseModel):
    """A row whose label an override replaced, for the report."""

    model_config = ConfigDict(frozen=True)
    id: str
    row: str  # file:line of the data row
    override: str  # file:line of the override
    old_tool: str
    new_tool: str
    reason: str
    reviewer: str
