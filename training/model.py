"""A tiny model built locally: a byte-level BPE tokenizer trained on the data and a random Qwen2.

No machine here can download weights, so the `cpu` and `smoke` presets build their model from
scratch. Both halves are ordinary Hugging Face objects: `save_pretrained` writes them and
`AutoTokenizer` / `AutoModelForCausalLM` load them back, exactly as for a pretrained model.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers import set_seed as set_transformers_seed

from toolgrpo.training.chat import templated_text
from toolgrpo.training.config import FramePieces, LoraSection, ModelSection
from toolgrpo.training.pretrained import resolve_base

logger = logging.getLogger(__name__)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

# ChatML, as Qwen2.5-Instruct writes it, so a tiny model and a pretrained one see the same format.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# The text every chat and every answer is framed with, as ChatML and the shipped solutions write
# it (`{"thought": "…", "action": {"tool": "…", "params": {…}}, "plan": […]}`). To a model
# trained from scratch these pieces carry no information, and as BPE pieces they were ~24 of a
# row's ~100 tokens; `model.tiny.frame_tokens` makes each one token.
CHAT_FRAME = (
    f"{IM_START}system\n",
    f"{IM_END}\n{IM_START}user\n",
    f"{IM_END}\n{IM_START}assistant\n",
)
ANSWER_FRAME = ('{"thought": "', '", "action": {"tool": "', '", "params": {', '}}, "plan": [')
# The pieces between the request and the thought's first word: as BPE pieces, 9 positions in
# which the model reads the request before it writes anything.
ANSWER_OPENING = (CHAT_FRAME[-1], ANSWER_FRAME[0])
_EVERY_PIECE = (*CHAT_FRAME, *ANSWER_FRAME)
FRAME_PIECES: dict[FramePieces, tuple[str, ...]] = {
    "none": (),
    "all": _EVERY_PIECE,
    "all_but_opening": tuple(piece for piece in _EVERY_PIECE if piece not in ANSWER_OPENING),
}

# Qwen2's pre-tokenizer pattern. `\p{N}` alone puts every digit in its own token, which lets a
# small model compare amounts digit by digit; `\p{N}+` keeps numbers whole.
_PRE_TOKENIZER_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}%s| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
MAX_POSITIONS = 1024
_LOADING = threading.Lock()
# An assistant message rendered with the chat template ends with this text, then the end of turn.
_TURN_PROBE = "turn-end-probe"


class BaseModelError(ValueError):
    """A base model whose tokenizer cannot hold the chat format; the message says what to do."""


def train_tokenizer(
    texts: list[str],
    *,
    vocab_size: int = 2048,
    split_digits: bool = True,
    whole_texts: tuple[str, ...] = (),
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`, with ChatML special tokens and template;
    each of `whole_texts` (the constant system prompt, `CHAT_FRAME`, `ANSWER_FRAME`) becomes a
    single token of its own (the longest wins where one starts with another: `<|im_start|>`)."""
    pattern = _PRE_TOKENIZER_PATTERN % ("" if split_digits else "+")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        padding_side="left",
    )
    fast.add_tokens([AddedToken(text, normalized=False) for text in whole_texts])
    return fast


def build_tiny(
    texts: list[str],
    *,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    vocab_size: int = 2048,
    seed: int = 0,
    split_digits: bool = True,
    whole_texts: tuple[str, ...] = (),
) -> tuple[PreTrainedTokenizerFast, Qwen2ForCausalLM]:
    """A tokenizer trained on `texts` (`whole_texts` one token each) and a randomly initialised
    Qwen2 sized to it (seeded)."""
    tokenizer = train_tokenizer(
        texts, vocab_size=vocab_size, split_digits=split_digits, whole_texts=whole_texts
    )
    set_transformers_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    # Without eos in the generation config, generate() runs every completion to the length limit.
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return tokenizer, model


def end_of_turn_token(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The special token the chat template closes an assistant turn with (`<|im_end|>` in
    ChatML), or None when the turn ends in plain text or nothing."""
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _TURN_PROBE}]
    text = templated_text(tokenizer, messages)
    ids = tokenizer(text.rpartition(_TURN_PROBE)[2], add_special_tokens=False)["input_ids"]
    special = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    if not ids or ids[0] not in special:
        return None
    token = tokenizer.convert_ids_to_tokens(ids[0])
    return token if isinstance(token, str) else None


def fit_chat_tokenizer(tokenizer: PreTrainedTokenizerBase, source: Path | str) -> list[str]:
    """Make `tokenizer` end and pad a chat the way both stages and evaluation read it; returns
    what was changed, or raises `BaseModelError` when no change can make it fit.

    Without a chat template there is no prompt format to train: stop. Without a pad token,
    padding is eos (attention masks keep it out of attention and loss). When eos is not the
    template's end of turn (a base checkpoint's `<|endoftext|>` under ChatML), eos becomes the
    end of turn: SFT appends eos to every answer, and generation stops at it.
    """
    if not tokenizer.chat_template:
        raise BaseModelError(
            f"{source}: the tokenizer has no chat template; toolgrpo prompts in chat form. Use a "
            "chat/instruct checkpoint, or set `tokenizer.chat_template` (ChatML for example) "
            "and `save_pretrained` the tokenizer into the model directory"
        )
    changes = []
    end_of_turn = end_of_turn_token(tokenizer)
    if end_of_turn is not None and end_of_turn != tokenizer.eos_token:
        changes.append(f"eos {tokenizer.eos_token!r} → {end_of_turn!r} (the chat's end of turn)")
        tokenizer.eos_token = end_of_turn
    if tokenizer.pad_token is None:
        changes.append(f"no pad token: padding with eos {tokenizer.eos_token!r}")
        tokenizer.pad_token = tokenizer.eos_token
    return changes


def pretrained_model(path: Path | str, dtype: torch.dtype) -> PreTrainedModel:
    """`AutoModelForCausalLM.from_pretrained(path)`, one load at a time.

    While it loads, `from_pretrained` swaps process-wide state (`no_tie_weights`,
    `no_init_weights` replace `PreTrainedModel.tie_weights` and torch's init functions, then put
    back what they found), so two threads loading at once can leave `tie_weights` a no-op for the
    rest of the process: every later model's tied LM head stays on the meta device. The ablation
    evaluates its arms in threads of one process.
    """
    with _LOADING:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def load_model(
    path: Path | str, settings: ModelSection
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The tokenizer and causal LM at `path` (a local directory, a hub id, or `registry:NAME`,
    prepared on first use: `training.pretrained`), in the configured precision, with the chat's
    end of turn as eos, also ending generation (`fit_chat_tokenizer`)."""
    path = resolve_base(str(path))
    tokenizer = AutoTokenizer.from_pretrained(path)
    for change in fit_chat_tokenizer(tokenizer, path):
        logger.info("%s: tokenizer: %s", path, change)
    model = pretrained_model(path, torch.bfloat16 if settings.bf16 else torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer, model


class TiedWeightsResume:
    """A trainer mixin: resuming from a checkpoint says nothing of the tied output head.

    A checkpoint stores a tied LM head once, as the embedding, so loading it reports
    `lm_head.weight` missing on every resume; transformers re-ties it only for models that list
    their tied keys as not saved. Missing keys that are tied to a loaded one are re-tied quietly;
    any other missing key is still reported."""

    model: Any  # the Trainer's (a PreTrainedModel, a PEFT wrapper, or None before init)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(  # type: ignore[misc]
            load_result._replace(missing_keys=missing)
        )


def lora_config(lora: LoraSection) -> LoraConfig | None:
    """PEFT's LoRA settings for the TRL trainer's `peft_config` (the section's fields are PEFT's
    names), or None to train every weight."""
    if lora.r == 0:
        return None
    return LoraConfig(**lora.model_dump(), task_type="CAUSAL_LM")


def save_model(
    model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, path: Path
) -> Path:
    """Save a plain model directory (LoRA merged into the weights), loadable with `AutoModel*`."""
    if isinstance(model, PeftModel):
        model = model.merge_and_unload()
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path
