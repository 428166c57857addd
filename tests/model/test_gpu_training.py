"""The gpu preset's code path (CUDA, bf16, LoRA merged on save) with a tiny local base model."""

import pytest
import torch
from prefect.logging import disable_run_logger
from transformers import AutoModelForCausalLM

from toolgrpo.tasks.train import train_stage
from toolgrpo.training.config import load_preset
from toolgrpo.training.model import build_tiny, save_model
from toolgrpo.training.samples import grpo_rows, tokenizer_corpus

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_gpu_preset_trains_lora_in_bf16_and_saves_a_merged_model(prefect_harness, tmp_path):
    smoke = load_preset("smoke")
    tokenizer, model = build_tiny(tokenizer_corpus(grpo_rows(smoke)), hidden_size=128, num_layers=2)
    base_dir = save_model(model, tokenizer, tmp_path / "base")
    config = load_preset(
        "gpu",
        {
            "model.base_model": str(base_dir),
            "data.max_train_rows": 32,
            "sft.num_train_epochs": 1,
            "grpo.max_steps": 2,
            "grpo.prompts_per_step": 2,
            "grpo.max_completion_length": 48,
        },
    )
    with disable_run_logger():
        train_stage.fn("sft", tmp_path / "run", config, timeout_s=600)
        grpo = train_stage.fn("grpo", tmp_path / "run", config, timeout_s=600)

    merged = AutoModelForCausalLM.from_pretrained(grpo.model_dir)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert merged.config.dtype == torch.bfloat16
    assert grpo.steps == 2
