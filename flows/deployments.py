"""The scheduled deployments: nightly retraining and an hourly data-quality report, and the
automation that tells a person when a run of either fails.

`toolgrpo serve` serves both from this process (a local Prefect server shows them); prefect.yaml
declares the same two for `prefect deploy` onto a work pool. `toolgrpo notify-on-failure`
creates the automation of notify-on-failure.yaml on the server.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import yaml
from prefect import get_client, serve
from prefect.deployments.runner import RunnerDeployment
from prefect.events.schemas.automations import AutomationCore
from prefect.exceptions import ObjectNotFound

from toolgrpo.flows.data_quality import data_quality
from toolgrpo.flows.retrain import SHIPPED_EVAL_FILES, retrain
from toolgrpo.training.overrides import load_preset

NIGHTLY_CRON = "0 2 * * *"  # 02:00 every night; unchanged data hits the training cache
DATA_QUALITY_INTERVAL_S = 3600
RETRAIN_DEPLOYMENT = "nightly-retrain"
DATA_QUALITY_DEPLOYMENT = "data-quality-hourly"
AUTOMATION_FILE = Path(__file__).with_name("notify-on-failure.yaml")


class NotificationError(ValueError):
    """The notification block named for the automation cannot be used; says which and why."""


def deployments(preset: str = "cpu", out: Path = Path("runs")) -> list[RunnerDeployment]:
    """The nightly retrain (of `preset`, into `out`) and the hourly report on the same data
    files — the preset's training rows and the rows SFT mixes in, the eval files — with the same
    roles (so an eval row found in the training files fails both); every other parameter is the
    retrain flow's default, listed on the deployment's form."""
    data = load_preset(preset).data
    return [
        retrain.to_deployment(  # type: ignore[list-item]  # sync call: the deployment
            name=RETRAIN_DEPLOYMENT,
            cron=NIGHTLY_CRON,
            parameters={"preset": preset, "out": str(out)},
            description="Gate, train SFT + GRPO/NGRPO, evaluate, mine, report.",
            tags=["toolgrpo", "training"],
        ),
        data_quality.to_deployment(  # type: ignore[list-item]  # sync call: the deployment
            name=DATA_QUALITY_DEPLOYMENT,
            interval=DATA_QUALITY_INTERVAL_S,
            parameters={
                "train_files": [str(p) for p in [*data.training_files(), *data.mixed_in_aux()]],
                "eval_files": [str(p) for p in SHIPPED_EVAL_FILES],
                "out": str(out),
            },
            description="Validate the labelled data and publish the data-quality report.",
            tags=["toolgrpo", "data-quality"],
        ),
    ]


def serve_deployments(preset: str = "cpu", out: Path = Path("runs")) -> None:
    """Serve both deployments with their schedules until interrupted."""
    serve(*deployments(preset, out))


def failure_automation(block_document_id: UUID) -> AutomationCore:
    """The automation of notify-on-failure.yaml, notifying through that block document."""
    spec = yaml.safe_load(AUTOMATION_FILE.read_text(encoding="utf-8"))
    for action in spec["actions"]:
        action["block_document_id"] = str(block_document_id)
    return AutomationCore.model_validate(spec)


def notify_on_failure(block: str) -> UUID:
    """Create the failure automation, notifying through `block` (`<block type>/<name>`, e.g.
    `slack-webhook/toolgrpo-alerts`), in place of any earlier one of the same name; returns its
    id. Raises `NotificationError` when the block cannot be found."""
    block_type, _, name = block.partition("/")
    if not name:
        raise NotificationError(f"--block takes <block type>/<name>, got {block!r}")
    with get_client(sync_client=True) as client:
        try:
            document = client.read_block_document_by_name(name, block_type)
        except ObjectNotFound:
            raise NotificationError(
                f"no {block_type!r} block named {name!r} on this Prefect server; create it first "
                "(docs/prefect-ui.md: Being told)"
            ) from None
        automation = failure_automation(document.id)
        for earlier in client.read_automations_by_name(automation.name):
            client.delete_automation(earlier.id)
        return client.create_automation(automation)
