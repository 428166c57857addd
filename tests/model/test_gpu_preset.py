"""The gpu preset's whole path on whatever this machine has: a local base model (Gemma 3 270M,
truncated to two layers, its vocabulary cut to the rows') → SFT with LoRA → GRPO with LoRA →
merged save → evaluation of the merged model, through the retrain flow, with device and
precision following the machine (CUDA in bf16; else the CPU, in bf16 where it computes it
natively, otherwise float32)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from toolgrpo.evaluation.device import eval_device
from toolgrpo.flows.retrain import RetrainOverrides, retrain
from toolgrpo.training.config import CONFIG_FILENAME
from toolgrpo.training.config_overrides import read_config
from toolgrpo.training.device import cpu_has_bf16

pytestmark = pytest.mark.slow
CUDA = torch.cuda.is_available()
# Sizes only, so that the case study's 500 steps of 64 completions fit a test; nothing about the
# device or the precision is overridden.
SMALL = {
    "data.max_train_rows": 32,
    "sft.num_train_epochs": 1,
    "grpo.max_steps": 2,
    "grpo.prompts_per_step": 2,
    "grpo.max_completion_length": 48,
    "runtime.eval_max_rows": 8,
}


@pytest.fixture(scope="module")
def base_dir(small_gemma):
    return small_gemma


@pytest.fixture(scope="module")
def gpu_run(prefect_harness, base_dir, tmp_path_factory):
    return retrain(
        preset="gpu",
        out=tmp_path_factory.mktemp("runs"),
        config=RetrainOverrides.from_dotted({"model.base_model": str(base_dir), **SMALL}),
        audit_training_rows=False,
    )


def test_gpu_preset_trains_where_the_machine_can_and_records_it(gpu_run):
    for stage in ("sft", "grpo"):
        trained = read_config(gpu_run.models[stage] / CONFIG_FILENAME)
        assert trained.runtime.device == ("cuda" if CUDA else "cpu")
        assert trained.model.bf16 is (CUDA or cpu_has_bf16())
        assert trained.model.lora.r == 16 and trained.runtime.gradient_checkpointing


def test_lora_is_merged_into_a_plain_model_that_kept_the_base_embeddings(gpu_run, base_dir):
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    merged = AutoModelForCausalLM.from_pretrained(gpu_run.models["grpo"], dtype=torch.float32)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    # LoRA on the linear layers leaves the embeddings as they were and moves the projections.
    embeddings = merged.get_input_embeddings().weight
    assert torch.equal(embeddings, base.get_input_embeddings().weight.to(embeddings.dtype))
    query = merged.model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(query, base.model.layers[0].self_attn.q_proj.weight)


def test_merged_models_are_evaluated_on_every_eval_file(gpu_run):
    for stage in ("sft", "grpo"):
        accuracy = gpu_run.accuracy[stage]
        assert set(accuracy.by_source) == {
            "eval/single_step",
            "eval/multistep",
            "eval/unseen_phrasing",
        }
        assert 0.0 <= accuracy.overall <= 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_a_cuda_trained_model_is_saved_and_evaluated_in_bf16_on_cuda(gpu_run):
    merged = AutoModelForCausalLM.from_pretrained(gpu_run.models["grpo"])
    assert merged.config.dtype == torch.bfloat16
    assert eval_device(gpu_run.models["grpo"])[:2] == ("cuda", torch.bfloat16)
