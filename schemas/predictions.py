"""The predictions frame: one row per evaluated sample, what the model said and how it scored.

Evaluation writes it (`evaluation.predict`), metrics and error mining read it. Per-tool
probabilities are one float column per catalogue tool, `p_<tool>`, normalised over the catalogue
at the action slot; `probability_columns(catalogue)` names them in catalogue order.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl
from pandera.api.polars.model_config import BaseConfig

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.samples import CONDITIONS

PROBABILITY_PREFIX = "p_"
# Probabilities are softmax outputs stored as float64; this much rounding is tolerated.
PROBABILITY_SUM_TOLERANCE = 1e-4


def probability_columns(catalogue: Catalogue) -> list[str]:
    """The per-tool probability column names, in catalogue order."""
    return [PROBABILITY_PREFIX + name for name in catalogue.names]


class Predictions(pa.DataFrameModel):
    """One evaluated row: the sample, the model's completion, its checks, per-tool probabilities."""

    id: str = pa.Field(unique=True)
    scenario_id: str
    kind: str = pa.Field(isin=["single", "multi"])
    lang: str = pa.Field(isin=["en", "zh"])
    step: int = pa.Field(ge=1)
    n_steps: int = pa.Field(ge=1)
    source: str = pa.Field(description="the file the row came from, e.g. eval/unseen_phrasing")
    prompt: str
    label_tool: str
    condition: str | None = pa.Field(
        nullable=True, isin=list(CONDITIONS), description="the sample's branch, when it has one"
    )
    predicted_tool: str = pa.Field(nullable=True, description="null when the output has no tool")
    # Null on a row scored, not decoded (the training audit): only the whole answer shows these.
    completion: str = pa.Field(nullable=True)
    parsed_ok: bool = pa.Field(
        nullable=True, description="the completion is one object of the output format"
    )
    params_valid: bool = pa.Field(
        nullable=True, description="params satisfy the predicted tool's schema"
    )
    params_exact: bool = pa.Field(
        nullable=True, description="right tool and params equal to the label's"
    )
    consistent: bool = pa.Field(
        nullable=True, description="the thought announces the tool the action calls"
    )
    tool_probabilities: float = pa.Field(alias="p_.+", regex=True, ge=0.0, le=1.0)

    class Config(BaseConfig):
        strict = True

    @pa.dataframe_check
    def step_within_scenario(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """A row's step is never beyond its scenario's number of steps."""
        return data.lazyframe.select(pl.col("step") <= pl.col("n_steps"))

    @pa.dataframe_check
    def probabilities_sum_to_one(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """Each row's per-tool probabilities form a distribution over the catalogue."""
        total = pl.sum_horizontal(pl.col(f"^{PROBABILITY_PREFIX}.+$"))
        return data.lazyframe.select((total - 1.0).abs() <= PROBABILITY_SUM_TOLERANCE)


class PredictionsError(ValueError):
    """A predictions frame that does not match the contract; the message names rows and checks."""


def validate_predictions(frame: pl.DataFrame, catalogue: Catalogue) -> pl.DataFrame:
    """`frame` checked against `Predictions` and the catalogue (one probability column per tool).

    Raises `PredictionsError` listing every failing column/check with row indices.
    """
    missing = [c for c in probability_columns(catalogue) if c not in frame.columns]
    extra = [
        c
        for c in frame.columns
        if c.startswith(PROBABILITY_PREFIX) and c not in probability_columns(catalogue)
    ]
    if missing or extra:
        raise PredictionsError(
            f"probability columns do not match the catalogue: missing {missing}, unknown {extra}"
        )
    if "label_tool" in frame.columns:
        unknown = frame.filter(~pl.col("label_tool").is_in(catalogue.names))
        if unknown.height:
            first = unknown.row(0, named=True)
            raise PredictionsError(
                f"{unknown.height} row(s) labelled with a tool not in the catalogue, e.g. id "
                f"{first.get('id')}: {first['label_tool']!r}"
            )
    try:
        return Predictions.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases.select("column", "check", "index", "failure_case")
        lines = [_failure_line(row) for row in cases.head(20).iter_rows(named=True)]
        more = f"\n… and {cases.height - 20} more" if cases.height > 20 else ""
        raise PredictionsError("predictions frame invalid:\n" + "\n".join(lines) + more) from None


def _failure_line(case: dict[str, object]) -> str:
    """One failure as a user reads it: row, column, check, and the offending value."""
    if case["index"] is None:  # a frame-wide check, e.g. an unexpected column
        return f"frame: [check: {case['check']}] {case['failure_case']}"
    if case["column"] is None:  # a row-wide check: the failure case is the whole row
        return f"row {case['index']}: [check: {case['check']}]"
    value = str(case["failure_case"])[:80]
    return f"row {case['index']}: column {case['column']} [check: {case['check']}] value {value}"
