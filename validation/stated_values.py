"""The values a request states for a tool's params, read from each param's JSON Schema.

Nothing here knows a tool by name: a param's schema says what to look for in a text.

- a number (`type` number or integer): the amounts the text writes (`schemas.figures.amounts_in`:
  10万, 100k, 50 rupees, 24, 40%) within the param's bounds (`minimum`, `maximum`, the exclusive
  ones; whole numbers for an integer), except those a text writes as a change ("by 2 degrees",
  "3 more"); when the schema gives the param's unit words (`"x-keywords": ["day", "天"]`), only
  the amounts written with one ("14 days", "14-day", "60 天", "volume 4");
- a string with a `pattern`: the text's ASCII words the pattern matches (ACC042, AAPL);
- a string with an `enum`: the members the text names, each by its words: the schema's
  `x-keywords` for the member when it gives them (`{"buy": ["buy", "purchase", "买"]}`), else the
  member itself ("living_room" as "living room"), matched as the catalogue's keywords are
  (`common.wording.phrase_pattern`).

A param whose name says a direction (`from_…`, `source`; `to_…`, `target`, `destination`) is
also read for its role: the text marks a value as where something goes from ("from ACC001",
"从 ACC001") or to ("to ACC002", "给 ACC002").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from toolgrpo.common.wording import phrase_pattern
from toolgrpo.schemas.catalogue import Catalogue, linear_pattern
from toolgrpo.schemas.figures import AMOUNT, Amount, amount_of, described, number_text

ENUM_WORDS = "x-keywords"  # a param schema's words per enum member (a catalogue's own tuning)
FROM, TO = "from", "to"
_ROLE_PARTS = {
    FROM: {"from", "source", "src", "origin", "sender"},
    TO: {"to", "target", "destination", "dest", "recipient", "into"},
}
_ARTICLE = r"(?:\b(?:the|my|our)\s+)?"
_ROLE_BEFORE = {
    FROM: re.compile(rf"(?:\b(?:from|out of)|从|由)\s*{_ARTICLE}$", re.IGNORECASE),
    TO: re.compile(rf"(?:\b(?:to|into|onto)|给|到|向|转入|转给|打给)\s*{_ARTICLE}$", re.IGNORECASE),
}
# A figure written as a change of a value, not the value: "by 2 degrees", "3 more", "调高 2 度".
_CHANGE_BEFORE = re.compile(r"(?:\bby|调高|调低|升高|降低|增加|减少)\s*$", re.IGNORECASE)
_CHANGE_AFTER = re.compile(
    r"^\s*(?:[a-z%°]+\s+)?(?:more|less|fewer|warmer|cooler|colder|higher|lower|up|down)\b",
    re.IGNORECASE,
)
_UNIT_GAP_AFTER = re.compile(r"[\s-]*")
# the word right before an amount, or the one before it ("volume 4", "volume to 4")
_UNIT_BEFORE = re.compile(r"\w+(?=\W+(?:\w+\W+)?$)")
ASCII_WORD = re.compile(r"[A-Za-z0-9_]{1,64}")
_LOOKBACK = 12  # characters before a value where its direction word may stand


@dataclass(frozen=True)
class ParamReading:
    """How a text states one param's value: its kind (`number`, `pattern`, `enum`), its
    bounds, pattern or members' words, and its direction when its name says one."""

    name: str
    kind: str | None
    integer: bool = False
    low: float = -math.inf
    low_inclusive: bool = True
    high: float = math.inf
    high_inclusive: bool = True
    pattern: Any = None  # RE2's compiled pattern (`schemas.catalogue.linear_pattern`)
    members: tuple[tuple[str, re.Pattern[str]], ...] = ()
    role: str | None = None
    units: re.Pattern[str] | None = None  # a number's unit words, after or before it

    def in_bounds(self, value: float) -> bool:
        above = value >= self.low if self.low_inclusive else value > self.low
        below = value <= self.high if self.high_inclusive else value < self.high
        return above and below and (not self.integer or value == int(value))


def _role(name: str) -> str | None:
    parts = set(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().split("_"))
    roles = [role for role, words in _ROLE_PARTS.items() if parts & words]
    return roles[0] if len(roles) == 1 else None


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float, bool] | None:
    values = []
    for key, is_inclusive in ((inclusive, True), (exclusive, False)):
        value = schema.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values.append((float(value), is_inclusive))
    return values[0] if len(values) == 1 else None


def _members(schema: dict[str, Any]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    words = schema.get(ENUM_WORDS)
    words = words if isinstance(words, dict) else {}
    members = []
    for member in schema["enum"]:
        if not isinstance(member, str):
            continue
        given = words.get(member)
        said = (
            [w for w in given if isinstance(w, str) and w.strip()]
            if isinstance(given, list)
            else []
        )
        members.append((member, phrase_pattern(said or [member.replace("_", " ")])))
    return tuple(members)


def _reading(name: str, schema: object) -> ParamReading:
    if not isinstance(schema, dict):
        return ParamReading(name, None)
    kind, role = schema.get("type"), _role(name)
    if kind in ("number", "integer"):
        low = _bound(schema, "minimum", "exclusiveMinimum") or (-math.inf, True)
        high = _bound(schema, "maximum", "exclusiveMaximum") or (math.inf, True)
        units = schema.get(ENUM_WORDS)
        words = (
            [w for w in units if isinstance(w, str) and w.strip()]
            if isinstance(units, list)
            else []
        )
        unit = phrase_pattern(words) if words else None
        return ParamReading(name, "number", kind == "integer", *low, *high, role=role, units=unit)
    if kind == "string" and isinstance(schema.get("enum"), list):
        return ParamReading(name, "enum", members=_members(schema), role=role)
    if kind == "string" and isinstance(schema.get("pattern"), str):
        try:
            pattern = linear_pattern(schema["pattern"])
        except ValueError:  # a pattern RE2 cannot read: the param is not checked
            return ParamReading(name, None, role=role)
        return ParamReading(name, "pattern", pattern=pattern, role=role)
    return ParamReading(name, None, role=role)


@cache
def param_readings(catalogue: Catalogue) -> dict[str, tuple[ParamReading, ...]]:
    """Per tool, how a text states each of its params (`properties` of its params schema)."""
    readings = {}
    for tool in catalogue.tools:
        properties = tool.params.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        readings[tool.name] = tuple(_reading(name, schema) for name, schema in properties.items())
    return readings


def is_change(text: str, start: int, end: int) -> bool:
    before = text[max(0, start - _LOOKBACK) : start]
    return bool(_CHANGE_BEFORE.search(before) or _CHANGE_AFTER.search(text, end, end + 24))


def with_unit(text: str, start: int, end: int, units: re.Pattern[str]) -> bool:
    """Whether a unit word follows the amount ("14 days", "14-day") or precedes it, a word
    apart at most ("volume 4", "volume to 4")."""
    after = _UNIT_GAP_AFTER.match(text, end)
    if after is not None and units.match(text, after.end()):
        return True
    before = text[max(0, start - 24) : start]
    return any(
        units.fullmatch(before, found.start(), found.end())
        for found in _UNIT_BEFORE.finditer(before)
    )


def stated_numbers(text: str, reading: ParamReading) -> list[Amount]:
    """The amounts `text` writes that the param could take (within its bounds, not a change,
    with a unit word when the param has some)."""
    return [
        amount
        for match in AMOUNT.finditer(text)
        if reading.in_bounds((amount := amount_of(match)).value)
        and not is_change(text, match.start(), match.end())
        and (reading.units is None or with_unit(text, match.start(), match.end(), reading.units))
    ]


def stated_words(text: str, reading: ParamReading) -> list[str]:
    """The ASCII words of `text` the param's pattern matches, in order, once each."""
    assert reading.pattern is not None
    return list(dict.fromkeys(w for w in ASCII_WORD.findall(text) if reading.pattern.search(w)))


def stated_members(text: str, reading: ParamReading) -> dict[str, str]:
    """The enum members `text` names, each with the first words naming it."""
    named = {}
    for member, pattern in reading.members:
        if found := pattern.search(text):
            named[member] = found.group(0)
    return named


def _occurrences(text: str, reading: ParamReading, value: str) -> list[re.Match[str]]:
    """Where `text` writes `value`: an enum member by its words, any other value as written."""
    for member, pattern in reading.members:
        if member == value:
            return list(pattern.finditer(text))
    edge = r"\b" if value[:1].isalnum() and value.isascii() else ""
    return list(re.finditer(edge + re.escape(value) + edge, text))


def directions_before(text: str, start: int) -> dict[str, str]:
    """The directions (from / to) the words right before `start` give what stands there, each
    with the words that give it ("to ", "给")."""
    before = text[max(0, start - _LOOKBACK) : start]
    return {
        role: word.group(0)
        for role, pattern in _ROLE_BEFORE.items()
        if (word := pattern.search(before))
    }


def _marks(text: str, reading: ParamReading, value: str) -> dict[str, str] | None:
    """The directions `text` gives `value` (from / to), each with the words that give it;
    None when `text` does not write `value`."""
    marks: dict[str, str] = {}
    found = _occurrences(text, reading, value)
    for match in found:
        for role, word in directions_before(text, match.start()).items():
            marks.setdefault(role, f"{word}{match.group(0)}")
    return marks if found else None


def _value_contradiction(reading: ParamReading, value: object, stated: str) -> str | None:
    """Why `value` is not one the text states for the param (None: it is, or nothing is)."""
    if reading.kind == "number":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        amounts = stated_numbers(stated, reading)
        if not amounts or any(math.isclose(value, a.value) for a in amounts):
            return None
        said = ", ".join(dict.fromkeys(described(a) for a in amounts))
        return f"{reading.name} {number_text(value)}, where the request states {said}"
    if reading.kind == "pattern":
        words = stated_words(stated, reading) if isinstance(value, str) else []
        if not words or value in words:
            return None
        return f"{reading.name} {value}, where the request states {', '.join(words)}"
    if reading.kind == "enum":
        named = stated_members(stated, reading) if isinstance(value, str) else {}
        if not named or value in named:
            return None
        said = ", ".join(f'{member} ("{words}")' for member, words in named.items())
        return f"{reading.name} {value}, where the request states {said}"
    return None


def _reversed(
    readings: tuple[ParamReading, ...], params: dict[str, Any], request: str
) -> str | None:
    """Why the from/to params read reversed: one's value is marked only with the other's
    direction, and the other's value is written in the request, not marked with its own."""
    marks = {
        r.name: _marks(request, r, params[r.name])
        for r in readings
        if r.role is not None and isinstance(params.get(r.name), str) and params[r.name]
    }
    roles = {r.name: r.role for r in readings}
    written = {name: given for name, given in marks.items() if given is not None}
    for name, given in written.items():
        other = TO if roles[name] == FROM else FROM
        if set(given) != {other}:
            continue
        partners = [marked for n, marked in written.items() if roles[n] == other]
        if partners and all(other not in marked for marked in partners):
            return f"{name} {params[name]}, where the request says “{given[other]}”: reversed"
    return None


def params_contradictions(
    tool: str, params: object, request: str, observations: list[str], catalogue: Catalogue
) -> list[str]:
    """What in the label's `params` contradicts what `request` and the history's
    `observations` state, one sentence per param; empty where they state nothing about it."""
    readings = param_readings(catalogue).get(tool, ())
    if not isinstance(params, dict) or not readings:
        return []
    # the history widens what counts as stated (a balance to send on), never alone: a value
    # only an observation states (the payee of an earlier transfer) is no request's
    stated = "\n".join([request, *observations])
    found = []
    for reading in readings:
        if reading.name not in params:
            continue
        why = _value_contradiction(reading, params[reading.name], request)
        if why is not None and _value_contradiction(reading, params[reading.name], stated):
            found.append(why)
    if (turned := _reversed(readings, params, request)) is not None:
        found.append(turned)
    return found
