"""The wording of a request: which tools its words name (the catalogue's keywords, en and zh).

The miner's wording evidence and the context checks' `step_named_by_request` read a request
the same way: accounts, symbols and named accounts masked (they are slot values, not wording),
then each tool's keywords matched.
"""

from __future__ import annotations

import re

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.samples import PREVIOUS_STEPS_HEADER

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


ACCOUNT = re.compile(r"ACC\d{3}")
# Stock symbols and named accounts (AAPL, CHECKING) are upper-case slot values, not wording.
IDENTIFIER = re.compile(r"(?<![A-Za-z])[A-Z]+(?![A-Za-z])")
# ... and so are the same accounts written out: "my checking account" names no check_balance.
_NAMED_ACCOUNT = re.compile(r"\b(?:checking|savings|brokerage|wealth) account\b", re.IGNORECASE)


def mask_identifiers(text: str) -> str:
    """`text` with accounts and upper-case identifiers replaced by placeholders."""
    return IDENTIFIER.sub("<id>", _NAMED_ACCOUNT.sub("<acc>", ACCOUNT.sub("<acc>", text)))
