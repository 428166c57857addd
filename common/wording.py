"""The wording of a request: which tools its words name (the catalogue's keywords, en and zh).

The miner's wording evidence and the context checks' `step_named_by_request` read a request
through one function, `request_names`: accounts, symbols and the catalogue's `not_naming`
phrases masked (slot values and phrases that ask for no tool, not wording), then each tool's
keywords matched, a word inside another tool's longer keyword left to that tool.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import NamedTuple

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import completion_text, first_json_object, written_action
from toolgrpo.schemas.figures import ACCOUNT, IDENTIFIER

# An English keyword of several words also matches with up to this many words between them
# (separable phrasal verbs: "take 100 rupees out", "put 9,000 in").
PHRASAL_GAP_WORDS = 3


def _keyword_pattern(keyword: str) -> str:
    if not keyword.isascii():  # Chinese: anywhere
        return re.escape(keyword)
    gap = rf"(?:\W+\w+){{0,{PHRASAL_GAP_WORDS}}}?\W+"
    # English at a word start, any ending ("withdraw" finds "withdrawal"), as the reward does.
    return r"\b" + gap.join(re.escape(part) for part in keyword.split())


def phrase_pattern(words: list[str]) -> re.Pattern[str]:
    """One pattern matching any of `words` as the keywords are matched: an English word at a
    word start with any ending, its phrases with up to `PHRASAL_GAP_WORDS` words between; a
    Chinese word anywhere."""
    return re.compile("|".join(f"(?:{_keyword_pattern(w)})" for w in words), re.IGNORECASE)


# The only non-ASCII characters Python's IGNORECASE matches with ASCII letters (re docs).
FOLDED_ONTO_ASCII = "[İıſK]"
_FOLDED_ONTO_ASCII = re.compile(FOLDED_ONTO_ASCII)


class ToolKeywords(NamedTuple):
    """A tool's keywords as one pattern (`phrase_pattern`), and what a text holds, lower-cased,
    wherever the pattern matches: a keyword's first word (ASCII) or the whole keyword (without
    letter case, as Chinese). Most texts hold none of a tool's, and a substring test costs a
    fraction of a pattern's search. None: every text is searched (a keyword with non-ASCII
    letters that have a case, which IGNORECASE folds otherwise than `str.lower`)."""

    pattern: re.Pattern[str]
    held: tuple[str, ...] | None


def _held(word: str) -> str | None:
    """What a text holds where `word` matches (`ToolKeywords.held`); None: no such text."""
    if word.isascii():
        first = word.split()[:1]
        return first[0].lower() if first else None
    return word if word.lower() == word.upper() else None


def keyword_patterns(catalogue: Catalogue) -> dict[str, ToolKeywords]:
    """Per tool with keywords, its catalogue keywords (en and zh) as `ToolKeywords`."""
    patterns = {}
    for tool in catalogue.tools:
        words = tool.keywords.all_texts()
        if words:  # an empty alternation would match everywhere
            held = [_held(word) for word in words]
            texts = None if None in held else tuple(dict.fromkeys(h for h in held if h))
            patterns[tool.name] = ToolKeywords(phrase_pattern(words), texts)
    return patterns


def _matches(text: str, patterns: dict[str, ToolKeywords]) -> Iterator[tuple[str, re.Match[str]]]:
    """Each tool's keyword matches in `text`, tool by tool, searching only the tools whose
    texts it holds (a text with a letter IGNORECASE folds onto ASCII: every tool)."""
    lowered = text.lower()
    folded = _FOLDED_ONTO_ASCII.search(text) is not None
    for name, keywords in patterns.items():
        held = keywords.held
        if held is None or folded or any(word in lowered for word in held):
            for match in keywords.pattern.finditer(text):
                yield name, match


def keyword_hits(request: str, patterns: dict[str, ToolKeywords]) -> dict[str, list[str]]:
    """Per tool, the words of `request` matching its keywords (`keyword_patterns`), a hit inside
    a longer hit of another tool left to that tool ("stop the music" names stop_music, not also
    play_music's "music"); tools with no match are left out."""
    spans = [
        (match.start(), match.end(), name, match.group(0))
        for name, match in _matches(request, patterns)
    ]
    hits: dict[str, list[str]] = {}
    for start, end, name, word in spans:
        inside = any(
            other != name and s <= start and end <= e and e - s > end - start
            for s, e, other, _ in spans
        )
        if not inside:
            hits.setdefault(name, []).append(word)
    return hits


@cache
def _not_naming(catalogue: Catalogue) -> re.Pattern[str] | None:
    """The catalogue's `not_naming` phrases as one pattern, longest first; None: it has none."""
    phrases = catalogue.not_naming.all_texts()
    if not phrases:
        return None
    alternatives = [
        (r"\b" if phrase.isascii() else "") + re.escape(phrase)
        for phrase in sorted(phrases, key=len, reverse=True)
    ]
    return re.compile("|".join(alternatives), re.IGNORECASE)


def mask_slot_values(text: str, catalogue: Catalogue) -> str:
    """`text` with accounts and upper-case identifiers replaced by placeholders, and the
    catalogue's `not_naming` phrases ("my checking account") by one of their own: slot values
    and phrases that ask for no tool, not wording."""
    not_naming = _not_naming(catalogue)
    if not_naming is not None:
        text = not_naming.sub("<_>", text)
    return IDENTIFIER.sub("<id>", ACCOUNT.sub("<acc>", text))


# Markers of the step a thought commits to, strongest first: "now" (a later step may recall what
# was done first), "first" (step 1 announces its order), then the words that move on to a
# following step or say what the thought will do ("deposit done, then transfer", "so I …",
# "I will …", "因为余额不足，所以无法转账").
_STEP_MARKERS = (
    re.compile(r"\b(?:now|next)\b|现在|接下来|下一步", re.IGNORECASE),
    re.compile(r"\bfirst(?:ly)?\b|首先|先", re.IGNORECASE),
    re.compile(
        r"\b(?:then|so|therefore|I will|I'll|I am going to|I'm going to|let me)\b"
        r"|然后|再|接着|所以|因此|我会|我将",
        re.IGNORECASE,
    ),
)
# Clauses end at punctuation and start at a word that moves on to a following step.
_CLAUSE_BREAK = re.compile(
    r"[,.;:!?\n，。；：！？、]|(?=\b(?:then|so|therefore)\b|然后|再|接着|所以|因此)", re.IGNORECASE
)
# A keyword right after a negation names what the thought will not do.
_NEGATION_BEFORE = re.compile(
    r"(?:不能|不可以|无法|没法|不|\b(?:cannot|can't|can not|won't|unable to|not|don't))\s*$",
    re.IGNORECASE,
)


class _KeywordScanner(NamedTuple):
    pattern: re.Pattern[str]
    tools_by_keyword: dict[str, set[str]]


@cache
def _keyword_scanner(catalogue: Catalogue) -> _KeywordScanner:
    """One pattern over every tool's catalogue keywords (en and zh), longest first.

    Longest first makes overlapping keywords name the more specific tool: 股价 (get_quote)
    before 股 (place_order), "not enough" (respond) before "enough" (check_balance). The
    catalogue's `not_naming` phrases name no tool: "in order to" holds no order.
    """
    skipped = catalogue.not_naming.all_texts()
    tools_by_keyword: dict[str, set[str]] = {phrase.lower(): set() for phrase in skipped}
    english: set[str] = {phrase.lower() for phrase in skipped if phrase.isascii()}
    for tool in catalogue.tools:
        for language in ("en", "zh"):
            for word in tool.keywords.texts(language):
                tools_by_keyword.setdefault(word.lower(), set()).add(tool.name)
                if language == "en":
                    english.add(word.lower())
    alternatives = [
        (r"\b" if word in english else "") + re.escape(word)
        for word in sorted(tools_by_keyword, key=len, reverse=True)
    ]
    return _KeywordScanner(re.compile("|".join(alternatives), re.IGNORECASE), tools_by_keyword)


def tool_keywords(catalogue: Catalogue) -> dict[str, frozenset[str]]:
    """Per tool, the keywords (lower-cased) whose occurrence names it (`_tools_named`)."""
    words: dict[str, set[str]] = {name: set() for name in catalogue.names}
    for word, tools in _keyword_scanner(catalogue).tools_by_keyword.items():
        for tool in tools:
            words[tool].add(word)
    return {tool: frozenset(found) for tool, found in words.items()}


@cache
def catalogue_tools(catalogue: Catalogue) -> frozenset[str]:
    """The catalogue's tool names as a set (looked up once per completion)."""
    return frozenset(catalogue.names)


def _tools_named(text: str, catalogue: Catalogue) -> set[str]:
    """Tools whose keywords occur in `text`, except negated ones ("不能转账" names no transfer)."""
    scanner = _keyword_scanner(catalogue)
    return {
        tool
        for found in scanner.pattern.finditer(text)
        if not _NEGATION_BEFORE.search(text, max(0, found.start() - 12), found.start())
        for tool in scanner.tools_by_keyword[found.group().lower()]
    }


class Announcement(NamedTuple):
    """The tools a thought announces, and whether a step marker's clause named them
    (`committed`) or, no marked clause naming a tool, the whole thought did: then a tool it
    names may be an earlier step's result it reports ("the reading is in, …"), and `marked`
    says whether it committed in words no keyword names ("… so I carry on")."""

    tools: set[str]
    committed: bool
    marked: bool  # a step marker was found, whether or not a clause from it named a tool


def announcement(thought: str, catalogue: Catalogue) -> Announcement:
    """What the thought commits to now (see `thought_action_consistent`)."""
    clauses = _CLAUSE_BREAK.split(thought)
    any_marker = False
    for marker in _STEP_MARKERS:
        marked = next((i for i, clause in enumerate(clauses) if marker.search(clause)), None)
        if marked is None:
            continue
        any_marker = True
        # "First, check the balance": the step's tool may sit in the clause after the marker.
        for clause in clauses[marked:]:
            if named := _tools_named(clause, catalogue):
                return Announcement(named, committed=True, marked=True)
    return Announcement(_tools_named(thought, catalogue), committed=False, marked=any_marker)


def thought_action_consistent(completion: object, catalogue: Catalogue | None = None) -> bool:
    """Does the action carry out the step the thought announces (read with the keywords of
    `catalogue`, default the shipped one)? Unparseable → False.

    The rule: split the thought into clauses (at punctuation, and before "then"/然后/再/所以 …);
    the current step is the first clause marked "now"/"next"/现在/接下来, else "first"/先/首先,
    else "then"/"so"/"I will"/然后/再/所以 (or, if that clause names no tool, the next one that
    does). A clause names the tools whose catalogue keywords (en/zh) occur in it, longest keyword
    first. Without a marked clause naming a tool, every tool the thought names counts. Thought
    and action agree when the thought names no tool or names the action's tool. The case
    study's failure, "需要先查余额" (check the balance first) with action transfer_funds,
    announces check_balance: False.
    """
    parsed = first_json_object(completion_text(completion))
    if parsed is None:
        return False
    thought, tool = parsed.get("thought"), written_action(parsed).tool
    if not (isinstance(thought, str) and thought.strip() and tool is not None):
        return False
    catalogue = catalogue or default_catalogue()
    if tool not in catalogue_tools(catalogue):
        return False
    announced = announcement(thought, catalogue).tools
    return not announced or tool in announced


@cache
def _catalogue_patterns(catalogue: Catalogue) -> dict[str, ToolKeywords]:
    return keyword_patterns(catalogue)


def request_names(request: str, catalogue: Catalogue) -> dict[str, list[str]]:
    """Per tool, the words of `request` that name it: its identifiers masked, then
    `keyword_hits` with the catalogue's keywords. The one reading of a request's wording."""
    return keyword_hits(mask_slot_values(request, catalogue), _catalogue_patterns(catalogue))
