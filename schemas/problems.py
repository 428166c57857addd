"""A problem the data gate found: where (file:line, row id), which check, what is wrong; and how a
value from the data is shown in one, or in any report or terminal line."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

# A value from the data is shown cut to this many characters, with its full length stated: one
# 10 MB field must not become 10 MB of terminal output or of every report that lists it.
MAX_SHOWN_CHARS = 200
# Characters a terminal or a viewer obeys, or shows as nothing, instead of showing: C0/C1
# controls (ANSI escapes such as `\x1b[2J`, line breaks), and Unicode's format and separator
# characters (categories Cf, Zl, Zp: zero-width spaces and joiners, the bidirectional marks and
# overrides that reorder text on screen, the byte-order mark, tag characters, U+2028/U+2029), so
# an id with one never looks identical to an id without. The Cf/Zl/Zp ranges are Unicode 14's
# (Python 3.11); a test compares them with `unicodedata`.
CONTROL_CHARACTERS = re.compile(
    r"[\x00-\x1f\x7f-\x9f"
    r"\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    r"\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    r"\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    r"\U000e0020-\U000e007f]"
)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(character: str) -> str:
    code = ord(character)
    if named := _NAMED_ESCAPES.get(character):
        return named
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


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
