"""The scheduled deployments: nightly retraining and an hourly data-quality report, and the
automation that tells a person when a run of either fails.

`toolgrpo serve` serves both from this process (a local Prefect server shows them); prefect.yaml
declares the same two for `prefect deploy` onto a work pool. `toolgrpo notify-on-failure`
creates the automation (`failure_automation`) on the server; notify-on-failure.yaml is the same
automation for `prefect automation create --from-file`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml
from prefect import get_client, serve
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.events.actions import ChangeFlowRunState, SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron
from prefect.settings import get_current_settings

from toolgrpo.data import DATA_DIR
from toolgrpo.flows.data_quality import DATA_QUALITY_TAGS, data_quality
from toolgrpo.flows.prefect_api import crash_leftovers
from toolgrpo.flows.retrain import RETRAIN_TAGS, SHIPPED_EVAL_FILES, retrain
from toolgrpo.training.config_overrides import load_preset

NIGHTLY_CRON = "0 2 * * *"  # 02:00 every night; unchanged data hits the training cache
# On the hour, whenever `serve` started (an interval would restart its clock at each start).
DATA_QUALITY_CRON = "0 * * * *"
SCHEDULE_TIMEZONE = "UTC"  # what the UI shows beside each schedule, as in prefect.yaml
RETRAIN_DEPLOYMENT = "nightly-retrain"
DATA_QUALITY_DEPLOYMENT = "data-quality-hourly"
AUTOMATION_FILE = Path(__file__).with_name("notify-on-failure.yaml")
AUTOMATION_NAME = "toolgrpo-failed-run"
UNRESPONSIVE_AUTOMATION_NAME = "toolgrpo-unresponsive-run"
# Seconds between a served run's heartbeats: a run whose process died is Crashed after three.
HEARTBEAT_S = 30
HEARTBEAT_VARIABLE = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"
# The flow-run states that end a run badly, which the automation reports.
FAILED_STATES = ("Failed", "Crashed", "TimedOut")
# The placeholder block id of notify-on-failure.yaml: `toolgrpo notify-on-failure` fills it in.
NO_BLOCK = UUID(int=0)


class NotificationError(ValueError):
    """The notification block named for the automation cannot be used; says which and why."""


def deployments(preset: str = "cpu", out: Path = Path("runs")) -> list[RunnerDeployment]:
    """The nightly retrain (of `preset`, into `out`) and the hourly report on the same data
    files — the preset's training rows and the rows SFT mixes in, the eval files — with the same
    roles (so an eval row found in the training files fails both); every other parameter is the
    retrain flow's default, listed on the deployment's form. Their entrypoints are module paths
    (`toolgrpo.flows.retrain.retrain`), the same wherever `serve` runs."""
    data = load_preset(preset).data
    return [
        retrain.to_deployment(  # type: ignore[list-item]  # sync call: the deployment
            name=RETRAIN_DEPLOYMENT,
            entrypoint_type=EntrypointType.MODULE_PATH,
            schedule=Cron(NIGHTLY_CRON, timezone=SCHEDULE_TIMEZONE),
            parameters={"preset": preset, "out": str(out)},
            description=(
                "Gate, train SFT + GRPO/NGRPO, evaluate, mine, report. Unchanged data is not "
                "retrained."
            ),
            tags=[*RETRAIN_TAGS, RETRAIN_DEPLOYMENT],  # its name: the failure alert watches it
            # one retrain at a time: a run started while one trains waits its turn
            concurrency_limit=1,
        ),
        data_quality.to_deployment(  # type: ignore[list-item]  # sync call: the deployment
            name=DATA_QUALITY_DEPLOYMENT,
            entrypoint_type=EntrypointType.MODULE_PATH,
            schedule=Cron(DATA_QUALITY_CRON, timezone=SCHEDULE_TIMEZONE),
            parameters={
                "train_files": [str(p) for p in [*data.training_files(), *data.mixed_in_aux()]],
                "eval_files": [str(p) for p in SHIPPED_EVAL_FILES],
                "out": str(out),
            },
            description="Validate the labelled data and publish the data-quality report.",
            tags=[*DATA_QUALITY_TAGS, DATA_QUALITY_DEPLOYMENT],
        ),
    ]


PREFECT_YAML_HEADER = """\
# `prefect deploy --all` registers the two scheduled deployments on a work pool
# (`prefect work-pool create toolgrpo --type process`, then `prefect worker start --pool toolgrpo`
# from the repository root). `toolgrpo serve` serves the same two without a work pool.
# `toolgrpo notify-on-failure --block TYPE/NAME` adds the automation that notifies a person when a
# run of either fails (flows/notify-on-failure.yaml). Written by `toolgrpo.flows.deployments`
# (prefect_yaml_text) from the deployments `serve` serves: edit the code, not this file.
"""


def prefect_yaml_text(preset: str = "cpu", out: Path = Path("runs")) -> str:
    """prefect.yaml: the deployments of `deployments()` for a process work pool started in the
    repository root, their files relative to it (a test keeps the file up to date)."""
    root = DATA_DIR.parent

    def relative(value: Any) -> Any:
        if isinstance(value, list):
            return [relative(item) for item in value]
        if isinstance(value, str) and Path(value).is_absolute():
            return Path(value).relative_to(root).as_posix()
        return value

    specs = []
    for deployment in deployments(preset, out):
        module, _, function = (deployment.entrypoint or "").rpartition(".")
        path = module.removeprefix("toolgrpo.").replace(".", "/")
        specs.append(
            {
                "name": deployment.name,
                "description": deployment.description,
                "entrypoint": f"{path}.py:{function}",
                "tags": deployment.tags,
                "concurrency_limit": deployment.concurrency_limit,
                "schedules": [
                    {"cron": schedule.schedule.cron, "timezone": schedule.schedule.timezone}  # type: ignore[union-attr]
                    for schedule in deployment.schedules or []
                ],
                "parameters": {name: relative(v) for name, v in deployment.parameters.items()},
                "work_pool": {
                    "name": "toolgrpo",
                    "job_variables": {"env": {HEARTBEAT_VARIABLE: str(HEARTBEAT_S)}},
                },
            }
        )
    spec = {
        "name": "toolgrpo",
        "build": None,
        "push": None,
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PWD }}"}}],
        "deployments": [
            {key: value for key, value in deployment.items() if value is not None}
            for deployment in specs
        ],
    }
    return PREFECT_YAML_HEADER + yaml.safe_dump(spec, sort_keys=False, width=100)


def serve_deployments(preset: str = "cpu", out: Path = Path("runs")) -> None:
    """Serve both deployments with their schedules until interrupted. Their runs send a
    heartbeat every `HEARTBEAT_S` seconds (unless PREFECT_FLOWS_HEARTBEAT_FREQUENCY says
    otherwise) and the server marks one Crashed once three are missed (`unresponsive_runs`):
    a run whose process died with `serve` (stopped, killed, its machine gone) ends Crashed,
    and so alerts, in bounded time. Runs this host's earlier `serve` left Running are marked
    Crashed at once."""
    heartbeat_s = int(os.environ.setdefault(HEARTBEAT_VARIABLE, str(HEARTBEAT_S)))
    with get_client(sync_client=True) as client:
        replace_automation(client, unresponsive_runs(heartbeat_s))
    crash_leftovers()
    served = deployments(preset, out)
    check_data_at_start(next(d for d in served if d.name == DATA_QUALITY_DEPLOYMENT))
    serve(*served)


def check_data_at_start(data_check: RunnerDeployment) -> FlowRun:
    """Register the hourly data check and schedule one run of it now, which `serve` then runs:
    a `serve` started at 10:40 reports on the data at once, not first at 11:00."""
    data_check.apply()
    return run_deployment(f"{data_check.flow_name}/{data_check.name}", timeout=0)  # type: ignore[return-value]  # sync call: the run


def _our_runs() -> dict[str, Any]:
    """The trigger's filter for the runs of both deployments (each tags its runs with its name),
    so that an automation never touches another team's flows on the same server."""
    names = (RETRAIN_DEPLOYMENT, DATA_QUALITY_DEPLOYMENT)
    return {
        "prefect.resource.role": "tag",
        "prefect.resource.id": [f"prefect.tag.{name}" for name in names],
    }


def unresponsive_runs(heartbeat_s: int = HEARTBEAT_S) -> AutomationCore:
    """The automation that marks a run of either deployment Crashed when it has sent no event
    (heartbeat or state change) for three heartbeats: Prefect's zombie detection."""
    return AutomationCore(
        name=UNRESPONSIVE_AUTOMATION_NAME,
        description="Mark a nightly retrain or hourly data-quality run Crashed once its "
        "process stops sending heartbeats.",
        enabled=True,
        trigger=EventTrigger(
            posture=Posture.Proactive,
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.*"},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related=_our_runs(),
            for_each={"prefect.resource.id"},
            threshold=1,
            within=timedelta(seconds=3 * heartbeat_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {3 * heartbeat_s} s: its process died (serve or the "
                "worker stopped, the machine went away)",
            )
        ],
    )


def replace_automation(client: SyncPrefectClient, automation: AutomationCore) -> UUID:
    """Create `automation` in place of any earlier one of its name; its id."""
    for earlier in client.read_automations_by_name(automation.name):
        client.delete_automation(earlier.id)
    return client.create_automation(automation)


def failure_automation(block_document_id: UUID, ui_url: str | None = None) -> AutomationCore:
    """The automation that sends a notification through that block document when a run of either
    deployment ends Failed, Crashed or TimedOut: its name, state message and a link to it.

    The trigger is the shape the UI's "Flow run state" form makes, so the automation's card
    reads "When any flow run with the tag nightly-retrain or data-quality-hourly enters Failed,
    Crashed, TimedOut" (each deployment tags its runs with its name). The link is the server's
    `{{ flow_run|ui_url }}`, which needs PREFECT_UI_URL set where the server runs; else it is
    `ui_url` (a UI address known when the automation is made) followed by the run's page."""
    link = "flow_run|ui_url"
    if ui_url:
        link = f"{link} or {ui_url.rstrip('/')!r} ~ '/runs/flow-run/' ~ flow_run.id"
    return AutomationCore(
        name=AUTOMATION_NAME,
        description="Notify when a nightly retrain or an hourly data-quality run fails.",
        enabled=True,
        trigger=EventTrigger(
            posture=Posture.Reactive,
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related=_our_runs(),
            for_each={"prefect.resource.id"},
            expect={f"prefect.flow-run.{state}" for state in FAILED_STATES},
            threshold=1,
            within=timedelta(0),
        ),
        actions=[
            SendNotification(
                block_document_id=block_document_id,
                subject="toolgrpo: {{ flow_run.name }} {{ flow_run.state.name }}",
                body=(
                    "{{ deployment.name }}: flow run {{ flow_run.name }} ended "
                    "{{ flow_run.state.name }}.\n{{ flow_run.state.message }}\n"
                    f"{{{{ {link} }}}}"
                ),
            )
        ],
    )


def automation_file_text() -> str:
    """notify-on-failure.yaml as `failure_automation` makes it, for `prefect automation create
    --from-file` (its block id a placeholder; a test keeps the file up to date)."""
    specs = []
    for automation in (failure_automation(NO_BLOCK), unresponsive_runs()):
        spec = automation.model_dump(mode="json", exclude_none=True)
        for field in ("expect", "after", "for_each"):  # sets: in a stable order
            spec["trigger"][field] = sorted(spec["trigger"][field])
        specs.append(_without_empty_lists(spec))

    class Dumper(yaml.SafeDumper):
        """Writes a string of several lines as a block, as a person would."""

    Dumper.add_representer(
        str,
        lambda dumper, text: dumper.represent_scalar(
            "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
        ),
    )
    text = yaml.dump({"automations": specs}, Dumper=Dumper, sort_keys=False, allow_unicode=True)
    return AUTOMATION_HEADER + text


def _without_empty_lists(spec: dict) -> dict:
    return {
        key: _without_empty_lists(value) if isinstance(value, dict) else value
        for key, value in spec.items()
        if value != []
    }


AUTOMATION_HEADER = """\
# Two Prefect automations. The first: when a run of either scheduled deployment (prefect.yaml,
# `toolgrpo serve`, each tagging its runs with its name) ends Failed, Crashed or TimedOut, send its
# name, state message and UI link through a notification block (Slack, Teams, email, a webhook
# ...). The second: mark such a run Crashed once its process has sent no heartbeat for three
# heartbeats (serve stopped, a worker killed), so that a dead run ends and the first alerts on it.
#
#   toolgrpo notify-on-failure --block slack-webhook/toolgrpo-alerts
#
# creates (or replaces) both on the server PREFECT_API_URL names, with the block's id. By hand: put
# the block's id in `block_document_id`, then
# `prefect automation create --from-file flows/notify-on-failure.yaml`. The link needs
# PREFECT_UI_URL set where the server runs (docs/prefect-ui.md); `notify-on-failure` also writes
# the UI address it reached as a fallback. Written by `toolgrpo.flows.deployments`
# (automation_file_text): edit the code, not this file.
"""


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
        replace_automation(client, unresponsive_runs())  # a dead run must end to alert
        return replace_automation(
            client, failure_automation(document.id, get_current_settings().ui_url)
        )
