"""The formatting every report shares: percentages and markdown tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


def percent(value: float | None) -> str:
    """`94.5%`, or `–` where there is no number (an empty slice)."""
    return "–" if value is None else f"{100 * value:.1f}%"


# What can start markup inside a line: code, emphasis, links, HTML, table cells, strikethrough, an
# entity, and `_` at a word's edge (inside a word, as in `scenario_id`, it is plain text).
_INLINE_MARKUP = re.compile(r"([\\`*\[\]<>|~]|&(?=#?\w+;)|(?<![^\W_])_|_(?![^\W_]))")
# What starts a block at the beginning of a line: a heading, quote, list item or rule.
_BLOCK_START = re.compile(r"^(\s*)([#>+=-]|\d+(?=[.)]))")


def _escaped_block_start(match: re.Match[str]) -> str:
    indent, marker = match.groups()
    return indent + (f"{marker}\\" if marker.isdigit() else f"\\{marker}")  # `1\.`, `\#`


def escape_markdown(text: object) -> str:
    """`text` as literal markdown on one line, so that text from data (a message quoting a row,
    a file name, a reviewer's reason) renders as written and never as markup."""
    one_line = " ".join(str(text).splitlines())
    return _BLOCK_START.sub(_escaped_block_start, _INLINE_MARKUP.sub(r"\\\1", one_line), count=1)


def _cell(value: object) -> str:
    """A value as one table cell: a `|` or a line break would split the row."""
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub-flavoured markdown table of `rows` (keys of the first row are the header)."""
    if not rows:
        return "_(no rows)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)
