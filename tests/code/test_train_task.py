"""The Prefect task that runs a training stage as a subprocess: command, deadline, failures."""

import re
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.logging import disable_run_logger

import toolgrpo.tasks.progress as progress_module
from toolgrpo.tasks.train import (
    PER_STEP_RECORD,
    StageFailed,
    _cause,
    stage_command,
    train_stage,
)
from toolgrpo.training import device
from toolgrpo.training.config import CONFIG_FILENAME, trl_accelerate_configs
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.device import stage_threads


def test_one_process_runs_python_m_training():
    command = stage_command("sft", Path("/runs/a"), load_preset("cpu"), None)
    assert command == [sys.executable, "-m", "toolgrpo.training", "sft", "--run-dir", "/runs/a"]


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_cpu_preset_runs_sft_as_one_process_and_grpo_as_two_processes_sharing_the_cpus(
    monkeypatch,
):
    config = load_preset("cpu")
    sft, grpo = config.for_stage("sft"), config.for_stage("grpo")
    monkeypatch.setattr(device, "usable_cpus", lambda: 2)  # the measured choice on 2 cores
    assert (sft.runtime.num_processes, stage_threads(sft.runtime)) == (1, 2)
    assert (grpo.runtime.num_processes, stage_threads(grpo.runtime)) == (2, 1)
    monkeypatch.setattr(device, "usable_cpus", lambda: 32)  # a bigger worker: every core used
    assert (stage_threads(sft.runtime), stage_threads(grpo.runtime)) == (32, 16)
    command = stage_command("grpo", Path("/runs/a"), grpo, Path("/models/sft"))
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    assert _option(command, "--num_processes") == "2"
    # Unset, GRPO runs as the runtime section says.
    unset = {"runtime.grpo.num_processes": None, "runtime.torch_threads": 3}
    runtime = with_overrides(config, unset).for_stage("grpo").runtime
    assert (runtime.num_processes, stage_threads(runtime)) == (1, 3)


def test_several_processes_go_through_accelerate_launch_with_the_named_config():
    config = load_preset("gpu", {"runtime.num_processes": 4, "runtime.accelerate_config": "zero2"})
    command = stage_command("grpo", Path("/runs/a"), config, Path("/models/sft"))
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    assert _option(command, "--config_file") == str(trl_accelerate_configs()["zero2"])
    assert _option(command, "--num_processes") == "4"
    assert _option(command, "--mixed_precision") == "bf16"
    assert int(_option(command, "--main_process_port")) > 0  # a free one, not a shared default
    assert command[-7:] == [
        "-m",
        "toolgrpo.training",
        "grpo",
        "--run-dir",
        "/runs/a",
        "--init",
        "/models/sft",
    ]


@pytest.mark.parametrize(
    ("line", "per_step"),
    [
        ("{'loss': '0.4471', 'grad_norm': '0.337', 'rewards/tool_reward/mean': '0'}", True),
        ("toolgrpo.training.ngrpo: Zero std: 2/2 (100.0%); calibration changed 2/2 groups", True),
        ("grpo step 3/40 · reward 0.61 · zero-std 25% of groups · 1.4 s/step · ETA 1m", False),
        ("resuming from /runs/a/sft/checkpoint-4", False),
        ("error: data/train/multistep.jsonl: sample file not found", False),
    ],
)
def test_only_the_childs_per_step_records_leave_the_info_log(line, per_step):
    assert bool(PER_STEP_RECORD.match(line)) is per_step


def test_the_training_process_logs_info_but_not_accelerates_per_epoch_note():
    """In a process of its own, as the stage runs (the set-up is process-wide)."""
    check = (
        "import logging; from toolgrpo.training.__main__ import configure_output; "
        "configure_output(); enabled = lambda name: logging.getLogger(name).isEnabledFor(20); "
        "print(enabled('toolgrpo.training.ngrpo'), enabled('accelerate.accelerator'))"
    )
    shown = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert shown.stdout.split() == ["True", "False"], shown.stderr


def _training_processes(run_dir: Path) -> list[int]:
    """Pids of live processes whose command line names `run_dir`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(run_dir) in (proc / "cmdline").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_deadline_stops_the_training_process_and_says_how_to_resume(prefect_harness, tmp_path):
    with disable_run_logger(), pytest.raises(StageFailed, match="past its 2s deadline") as error:
        train_stage.fn("sft", tmp_path, load_preset("smoke"), timeout_s=2)
    assert error.value.returncode is None
    assert "no checkpoint was saved, so a re-run starts the stage over" in str(error.value)
    time.sleep(0.5)
    assert _training_processes(tmp_path) == []


@flow(name="one-stage")
def _one_stage(run_dir: Path, config):
    return train_stage("sft", run_dir, config, timeout_s=300)


def test_bad_config_fails_the_task_once_with_the_childs_message(prefect_harness, tmp_path):
    config = load_preset("smoke", {"data.train_multistep": Path("missing/multistep.jsonl")})

    state = _one_stage(tmp_path, config, return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, StageFailed) and error.returncode == 2
    message = str(error)
    # the cause first, then how to go on, then the output it came from
    assert re.match(
        r"sft stage failed \(exit status 2\) after [\d.]+s: \S*missing/multistep\.jsonl: sample "
        r"file not found\. Last output:\n",
        message,
    )
    assert "Traceback" not in message
    with get_client(sync_client=True) as client:  # input errors are not retried
        flow_runs = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        (task_run,) = client.read_task_runs(flow_run_filter=flow_runs)
    assert task_run.state.is_failed() and task_run.run_count == 1
    assert task_run.name == "sft"
    assert (tmp_path / CONFIG_FILENAME).is_file()


def test_a_failure_message_leads_with_the_last_line_that_says_why():
    tail = deque(["sft step 3/10 · loss 0.2", "Traceback (most recent call last):", "  x()"])
    tail += ["RuntimeError: [enforce fail at inline_container.cc:664] unexpected pos 64"]
    assert (
        _cause(tail)
        == ": RuntimeError: [enforce fail at inline_container.cc:664] unexpected pos 64"
    )
    assert _cause(deque(["error: no such file", "sft step 1/2"])) == ": no such file"
    assert _cause(deque(["sft step 1/2 · loss 0.3"])) == ""


def test_an_unreachable_api_neither_holds_up_nor_fails_the_work_and_is_said_once(
    prefect_harness, monkeypatch, caplog
):
    calls: list[float] = []

    def unreachable(*args, **kwargs):  # as the client's retries wait out a server gone away
        calls.append(time.monotonic())
        time.sleep(0.5)
        raise TimeoutError("timed out")

    monkeypatch.setattr(progress_module, "create_progress_artifact", unreachable)
    monkeypatch.setattr(progress_module, "update_progress_artifact", unreachable)

    @task
    def train_steps() -> float:
        started = time.monotonic()
        artifact = progress_module.ProgressArtifact("train-sft-progress", "sft steps")
        for step in range(1, 101):
            artifact.update(step, f"sft: step {step}/100")
        held_up = time.monotonic() - started
        time.sleep(1.6)  # the sends still waiting are tried
        return held_up

    @flow
    def retrain() -> float:
        return train_steps()

    assert retrain() < 0.2
    assert 2 <= len(calls) <= 4  # the newest update replaces the waiting ones
    said = [
        r.getMessage() for r in caplog.records if "not sent to the Prefect API" in r.getMessage()
    ]
    assert len(said) == 1 and "timed out" in said[0]
