"""The row as a file holds it (`SampleRecord`): what the loader reads, before the contract's
rules (`samples`). The one declaration of the contract's columns: the loader's polars schema and
the pandera models' columns are read from it. Apart from pandera, so that a command can start
reading its files before the checks' libraries are imported."""

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
# Each column's type: a number (`int`) or a text (`str`); the optional ones may be null.
COLUMN_TYPES: dict[str, type] = {
    name: int if field.annotation is int else str
    for name, field in SampleRecord.model_fields.items()
}
OPTIONAL_COLUMNS = [
    name for name, field in SampleRecord.model_fields.items() if not field.is_required()
]
RECORD_SCHEMA = pl.Schema(
    {name: pl.Int64 if kind is int else pl.String for name, kind in COLUMN_TYPES.items()}
)
