"""A problem the data gate found: where (file:line, row id), which check, what is wrong; and how a
value from the data is shown in one, or in any report or terminal line."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

# A value from the data is shown cut to this many characters, with its full length stated: one
# 10 MB field must not become 10 MB of terminal output or of every report that lists it.
MAX_SHOWN_CHARS = 200
# Characters a terminal or a viewer obeys instead of showing: C0/C1 controls (ANSI escapes such
# as `\x1b[2J`, line breaks) and the bidirectional overrides that reorder text on screen.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(character: str) -> str:
    code = ord(character)
    return _NAMED_ESCAPES.get(character) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str, keep: str = "") -> str:
    """`text` with each control character written as its escape (`\\x1b`, `\\n`), except those
    in `keep`: a terminal or report then shows them instead of obeying them."""
    return CONTROL_CHARACTERS.sub(
        lambda match: match[0] if match[0] in keep else _escape(match[0]), text
    )


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """`value` as text in a problem line or a report: control characters escaped, and cut to
    `limit` characters with the full length stated."""
    text = str(value)
    if len(text) <= limit:
        return visible(text)
    return f"{visible(text[:limit])}… ({len(text):,} characters)"


class Problem(BaseModel):
    """One reason a file or row fails the data gate, located so a person can fix it.

    `message` and `id` quote the data through `shown`, so a problem line stays one short line.
    """

    model_config = ConfigDict(frozen=True)
    file: str
    line: int | None  # None: the whole file
    check: str
    message: str
    id: str | None = None

    @property
    def location(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.location}: {self.message} [check: {self.check}]"
