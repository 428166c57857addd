"""Stopping `toolgrpo run` as a person does: Ctrl-C in its terminal (SIGINT to the whole process
group) or `kill -9` of the command. One line and exit 130, within seconds; no process left
behind; the flow run ends Crashed — at once on Ctrl-C, by the next command after a `kill -9`."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TOOLGRPO = Path(sys.executable).parent / "toolgrpo"
GRPO_STEP = re.compile(r"grpo step (\d+)/")


COMMAND = [str(TOOLGRPO), "run", "--preset", "smoke", "--set", "grpo.max_steps=60"]
# Two GRPO arms side by side, each supervised from a thread of its own.
ABLATE = [str(TOOLGRPO), "ablate", "--preset", "smoke", "--seeds", "1", "--starts", "default"]
ABLATE += ["--arms", "none,zero_std", "--steps", "60", "--workers", "2"]


def _start_run(
    tmp_path: Path, until_step: int = 2, command: list[str] = COMMAND
) -> tuple[subprocess.Popen, Path, dict[str, str]]:
    """`toolgrpo run --preset smoke` with GRPO long enough to interrupt, in a process group of
    its own with SIGINT as a terminal leaves it, and a PREFECT_HOME of its own."""
    home = tmp_path / "prefect-home"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        [*command, "--out", str(tmp_path / "runs")],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        process_group=0,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 600
    while not any(int(step) >= until_step for step in GRPO_STEP.findall(log.read_text())):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)
    return process, log, env


def _processes_in(home: Path) -> list[str]:
    """The processes whose PREFECT_HOME is `home`: the command, its trainers, its server."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environment = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PREFECT_HOME={home}".encode() in environment and int(proc.name) != os.getpid():
            found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    return found


def _flow_run_states(home: Path) -> list[str]:
    with sqlite3.connect(home / "prefect.db") as db:
        return [state for (state,) in db.execute("select state_type from flow_run")]


def test_ctrl_c_during_grpo_stops_in_seconds_with_one_line_and_leaves_nothing(tmp_path):
    process, log, env = _start_run(tmp_path)
    stopped = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert time.monotonic() - stopped < 20
    output = log.read_text()
    assert output.strip().splitlines()[-1] == "toolgrpo: interrupted (Ctrl-C); stopped"
    assert "Traceback" not in output
    time.sleep(2)
    assert _processes_in(Path(env["PREFECT_HOME"])) == []
    assert _flow_run_states(Path(env["PREFECT_HOME"])) == ["CRASHED"]


def test_ctrl_c_during_an_ablation_stops_every_arm_and_the_server(tmp_path):
    process, log, env = _start_run(tmp_path, command=ABLATE)
    stopped = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert time.monotonic() - stopped < 20
    assert log.read_text().strip().splitlines()[-1] == "toolgrpo: interrupted (Ctrl-C); stopped"
    time.sleep(2)
    assert _processes_in(Path(env["PREFECT_HOME"])) == []  # both trainers and the server


def test_kill_9_leaves_no_process_and_the_next_command_marks_the_run_crashed(tmp_path):
    process, _, env = _start_run(tmp_path)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 15
    while _processes_in(Path(env["PREFECT_HOME"])) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_in(Path(env["PREFECT_HOME"])) == []  # the trainer and the server too
    home = Path(env["PREFECT_HOME"])
    assert _flow_run_states(home) == ["RUNNING"]
    rows = Path(__file__).resolve().parents[2] / "data" / "train" / "single_step.jsonl"
    validate = subprocess.run(
        [str(TOOLGRPO), "validate", str(rows), "--out", str(tmp_path / "reports")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validate.returncode == 0
    assert "was left Running by a process that died: now Crashed" in validate.stderr
    assert sorted(_flow_run_states(home)) == ["COMPLETED", "CRASHED"]


def test_a_run_after_ctrl_c_resumes_grpo_and_says_so(tmp_path):
    process, _, env = _start_run(tmp_path, until_step=6)  # past the checkpoint of step 4
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130
    again = subprocess.run(
        [*COMMAND, "--out", str(tmp_path / "runs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    summary_path = again.stdout.strip().splitlines()[-1].removeprefix("summary: ")
    summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
    sft, grpo = summary["training"]["sft"], summary["training"]["grpo"]
    assert summary["retrained"] is True
    assert sft["trained_here"] is False and summary["wall_s"]["sft"] == 0
    assert grpo["trained_here"] is True and grpo["resumed_from_step"] >= 4
    assert grpo["steps"] == 60 and summary["wall_s"]["grpo"] > 0
    assert f"grpo: resumed from checkpoint {grpo['resumed_from_step']}: trained steps" in (
        again.stdout + again.stderr
    )
    headline = (Path(summary_path).parent / "report.md").read_text(encoding="utf-8")
    assert "grpo resumed from checkpoint" in headline
