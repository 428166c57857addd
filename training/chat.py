"""The exact text a model is conditioned on, shared by training and evaluation."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from toolgrpo.schemas.catalogue import default_catalogue


def _system_prompt() -> str:
    tools = ", ".join(default_catalogue().names)
    return (
        f"You are a financial assistant. Call one tool per step: {tools}. "
        "Reply with one JSON object: thought, action {tool, params}, plan."
    )


# Built once from the catalogue. Short on purpose: a tiny model reads it on every row, and the
# SFT warm start teaches the params and the format itself.
SYSTEM_PROMPT: str = _system_prompt()


def chat_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """The chat-templated text for `prompt` (system prompt, user turn, assistant header)."""
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": prompt},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
