"""The row as a file holds it (`SampleRecord`): what the loader reads, before the contract's
rules (`samples`). Apart from pandera, so that a command can start reading its files before the
checks' libraries are imported."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, ConfigDict


class SampleRecord(BaseModel):
    """One row as read from a file: the contract's fields with their JSON types, never coerced.

    It gates what can become a table row at all; the rules about values live in `samples.Sample`.
    """

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    id: str
    scenario_id: str
    kind: str
    lang: str
    step: int
    n_steps: int
    prompt: str
    solution: str
    tool: str
    condition: str | None = None  # optional: only conditional steps carry it


CONTRACT_COLUMNS = list(SampleRecord.model_fields)
RECORD_SCHEMA = pl.Schema(
    {
        name: pl.Int64 if field.annotation is int else pl.String
        for name, field in SampleRecord.model_fields.items()
    }
)
