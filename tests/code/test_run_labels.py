"""What a flow run shows in the UI across attempts: a retried run keeps its name, carries one tag
per key and leads with its latest attempt's artifacts; a config the form cannot check fails the
run in one line, with its tags."""

import types

from prefect import flow, get_client
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.context import FlowRunContext

from toolgrpo.flows.retrain import RetrainOverrides, retrain
from toolgrpo.tasks import runs
from toolgrpo.tasks.runs import clear_earlier_attempts, tag_flow_run


def test_a_retried_run_shows_only_its_latest_attempt(prefect_harness):
    attempts: list[int] = []

    @flow(name="retried", retries=1, retry_delay_seconds=0)
    def retried():
        clear_earlier_attempts()
        attempts.append(len(attempts) + 1)
        tag_flow_run("toolgrpo", f"data:{attempts[-1]}")
        create_markdown_artifact(key=f"verdict-{attempts[-1]}", markdown="attempt")
        if len(attempts) == 1:
            raise ValueError("the first attempt fails")
        return FlowRunContext.get().flow_run.id

    run_id = retried()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    assert attempts == [1, 2]
    assert [artifact.key for artifact in artifacts] == ["verdict-2"]
    assert sorted(run.tags) == ["data:2", "toolgrpo"]


def test_a_retried_run_keeps_the_name_its_first_attempt_was_given(monkeypatch):
    first = types.SimpleNamespace(run_count=0, name="brave-otter")
    monkeypatch.setattr(runs, "flow_run", first)
    assert runs.run_name("retrain", "cpu").startswith("retrain-cpu-")
    again = types.SimpleNamespace(run_count=1, name="retrain-cpu-20261201-0529")
    monkeypatch.setattr(runs, "flow_run", again)
    assert runs.run_name("retrain", "cpu") == "retrain-cpu-20261201-0529"


def test_a_config_the_form_cannot_check_fails_the_run_in_one_line_with_its_tags(
    prefect_harness, tmp_path
):
    # each field is valid alone; together they are not (the tiny model has no base to cut)
    config = RetrainOverrides.from_dotted({"model.cut_vocabulary": True})
    state = retrain(preset="smoke", config=config, out=tmp_path, return_state=True)
    assert state.is_failed()
    assert "cut_vocabulary" in state.message and "\n" not in state.message
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert {"toolgrpo", "training", "preset:smoke"} <= set(run.tags)
    assert list(tmp_path.iterdir()) == []  # nothing started
