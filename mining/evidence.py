"""Evidence about a request: its wording (catalogue keywords) and its template (slots masked).

Rows with equal templates are near-identical requests; the words that name a tool tell which
label the wording supports.
"""

from __future__ import annotations

import re

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.samples import PREVIOUS_STEPS_HEADER
from toolgrpo.validation.context import AMOUNT

# An English keyword of several words also matches with up to this many words between them
# (separable phrasal verbs: "take 100 rupees out", "put 9,000 in").
PHRASAL_GAP_WORDS = 3


def request_text(prompt: str) -> str:
    """The user's request: the prompt without its `Previous steps:` history."""
    return prompt.split(PREVIOUS_STEPS_HEADER, 1)[0]


def _keyword_pattern(keyword: str) -> str:
    if not keyword.isascii():  # Chinese: anywhere
        return re.escape(keyword)
    gap = rf"(?:\W+\w+){{0,{PHRASAL_GAP_WORDS}}}?\W+"
    # English at a word start, any ending ("withdraw" finds "withdrawal"), as the reward does.
    return r"\b" + gap.join(re.escape(part) for part in keyword.split())


def keyword_patterns(catalogue: Catalogue) -> dict[str, re.Pattern[str]]:
    """Per tool, one pattern matching any of its catalogue keywords (en and zh)."""
    patterns = {}
    for tool in catalogue.tools:
        words = [*tool.keywords.texts("en"), *tool.keywords.texts("zh")]
        alternatives = "|".join(f"(?:{_keyword_pattern(w)})" for w in words)
        patterns[tool.name] = re.compile(alternatives, re.IGNORECASE)
    return patterns


def keyword_hits(request: str, patterns: dict[str, re.Pattern[str]]) -> dict[str, list[str]]:
    """Per tool, the words of `request` matching its keywords (`keyword_patterns`); tools with
    no match are left out."""
    hits = {}
    for name, pattern in patterns.items():
        found = [match.group(0) for match in pattern.finditer(request)]
        if found:
            hits[name] = found
    return hits


_ACCOUNT = re.compile(r"ACC\d{3}")
# Stock symbols and named accounts (AAPL, CHECKING) are upper-case slot values, not wording.
_IDENTIFIER = re.compile(r"(?<![A-Za-z])[A-Z]+(?![A-Za-z])")


def mask_identifiers(text: str) -> str:
    """`text` with accounts and upper-case identifiers replaced by placeholders."""
    return _IDENTIFIER.sub("<id>", _ACCOUNT.sub("<acc>", text))


def request_template(prompt: str) -> str:
    """The prompt with slot values masked: rows with equal templates are near-identical.

    Identifiers are masked everywhere; amounts only in a request without executed steps,
    because after a `check_balance` step the request's amount is compared with the observed
    balance, and that comparison decides the label.
    """
    request, header, history = prompt.partition(PREVIOUS_STEPS_HEADER)
    request = mask_identifiers(request)
    if not header:
        request = AMOUNT.sub("<n>", request)  # one slot whatever its form: 10万, 100k
    return re.sub(r"\s+", " ", request).strip().lower() + header + history
