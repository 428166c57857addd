"""Where training and evaluation run: device placement, engines a machine cannot start, batch sizes
that fit a GPU, and base-model tokenizers made to fit the chat format. No GPU needed: the
decisions are functions of the config and of what the machine has."""

import pytest
import torch
from transformers import Qwen2Config

from toolgrpo.evaluation.device import (
    CPU,
    CUDA_MAX_BATCH_SIZE,
    EvaluationError,
    choose_eval_device,
    kv_cache_bytes_per_token,
    rows_that_fit,
)
from toolgrpo.training.config import ConfigError
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.device import place
from toolgrpo.training.model import BaseModelError, fit_chat_tokenizer, train_tokenizer

EVERYTHING_INSTALLED = {"installed": lambda package: True}
NOTHING_INSTALLED = {"installed": lambda package: False}

# --- training: runtime.device against the machine -------------------------------------------


def test_gpu_preset_without_cuda_falls_back_to_float32_on_the_cpu_and_says_so():
    placed, note = place(load_preset("gpu"), cuda=False)
    assert (placed.runtime.device, placed.model.bf16) == ("cpu", False)
    assert note == (
        "no CUDA device: training on the CPU in float32; bf16 off (model.bf16=false); "
        "set runtime.device=cuda to stop instead"
    )


def test_a_cpu_that_computes_bf16_natively_keeps_it_and_says_so():
    placed, note = place(load_preset("pretrained"), cuda=False, cpu_bf16=True)
    assert (placed.runtime.device, placed.model.bf16) == ("cpu", True)
    assert note == (
        "no CUDA device: training on the CPU in bfloat16 (this CPU computes it natively); "
        "set runtime.device=cuda to stop instead"
    )
    placed, note = place(load_preset("pretrained"), cuda=False, cpu_bf16=False)
    assert not placed.model.bf16 and "in float32; bf16 off (model.bf16=false)" in note


def test_gpu_preset_with_cuda_keeps_bf16_and_logs_nothing():
    placed, note = place(load_preset("gpu"), cuda=True)
    assert (placed.runtime.device, placed.model.bf16, note) == ("cuda", True, None)


def test_cpu_preset_is_placed_unchanged_even_on_a_gpu_machine():
    config = load_preset("cpu")
    assert place(config, cuda=True) == (config, None)


def test_a_placed_config_places_to_itself():
    placed, _ = place(load_preset("gpu"), cuda=False)
    assert place(placed, cuda=False) == (placed, None)


def test_cuda_asked_for_on_a_machine_without_it_is_one_line_saying_what_to_set():
    config = load_preset("gpu", {"runtime.device": "cuda"})
    with pytest.raises(ConfigError, match=r"no CUDA device: set runtime.device=auto \(or cpu\)"):
        place(config, cuda=False)


def test_cpu_turns_vllm_off_and_names_both_settings():
    config = load_preset("gpu", {"runtime.device": "cpu", "grpo.use_vllm": True})
    placed, note = place(config, cuda=False, **NOTHING_INSTALLED)
    assert not placed.grpo.use_vllm
    assert note.startswith("runtime.device=cpu: training on the CPU in float32; bf16 off")
    assert "vLLM off (grpo.use_vllm=false)" in note


def test_vllm_on_a_gpu_without_the_package_stops_before_training():
    config = load_preset("gpu", {"grpo.use_vllm": True})
    with pytest.raises(ConfigError, match="vLLM is not installed"):
        place(config, cuda=True, **NOTHING_INSTALLED)
    assert place(config, cuda=True, **EVERYTHING_INSTALLED).config.grpo.use_vllm


@pytest.mark.parametrize(
    ("cuda", "installed", "message"),
    [
        (True, NOTHING_INSTALLED, r"pip install 'toolgrpo\[deepspeed\]'"),
        (False, EVERYTHING_INSTALLED, "needs CUDA devices"),
    ],
)
def test_deepspeed_needs_its_package_and_cuda(cuda, installed, message):
    config = load_preset("gpu", {"runtime.num_processes": 2, "runtime.accelerate_config": "zero2"})
    with pytest.raises(ConfigError, match=message):
        place(config, cuda=cuda, **installed)


# --- config validation of the engines ----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"runtime.accelerate_config": "zero9"},
            r"runtime.accelerate_config: 'zero9' is neither a file nor an accelerate config TRL "
            r"ships \(fsdp1, fsdp2, multi_gpu",
        ),
        (
            {"runtime.num_processes": 2, "runtime.accelerate_config": "zero3"},
            "'zero3' shards the weights, which LoRA merges into on save",
        ),
        (
            {"grpo.vllm_server_base_url": "http://vllm:8000"},
            "grpo: vllm_server_base_url is only read with vllm_mode 'server'",
        ),
        (
            {"grpo.use_vllm": True, "grpo.vllm_tensor_parallel_size": 2},
            "grpo.vllm_tensor_parallel_size 2 does not divide GRPO's process count 1",
        ),
    ],
)
def test_engine_settings_that_cannot_work_are_refused_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_preset("gpu", overrides)


def test_zero3_shards_full_fine_tuning_and_a_config_file_path_is_accepted(tmp_path):
    load_preset(
        "gpu", {"runtime.num_processes": 2, "runtime.accelerate_config": "zero3", "model.lora.r": 0}
    )
    own = tmp_path / "two_nodes.yaml"
    own.write_text("distributed_type: MULTI_GPU\nnum_machines: 2\n", encoding="utf-8")
    config = load_preset("gpu", {"runtime.num_processes": 2, "runtime.accelerate_config": str(own)})
    assert config.runtime.accelerate_config == str(own)


def test_where_vllm_runs_does_not_change_the_weights_key():
    config = load_preset("gpu", {"grpo.use_vllm": True})
    server = with_overrides(
        config, {"grpo.vllm_mode": "server", "grpo.vllm_server_base_url": "http://vllm:8000"}
    )
    assert server.weights_key() == config.weights_key()
    assert config.weights_key() != load_preset("gpu").weights_key()


# --- evaluation: the device the model trained on ----------------------------------------------

CUDA_TRAINED = place(load_preset("gpu"), cuda=True).config
CPU_TRAINED = load_preset("cpu")


def _choose(
    trained, requested="auto", *, cuda=True, vllm_installed=False, saved_bf16=False, cpu_bf16=False
):
    return choose_eval_device(
        trained,
        requested,
        cuda=cuda,
        vllm_installed=vllm_installed,
        saved_bf16=saved_bf16,
        cpu_bf16=cpu_bf16,
    )


def test_a_cuda_trained_model_is_evaluated_on_cuda_in_bf16():
    assert _choose(CUDA_TRAINED) == ("cuda", torch.bfloat16, False, None)


def test_a_cpu_trained_model_stays_on_the_cpu_in_float32_even_with_a_gpu():
    assert _choose(CPU_TRAINED) == CPU


def test_a_model_trained_in_bf16_on_the_cpu_is_evaluated_in_bf16_where_the_cpu_computes_it():
    trained = place(load_preset("pretrained"), cuda=False, cpu_bf16=True).config
    assert _choose(trained, cuda=False, cpu_bf16=True)[:2] == ("cpu", torch.bfloat16)
    assert _choose(trained, cuda=False, cpu_bf16=False) == CPU
    assert _choose(CPU_TRAINED, cpu_bf16=True) == CPU


def test_a_cuda_trained_model_without_cuda_falls_back_to_the_cpu_with_a_note():
    device = _choose(CUDA_TRAINED, cuda=False)
    assert (device.device, device.dtype) == ("cpu", torch.float32)
    assert device.describe() == "cpu, float32, generate (trained on CUDA; no CUDA device here)"


def test_vllm_decodes_only_when_the_stage_used_it_and_it_is_installed():
    with_vllm = with_overrides(CUDA_TRAINED, {"grpo.use_vllm": True})
    assert _choose(with_vllm, vllm_installed=True).vllm
    assert not _choose(with_vllm, vllm_installed=False).vllm
    assert not _choose(CUDA_TRAINED, vllm_installed=True).vllm


def test_a_model_from_elsewhere_takes_cuda_in_its_saved_precision():
    assert _choose(None, saved_bf16=True)[:2] == ("cuda", torch.bfloat16)
    assert _choose(None, saved_bf16=False)[:2] == ("cuda", torch.float32)
    assert _choose(None, cuda=False) == CPU


def test_an_explicit_device_wins_and_cuda_without_one_is_an_error():
    assert _choose(CUDA_TRAINED, "cpu") == CPU
    assert _choose(CPU_TRAINED, "cuda").device == "cuda"
    with pytest.raises(EvaluationError, match="no CUDA"):
        _choose(CPU_TRAINED, "cuda", cuda=False)


def test_gpu_batches_hold_as_many_kv_caches_as_half_the_free_memory_takes():
    # Qwen2.5-0.5B's shape: 24 layers, 2 key/value heads of 64 dims → 12 KiB per token in bf16.
    qwen = Qwen2Config(
        hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    )
    per_token = kv_cache_bytes_per_token(qwen, torch.bfloat16)
    assert per_token == 2 * 24 * 2 * 64 * 2
    row = per_token * 700  # a 350-token prompt and 350 new tokens
    assert rows_that_fit(2 * 100 * row, row, CUDA_MAX_BATCH_SIZE) == 100
    assert rows_that_fit(10**12, row, CUDA_MAX_BATCH_SIZE) == CUDA_MAX_BATCH_SIZE
    assert rows_that_fit(0, row, CUDA_MAX_BATCH_SIZE) == 1


# --- a base model's tokenizer and the chat format ---------------------------------------------

TEXTS = ["Show the balance of ACC001", '{"thought": "check", "action": {"tool": "withdraw"}}'] * 5


@pytest.fixture
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


def test_a_tokenizer_without_a_chat_template_is_refused_with_the_fix(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(BaseModelError, match="base: the tokenizer has no chat template"):
        fit_chat_tokenizer(tokenizer, "base")


def test_a_tokenizer_without_a_pad_token_pads_with_eos(tokenizer):
    tokenizer.pad_token = None
    assert fit_chat_tokenizer(tokenizer, "base") == ["no pad token: padding with eos '<|im_end|>'"]
    assert tokenizer.pad_token == "<|im_end|>"


def test_an_eos_other_than_the_chats_end_of_turn_becomes_the_end_of_turn(tokenizer):
    tokenizer.add_special_tokens({"eos_token": "<|endoftext|>"})
    changes = fit_chat_tokenizer(tokenizer, "base")
    assert changes == ["eos '<|endoftext|>' → '<|im_end|>' (the chat's end of turn)"]
    assert tokenizer.eos_token == "<|im_end|>"


def test_a_chat_tokenizer_that_fits_is_left_alone(tokenizer):
    assert fit_chat_tokenizer(tokenizer, "base") == []
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n\n{% endfor %}"
    assert fit_chat_tokenizer(tokenizer, "base") == []  # turns end in plain text: eos ends them
