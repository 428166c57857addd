"""Decoding a saved model: batched greedy generation and per-tool probabilities.

`generate_completions` writes the model's answers (`generate_with_vllm` the same with vLLM);
`tool_probabilities` scores every catalogue tool at the answer's action slot from one forward
pass per row (KV cache), for mining. Both run on the model's device (`evaluation.device`).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from toolgrpo.evaluation.device import CPU, EvalDevice, EvaluationError
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.training.chat import chat_prompt

# Where the action slot starts in the model's own output: `"tool": "`.
_TOOL_SLOT = re.compile(r'"tool"\s*:\s*"')


def load_model(
    model_dir: Path, device: EvalDevice = CPU
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The tokenizer and model saved in `model_dir` on `device`, ready for batched decoding."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise EvaluationError(
            f"{model_dir}: not a saved model (no config.json); pass a `<stage_dir>/model` folder"
        )
    # The flow's log carries evaluation progress; a loading bar on the console is only noise.
    transformers.utils.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=device.dtype)
    except (OSError, ValueError) as error:
        raise EvaluationError(f"{model_dir}: cannot load the saved model: {error}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device.device).eval()
    return tokenizer, model


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], catalogue: Catalogue | None = None
) -> list[list[int]]:
    """The token ids of each prompt, chat-templated with `catalogue`'s tools (default: the
    shipped ones): what either decoder continues."""
    texts = [chat_prompt(tokenizer, prompt, catalogue) for prompt in prompts]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def _length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def generate_completions(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    catalogue: Catalogue | None = None,
) -> list[str]:
    """Greedy completions for `prompts` (chat-templated here), decoded in left-padded batches;
    `on_batch` gets the number of prompts decoded so far after each batch."""
    encoded = encode_prompts(tokenizer, prompts, catalogue)
    eos = model.generation_config.eos_token_id or tokenizer.eos_token_id
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    completions = [""] * len(prompts)
    done = 0
    for batch in _length_sorted_batches([len(ids) for ids in encoded], batch_size):
        inputs = tokenizer.pad(
            {"input_ids": [encoded[i] for i in batch]},
            padding=True,
            padding_side="left",  # new tokens follow every prompt directly
            return_tensors="pt",
        ).to(model.device)
        output = model.generate(**inputs, generation_config=config)
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        for index, text in zip(
            batch, tokenizer.batch_decode(new_tokens, skip_special_tokens=True), strict=True
        ):
            completions[index] = text
        done += len(batch)
        if on_batch is not None:
            on_batch(done)
    return completions


def generate_with_vllm(
    model_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    max_new_tokens: int,
    dtype: torch.dtype,
    gpu_memory_utilization: float,
    catalogue: Catalogue | None = None,
) -> list[str]:
    """Greedy completions from vLLM for the same token ids `generate_completions` decodes; vLLM
    stops at the saved generation config's eos. Its engine is shut down before returning, so the
    next evaluation in the process gets the memory back."""
    from vllm import LLM, SamplingParams

    engine = LLM(
        model=str(model_dir),
        dtype=str(dtype).removeprefix("torch."),
        gpu_memory_utilization=gpu_memory_utilization,
        seed=0,
    )
    sampling = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    requests = [{"prompt_token_ids": ids} for ids in encode_prompts(tokenizer, prompts, catalogue)]
    try:
        outputs = engine.generate(requests, sampling, use_tqdm=False)
    finally:
        del engine
        gc.collect()
        torch.cuda.empty_cache()
    return [output.outputs[0].text for output in outputs]


def action_slot_prefix(completion: str) -> str:
    """The completion up to and including `"tool": "`, where a tool name is written next.

    Without that prefix in the model's output, the canonical one carrying its thought (or an
    empty one): `{"thought": "...", "action": {"tool": "`.
    """
    slot = _TOOL_SLOT.search(completion)
    if slot is not None:
        return completion[: slot.end()]
    parsed = first_json_object(completion)
    thought = parsed.get("thought") if parsed else None
    thought = thought if isinstance(thought, str) else ""
    return '{"thought": ' + json.dumps(thought, ensure_ascii=False) + ', "action": {"tool": "'


@torch.inference_mode()
def tool_probabilities(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    contexts: list[str],
    tool_names: list[str],
    *,
    batch_size: int,
) -> np.ndarray:
    """P(tool | context) for every context and tool: each name followed by `"` is scored (sum
    of token log-probs) after the context, then normalised over `tool_names` (softmax).

    Each context runs through the model once (left-padded batches); the candidates continue
    from its KV cache, repeated once per tool, so scoring costs about one forward pass per row
    rather than one per tool, and only a few positions' logits are computed.
    """
    context_ids = tokenizer(contexts, add_special_tokens=False)["input_ids"]
    candidates = [
        tokenizer(name + '"', add_special_tokens=False)["input_ids"] for name in tool_names
    ]
    n_tools, longest = len(candidates), max(len(c) for c in candidates)
    pad = tokenizer.pad_token_id
    # Right-padded: padding after a candidate's last token cannot change that token's score.
    device = model.device
    candidate_ids = torch.tensor(
        [c + [pad] * (longest - len(c)) for c in candidates], device=device
    )
    candidate_mask = torch.tensor(
        [[1] * len(c) + [0] * (longest - len(c)) for c in candidates], device=device
    )
    log_probs = np.zeros((len(contexts), n_tools))
    for batch in _length_sorted_batches([len(ids) for ids in context_ids], batch_size):
        width = max(len(context_ids[i]) for i in batch)
        padding = [width - len(context_ids[i]) for i in batch]
        input_ids = torch.tensor(
            [[pad] * n + context_ids[i] for i, n in zip(batch, padding, strict=True)],
            device=device,
        )
        attention_mask = torch.tensor([[0] * n + [1] * (width - n) for n in padding], device=device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        context = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        # Sequence r * n_tools + k continues row r with tool k from row r's cache.
        rows = len(batch)
        cache = context.cache
        cache.batch_repeat_interleave(n_tools)
        tokens, mask = candidate_ids.repeat(rows, 1), candidate_mask.repeat(rows, 1)
        continuation = model(
            input_ids=tokens,
            attention_mask=torch.cat([attention_mask.repeat_interleave(n_tools, 0), mask], 1),
            position_ids=position_ids[:, -1:].repeat_interleave(n_tools, 0)
            + torch.arange(1, longest + 1, device=device),
            cache=cache,
        )
        first = torch.log_softmax(context.logits[:, -1].float(), -1).repeat_interleave(n_tools, 0)
        # continuation.logits[:, j] predicts candidate token j + 1.
        rest = torch.log_softmax(continuation.logits[:, :-1].float(), -1)
        token_log_probs = torch.cat(
            [first.gather(-1, tokens[:, :1]), rest.gather(-1, tokens[:, 1:, None]).squeeze(-1)], 1
        )
        log_probs[batch] = (token_log_probs * mask).sum(-1).view(rows, n_tools).cpu().numpy()
    shifted = log_probs - log_probs.max(axis=1, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
