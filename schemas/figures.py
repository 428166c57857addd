"""The figures a text states: amounts as people write them, accounts and identifiers.

`amounts_in` is the one parser of amounts as people write them (the catalogue's languages):
100,000 / 100k / 10万 / 13.5万 / 6 万 / 5000元 / 200块 / 50 rupees / $50 / 562.54. A currency
is not converted: a request and the balance it is compared with are in one currency. The label
rules, the reward's arithmetic check, the miner and the generator all read figures here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolgrpo.schemas.samples import HISTORY_LINE

ACCOUNT = re.compile(r"ACC\d{3}")
# Stock symbols and named accounts (AAPL, CHECKING) are upper-case slot values, not wording.
IDENTIFIER = re.compile(r"(?<![A-Za-z])[A-Z]+(?![A-Za-z])")

_SCALES = {"万": 10_000, "千": 1_000, "百": 100, "k": 1_000}
# Not after a letter or digit (the 437 of ACC437 is no amount); a CJK character may precede one.
AMOUNT = re.compile(
    r"(?<![A-Za-z0-9_.,])(?:[$¥₹]\s?)?(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?"
    r"(?:\s*(?P<scale>万|千|百|k(?![a-z])))?"
    r"(?:\s*(?:元|块|rupees?(?![a-z])|yuan(?![a-z])|dollars?(?![a-z])|rmb(?![a-z])))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Amount:
    """An amount as written and the number it means."""

    text: str
    value: float


def amount_of(match: re.Match[str]) -> Amount:
    """The amount an `AMOUNT` match writes."""
    value = float(match["number"].replace(",", "") + (match["fraction"] or ""))
    scale = _SCALES[match["scale"].lower()] if match["scale"] else 1
    return Amount(match.group(0), value * scale)


def amounts_in(text: str) -> list[Amount]:
    """Every amount written in `text`, in order (`"转 10万 到 ACC042"` → one: 100,000)."""
    return [amount_of(match) for match in AMOUNT.finditer(text)]


def _blank_step_number(line: re.Match[str]) -> str:
    """A history line with its `Step k:` blanked, the same length: a step number is no figure."""
    cut = line.end("step") + 1 - line.start()
    return " " * cut + line[0][cut:]


def figures_in(text: str) -> list[str]:
    """The accounts, upper-case identifiers (tickers) and amounts `text` states, as written, in
    order, the step numbers of its history left out: what an answer about it copies
    (`"转 10万 从 ACC042 到 ACC149"` → 10万, ACC042, ACC149; `"Step 2: get_quote → META 现价
    633.07"` → META, 633.07)."""
    text = HISTORY_LINE.sub(_blank_step_number, text)
    found = sorted(
        (m.start(), -m.end(), m.group())  # where two start together, the longer first
        for pattern in (ACCOUNT, AMOUNT, IDENTIFIER)
        for m in pattern.finditer(text)
        if pattern is not IDENTIFIER or len(m.group()) > 1  # "I" is no ticker
    )
    figures, end = [], 0
    for start, negative_end, figure in found:
        if start >= end:  # the ACC of ACC042 is part of the account
            figures.append(figure)
            end = -negative_end
    return figures


def number_text(value: float) -> str:
    """`60,000`; `562.54`: a figure as evidence writes it."""
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def described(amount: Amount) -> str:
    """`6 万 (60,000)`; an amount written as its number alone once."""
    number = number_text(amount.value)
    return amount.text if amount.text == number else f"{amount.text} ({number})"
