"""Where evaluation runs: the device and precision the model trained in, the engine that decodes,
and batch sizes that fit there.

A model trained by toolgrpo has its training config beside the weights (`train_config.json`,
placed on the device it trained on), so evaluation follows it: CUDA in bf16 after a bf16 GPU
run, the CPU in the precision the CPU run trained in (bf16 where the CPU computes it natively,
else float32), vLLM when the stage generated with it and it is installed. A model from
elsewhere goes to CUDA when there is a device, in the precision it was saved in. Without CUDA
everything falls back to the CPU with a note; asking for `cuda` there is an error.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from transformers import AutoConfig, PretrainedConfig

from toolgrpo.training.config import CONFIG_FILENAME, ConfigError, Device, TrainConfig
from toolgrpo.training.config_overrides import read_config
from toolgrpo.training.device import cpu_has_bf16

# (decoding, scoring) batch sizes on the CPU: the fastest in `bench/evaluate.py` on 2 cores.
CPU_BATCH_SIZES = (32, 16)
# On a GPU the batch is what fits: the KV cache of a batch takes at most this share of the free
# memory (the rest is for activations and the allocator), up to these many rows.
CUDA_MEMORY_SHARE = 0.5
CUDA_MAX_BATCH_SIZE = 256
CUDA_MAX_SCORE_BATCH_SIZE = 64


class EvaluationError(ValueError):
    """Evaluation cannot start (no model, missing columns, no such device); the message says
    what to fix."""


class EvalDevice(NamedTuple):
    """Where a model is evaluated, in which precision, whether vLLM decodes, and why it differs
    from where the model trained (None when it does not)."""

    device: Literal["cpu", "cuda"]
    dtype: torch.dtype
    vllm: bool = False
    note: str | None = None

    def describe(self) -> str:
        engine = "vLLM" if self.vllm else "generate"
        text = f"{self.device}, {str(self.dtype).removeprefix('torch.')}, {engine}"
        return f"{text} ({self.note})" if self.note else text


CPU = EvalDevice("cpu", torch.float32)


def choose_eval_device(
    trained: TrainConfig | None,
    requested: Device,
    *,
    cuda: bool,
    vllm_installed: bool,
    saved_bf16: bool,
    cpu_bf16: bool = False,
) -> EvalDevice:
    """The evaluation device for a model trained with `trained` (None: not by toolgrpo, saved in
    bf16 or not) on a machine with or without CUDA, whose CPU computes bfloat16 natively or not
    (`cpu_bf16`): pure, so tests need no GPU."""
    bf16 = trained.model.bf16 if trained is not None else saved_bf16
    cpu = CPU._replace(dtype=torch.bfloat16) if bf16 and cpu_bf16 else CPU
    if requested == "cpu":
        return cpu
    if requested == "cuda" and not cuda:
        raise EvaluationError("evaluation device 'cuda' asked for, but this machine has no CUDA")
    trained_on = trained.runtime.device if trained is not None else "auto"
    if requested == "auto" and trained_on == "cpu":
        return cpu
    if not cuda:
        note = "trained on CUDA; no CUDA device here" if trained_on == "cuda" else None
        return cpu._replace(note=note)
    vllm = trained is not None and trained.grpo.use_vllm and vllm_installed
    return EvalDevice("cuda", torch.bfloat16 if bf16 else torch.float32, vllm)


def eval_device(model_dir: Path, requested: Device = "auto") -> EvalDevice:
    """`choose_eval_device` for the model saved in `model_dir`, on this machine."""
    config_path = Path(model_dir) / CONFIG_FILENAME
    try:
        trained = read_config(config_path) if config_path.is_file() else None
    except ConfigError as error:
        raise EvaluationError(str(error)) from None
    saved_bf16 = trained is None and _saved_dtype(model_dir) == torch.bfloat16
    return choose_eval_device(
        trained,
        requested,
        cuda=torch.cuda.is_available(),
        vllm_installed=importlib.util.find_spec("vllm") is not None,
        saved_bf16=saved_bf16,
        cpu_bf16=cpu_has_bf16(),
    )


def _saved_dtype(model_dir: Path) -> torch.dtype | None:
    try:
        return getattr(AutoConfig.from_pretrained(model_dir), "dtype", None)
    except (OSError, ValueError):
        return None  # not a saved model: loading it says so


def kv_cache_bytes_per_token(config: PretrainedConfig, dtype: torch.dtype) -> int:
    """Bytes one token's keys and values take in every layer."""
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * dtype.itemsize


def rows_that_fit(free_bytes: int, bytes_per_row: int, cap: int) -> int:
    """How many rows of `bytes_per_row` fit in `CUDA_MEMORY_SHARE` of `free_bytes`, 1 to `cap`."""
    return max(1, min(cap, int(CUDA_MEMORY_SHARE * free_bytes) // max(1, bytes_per_row)))


def cuda_batch_sizes(
    config: PretrainedConfig, dtype: torch.dtype, tokens_per_row: int, tools: int
) -> tuple[int, int]:
    """(decoding, scoring) batch sizes that fit in the GPU's free memory now; a scored row holds
    one continuation per tool."""
    free_bytes, _ = torch.cuda.mem_get_info()
    row = kv_cache_bytes_per_token(config, dtype) * tokens_per_row
    return (
        rows_that_fit(free_bytes, row, CUDA_MAX_BATCH_SIZE),
        rows_that_fit(free_bytes, row * tools, CUDA_MAX_SCORE_BATCH_SIZE),
    )
