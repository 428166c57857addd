"""The scheduled deployments: prefect.yaml and `toolgrpo serve` declare the same two, runnable,
and the failure automation watches exactly those two."""

from pathlib import Path
from uuid import uuid4

import yaml
from prefect.flows import load_flow_from_entrypoint

from toolgrpo.flows.deployments import NIGHTLY_CRON, deployments, failure_automation

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_prefect_yaml_entrypoints_load_and_accept_their_parameters():
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    names = {d["name"] for d in spec["deployments"]}
    assert names == {"nightly-retrain", "data-quality-hourly"}
    for deployment in spec["deployments"]:
        entrypoint = str(REPO_ROOT / deployment["entrypoint"])
        flow = load_flow_from_entrypoint(entrypoint)
        flow.validate_parameters(deployment["parameters"])  # raises on a bad parameter
        assert deployment["schedules"]


def test_served_deployments_carry_their_schedules():
    served = {d.name: d for d in deployments()}
    assert set(served) == {"nightly-retrain", "data-quality-hourly"}
    assert served["nightly-retrain"].schedules[0].schedule.cron == NIGHTLY_CRON
    assert served["data-quality-hourly"].schedules[0].schedule.interval.total_seconds() == 3600
    parameters = served["data-quality-hourly"].parameters
    assert [Path(f).parent.name for f in parameters["train_files"]] == ["train", "train"]
    assert [Path(f).parent.name for f in parameters["eval_files"]] == ["eval"] * 3


def test_failure_automation_notifies_on_failed_runs_of_both_deployments():
    block_id = uuid4()
    automation = failure_automation(block_id)
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))

    assert {"prefect.flow-run.Failed", "prefect.flow-run.Crashed"} <= automation.trigger.expect
    related = automation.trigger.match_related
    related = related[0] if isinstance(related, list) else related
    assert related["prefect.resource.role"] == ["deployment"]
    names = set(related["prefect.resource.name"])
    assert names == {d["name"] for d in spec["deployments"]} == {d.name for d in deployments()}
    (action,) = automation.actions
    assert action.type == "send-notification" and action.block_document_id == block_id
    assert "{{ flow_run|ui_url }}" in action.body
