"""The smoke preset trained for real on the CPU: SFT killed mid-run and resumed, then GRPO."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from prefect.logging import disable_run_logger
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolgrpo.tasks.train import train_stage
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config import CONFIG_FILENAME
from toolgrpo.training.config_overrides import load_preset, read_config
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics
from toolgrpo.training.stage import last_checkpoint

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 600


def _kill_after_first_checkpoint(run_dir):
    """Run the SFT process until its first checkpoint is complete, then SIGKILL its group."""
    process = subprocess.Popen(
        [sys.executable, "-m", "toolgrpo.training", "sft", "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while last_checkpoint(run_dir / "sft") is None:
            assert process.poll() is None, "SFT ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within the time limit"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def smoke_run(prefect_harness, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("smoke-run")
    config = load_preset("smoke")
    config.write(run_dir / CONFIG_FILENAME)
    _kill_after_first_checkpoint(run_dir)
    killed_at = read_metrics(run_dir / "sft" / METRICS_FILENAME)
    with disable_run_logger():
        sft = train_stage.fn("sft", run_dir, config, timeout_s=900)
        grpo = train_stage.fn("grpo", run_dir, config, timeout_s=900)
    return run_dir, config, killed_at, sft, grpo


def test_killed_sft_resumes_from_its_checkpoint_instead_of_step_zero(smoke_run):
    _, config, killed_at, sft, _ = smoke_run
    assert sft.resumed_from_step >= config.runtime.save_steps
    assert sft.steps == sft.max_steps
    steps = [line["step"] for line in read_metrics(sft.metrics_path) if "loss" in line]
    # one line per step: the lines the killed run wrote up to its checkpoint are kept, the
    # resumed run starts right after it
    assert steps == list(range(1, sft.max_steps + 1))
    assert (
        killed_at[: sft.resumed_from_step]
        == read_metrics(sft.metrics_path)[: sft.resumed_from_step]
    )


def test_smoke_sft_then_grpo_leaves_loadable_models_with_their_config(smoke_run):
    run_dir, config, _, sft, grpo = smoke_run
    assert sft.model_dir == run_dir / "sft" / "model"
    for model_dir in (sft.model_dir, grpo.model_dir):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        assert read_config(model_dir / CONFIG_FILENAME) == config
        inputs = tokenizer(
            [chat_prompt(tokenizer, "Show the balance of ACC001")], return_tensors="pt"
        )
        with torch.no_grad():
            output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert output.shape[1] > inputs["input_ids"].shape[1]


def test_grpo_metrics_carry_reward_components_and_zero_std_figures(smoke_run):
    _, config, _, _, grpo = smoke_run
    lines = [line for line in read_metrics(grpo.metrics_path) if "reward" in line]
    assert [line["step"] for line in lines] == list(range(1, config.grpo.max_steps + 1))
    for line in lines:
        assert line["groups"] == config.grpo.prompts_per_step
        assert 0 <= line["zero_std_groups"] <= line["groups"]
        assert {"rewards/tool_reward/mean", "reward_std", "learning_rate", "step_time_s"} <= set(
            line
        )
    assert lines[-1]["groups_total"] == config.grpo.max_steps * config.grpo.prompts_per_step
    assert lines[-1]["zero_std_groups_total"] == sum(line["zero_std_groups"] for line in lines)
