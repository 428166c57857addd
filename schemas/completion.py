"""The model's output format, one JSON object per step, and a parser that never raises."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

# Longer completions are not model output we would score; bounding keeps parsing cheap.
MAX_COMPLETION_CHARS = 20_000
_decoder = json.JSONDecoder()


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1)
    params: dict[str, Any]


class Completion(BaseModel):
    """`{"thought": ..., "action": {"tool": ..., "params": {...}}, "plan": [...]}`."""

    model_config = ConfigDict(extra="forbid")
    thought: str = Field(min_length=1)
    action: Action
    plan: list[str]


def first_json_object(text: object) -> dict[str, Any] | None:
    """The first complete JSON object in `text` (fences and prose around it ignored), else None."""
    if not isinstance(text, str):
        return None
    text = text[:MAX_COMPLETION_CHARS]
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


class WrittenAction(NamedTuple):
    """An answer's action as written: its tool (None unless a string) and params (as given)."""

    tool: str | None
    params: Any


def written_action(answer: object) -> WrittenAction:
    """The action of a parsed answer (`first_json_object`'s dict, or None): the one reader of a
    completion's or label's tool and params, for reward, metrics, rules and review alike."""
    action = answer.get("action") if isinstance(answer, dict) else None
    if not isinstance(action, dict):
        return WrittenAction(None, None)
    tool = action.get("tool")
    return WrittenAction(tool if isinstance(tool, str) else None, action.get("params"))


def completion_text(completion: object) -> str:
    """The text of a TRL completion: a plain string or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts = [m.get("content") for m in completion if isinstance(m, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    if isinstance(completion, dict) and isinstance(completion.get("content"), str):
        return completion["content"]
    return ""
