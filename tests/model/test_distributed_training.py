"""Both stages on two CPU processes through the training task: `accelerate launch` with TRL's
DDP config, gloo on the CPU (NCCL on GPUs, the same code)."""

import pytest
from prefect.logging import disable_run_logger
from transformers import AutoModelForCausalLM

from toolgrpo.tasks.train import train_stage
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_sft_and_grpo_train_on_two_processes_splitting_the_batches(prefect_harness, tmp_path):
    config = load_preset(
        "smoke",
        {
            "runtime.num_processes": 2,
            "runtime.torch_threads": 1,
            "sft.num_train_epochs": 1,
            "grpo.max_steps": 2,
        },
    )
    with disable_run_logger():
        sft = train_stage.fn("sft", tmp_path, config, timeout_s=900)
        grpo = train_stage.fn("grpo", tmp_path, config, timeout_s=900)

    # 48 rows in batches of 8 per process: 3 steps an epoch on two processes (6 on one).
    assert (sft.steps, sft.max_steps) == (3, 3)
    # Each process samples half of a step's completions; the groups are counted over both.
    lines = [line for line in read_metrics(grpo.metrics_path) if "groups" in line]
    assert [line["groups"] for line in lines] == [config.grpo.prompts_per_step] * 2
    assert AutoModelForCausalLM.from_pretrained(grpo.model_dir).num_parameters() > 0
