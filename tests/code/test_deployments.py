"""The scheduled deployments: prefect.yaml and `toolgrpo serve` declare the same two, runnable."""

from pathlib import Path

import yaml
from prefect.flows import load_flow_from_entrypoint

from toolgrpo.flows.deployments import NIGHTLY_CRON, deployments

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
    files = served["data-quality-hourly"].parameters["files"]
    assert any(f.endswith("multistep.jsonl") for f in files)
