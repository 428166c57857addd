"""`toolgrpo run` refuses a bad preset, `--set` or file before any flow run, run folder or
temporary server exists; once its arguments hold, the server starts beside the flow's imports."""

import os
import socket
import sqlite3
import subprocess
import sys
import threading

import httpx
import prefect.context
import pytest
from prefect.settings import (
    PREFECT_API_DATABASE_CONNECTION_URL,
    PREFECT_API_URL,
    get_current_settings,
    temporary_settings,
)

from toolgrpo.flows import cli, prefect_api
from toolgrpo.flows.prefect_api import TemporaryServerFailed, temporary_server_starting
from toolgrpo.flows.retrain import retrain


@pytest.mark.parametrize(
    ("set_", "message"),
    [
        (["grpo_max_steps=20"], "did you mean 'grpo.max_steps'"),
        (["grpo.max_steps=abc"], "grpo.max_steps"),
        (["grpo.max_steps"], "--set takes FIELD=VALUE"),
        (["grpo.max_steps=[1"], "is not a value"),
        (["runtime.use_cpu=true"], "did you mean 'runtime.device'"),
        (["data.catalogue=x.json"], "the run sets it from --catalogue"),
        (["data.train_multistep=x.jsonl"], "the run sets it from --train"),
        (["base.exercise_rounds=3"], "`toolgrpo base build` reads it, no run does"),
    ],
)
def test_a_bad_override_exits_2_with_one_line_and_no_run(tmp_path, capsys, set_, message):
    out = tmp_path / "runs"
    assert cli.run(preset="smoke", out=out, set_=set_) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not out.exists()


def test_a_missing_data_file_exits_2_before_any_run(tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli.run(preset="smoke", out=out, train=[tmp_path / "nope.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the tool catalogue: No such file or directory"),
        ("{not json", "the tool catalogue is not JSON"),
        ('{"version": 1, "tools": [{"name": "Fly"}]}', "not a tool catalogue: tools.0.name"),
    ],
)
def test_a_bad_catalogue_exits_2_with_one_line_before_any_run(tmp_path, capsys, content, message):
    catalogue = tmp_path / "tools.json"
    if content is not None:
        catalogue.write_text(content, encoding="utf-8")
    out = tmp_path / "runs"
    assert cli.run(preset="smoke", out=out, catalogue=catalogue) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and str(catalogue) in error and len(error.splitlines()) == 1
    assert not out.exists()


def test_every_command_that_reads_tools_takes_a_catalogue_and_refuses_a_bad_one(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    data = [cli.DATA_DIR / "eval" / "single_step.jsonl"]
    out = tmp_path / "runs"
    calls = {
        "validate": lambda: cli.validate(*data, out=out, catalogue=missing),
        "evaluate": lambda: cli.evaluate(model=tmp_path, data=data, out=out, catalogue=missing),
        "mine": lambda: cli.mine(predictions=tmp_path / "p.parquet", out=out, catalogue=missing),
        "ablate": lambda: cli.ablate(preset="smoke", out=out, catalogue=missing),
    }
    for command, call in calls.items():
        assert call() == 2, command
        error = capsys.readouterr().err.strip()
        assert f"{missing}: cannot read the tool catalogue" in error, command
        assert len(error.splitlines()) == 1, command
    assert not out.exists()


def test_run_options_become_the_flows_typed_parameters(tmp_path):
    catalogue = cli.DATA_DIR / "tools.json"
    parameters = cli.retrain_parameters(
        "smoke", None, None, tmp_path, ["grpo.max_steps=2", "seed=4"], 0, catalogue
    )
    assert parameters["config"].dotted() == {"grpo.max_steps": 2, "seed": 4}
    assert (parameters["catalogue"], parameters["audit_folds"]) == (catalogue, 0)
    assert "train_files" not in parameters  # the flow's default: the preset's files
    retrain.validate_parameters(parameters)  # raises on a parameter the flow would refuse


@pytest.fixture
def no_api(monkeypatch):
    """No API configured (a temporary server allowed); what a temporary server sets for the
    process (PREFECT_API_URL, Prefect's global settings) undone after the test, and the servers
    started stopped."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    global_settings = prefect.context.GLOBAL_SETTINGS_CONTEXT
    monkeypatch.setattr(prefect.context, "GLOBAL_SETTINGS_CONTEXT", global_settings)
    launched = []

    def launch(*args):
        launched.append(launch_for_real(*args))
        return launched[-1]

    launch_for_real = prefect_api._launch
    monkeypatch.setattr(prefect_api, "_launch", launch)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        yield launched
    for server in launched:
        prefect_api._stop(server.process)


@pytest.mark.slow
def test_the_temporary_server_starts_before_the_block_and_serves_after_it(no_api):
    with temporary_server_starting():
        (server,) = no_api
        assert server.process.poll() is None  # starting while the block runs
    url = os.environ["PREFECT_API_URL"]
    assert url == server.url and httpx.get(f"{url}/health").is_success
    # a thread without a settings context of its own (Prefect's workers) reads the global one
    seen = []
    reader = threading.Thread(target=lambda: seen.append(get_current_settings().api.url))
    reader.start()
    reader.join()
    assert seen == [url]


@pytest.mark.slow
def test_a_temporary_server_that_cannot_start_is_one_error_naming_why(no_api, tmp_path):
    database = f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'prefect.db'}"
    with (
        temporary_settings(updates={PREFECT_API_DATABASE_CONNECTION_URL: database}),
        pytest.raises(TemporaryServerFailed, match="unable to open database file"),
        temporary_server_starting(),
    ):
        pass
    assert "PREFECT_API_URL" not in os.environ


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_is_left_for_another(no_api, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        free_port = prefect_api._free_port
        monkeypatch.setattr(prefect_api, "_free_port", lambda: next(ports, None) or free_port())
        with temporary_server_starting():
            pass
    first, second = no_api
    assert first.process.returncode is not None and second.process.poll() is None
    assert os.environ["PREFECT_API_URL"] == second.url


def test_a_usage_error_starts_no_temporary_server(tmp_path, no_api):
    assert cli.run(preset="smoke", out=tmp_path / "runs", set_=["grpo_max_steps=20"]) == 2
    assert no_api == []


def test_no_temporary_server_starts_where_an_api_is_configured(no_api):
    api = {PREFECT_API_URL: "http://127.0.0.1:9/api"}
    with temporary_settings(updates=api), temporary_server_starting():
        pass
    assert no_api == []


# The command line as the console script runs it, with a mark printed wherever Prefect starts a
# temporary server of its own (its console log is turned down by then).
PREFECT_STARTS_MARKED = """
import sys
from prefect.server.api.server import SubprocessASGIServer
from toolgrpo.flows.cli import main

start = SubprocessASGIServer.start

def marked(self, *args, **kwargs):
    print("PREFECT STARTED A SERVER", file=sys.stderr)
    return start(self, *args, **kwargs)

SubprocessASGIServer.start = marked
main()
"""


@pytest.mark.slow
def test_validate_without_an_api_runs_on_the_temporary_server_it_started(tmp_path):
    """The command as a user runs it with no API configured: its flow run is recorded by the
    server it started early, and Prefect starts no second one."""
    home = tmp_path / "prefect"
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    command = [sys.executable, "-c", PREFECT_STARTS_MARKED, "validate"]
    command += [cli.DATA_DIR / "eval" / "single_step.jsonl", "--out", tmp_path / "runs"]
    result = subprocess.run(
        command, env={**env, "PREFECT_HOME": str(home)}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "PREFECT STARTED A SERVER" not in result.stderr
    with sqlite3.connect(home / "prefect.db") as database:
        runs = database.execute("SELECT state_type FROM flow_run").fetchall()
    assert runs == [("COMPLETED",)]
