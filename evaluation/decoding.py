"""Decoding a saved model: batched greedy generation and per-tool probabilities.

`generate_completions` writes the model's answers (`generate_with_vllm` the same with vLLM),
or only their thought up to the action slot; `tool_probabilities` scores every catalogue tool at
the action slot from one forward pass per row (KV cache). Both run on the model's device
(`evaluation.device`).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from safetensors import SafetensorError
from transformers import (
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from toolgrpo.evaluation.device import CPU, EvalDevice, EvaluationError
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.model import ANSWER_FRAME, pretrained_model

# Where the action slot starts in the model's own output: `"tool": "`.
_TOOL_SLOT = re.compile(r'"tool"\s*:\s*"')
# The slot is 9 characters: in byte-level BPE at most 9 tokens, plus spaces the pattern allows.
_TOOL_SLOT_TOKENS = 16
CANONICAL_TOOL_SLOT = '"tool": "'
# What follows the tool's name in every answer the model was trained on: the answer frame's
# `", "params": {`, then the first parameter's quote.
AFTER_TOOL_NAME = ANSWER_FRAME[2] + '"'


# Weights saved with Python's pickle (torch.save): loading one may run code, so only safetensors
# folders are evaluated.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def _load_failure(error: BaseException) -> str:
    """What went wrong loading a model folder, in one line."""
    if isinstance(error, SafetensorError):
        return f"the weights file is corrupt or cut short ({error})"
    if isinstance(error, RuntimeError) and "mismatch" in str(error):
        return "the weights' shapes do not match config.json (a config from another model?)"
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def load_trained_model(
    model_dir: Path, device: EvalDevice = CPU
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The tokenizer and model saved in `model_dir` on `device`, ready for batched decoding.
    Raises `EvaluationError` (one line) for a folder that is not a saved model, pickled weights,
    corrupt or cut-short safetensors, or weights whose shapes do not fit the config."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise EvaluationError(
            f"{model_dir}: not a saved model (no config.json); pass a `<stage_dir>/model` folder"
        )
    if not any(model_dir.glob("*.safetensors")):
        pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in model_dir.glob(pattern))
        found = f"its weights are pickled ({', '.join(pickled)})" if pickled else "no weights"
        raise EvaluationError(
            f"{model_dir}: {found}; only safetensors are loaded (pickle can run code): re-save "
            "it with `save_pretrained(..., safe_serialization=True)` where it was trusted"
        )
    # The flow's log carries evaluation progress; a loading bar on the console is only noise,
    # and so is transformers' per-tensor load report before it raises.
    transformers.utils.logging.disable_progress_bar()
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = pretrained_model(model_dir, device.dtype)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        reason = _load_failure(error)
        raise EvaluationError(f"{model_dir}: cannot load the saved model: {reason}") from None
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device.device).eval()  # type: ignore[arg-type]  # transformers types `to` unbound
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


def _left_padded(
    rows: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`rows` left-padded to one width: input ids, attention mask, and position ids that start
    at 0 on each row's first real token (so padding shifts nothing)."""
    width = max(len(row) for row in rows)
    input_ids = torch.tensor([[pad_token_id] * (width - len(r)) + r for r in rows], device=device)
    attention_mask = torch.tensor(
        [[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device
    )
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return input_ids, attention_mask, position_ids


def _prefill(
    model: PreTrainedModel, rows: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """One cached forward pass over `rows` (`_left_padded`), logits of the last position only;
    returns the model's output with the batch's attention mask and position ids."""
    input_ids, attention_mask, position_ids = _left_padded(rows, pad_token_id, device)
    output = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        logits_to_keep=1,
    )
    return output, attention_mask, position_ids


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> set[int]:
    """The end tokens a completion stops at: the saved generation config's, else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    eos = tokenizer.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, list) else {eos}


@torch.inference_mode()
def greedy_token_ids(
    model: PreTrainedModel,
    encoded: list[list[int]],
    *,
    pad_token_id: int,
    eos_token_ids: set[int],
    max_new_tokens: int,
    batch_size: int,
    stop: Callable[[list[int]], bool] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """Greedy continuations of `encoded` (token ids, end token left out), in batches of similar
    prompt length; `on_batch` gets the number of rows decoded so far after each batch.

    A row leaves its batch at its end token, when `stop(its tokens)` is true, or after
    `max_new_tokens`: its cache rows are dropped, so a finished row costs nothing while the
    others decode (`generate` keeps computing every row until the longest is done).
    """
    outputs: list[list[int]] = [[] for _ in encoded]
    done = 0
    for batch in _length_sorted_batches([len(ids) for ids in encoded], batch_size):
        step, attention_mask, position_ids = _prefill(
            model, [encoded[i] for i in batch], pad_token_id, model.device
        )
        cache, position = step.cache, position_ids[:, -1:]
        alive = list(batch)  # the rows still decoding, in the cache's order
        for _ in range(max_new_tokens):
            tokens = step.logits[:, -1].argmax(-1)
            keep = []
            for slot, (row, token) in enumerate(zip(alive, tokens.tolist(), strict=True)):
                if token in eos_token_ids:
                    continue
                outputs[row].append(token)
                if len(outputs[row]) < max_new_tokens and not (stop and stop(outputs[row])):
                    keep.append(slot)
            if not keep:
                break
            if len(keep) < len(alive):
                kept = torch.tensor(keep, device=model.device)
                cache.batch_select_indices(kept)
                alive = [alive[slot] for slot in keep]
                tokens, position = tokens[kept], position[kept]
                attention_mask = attention_mask[kept]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(alive), 1)], 1)
            position = position + 1
            step = model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=position,
                cache=cache,
                use_cache=True,
            )
        done += len(batch)
        if on_batch is not None:
            on_batch(done)
    return outputs


def ends_at_tool_slot(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[int]], bool]:
    """Whether a row's tokens so far end with the action slot `"tool": "` (looked for in the
    last few tokens only: decoding stops at the first one)."""

    def ends(token_ids: list[int]) -> bool:
        tail = tokenizer.decode(token_ids[-_TOOL_SLOT_TOKENS:])
        return isinstance(tail, str) and _TOOL_SLOT.search(tail) is not None

    return ends


def generate_completions(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    up_to_tool_slot: bool = False,
    catalogue: Catalogue | None = None,
) -> list[str]:
    """Greedy completions for `prompts` (chat-templated here, with `catalogue`'s system prompt);
    `up_to_tool_slot`: each stops once it has written `"tool": "` (the model's thought and the
    action slot, what tool scoring continues from). `on_batch`: see `greedy_token_ids`."""
    token_ids = greedy_token_ids(
        model,
        encode_prompts(tokenizer, prompts, catalogue),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(tokenizer, model),
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        stop=ends_at_tool_slot(tokenizer) if up_to_tool_slot else None,
        on_batch=on_batch,
    )
    return tokenizer.batch_decode(token_ids, skip_special_tokens=True)


def generate_with_vllm(
    model_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    max_new_tokens: int,
    dtype: torch.dtype,
    gpu_memory_utilization: float,
    up_to_tool_slot: bool = False,
    catalogue: Catalogue | None = None,
) -> list[str]:
    """Greedy completions from vLLM for the same token ids `generate_completions` decodes; vLLM
    stops at the saved generation config's eos (`up_to_tool_slot`: also after the canonical
    `"tool": "`). Its engine is shut down before returning, so the next evaluation in the process
    gets the memory back."""
    from vllm import LLM, SamplingParams

    engine = LLM(
        model=str(model_dir),
        dtype=str(dtype).removeprefix("torch."),
        gpu_memory_utilization=gpu_memory_utilization,
        seed=0,
    )
    stop = {"stop": [CANONICAL_TOOL_SLOT], "include_stop_str_in_output": True}
    sampling = SamplingParams(
        temperature=0.0, max_tokens=max_new_tokens, **(stop if up_to_tool_slot else {})
    )
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


def tool_candidate(tokenizer: PreTrainedTokenizerBase, name: str) -> list[int]:
    """The tokens a tool's score sums over: its name and the one token that closes it as an
    answer writes it (`",` in byte-level BPE, `", "params": {` where that is one token:
    `model.tiny.frame_tokens`), so a name is scored by the continuation the model learnt."""
    name_ids = tokenizer(name, add_special_tokens=False)["input_ids"]
    ids = tokenizer(name + AFTER_TOOL_NAME, add_special_tokens=False)["input_ids"]
    return ids[: len(name_ids) + 1] if ids[: len(name_ids)] == name_ids else ids


@torch.inference_mode()
def tool_probabilities(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    contexts: list[str],
    tool_names: list[str],
    *,
    batch_size: int,
) -> np.ndarray:
    """P(tool | context) for every context and tool: each name and the token closing it
    (`tool_candidate`) is scored (sum of token log-probs) after the context, then normalised
    over `tool_names` (softmax).

    Each context runs through the model once (left-padded batches); the candidates continue
    from its KV cache, repeated once per tool, so scoring costs about one forward pass per row
    rather than one per tool, and only a few positions' logits are computed.
    """
    context_ids = tokenizer(contexts, add_special_tokens=False)["input_ids"]
    candidates = [tool_candidate(tokenizer, name) for name in tool_names]
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
        context, attention_mask, position_ids = _prefill(
            model, [context_ids[i] for i in batch], pad, device
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
