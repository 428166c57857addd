"""A pretrained model's vocabulary cut to what a task can use, as an ordinary model and tokenizer.

A small pretrained model spends most of a training step on its output layer: Gemma 3 270M's
head has 262,144 rows, 168M of its 268M parameters, while a task's prompts and answers use a
thousand or so of them. `cut_vocabulary` keeps

- every token the task's texts encode to (training rows, the catalogue, the chat frame),
- the tokens any text falls back to (the 256 byte tokens), so that every text still encodes,
- every single character of the scripts those texts are written in (Latin, CJK, …), so that a
  new word costs more tokens, not bytes,
- the base's `common_tokens` most frequent tokens in those scripts (by BPE merge rank), so that
  common words a request may use that the rows never did stay whole,
- and every token a kept token is merged from, so that the cut tokenizer encodes the task's
  texts exactly as the full one did,

and writes them as a smaller vocabulary: the BPE vocab renumbered, its merges filtered, the
embedding (and an untied output head) gathered to the kept rows. The result is a plain
`save_pretrained` model and tokenizer, so SFT, GRPO sampling, evaluation and a merged save need
no id mapping; what it costs on text no kept token covers is measured in `bench/vocabulary.py`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer, pre_tokenizers
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast


class VocabularyError(ValueError):
    """A tokenizer whose vocabulary cannot be cut; the message says what to set instead."""


@dataclass(frozen=True)
class VocabularyCut:
    """What a cut kept: the kept tokens' ids in the full vocabulary (in order: the new id of
    `kept_ids[i]` is i), and how many of them each reason added."""

    full_size: int
    kept_ids: tuple[int, ...]
    reasons: dict[str, int]

    def line(self) -> str:
        """`vocabulary cut 262,144 → 22,256 tokens (texts 821, …)`, for the log."""
        parts = ", ".join(f"{reason} {count:,}" for reason, count in self.reasons.items())
        return f"vocabulary cut {self.full_size:,} → {len(self.kept_ids):,} tokens ({parts})"


def _script(char: str) -> str | None:
    """The writing system of a letter (`LATIN`, `CJK`, `CYRILLIC`, …: the first word of its
    Unicode name), None for anything else (digits, punctuation, spaces, symbols)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    return unicodedata.name(char, "UNKNOWN").split(" ")[0]


class _TextShape:
    """The characters and scripts a task's texts are written in."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.chars = {char for text in texts for char in text}
        self.scripts = {script for char in self.chars if (script := _script(char))}

    def fits(self, text: str) -> bool:
        """Whether `text` (a decoded token) is written in these texts' scripts: each letter of
        one of their scripts, every other character one they use."""
        return bool(text) and all(self._fits(char) for char in text)

    def _fits(self, char: str) -> bool:
        script = _script(char)
        return script in self.scripts if script else char in self.chars


def _fallback_tokens(state: dict[str, Any]) -> set[str]:
    """The tokens any text can be written in: byte tokens (`<0x41>`, BPE with byte fallback)
    or the byte-level alphabet (GPT-2 style byte-level BPE)."""
    model = state["model"]
    if model.get("byte_fallback"):
        return {f"<0x{byte:02X}>" for byte in range(256)} & model["vocab"].keys()
    pre = json.dumps(state.get("pre_tokenizer"))
    if '"ByteLevel"' in pre:
        return set(pre_tokenizers.ByteLevel.alphabet()) & model["vocab"].keys()
    raise VocabularyError(
        "the tokenizer has neither byte fallback nor a byte-level alphabet, so a cut vocabulary "
        "could not encode every text: set model.cut_vocabulary=false"
    )


def _merges(state: dict[str, Any]) -> list[tuple[str, str]]:
    """The BPE merges in rank order, whichever way tokenizer.json writes them."""
    return [
        (pair[0], pair[1]) if isinstance(pair, list) else tuple(pair.split(" ", 1))
        for pair in state["model"]["merges"]
    ]


def _token_ids(state: dict[str, Any]) -> dict[str, int]:
    """Every token's id: the BPE vocabulary's and the added tokens' (which a tokenizer may keep
    outside its vocabulary: `<|im_start|>` in Qwen's)."""
    added = {token["content"]: token["id"] for token in state["added_tokens"]}
    return {**added, **state["model"]["vocab"]}


def _with_parts(tokens: set[str], merges: list[tuple[str, str]]) -> set[str]:
    """`tokens` and, recursively, every token a merge makes one of them from: BPE then reaches
    each kept token by the merges it took before."""
    parts: dict[str, list[tuple[str, str]]] = {}
    for left, right in merges:
        parts.setdefault(left + right, []).append((left, right))
    kept, todo = set(tokens), list(tokens)
    while todo:
        for pair in parts.get(todo.pop(), ()):
            for part in pair:
                if part not in kept:
                    kept.add(part)
                    todo.append(part)
    return kept


def kept_tokens(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], common_tokens: int
) -> tuple[set[str], dict[str, int]]:
    """The tokens a cut of `tokenizer` keeps for `texts` (the module docstring's list), and how
    many each reason added. Raises `VocabularyError` for a tokenizer that is not BPE."""
    backend: Tokenizer = tokenizer.backend_tokenizer
    state = json.loads(backend.to_str())
    if state["model"]["type"] != "BPE":
        raise VocabularyError(
            f"the tokenizer is {state['model']['type']}, not BPE: only a BPE vocabulary can be "
            "cut; set model.cut_vocabulary=false"
        )
    vocab: dict[str, int] = state["model"]["vocab"]
    ids = _token_ids(state)
    token_of = {index: token for token, index in ids.items()}
    merges = _merges(state)
    shape = _TextShape(texts)
    # the special tokens the chat frame does not write itself: padding, unknown, end of text
    specials = {
        token
        for token in (
            tokenizer.bos_token,
            tokenizer.eos_token,
            tokenizer.pad_token,
            tokenizer.unk_token,
        )
        if isinstance(token, str) and token in ids
    }
    used = {
        token_of[i] for e in backend.encode_batch(texts, add_special_tokens=False) for i in e.ids
    }
    reasons: dict[str, int] = {}
    kept: set[str] = set()

    def add(reason: str, tokens: Iterable[str]) -> None:
        before = len(kept)
        kept.update(tokens)
        reasons[reason] = len(kept) - before

    add("texts", used | specials)
    add("fallback", _fallback_tokens(state))
    decoded = dict(zip(vocab, backend.decode_batch([[i] for i in vocab.values()]), strict=True))
    add(
        "characters",
        (t for t, text in decoded.items() if len(text.strip()) == 1 and shape.fits(text.strip())),
    )
    if common_tokens:
        rank: dict[str, int] = {}
        for number, (left, right) in enumerate(merges):
            rank.setdefault(left + right, number)
        common = (t for t in sorted(rank, key=rank.__getitem__) if t not in kept)
        fitting = (t for t in common if shape.fits(decoded.get(t, "")))
        add("common", (t for _, t in zip(range(common_tokens), fitting, strict=False)))
    before = len(kept)
    kept = _with_parts(kept, merges) & ids.keys()
    reasons["merge parts"] = len(kept) - before
    return kept, reasons


def _cut_state(state: dict[str, Any], new_id: dict[int, int]) -> dict[str, Any]:
    """tokenizer.json's state with only the tokens `new_id` maps, renumbered."""
    vocab: dict[str, int] = state["model"]["vocab"]
    kept = {token for token, index in vocab.items() if index in new_id}
    state["model"]["vocab"] = {
        token: new_id[index] for token, index in vocab.items() if token in kept
    }
    state["model"]["merges"] = [
        [left, right]
        for left, right in _merges(state)
        if left in kept and right in kept and left + right in kept
    ]
    state["added_tokens"] = [
        {**added, "id": new_id[added["id"]]}
        for added in state["added_tokens"]
        if added["id"] in new_id
    ]
    _renumber_post_processor(state.get("post_processor"), new_id)
    return state


def _renumber_post_processor(processor: Any, new_id: dict[int, int]) -> None:
    """The special-token ids a post-processor adds (`<bos>`), renumbered in place."""
    if isinstance(processor, dict):
        for special in (processor.get("special_tokens") or {}).values():
            special["ids"] = [new_id[i] for i in special["ids"]]
        for inner in processor.get("processors") or []:
            _renumber_post_processor(inner, new_id)


def _weight(module: object) -> torch.Tensor:
    """An embedding's or output head's weight matrix."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise VocabularyError(f"{type(module).__name__} has no weight matrix to cut")
    return weight


def cut_vocabulary(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    texts: list[str],
    common_tokens: int,
) -> tuple[PreTrainedTokenizerFast, PreTrainedModel, VocabularyCut]:
    """`tokenizer` and `model` with the vocabulary `kept_tokens` chooses for `texts`: a new
    tokenizer (same special tokens and chat template) and `model` resized in place, its
    embedding rows (and an untied head's) those of the kept tokens, ids in its configs mapped."""
    kept, reasons = kept_tokens(tokenizer, texts, common_tokens)
    backend: Tokenizer = tokenizer.backend_tokenizer
    state = json.loads(backend.to_str())
    ids = _token_ids(state)
    full_size = len(ids)
    kept_ids = sorted(ids[token] for token in kept)
    new_id = {old: new for new, old in enumerate(kept_ids)}
    cut = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(_cut_state(state, new_id))),
        chat_template=tokenizer.chat_template,
        padding_side=tokenizer.padding_side,
        model_max_length=tokenizer.model_max_length,
        **{
            name: getattr(tokenizer, name)
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if getattr(tokenizer, name) in kept
        },
    )
    rows = torch.tensor(kept_ids)
    embedding = _weight(model.get_input_embeddings())
    output = model.get_output_embeddings()
    untied = output is not None and _weight(output).data_ptr() != embedding.data_ptr()
    kept_embedding = embedding.data[rows].clone()
    kept_head = _weight(output).data[rows].clone() if untied else None
    model.resize_token_embeddings(len(kept_ids), mean_resizing=False)
    _weight(model.get_input_embeddings()).data.copy_(kept_embedding)
    if kept_head is not None:
        _weight(model.get_output_embeddings()).data.copy_(kept_head)
    for config in (model.config, model.generation_config):
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(config, name, None)
            if isinstance(value, int):
                setattr(config, name, new_id.get(value))
            elif isinstance(value, list):
                setattr(config, name, [new_id[i] for i in value if i in new_id] or None)
    return cut, model, VocabularyCut(full_size, tuple(kept_ids), reasons)
