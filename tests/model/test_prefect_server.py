"""The main job and the data-quality check against a real `prefect server` on loopback, read back
through the client the way the UI reads them (and, where Chromium is installed, in the UI)."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, LogFilter
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Cancelling, Suspended

from bench.ui_screenshots import check_ui, chromium_path, latest_flow_run, prefect_server
from bench.ui_screenshots import webhook_receiver as receiving_webhooks
from toolgrpo.flows.deployments import failure_automation

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
TASK_NAMES = {"sft", "grpo", "evaluate sft · eval", "evaluate grpo · eval", "audit · train"}
TASK_NAMES |= {"mine", "report"}


class SmokeRun(NamedTuple):
    """A smoke retrain run by the CLI: its output, and what the server has of it."""

    output: subprocess.CompletedProcess
    flow_run: Any
    task_runs: list[Any]
    artifacts: list[Any]
    logs: list[str]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as (url, env):
        yield url, env


def _toolgrpo(env: dict[str, str], *arguments: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BIN / "toolgrpo", *map(str, arguments)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.fixture(scope="module")
def smoke_run(server, tmp_path_factory) -> SmokeRun:
    url, env = server
    run = _toolgrpo(env, "run", "--preset", "smoke", "--out", tmp_path_factory.mktemp("runs"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        flow_run = latest_flow_run(client, "retrain")
        this_run = FlowRunFilter(id={"any_": [flow_run.id]})
        task_runs = client.read_task_runs(flow_run_filter=this_run)
        artifacts = client.read_artifacts(flow_run_filter=this_run)
        logs = [
            log.message for log in client.read_logs(LogFilter(flow_run_id={"any_": [flow_run.id]}))
        ]
    return SmokeRun(run, flow_run, task_runs, artifacts, logs)


def test_smoke_retrain_is_completed_with_named_stages_and_the_headline_first(smoke_run):
    flow_run, artifacts = smoke_run.flow_run, smoke_run.artifacts
    assert "report: " in smoke_run.output.stdout
    assert flow_run.state.is_completed()
    assert re.fullmatch(r"retrain-smoke-\d{8}-\d{4}", flow_run.name)
    assert "preset:smoke" in flow_run.tags
    assert any(re.fullmatch(r"data:[0-9a-f]{12}", tag) for tag in flow_run.tags)
    assert {task_run.name for task_run in smoke_run.task_runs} >= TASK_NAMES
    # audit_folds is 0: no cross-fitted audit task at all
    assert not [t.name for t in smoke_run.task_runs if t.name.startswith("cross-fitted audit")]
    # The UI lists a flow run's own artifacts above its task runs': the headline alone.
    assert [a.key for a in artifacts if a.task_run_id is None] == ["retrain-headline"]
    keys = {a.key for a in artifacts}
    assert {"retrain-report", "retrain-accuracy", "data-quality-summary"} <= keys
    assert {"train-sft-progress", "evaluate-grpo-eval-progress", "audit-train-progress"} <= keys
    assert all(a.description for a in artifacts)
    report = next(a for a in artifacts if a.key == "retrain-report")
    assert report.data.count("](data:image/png;base64,") == 4  # plots the UI can show


def test_smoke_retrain_logs_progress_lines_and_the_before_after_table(smoke_run):
    logs = smoke_run.logs
    assert any(
        re.match(r"sft \| sft step \d+/\d+ · loss [\d.]+ · [\d.]+ s/step · ETA", m) for m in logs
    )
    assert any(
        re.match(r"grpo \| grpo step \d+/\d+ · reward .* · tool accuracy so far", m) for m in logs
    )
    assert any(re.match(r"evaluate sft · eval row \d+/\d+ · ", m) for m in logs)
    assert any(m.startswith("tool accuracy before and after GRPO") and "| n |" in m for m in logs)
    assert not any(m.startswith("sft | {'loss'") for m in logs)  # per-step dicts: debug only


def test_bad_data_file_fails_the_data_quality_run_with_its_problem_lines_logged(server, tmp_path):
    url, env = server
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "broken"\n[1]\n', encoding="utf-8")
    run = _toolgrpo(env, "validate", bad, "--out", tmp_path / "runs")
    assert run.returncode == 1, run.stdout + run.stderr

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        flow_run = latest_flow_run(client, "data-quality")
        logs = [
            log.message for log in client.read_logs(LogFilter(flow_run_id={"any_": [flow_run.id]}))
        ]
    assert flow_run.state.is_failed()
    assert flow_run.state.message.startswith("data gate failed: 2 of 2 rows invalid")
    assert re.fullmatch(r"data-quality-1-files-\d{8}-\d{4}", flow_run.name)
    assert any(m.startswith(f"{bad}:1: not JSON") for m in logs)
    assert f"{bad}:2: line is an array, not a JSON object [check: json_object]" in logs


def test_notify_on_failure_creates_the_automation_on_the_server(server):
    url, env = server
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    with temporary_settings({PREFECT_API_URL: url}):
        CustomWebhookNotificationBlock(
            name="toolgrpo-test", url="http://127.0.0.1:9/hook", json_data={"text": "{{body}}"}
        ).save("toolgrpo-test", overwrite=True)
    missing = _toolgrpo(env, "notify-on-failure", "--block", "custom-webhook/nobody")
    assert missing.returncode == 2 and "no 'custom-webhook' block named 'nobody'" in missing.stderr
    for _ in range(2):  # a second call replaces the first automation
        created = _toolgrpo(env, "notify-on-failure", "--block", "custom-webhook/toolgrpo-test")
        assert created.returncode == 0, created.stderr

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        (automation,) = client.read_automations_by_name("toolgrpo-failed-run")
        block = client.read_block_document_by_name("toolgrpo-test", "custom-webhook")
    assert automation.enabled and automation.actions[0].block_document_id == block.id
    assert automation.trigger == failure_automation(block.id).trigger


@pytest.fixture
def webhook_receiver() -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on loopback that keeps the JSON of every POST: its URL and the bodies."""
    with receiving_webhooks() as receiver:
        yield receiver


def _alert_to(hook: str, url: str, env: dict) -> None:
    """A webhook block posting to `hook`, and the failure automation sending through it."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    with temporary_settings({PREFECT_API_URL: url}):
        CustomWebhookNotificationBlock(
            name="toolgrpo-hook", url=hook, json_data={"text": "{{body}}"}
        ).save("toolgrpo-hook", overwrite=True)
    created = _toolgrpo(env, "notify-on-failure", "--block", "custom-webhook/toolgrpo-hook")
    assert created.returncode == 0, created.stderr


def test_a_failed_deployment_run_sends_a_notification_that_links_to_it(
    server, webhook_receiver, tmp_path
):
    """The server runs without PREFECT_UI_URL, as `prefect server start` does by default: the
    link falls back to the UI address `notify-on-failure` reached."""
    url, env = server
    hook, received = webhook_receiver
    from prefect import tags

    from toolgrpo.flows.data_quality import data_quality
    from toolgrpo.flows.deployments import DATA_QUALITY_DEPLOYMENT

    _alert_to(hook, url, env)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n", encoding="utf-8")
    with temporary_settings({PREFECT_API_URL: url}), tags(DATA_QUALITY_DEPLOYMENT):
        state = data_quality(files=[bad], out=tmp_path / "runs", return_state=True)
    assert state.is_failed()
    deadline = time.monotonic() + 120
    while not received and time.monotonic() < deadline:
        time.sleep(1)
    (notification,) = received
    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        flow_run = latest_flow_run(client, "data-quality")
    link = f"{url.removesuffix('/api')}/runs/flow-run/{flow_run.id}"
    assert notification["text"].splitlines()[-1] == link, notification["text"]
    assert f"flow run {flow_run.name} ended Failed" in notification["text"]
    # the UI serves the run's page to a browser (which asks for HTML)
    request = urllib.request.Request(link, headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=10) as page:
        assert page.status == 200


@pytest.mark.skipif(chromium_path() is None, reason="no Chromium (apt-get install chromium)")
def test_the_ui_shows_the_named_stages_the_headline_first_and_the_reports_plots(
    server, smoke_run, tmp_path
):
    url, env = server
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n", encoding="utf-8")
    assert _toolgrpo(env, "validate", bad, "--out", tmp_path / "runs").returncode == 1
    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        failed = latest_flow_run(client, "data-quality")
    artifacts = {a.key: a for a in smoke_run.artifacts}
    checks = check_ui(url.removesuffix("/api"), smoke_run.flow_run, artifacts, failed, tmp_path)
    assert all(check.ok for check in checks), "\n".join(check.line() for check in checks)
    (report,) = [c for c in checks if c.spec.name == "report-artifact"]
    assert len(report.images) == 4 and all(image["width"] > 300 for image in report.images)


def _served(client, name: str) -> bool:
    try:
        client.read_deployment_by_name(name)
    except ObjectNotFound:
        return False
    return True


def _runs_due(client, deployment: str) -> list:
    """The flow runs of `deployment` (`flow/deployment`) due by now: not those its schedule
    has made for later hours."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    served = client.read_deployment_by_name(deployment)
    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[served.id]))
    )
    now = datetime.now(UTC)
    return sorted(
        (run for run in runs if run.expected_start_time <= now),
        key=lambda run: run.expected_start_time,
    )


def _wait_refused(client, run_id) -> None:
    """Until the run is Running again with the stage's refusal, and Prefect's own in-process
    stop request (a Suspend's) has had time to arrive."""
    deadline = time.monotonic() + 60
    while "refused" not in (client.read_flow_run(run_id).state.message or ""):
        assert time.monotonic() < deadline, "the Suspend was not refused"
        time.sleep(0.5)
    assert client.read_flow_run(run_id).state.is_running()
    time.sleep(3)


def test_a_refused_suspend_lets_the_run_go_on_to_its_next_stage(server, tmp_path):
    """Prefect stops a suspended deployment run at its next task; a Suspend the stage refused
    must not: the run goes on and completes, rather than stopping with the server showing it
    Running."""
    url, env = server
    script = Path(__file__).with_name("served_stages.py")
    serving = subprocess.Popen(
        [sys.executable, script],
        env=env,
        stdout=(tmp_path / "serve.log").open("w"),
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    from prefect.deployments import run_deployment

    try:
        with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            deadline = time.monotonic() + 120
            while not _served(client, "two-stages/served"):
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(1)
            run = run_deployment("two-stages/served", timeout=0)
            while not client.read_flow_run(run.id).state.is_running():
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.5)
            time.sleep(3)  # the first stage is watching
            client.set_flow_run_state(run.id, Suspended(timeout_seconds=600), force=True)
            _wait_refused(client, run.id)
            deadline = time.monotonic() + 120
            while not (state := client.read_flow_run(run.id).state).is_final():
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                time.sleep(1)
            assert state.is_completed(), state
            deadline = time.monotonic() + 30  # logs reach the server in batches
            while "['first: done', 'second: done']" not in [
                log.message for log in client.read_logs(LogFilter(flow_run_id={"any_": [run.id]}))
            ]:
                assert time.monotonic() < deadline, "the run did not log both stages done"
                time.sleep(1)
    finally:
        os.killpg(serving.pid, signal.SIGKILL)


def test_a_run_whose_serve_was_stopped_mid_training_ends_crashed_and_alerts(
    server, webhook_receiver, tmp_path
):
    """`toolgrpo serve` checks the data as it starts; a Cancel of a run that trains, after a
    refused Suspend, ends it Cancelled, saying where it stopped; then, `serve` and everything
    it started killed while a deployment run trains: the run's heartbeats stop, the server
    marks it Crashed within three missed heartbeats, and the failure automation alerts on it."""
    url, env = server
    hook, received = webhook_receiver
    _alert_to(hook, url, env)
    serving = subprocess.Popen(
        [BIN / "toolgrpo", "serve", "--preset", "smoke", "--out", tmp_path],
        env=env,
        stdout=(tmp_path / "serve.log").open("w"),
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    from prefect.deployments import run_deployment

    from toolgrpo.flows.deployments import (
        DATA_QUALITY_DEPLOYMENT,
        RETRAIN_DEPLOYMENT,
        UNRESPONSIVE_AUTOMATION_NAME,
    )

    try:
        with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            deadline = time.monotonic() + 120
            while not _served(client, f"retrain/{RETRAIN_DEPLOYMENT}"):
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(1)
            assert client.read_automations_by_name(UNRESPONSIVE_AUTOMATION_NAME)
            # serve checks the data at once, not first on the hour
            deadline = time.monotonic() + 120
            data_check = f"data-quality/{DATA_QUALITY_DEPLOYMENT}"
            while not (checks := _runs_due(client, data_check)) or not checks[0].state.is_final():
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                time.sleep(1)
            assert checks[0].state.is_completed(), checks[0].state
            # no hourly check while the rest runs: the one alert below is the retrain's
            client.pause_deployment(client.read_deployment_by_name(data_check).id)

            def training(runs: int) -> Any:
                """A retrain run of the deployment, once it is the `runs`-th to train."""
                flow_run = run_deployment(
                    f"retrain/{RETRAIN_DEPLOYMENT}",
                    parameters={"config": {"sft": {"num_train_epochs": 400}}},
                    timeout=0,
                )
                deadline = time.monotonic() + 300
                while len(list(tmp_path.glob("*/sft/train_metrics.jsonl"))) < runs:
                    assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                    time.sleep(1)
                return flow_run

            # Suspend, refused; then Cancel: the runner's SIGTERM is read as the Cancel it is,
            # not as a crash, and the run says where it stopped, not that it was suspended
            cancelled = training(1)
            client.set_flow_run_state(cancelled.id, Suspended(timeout_seconds=600), force=True)
            _wait_refused(client, cancelled.id)
            client.set_flow_run_state(cancelled.id, Cancelling(), force=True)
            deadline = time.monotonic() + 60
            while not (state := client.read_flow_run(cancelled.id).state).is_final():
                assert time.monotonic() < deadline, "still cancelling"
                time.sleep(1)
            assert state.is_cancelled() and state.message.startswith("sft: cancelled from the")
            logs = client.read_logs(LogFilter(flow_run_id={"any_": [cancelled.id]}))
            assert not [log.message for log in logs if "Crash detected" in log.message]
            flow_run = training(2)
            # its machine gone: nothing of it lives to tell the server (a Ctrl-C lets the
            # flow's own process report Crashed; a kill leaves it to the heartbeat automation)
            os.killpg(serving.pid, signal.SIGKILL)
            serving.wait(timeout=60)
            deadline = time.monotonic() + 240  # three heartbeats of 30 s, and the check's own
            while (state := client.read_flow_run(flow_run.id).state).type.value == "RUNNING":
                assert time.monotonic() < deadline, "still Running"
                time.sleep(2)
        assert state.type.value == "CRASHED", state
        assert state.message.startswith("no heartbeat for 90 s"), state.message
        deadline = time.monotonic() + 60
        while not received and time.monotonic() < deadline:
            time.sleep(1)
        (notification,) = received
        assert "ended Crashed" in notification["text"], notification["text"]
    finally:
        if serving.poll() is None:
            os.killpg(serving.pid, signal.SIGKILL)
