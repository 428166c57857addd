"""The scheduled deployments: prefect.yaml and `toolgrpo serve` declare the same two, runnable,
and the failure automation watches exactly those two; prefect.kubernetes.yaml runs the gpu
preset on a Kubernetes work pool whose job template asks for a GPU."""

import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import prefect
import pytest
import yaml
from prefect.exceptions import ParameterTypeError
from prefect.flows import load_flow_from_entrypoint
from prefect.utilities.callables import parameter_schema_from_entrypoint
from prefect.utilities.importtools import import_object
from prefect.utilities.schema_tools import validate
from prefect.utilities.templating import apply_values

from toolgrpo.data import DATA_DIR
from toolgrpo.flows.deployments import (
    AUTOMATION_FILE,
    DATA_QUALITY_CRON,
    DATA_QUALITY_DEPLOYMENT,
    HEARTBEAT_S,
    NIGHTLY_CRON,
    automation_file_text,
    check_data_at_start,
    deployments,
    failure_automation,
    prefect_yaml_text,
    unresponsive_runs,
)
from toolgrpo.flows.retrain import retrain
from toolgrpo.training.config_overrides import load_preset

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_TEMPLATE = REPO_ROOT / "deploy" / "kubernetes-gpu-job-template.json"
# The job templates Prefect ships for each worker type (what `prefect work-pool
# get-default-base-job-template --type kubernetes` prints).
PREFECT_TEMPLATES = (
    Path(prefect.__file__).parent
    / "server/api/collections_data/views/aggregate-worker-metadata.json"
)


def test_prefect_yaml_is_what_serve_serves():
    assert (REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8") == prefect_yaml_text(), (
        "prefect.yaml is out of date: python -c 'from toolgrpo.flows.deployments import *; "
        'open("prefect.yaml", "w").write(prefect_yaml_text())\''
    )
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    deployed = {d["name"]: d for d in spec["deployments"]}
    for served in deployments():
        declared = deployed[served.name]
        parameters = load_flow_from_entrypoint(
            str(REPO_ROOT / declared["entrypoint"])
        ).validate_parameters(declared["parameters"])
        in_root = {  # the work pool's worker runs in the repository root
            name: [REPO_ROOT / p for p in value] if isinstance(value, list) else value
            for name, value in parameters.items()
        }
        flow = import_object(served.entrypoint)
        assert in_root == flow.validate_parameters(served.parameters), served.name
        assert declared["tags"] == served.tags
        assert declared.get("concurrency_limit") == served.concurrency_limit
        assert [s["cron"] for s in declared["schedules"]] == [
            s.schedule.cron for s in served.schedules
        ]


def test_prefect_yaml_entrypoints_load_and_accept_their_parameters():
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    names = {d["name"] for d in spec["deployments"]}
    assert names == {"nightly-retrain", "data-quality-hourly"}
    _check_entrypoints_and_parameters(spec)


def _check_entrypoints_and_parameters(spec: dict) -> None:
    for deployment in spec["deployments"]:
        entrypoint = str(REPO_ROOT / deployment["entrypoint"])
        flow = load_flow_from_entrypoint(entrypoint)
        flow.validate_parameters(deployment["parameters"])  # raises on a bad parameter
        assert deployment["schedules"]


def test_kubernetes_deployment_runs_the_gpu_preset_on_a_gpu_job():
    spec = yaml.safe_load((REPO_ROOT / "prefect.kubernetes.yaml").read_text(encoding="utf-8"))
    _check_entrypoints_and_parameters(spec)
    (deployment,) = spec["deployments"]
    params = retrain.validate_parameters(deployment["parameters"])
    assert load_preset(params["preset"], params["config"].dotted()).runtime.device == "cuda"

    template = json.loads(KUBERNETES_TEMPLATE.read_text(encoding="utf-8"))
    variables = template["variables"]["properties"]
    job_variables = deployment["work_pool"]["job_variables"]
    assert set(job_variables) <= set(variables)  # the worker would reject any other name
    values = {name: variables[name].get("default") for name in variables} | job_variables
    job = apply_values(template["job_configuration"], values)
    pod = job["job_manifest"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"] == "{{ $TOOLGRPO_IMAGE }}"  # filled in by `prefect deploy`
    assert pod["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "toolgrpo-data"}}
    ]
    assert params["out"].is_relative_to(container["volumeMounts"][0]["mountPath"])


def test_kubernetes_template_is_prefects_default_plus_the_gpu_and_the_volume():
    default = json.loads(PREFECT_TEMPLATES.read_text(encoding="utf-8"))["prefect-kubernetes"]
    default = default["kubernetes"]["default_base_job_configuration"]
    template = json.loads(KUBERNETES_TEMPLATE.read_text(encoding="utf-8"))
    added = set(template["variables"]["properties"]) - set(default["variables"]["properties"])
    assert added == {"gpu_limit", "data_claim"}
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container["resources"]["limits"].pop("nvidia.com/gpu")
    container.pop("volumeMounts")
    pod.pop("volumes")
    for name in added:
        template["variables"]["properties"].pop(name)
    assert template == default


def test_served_deployments_carry_their_schedules():
    served = {d.name: d for d in deployments()}
    assert set(served) == {"nightly-retrain", "data-quality-hourly"}
    assert served["nightly-retrain"].schedules[0].schedule.cron == NIGHTLY_CRON
    assert {d.schedules[0].schedule.timezone for d in served.values()} == {"UTC"}
    # module paths: the UI shows no path relative to the folder `serve` ran in
    assert served["nightly-retrain"].entrypoint == "toolgrpo.flows.retrain.retrain"
    assert served["data-quality-hourly"].schedules[0].schedule.cron == DATA_QUALITY_CRON
    assert served["nightly-retrain"].concurrency_limit == 1
    parameters = served["data-quality-hourly"].parameters
    # The preset's training files and the rows it mixes in, as its nightly run gates them.
    files = [Path(f).relative_to(DATA_DIR).as_posix() for f in parameters["train_files"]]
    assert files == [
        "train/single_step.jsonl",
        "aux/walked/multistep.jsonl",
        "aux/walked/comparisons.jsonl",
        "aux/walked/phrasings.jsonl",
    ]
    assert [Path(f).parent.name for f in parameters["eval_files"]] == ["eval"] * 3


def test_retrain_deployment_form_lists_the_flow_parameters_and_config_fields():
    (served,) = [d for d in deployments() if d.name == "nightly-retrain"]
    schema = served._parameter_openapi_schema.model_dump()  # what `apply` registers as the form
    properties = schema["properties"]
    assert {"preset", "train_files", "eval_files", "catalogue", "config", "audit_folds"} <= set(
        properties
    )
    assert "catalogue" in properties["catalogue"]["description"]
    assert properties["preset"]["enum"] == ["smoke", "cpu", "pretrained", "gpu"]
    grpo = schema["definitions"]["GRPOOverrides"]["properties"]
    assert grpo["max_steps"]["description"] == "optimiser steps"
    assert grpo["max_steps"]["type"] == "integer"
    # The fields the flow sets itself are not on the form.
    data = schema["definitions"]["DataOverrides"]["properties"]
    assert "max_train_rows" in data and "catalogue" not in data
    assert "train_single_step" not in data
    # `prefect deploy` reads the form from the prefect.yaml entrypoint: the same one.
    deployed = parameter_schema_from_entrypoint(f"{REPO_ROOT / 'flows' / 'retrain.py'}:retrain")
    assert deployed.model_dump() == schema


def _form_payload(schema: dict, definition: str) -> dict:
    """What the Prefect UI's form sent for a section left untouched: every field, null."""
    return {
        name: _form_payload(schema, field["$ref"].rpartition("/")[2]) if "$ref" in field else None
        for name, field in schema["definitions"][definition]["properties"].items()
    }


def test_a_custom_run_from_the_form_validates_on_the_server_and_overrides_one_field():
    (served,) = [d for d in deployments() if d.name == "nightly-retrain"]
    schema = served._parameter_openapi_schema.model_dump()
    # The form shows no field filled in (it sends a field's schema default) and no toggle (a
    # toggle is true or false, never "the preset's").
    for name, definition in schema["definitions"].items():
        for field_name, field in definition["properties"].items():
            assert "default" not in field, f"{name}.{field_name}"
            assert field.get("type") != "boolean", f"{name}.{field_name}"
    (config_ref,) = [b["$ref"] for b in schema["properties"]["config"]["anyOf"] if "$ref" in b]
    config = _form_payload(schema, config_ref.rpartition("/")[2])
    config["grpo"]["max_steps"] = 5
    payload = {
        **served.parameters,
        "preset": "smoke",
        "train_files": None,
        "catalogue": None,
        "audit_training_rows": False,
        "config": config,
    }

    validate(payload, schema, raise_on_error=True)  # as the server does before creating the run
    parameters = retrain.validate_parameters(payload)  # as the flow run does before it starts
    assert parameters["config"].dotted() == {"grpo.max_steps": 5}
    requested = load_preset(parameters["preset"], parameters["config"].dotted())
    assert requested == load_preset("smoke", {"grpo.max_steps": 5})
    # What the form sends now: only the fields filled in.
    assert retrain.validate_parameters({"config": {"grpo": {"max_steps": 5}}})[
        "config"
    ].dotted() == {"grpo.max_steps": 5}


def test_the_form_refuses_what_the_config_refuses_before_a_run_is_made():
    (served,) = [d for d in deployments() if d.name == "nightly-retrain"]
    schema = served._parameter_openapi_schema.model_dump()
    grpo = schema["definitions"]["GRPOOverrides"]["properties"]
    assert grpo["max_steps"]["exclusiveMinimum"] == 0  # the UI marks -1 inline
    lora = schema["definitions"]["LoraOverrides"]["properties"]
    assert lora["r"]["minimum"] == 0
    for bad in ({"grpo": {"max_steps": -1}}, {"model": {"lora": {"r": -4}}}):
        errors = validate({"config": bad}, schema, raise_on_error=False)  # as the server does
        assert errors, bad
        with pytest.raises(ParameterTypeError):
            retrain.validate_parameters({"config": bad})


def test_failure_automation_notifies_on_failed_runs_of_both_deployments():
    block_id = uuid4()
    automation = failure_automation(block_id, "http://127.0.0.1:4200")
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    names = {d["name"] for d in spec["deployments"]}
    assert names == {d.name for d in deployments()}

    trigger = automation.trigger
    assert trigger.expect == {f"prefect.flow-run.{s}" for s in ("Failed", "Crashed", "TimedOut")}
    # Each deployment tags its runs with its name, which the trigger watches: the UI's "flow run
    # state" shape (runs with these tags), so its card names both deployments and the states.
    assert trigger.match_related["prefect.resource.role"] == ["tag"]
    assert set(trigger.match_related["prefect.resource.id"]) == {f"prefect.tag.{n}" for n in names}
    for deployment in spec["deployments"]:
        assert deployment["name"] in deployment["tags"]
    for deployment in deployments():
        assert deployment.name in deployment.tags and "toolgrpo" in deployment.tags
    assert trigger.for_each == {"prefect.resource.id"} and trigger.threshold == 1

    (action,) = automation.actions
    assert action.type == "send-notification" and action.block_document_id == block_id
    # PREFECT_UI_URL where the server runs, else the UI this automation was created against
    assert action.body.endswith(
        "{{ flow_run|ui_url or 'http://127.0.0.1:4200' ~ '/runs/flow-run/' ~ flow_run.id }}"
    )


def test_notify_on_failure_yaml_is_the_automation_the_cli_creates():
    assert AUTOMATION_FILE.read_text(encoding="utf-8") == automation_file_text(), (
        "flows/notify-on-failure.yaml is out of date: python -c 'from toolgrpo.flows.deployments "
        "import *; AUTOMATION_FILE.write_text(automation_file_text())'"
    )
    from prefect.events.schemas.automations import AutomationCore

    spec = yaml.safe_load(AUTOMATION_FILE.read_text(encoding="utf-8"))
    failed, unresponsive = (AutomationCore.model_validate(a) for a in spec["automations"])
    assert failed.trigger == failure_automation(uuid4()).trigger
    assert unresponsive == unresponsive_runs()


def test_a_served_run_that_stops_sending_heartbeats_is_marked_crashed():
    """Prefect's zombie-run recipe, scoped to our two deployments: armed by each heartbeat, it
    fires when no event of that run follows within three heartbeats; prefect.yaml's runs send
    heartbeats at that rate as `serve`'s do."""
    automation = unresponsive_runs(heartbeat_s=20)
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.after == {"prefect.flow-run.heartbeat"}
    assert trigger.expect == {"prefect.flow-run.*"} and trigger.within.total_seconds() == 60
    assert trigger.match_related == failure_automation(uuid4()).trigger.match_related
    assert trigger.for_each == {"prefect.resource.id"}
    (action,) = automation.actions
    assert action.type == "change-flow-run-state" and action.state == "CRASHED"
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    for deployment in spec["deployments"]:
        env = deployment["work_pool"]["job_variables"]["env"]
        assert env == {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}


def test_serve_checks_the_data_at_once_not_first_on_the_hour(prefect_harness):
    (data_check,) = [d for d in deployments() if d.name == DATA_QUALITY_DEPLOYMENT]
    run = check_data_at_start(data_check)
    assert run.state.is_scheduled()
    assert abs((run.expected_start_time - datetime.now(UTC)).total_seconds()) < 60
    assert DATA_QUALITY_DEPLOYMENT in run.tags and run.parameters == data_check.parameters
