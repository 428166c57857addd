"""`toolgrpo run` refuses a bad preset, `--set` or file before any flow run, run folder or
temporary server exists; once its arguments hold, the server starts beside the flow's imports."""

import threading
import time

import pytest
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, temporary_settings

from toolgrpo.flows import cli
from toolgrpo.flows.prefect_api import temporary_server_starting
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
def server_starts(monkeypatch):
    """No API configured (a temporary server allowed), and the server's start recorded (it
    takes 0.3 s) instead of run."""
    starts = []

    def start(self, timeout=None):
        time.sleep(0.3)
        starts.append(threading.current_thread())

    monkeypatch.setattr(SubprocessASGIServer, "start", start)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        yield starts


def test_the_temporary_server_starts_in_the_background_and_the_block_waits_for_it(server_starts):
    with temporary_server_starting():
        assert server_starts == []  # the block runs while the server starts
    assert len(server_starts) == 1 and server_starts[0] is not threading.current_thread()


def test_a_usage_error_starts_no_temporary_server(tmp_path, server_starts):
    assert cli.run(preset="smoke", out=tmp_path / "runs", set_=["grpo_max_steps=20"]) == 2
    time.sleep(0.5)
    assert server_starts == []


def test_no_temporary_server_starts_where_an_api_is_configured(server_starts):
    api = {PREFECT_API_URL: "http://127.0.0.1:9/api"}
    with temporary_settings(updates=api), temporary_server_starting():
        pass
    assert server_starts == []
