"""The mine flow: categorise the errors of saved predictions, rank label issues, write the queue."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import flow

from toolgrpo.mining.report import MiningReport
from toolgrpo.schemas.catalogue import default_catalogue
from toolgrpo.schemas.predictions import validate_predictions
from toolgrpo.tasks.mine import mine
from toolgrpo.tasks.runs import new_run_dir


def read_predictions(path: Path) -> pl.DataFrame:
    """A predictions.parquet, checked against the predictions contract (raises
    `PredictionsError`, OSError or a polars error naming what is wrong)."""
    return validate_predictions(pl.read_parquet(path), default_catalogue())


@flow(name="mine", log_prints=True)
def mine_predictions(
    predictions: Path, audit: Path | None = None, out: Path = Path("runs")
) -> tuple[MiningReport, Path]:
    """Mine PREDICTIONS (and AUDIT, the training rows' predictions) into a new folder of OUT;
    returns the report and that folder."""
    eval_frame = read_predictions(predictions)
    audit_frame = read_predictions(audit) if audit is not None else None
    out_dir = new_run_dir(out, "mine")
    return mine(eval_frame, audit_frame, out_dir), out_dir
