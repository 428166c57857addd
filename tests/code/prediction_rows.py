"""Hand-made rows of the predictions frame, for metrics and mining tests."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from toolgrpo.schemas.catalogue import load_catalogue
from toolgrpo.schemas.predictions import probability_columns

CATALOGUE = load_catalogue()
NO_TOOL = ""  # `predicted=NO_TOOL`: the output named no tool (unparseable)


def completion_for(tool: str, params: dict[str, Any] | None = None) -> str:
    """A well-formed completion calling `tool`."""
    action = {"tool": tool, "params": params if params is not None else {"account": "ACC001"}}
    return json.dumps({"thought": "I check it.", "action": action, "plan": ["do it"]})


def prediction_row(
    row_id: str,
    label: str,
    predicted: str | None = None,
    *,
    prompt: str | None = None,
    kind: str = "single",
    step: int = 1,
    n_steps: int | None = None,
    scenario_id: str | None = None,
    lang: str = "en",
    source: str = "eval/single_step",
    confidence: float = 0.9,
    parsed_ok: bool | None = None,
    params_valid: bool | None = None,
    params_exact: bool | None = None,
    consistent: bool = True,
    params: dict[str, Any] | None = None,
    condition: str | None = None,
) -> dict[str, Any]:
    """One predictions row; `predicted` defaults to the label (a right answer) and gets
    `confidence` of the probability mass, the rest spread over the other tools. Without a
    `condition` the row has no such column, as predictions written before the label."""
    predicted = label if predicted is None else predicted
    ok = predicted in CATALOGUE.names
    names = CATALOGUE.names
    top = predicted if ok else label
    rest = (1.0 - confidence) / (len(names) - 1)
    probabilities = {
        column: confidence if name == top else rest
        for column, name in zip(probability_columns(CATALOGUE), names, strict=True)
    }
    return {
        "id": row_id,
        "scenario_id": scenario_id or row_id,
        "kind": kind,
        "lang": lang,
        "step": step,
        "n_steps": n_steps or (1 if kind == "single" else max(step, 2)),
        "source": source,
        "prompt": prompt or f"request {row_id}",
        "label_tool": label,
        "predicted_tool": predicted if predicted != NO_TOOL else None,
        "completion": completion_for(predicted, params) if ok else "not json {",
        "parsed_ok": ok if parsed_ok is None else parsed_ok,
        "params_valid": ok if params_valid is None else params_valid,
        "params_exact": (ok and predicted == label) if params_exact is None else params_exact,
        "consistent": consistent,
        **({"condition": condition} if condition else {}),
        **probabilities,
    }


def predictions_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema_overrides={"predicted_tool": pl.String})
