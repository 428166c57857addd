"""The walked comparison form: a conditional step's two figures, counted and compared
place by place, so a model with no pretrained numeracy decides from digits it has just written.

The worked reasoning restates both figures as plain digits before the verdict (`Needed 190000 ·
balance 197451 → enough`, data/phrases/scenarios: `worked_thought`); the walked form then writes
each figure's count of whole digits after it and, where the counts are equal, every pair of digits
from the first place to the first that differs (`Needed 190000 [6] · balance 197451 [6] · 1=1 9=9
0<7 → enough`). Digit counts decide figures of different lengths; for the others each written pair
is one place further than the last, so the deciding pair is reached by a walk, not a jump
(chosen over plain digits, zero-padded, counted and first-differing-pair forms:
docs/experiments/numeracy.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The two figures a restatement compares: the one before ` · ` and the last one after it
# (`200 × 562.54 = 112508 · 余额 98404`).
COMPARED = re.compile(r"(\d+(?:\.\d+)?) · (\D*)(\d+(?:\.\d+)?)$")
VERDICT = " → "  # what separates a restatement from its verdict

# A pair of compared figures, as written, in another form (`needed · balance`, `quote · limit`).
PairForm = Callable[[str, str], tuple[str, str]]


def whole(figure: str) -> str:
    """A figure's whole part (`562` of `562.54`)."""
    return figure.partition(".")[0]


def counted(needed: str, balance: str) -> tuple[str, str]:
    """Each figure followed by its count of whole digits (`560000 [6]`), written after the figure
    so that nothing has to be known before it is copied."""
    return f"{needed} [{len(whole(needed))}]", f"{balance} [{len(whole(balance))}]"


def places(needed: str, balance: str) -> list[tuple[str, str, str]]:
    """Where the whole parts have equal counts, each place's digits and their sign (`1 = 1`,
    `0 < 7`) from the first place to the first that differs (every place for equal whole parts);
    none where the counts decide."""
    first, second = whole(needed), whole(balance)
    if len(first) != len(second):
        return []
    walk = []
    for a, b in zip(first, second, strict=True):
        walk.append((a, "=" if a == b else "<" if a < b else ">", b))
        if a != b:
            break
    return walk


def walked(needed: str, balance: str) -> tuple[str, str]:
    """Counted, and where the counts are equal every pair of digits up to the first that differs
    (`190000 [6] · 197451 [6] · 1=1 9=9 0<7`; all `=` for equal whole parts)."""
    walk = " ".join("".join(place) for place in places(needed, balance))
    counted_needed, counted_balance = counted(needed, balance)
    return counted_needed, counted_balance + (f" · {walk}" if walk else "")


def compared_in(form: PairForm) -> Callable[[str], str]:
    """The rewrite of a restatement whose two compared figures are written in `form`
    (`200 × 562.54 = 112508 [6] · 余额 98404 [5]`)."""

    def rewrite(figures: str) -> str:
        def both(match: re.Match[str]) -> str:
            first, words, second = match.groups()
            first, second = form(first, second)
            return f"{first} · {words}{second}"

        return COMPARED.sub(both, figures)

    return rewrite


def rewritten_thought(thought: str, rewrite: Callable[[str], str]) -> str:
    """A worked thought with only its restatement (what comes before ` → `) rewritten."""
    figures, arrow, verdict = thought.partition(VERDICT)
    return rewrite(figures) + arrow + verdict


def walked_thought(thought: str) -> str:
    """A worked thought (`Needed 190000 · balance 197451 → enough, …`) in the walked form."""
    return rewritten_thought(thought, compared_in(walked))


def drill_figures(form: PairForm) -> Callable[[int, int], tuple[str, str]]:
    """A comparison drill's two figures written in `form` (`generator.numeracy.comparison_drills`'
    `restate`)."""
    return lambda needed, balance: form(str(needed), str(balance))
