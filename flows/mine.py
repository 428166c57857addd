"""The mine flow: categorise the errors of saved predictions, rank label issues, write the queue."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import flow

from toolgrpo.mining.miner import MiningReport
from toolgrpo.schemas.catalogue import Catalogue, catalogue_at
from toolgrpo.schemas.inputs import check_input
from toolgrpo.schemas.predictions import validate_predictions
from toolgrpo.tasks.mine import mine
from toolgrpo.tasks.runs import new_run_dir


def read_predictions(path: Path, catalogue: Catalogue) -> pl.DataFrame:
    """A predictions.parquet, checked against the predictions contract of `catalogue` (raises
    `PredictionsError`, OSError or a polars error naming what is wrong)."""
    check_input(path)
    return validate_predictions(pl.read_parquet(path), catalogue)


@flow(name="mine", log_prints=True)
def mine_predictions(
    predictions: Path,
    audit: Path | None = None,
    out: Path = Path("runs"),
    catalogue: Path | None = None,
) -> tuple[MiningReport, Path]:
    """Mine PREDICTIONS (and AUDIT, the training rows' predictions), made with the tool
    catalogue CATALOGUE (default: the shipped data/tools.json), into a new folder of OUT;
    returns the report and that folder."""
    tools = catalogue_at(catalogue)
    eval_frame = read_predictions(predictions, tools)
    audit_frame = read_predictions(audit, tools) if audit is not None else None
    out_dir = new_run_dir(out, "mine")
    return mine(eval_frame, audit_frame, out_dir, tools), out_dir
