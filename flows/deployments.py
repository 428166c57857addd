"""The scheduled deployments: nightly retraining and an hourly data-quality report.

`toolgrpo serve` serves both from this process (a local Prefect server shows them); prefect.yaml
declares the same two for `prefect deploy` onto a work pool.
"""

from __future__ import annotations

from prefect import serve
from prefect.deployments.runner import RunnerDeployment

from toolgrpo.flows.data_quality import data_quality
from toolgrpo.flows.retrain import RetrainParams, retrain

NIGHTLY_CRON = "0 2 * * *"  # 02:00 every night; unchanged data hits the training cache
DATA_QUALITY_INTERVAL_S = 3600


def deployments(params: RetrainParams | None = None) -> list[RunnerDeployment]:
    """The nightly retrain (with `params`) and the hourly report on the same data files."""
    params = params or RetrainParams()
    return [
        retrain.to_deployment(
            name="nightly-retrain",
            cron=NIGHTLY_CRON,
            parameters={"params": params.model_dump(mode="json")},
            description="Gate, train SFT + GRPO/NGRPO, evaluate, mine, report.",
            tags=["toolgrpo", "training"],
        ),
        data_quality.to_deployment(
            name="data-quality-hourly",
            interval=DATA_QUALITY_INTERVAL_S,
            parameters={
                "files": [str(p) for p in [*params.train_files, *params.eval_files]],
                "out": str(params.out),
            },
            description="Validate the labelled data and publish the data-quality report.",
            tags=["toolgrpo", "data-quality"],
        ),
    ]


def serve_deployments(params: RetrainParams | None = None) -> None:
    """Serve both deployments with their schedules until interrupted."""
    serve(*deployments(params))
