"""The exact text a model is conditioned on, shared by training and evaluation."""

from __future__ import annotations

from functools import cache
from typing import Any

from transformers import PreTrainedTokenizerBase

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue


# Short on purpose: a tiny model reads it on every row, and the SFT warm start teaches the params
# and the format itself. It names the catalogue's tools, so a model evaluates with the catalogue
# it was trained with.
@cache
def system_prompt(catalogue: Catalogue) -> str:
    """The system turn: who the agent is (the catalogue's `assistant`), the tools of `catalogue`
    and the answer's format."""
    tools = ", ".join(catalogue.names)
    return (
        f"You are {catalogue.assistant}. Call one tool per step: {tools}. "
        "Reply with one JSON object: thought, action {tool, params}, plan."
    )


def chat_messages(prompt: str, catalogue: Catalogue | None = None) -> list[dict[str, str]]:
    """The system turn naming the tools of `catalogue` (default the shipped one), then `prompt`
    as the user turn."""
    return [
        {"role": "system", "content": system_prompt(catalogue or default_catalogue())},
        {"role": "user", "content": prompt},
    ]


def chat_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: str, catalogue: Catalogue | None = None
) -> str:
    """The chat-templated text for `prompt` (`chat_messages`, then the assistant header)."""
    return templated_text(tokenizer, chat_messages(prompt, catalogue), add_generation_prompt=True)


def templated_text(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], **options: Any
) -> str:
    """`messages` in the tokenizer's chat template, as text (`tokenize=False` is a string)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    if not isinstance(text, str):
        raise TypeError(f"the chat template gave {type(text).__name__}, not text")
    return text
