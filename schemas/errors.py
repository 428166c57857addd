"""Pydantic validation errors as the one line a user reads."""

from __future__ import annotations

from pydantic import ValidationError


def validation_problems(error: ValidationError, whole: str = "value") -> str:
    """`field.sub: why; other: why` — every problem of `error`, `whole` naming an error of the
    whole object (an empty location)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or whole}: {item['msg']}"
        for item in error.errors(include_url=False)
    )
