"""What the Prefect UI's buttons do to a run that trains, as the UI sends them (a state set on the
flow run): Pause and Suspend are refused with a line and training goes on; Cancel stops the
trainer within seconds and the run ends Cancelled, saying where it stopped."""

import logging
import threading
import time
from pathlib import Path

import pytest
from prefect import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    LogFilter,
)
from prefect.client.schemas.filters import FlowRunFilterStateType as StateTypeFilter
from prefect.client.schemas.objects import StateType
from prefect.states import Cancelling, Paused

from toolgrpo.flows.retrain import RetrainOverrides, retrain

pytestmark = pytest.mark.slow


def _running_run_id(deadline: float):
    running = FlowRunFilter(
        state=FlowRunFilterState(type=StateTypeFilter(any_=[StateType.RUNNING]))
    )
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = [
                r for r in client.read_flow_runs(flow_run_filter=running) if "retrain" in r.name
            ]
            if runs:
                return runs[0].id
            time.sleep(0.5)
    raise AssertionError("no retrain run started")


def _trainer_processes(folder: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and "toolgrpo.training" in command and str(folder) in command:
            found.append(command)
    return found


def _stage_state(run_id, stage: str, deadline: float) -> StateType:
    """The final state of the flow run's task run `stage` (task runs reach the server as
    events, so it may lag the flow run's)."""
    of_run = FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
    with get_client(sync_client=True) as client:
        while True:
            runs = [r for r in client.read_task_runs(flow_run_filter=of_run) if r.name == stage]
            if runs and runs[0].state.is_final():
                return runs[0].state.type
            assert time.monotonic() < deadline, f"task run {stage} did not end"
            time.sleep(0.5)


def _logs_until(run_id, text: str, deadline: float) -> list:
    """The flow run's logs once one holds `text` (logs reach the server in batches)."""
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(LogFilter(flow_run_id={"any_": [run_id]}))
            if any(text in log.message for log in logs):
                return logs
            assert time.monotonic() < deadline, f"no log line holds {text!r}"
            time.sleep(0.5)


def _wait_for_steps(folder: Path, deadline: float) -> None:
    while not list(folder.glob("*/sft/train_metrics.jsonl")):
        assert time.monotonic() < deadline, "SFT logged no step"
        time.sleep(0.5)


def test_pause_is_refused_and_cancel_stops_the_trainer(prefect_harness, tmp_path):
    config = RetrainOverrides.from_dotted({"sft.num_train_epochs": 200, "seed": 11})
    outcome = {}

    def run() -> None:
        outcome["state"] = retrain(
            preset="smoke",
            config=config,
            out=tmp_path,
            audit_training_rows=False,
            return_state=True,
        )

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 300
    run_id = _running_run_id(deadline)
    _wait_for_steps(tmp_path, deadline)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, Paused(timeout_seconds=600), force=True)
        while client.read_flow_run(run_id).state.type != StateType.RUNNING:
            assert time.monotonic() < deadline, "the pause was not refused"
            time.sleep(0.5)
        assert _trainer_processes(tmp_path), "training stopped on a refused pause"
        cancelled_at = time.monotonic()
        client.set_flow_run_state(run_id, Cancelling(), force=True)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert time.monotonic() - cancelled_at < 30
    state = outcome["state"]
    assert state.is_cancelled()
    assert state.message.startswith("sft: cancelled from the Prefect UI")
    assert "training stopped at step" in state.message
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(run_id).state.type == StateType.CANCELLED
    assert _trainer_processes(tmp_path) == []
    # the stage the Cancel stopped shows Cancelled too, not Failed (red) inside a Cancelled run
    assert _stage_state(run_id, "sft", time.monotonic() + 30) == StateType.CANCELLED
    # and a Cancel is no error: the run's log says where training stopped, in no ERROR line
    logs = _logs_until(run_id, "training stopped at step", time.monotonic() + 30)
    assert [log.message for log in logs if log.level >= logging.ERROR] == []
