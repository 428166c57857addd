"""The generator's wording, loaded from data/phrases/ (YAML, English and Chinese side by side).

- `tools/<tool>.yaml`: the single-step `requests` for a tool, the `thought` that explains calling
  it, its `plan` entry and, for a tool whose result later steps see, its `observation`.
  respond.yaml adds the `replies` (one per request) and the `refusal_plan` of a failed condition.
- `scenarios/<pattern>.yaml`: a multi-step pattern's `requests`, its `steps` in order (tool and
  thought) and, for a conditional pattern, its `condition` (the last step as planned before the
  outcome is known, and the thought and reply of the respond step taken when it fails) with the
  worked reasoning of both branches (`worked_thought`, `worked_refusal_thought`: the compared
  figures restated as digits before the verdict, for the walked rows: generator/comparisons.py).
- `planted.yaml`: the thought of the planted check-first answer; `vocabulary.yaml`: slot values.
- `numeracy.yaml`: the auxiliary numeracy exercises (generator/numeracy.py).

`{placeholder}`s are filled by `str.format` from `Slots.placeholders()` plus what a scenario or
step adds (`balance`, `price`, `cost`, and the plain digits `amount_digits`, `balance_digits`,
`cost_digits`; in place_order's plan, `side` is the side's first word,
not the request's). Requests are picked by index and the last ones of each language are held
out for eval/unseen_phrasing.jsonl (`HELD_OUT_*` in build.py), so adding, removing or reordering
any entry changes the generated dataset: regenerate the shipped files.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Literal, NamedTuple, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolgrpo.data import DATA_DIR

PHRASES_DIR = DATA_DIR / "phrases"

Lang = Literal["en", "zh"]
LANGS: tuple[Lang, ...] = ("en", "zh")
Side = Literal["buy", "sell"]
SIDES: tuple[Side, ...] = ("buy", "sell")


class _Table(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Phrase(_Table):
    """One wording in both languages."""

    en: str
    zh: str

    def say(self, lang: Lang, placeholders: Mapping[str, object]) -> str:
        return (self.en if lang == "en" else self.zh).format(**placeholders)


class PhraseList(_Table):
    """Wordings per language, picked by index (so their order matters)."""

    en: tuple[str, ...] = Field(min_length=1)
    zh: tuple[str, ...] = Field(min_length=1)

    def of(self, lang: Lang) -> tuple[str, ...]:
        return self.en if lang == "en" else self.zh


class ToolPhrases(_Table):
    """tools/<tool>.yaml: a tool's single-step requests and how its step reads; `paraphrases`:
    more ways to ask, drawn only for the auxiliary phrasing rows (build.py's `phrasing_rows`)."""

    requests: PhraseList
    paraphrases: PhraseList | None = None
    thought: Phrase
    plan: Phrase
    observation: Phrase | None = None  # only tools whose result a later step is shown


class RespondPhrases(ToolPhrases):
    """tools/respond.yaml: also the reply to each request and the plan entry of a refusal."""

    replies: PhraseList
    refusal_plan: Phrase

    @model_validator(mode="after")
    def _one_reply_per_request(self) -> RespondPhrases:
        for lang in LANGS:
            if len(self.replies.of(lang)) != len(self.requests.of(lang)):
                raise ValueError(f"{lang}: replies must pair up with requests, index for index")
        return self


class StepPhrases(_Table):
    tool: str
    thought: Phrase


class ConditionPhrases(_Table):
    """A conditional pattern's last step: as planned ahead, and the respond step if it fails;
    the worked reasoning of each branch (`Needed 560000 · balance 4937231 → enough, …`)."""

    plan_ahead: Phrase
    refusal_thought: Phrase
    refusal_reply: Phrase
    worked_thought: Phrase
    worked_refusal_thought: Phrase


class ScenarioPhrases(_Table):
    """scenarios/<pattern>.yaml: a multi-step pattern's requests (and `paraphrases`, as a
    tool's) and its steps' reasoning."""

    requests: PhraseList
    paraphrases: PhraseList | None = None
    steps: tuple[StepPhrases, ...] = Field(min_length=2)
    condition: ConditionPhrases | None = None

    @model_validator(mode="after")
    def _tools_distinct(self) -> ScenarioPhrases:
        # a scenario's facts (balance, price, ...) are keyed by the tool they belong to
        tools = [step.tool for step in self.steps]
        if len(tools) != len(set(tools)):
            raise ValueError(f"a scenario calls each tool at most once, got {tools}")
        return self


class PlantedPhrases(_Table):
    thought: Phrase


class SideWords(_Table):
    """How requests word each order side; plans use the first word."""

    buy: PhraseList
    sell: PhraseList

    def of(self, side: Side) -> PhraseList:
        return self.buy if side == "buy" else self.sell


class Vocabulary(_Table):
    """vocabulary.yaml: the values slots are drawn from."""

    symbols: tuple[str, ...]
    named_accounts: dict[str, Phrase]  # the param value and how a request words it
    cities: PhraseList
    names: PhraseList
    side_words: SideWords
    days: tuple[int, ...]
    quantities: tuple[int, ...]


Exercise = Literal["convert", "cover", "limit", "multiply", "afford"]
Verdict = Literal["enough", "short", "below", "above"]


class ExercisePhrases(_Table):
    """One kind of exercise: its requests, the reasoning, the plan entry and the reply."""

    requests: PhraseList
    thought: Phrase
    plan: Phrase
    reply: Phrase


class NumeracyPhrases(_Table):
    """numeracy.yaml: rows and wording per kind, and the verdict and answer words."""

    rows: dict[Exercise, int] = Field(description="exercises per kind, half in each language")
    convert: ExercisePhrases
    cover: ExercisePhrases
    limit: ExercisePhrases
    multiply: ExercisePhrases
    afford: ExercisePhrases
    verdicts: dict[Verdict, Phrase]
    answers: dict[Literal["yes", "no"], Phrase]

    def of(self, exercise: Exercise) -> ExercisePhrases:
        return getattr(self, exercise)


class Rows(NamedTuple):
    """How many rows (or scenarios) of one kind each split gets."""

    train: int
    eval: int

    def of(self, split: str) -> int:
        return self.train if split == "train" else self.eval


class Counts(_Table):
    """counts.yaml: rows per tool, planted rows, scenarios per multi-step pattern."""

    single_rows: dict[str, Rows]
    planted_rows: Rows
    multi_scenarios: dict[str, Rows]


_Model = TypeVar("_Model", bound=BaseModel)


def _load(model: type[_Model], name: str) -> _Model:
    path = PHRASES_DIR / name
    try:
        return model.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except ValidationError as error:
        raise ValueError(f"{path}: {error}") from None


@cache
def tool_phrases(tool: str) -> ToolPhrases:
    return respond_phrases() if tool == "respond" else _load(ToolPhrases, f"tools/{tool}.yaml")


@cache
def respond_phrases() -> RespondPhrases:
    return _load(RespondPhrases, "tools/respond.yaml")


@cache
def scenario_phrases(pattern: str) -> ScenarioPhrases:
    return _load(ScenarioPhrases, f"scenarios/{pattern}.yaml")


@cache
def planted_phrases() -> PlantedPhrases:
    return _load(PlantedPhrases, "planted.yaml")


@cache
def vocabulary() -> Vocabulary:
    return _load(Vocabulary, "vocabulary.yaml")


@cache
def counts() -> Counts:
    return _load(Counts, "counts.yaml")


@cache
def numeracy_phrases() -> NumeracyPhrases:
    return _load(NumeracyPhrases, "numeracy.yaml")
