"""The formatting every report shares: percentages, markdown tables, and text from the data
written so that a markdown viewer shows it as it is (never as a link, an image or HTML)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from toolgrpo.schemas.problems import visible

# Characters that can start markdown syntax anywhere in a line: HTML and entities, links and
# images, code, emphasis, strike-through, table cells. `_` between two letters or digits cannot
# (CommonMark's flanking rule), so `check_balance` stays readable.
_INLINE_SYNTAX = re.compile(r"[\\`*\[\]<>&|~#]|(?<![^\W_])_|_(?![^\W_])")
# What makes text a list item when it starts a line: `- `, `+ `, `1. `, `1) ` (`60.0%` is not).
_LIST_MARKER = re.compile(r"^(\s*(?:[-+]|\d{1,9}[.)]))(?=\s|$)")
# Dashes alone (with spaces) join a list item's own dash into a thematic break: `- --` is a rule.
_DASHES = re.compile(r"[ -]*-[ -]*")


class Markdown(str):
    """Text that is markdown already (the project's own wording, e.g. a rule with `code`):
    `markdown_table` puts it in as it is."""


def percent(value: float | None) -> str:
    """`94.5%`, or `–` where there is no number (an empty slice)."""
    return "–" if value is None else f"{100 * value:.1f}%"


def markdown_text(value: object) -> str:
    """`value` as markdown that renders as exactly its text: syntax characters backslash-escaped,
    control characters (line breaks, ANSI escapes) written as escapes."""
    text = _INLINE_SYNTAX.sub(lambda match: "\\" + match[0], visible(str(value)))
    if _DASHES.fullmatch(text):
        return text.replace("-", "\\-")
    return _LIST_MARKER.sub(lambda marker: f"{marker[1][:-1]}\\{marker[1][-1]}", text)


def code_span(value: object) -> str:
    """`value` as one inline code span, however many backticks it holds."""
    text = visible(str(value))
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"


def _cell(value: object) -> str:
    """A value as one table cell: markdown as it is (a `|` or a line break would split the row),
    anything else as its text."""
    if isinstance(value, Markdown):
        return value.replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return markdown_text(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub-flavoured markdown table of `rows` (keys of the first row are the header)."""
    if not rows:
        return "_(no rows)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)
