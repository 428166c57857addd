"""The formatting every report shares: percentages and markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def percent(value: float | None) -> str:
    """`94.5%`, or `–` where there is no number (an empty slice)."""
    return "–" if value is None else f"{100 * value:.1f}%"


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
