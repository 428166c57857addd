"""The main job against a real `prefect server` on loopback, read back through the client."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter
from prefect.settings import PREFECT_API_URL, temporary_settings

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"prefect server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"prefect server not healthy after {timeout_s}s")


@pytest.fixture
def prefect_server(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    port = url.rsplit(":", 1)[1].split("/")[0]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", port],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_healthy(url, server)
        yield url, {**env, "PREFECT_API_URL": url}
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


def test_retrain_runs_on_a_real_server_with_its_artifacts(prefect_server, tmp_path):
    url, env = prefect_server
    run = subprocess.run(
        [BIN / "toolgrpo", "run", "--preset", "smoke", "--out", tmp_path / "runs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "report: " in run.stdout

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        (flow_run,) = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["retrain"]))
        )
        assert flow_run.state.is_completed()
        keys = {
            artifact.key
            for artifact in client.read_artifacts(
                flow_run_filter=FlowRunFilter(id={"any_": [flow_run.id]})
            )
        }
    assert {"retrain-report", "retrain-accuracy", "data-quality-summary"} <= keys
