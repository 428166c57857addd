"""Build the shipped dataset (train, eval, unseen phrasing, planted ambiguity) from a seed.

Everything is drawn from one `random.Random(seed)` in a fixed order and written with the same
JSON settings, so `toolgrpo data generate --seed 0` reproduces the shipped files byte for byte
(the auxiliary rows under data/aux/ from RNGs of their own: the numeracy exercises, numeracy.py,
the conditional redraws, `conditional_redraws`, and the paraphrased rows, `phrasing_rows`; the
cpu preset's walked rows under data/aux/walked/: the training multi-step rows drawn again with
their conditional reasoning in the walked form, comparison drills in that form, and the
paraphrased rows with their conditional steps walked).
The wording is data (data/phrases/, see phrases.py); steps.py and scenarios.py build the steps.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from toolgrpo.generator.comparisons import drill_figures, walked
from toolgrpo.generator.numeracy import EXERCISES_FILE, build_exercises, comparison_drills
from toolgrpo.generator.phrases import (
    LANGS,
    Lang,
    PhraseList,
    ScenarioPhrases,
    ToolPhrases,
    counts,
    tool_phrases,
)
from toolgrpo.generator.scenarios import PATTERNS
from toolgrpo.generator.slots import Slots, draw_slots
from toolgrpo.generator.steps import Step, planted_check_first, single_step
from toolgrpo.schemas.catalogue import Catalogue, load_catalogue
from toolgrpo.schemas.samples import normalise_prompt, request_text

Split = Literal["train", "eval"]
Kind = Literal["single", "multi"]


# The case study: 454 single-step samples + 823 expanded multi-step samples.
TRAIN_SINGLE_ROWS = 454
TRAIN_MULTI_ROWS = 823

CONDITION_FAILS_SHARE = 0.4  # the respond branch must be common enough to measure
HELD_OUT_SINGLE = 2  # the last two requests of each single-step list are kept for unseen
HELD_OUT_MULTI = 1  # the last request of each multi-step list is kept for unseen
UNSEEN_DRAWS_PER_PHRASING = 2  # a conditional pattern's two draws take one branch each

PLANTED_FILE = "planted_ambiguity.json"
REDRAWS_FILE = "aux/conditional.jsonl"
# 8 draws of the 225 conditional training steps: 1,800 rows, so that a 0.3 share of SFT (547
# rows) is a different draw for each seed.
REDRAW_ROUNDS = 8
# The walked form (generator/comparisons.py): the 823 multi-step training rows with their
# 225 conditional steps reasoned in it, and 4,000 comparison drills written in it, which the cpu
# preset trains on and mixes in (docs/experiments/numeracy.md, default-model.md).
WALKED_MULTISTEP_FILE = "aux/walked/multistep.jsonl"
WALKED_DRILLS_FILE = "aux/walked/comparisons.jsonl"
WALKED_DRILLS = 4000
# The phrase tables' paraphrases (more ways to ask than the trained requests, none of them an
# unseen-phrasing template), each drawn this many times as the training scenarios are: rows a
# preset mixes into SFT (`data.train_aux`) to learn wording beyond the trained templates.
PHRASINGS_FILE = "aux/phrasings.jsonl"
PHRASING_DRAWS = 3
# The same rows with their conditional steps reasoned in the walked form: the cpu preset's.
WALKED_PHRASINGS_FILE = "aux/walked/phrasings.jsonl"
PLANTED_WHY = (
    "Single-step rows worded as plain withdraw requests (same templates as genuine withdraw "
    "rows) but labelled check_balance under a check-first policy, like the case study's "
    "'Withdraw 50 rupees from ACC002'. Only tests and benchmarks may read this file, to score "
    "whether error mining flags them as label ambiguity."
)


class SingleJob(NamedTuple):
    """A single-step row to draw, worded by `tool`'s request `phrasing`.

    A planted job is worded as a withdraw request but labelled check_balance (check first).
    """

    tool: str
    lang: Lang
    phrasing: int
    planted: bool = False


class MultiJob(NamedTuple):
    """A multi-step scenario to draw, and whether its condition (if it has one) holds."""

    pattern: str
    lang: Lang
    phrasing: int
    condition_holds: bool


class _Drawn(NamedTuple):
    """A drawn scenario before it is numbered."""

    request: str
    lang: Lang
    steps: list[Step]
    phrasing_id: str  # "<tool or pattern>.<lang>.<index>"
    planted: bool = False


@dataclass
class Dataset:
    """Every generated file's rows, the planted ids, and (for tests) each row's phrasing id;
    the auxiliary rows apart (numeracy exercises, conditional redraws, the walked rows), since
    they are not counted among the training rows."""

    files: dict[str, list[dict[str, Any]]]
    planted_ids: list[str]
    phrasing_of: dict[str, str] = field(default_factory=dict)
    exercises: list[dict[str, Any]] = field(default_factory=list)
    redraws: list[dict[str, Any]] = field(default_factory=list)
    walked_multistep: list[dict[str, Any]] = field(default_factory=list)
    walked_drills: list[dict[str, Any]] = field(default_factory=list)
    phrasings: list[dict[str, Any]] = field(default_factory=list)
    walked_phrasings: list[dict[str, Any]] = field(default_factory=list)

    def rows_by_file(self) -> dict[str, list[dict[str, Any]]]:
        """Every JSONL file's rows by its path under the data folder, auxiliary ones included."""
        return self.files | {
            EXERCISES_FILE: self.exercises,
            REDRAWS_FILE: self.redraws,
            WALKED_MULTISTEP_FILE: self.walked_multistep,
            WALKED_DRILLS_FILE: self.walked_drills,
            PHRASINGS_FILE: self.phrasings,
            WALKED_PHRASINGS_FILE: self.walked_phrasings,
        }


def _trained_count(requests: PhraseList, lang: Lang, held_out: int) -> int:
    """How many of a list's requests train and eval use; the rest are kept for unseen."""
    return len(requests.of(lang)) - held_out


def _held_out(requests: PhraseList, lang: Lang, held_out: int) -> range:
    return range(_trained_count(requests, lang, held_out), len(requests.of(lang)))


def _solution(step: Step, plan: list[str]) -> str:
    action = {"tool": step.tool, "params": step.params}
    return json.dumps({"thought": step.thought, "action": action, "plan": plan}, ensure_ascii=False)


def _row(row_id: str, scenario_id: str, kind: Kind, index: int, drawn: _Drawn) -> dict[str, Any]:
    """The row for step `index`: the request plus what the earlier steps returned."""
    steps, step = drawn.steps, drawn.steps[index]
    prompt = drawn.request
    if index:
        history = [
            f"Step {number}: {earlier.tool} → {earlier.observation}"
            for number, earlier in enumerate(steps[:index], 1)
        ]
        prompt = "\n".join([prompt, "", "Previous steps:", *history])
    plan = [step.plan_now, *(later.plan_ahead or later.plan_now for later in steps[index + 1 :])]
    row = {
        "id": row_id,
        "scenario_id": scenario_id,
        "kind": kind,
        "lang": drawn.lang,
        "step": index + 1,
        "n_steps": len(steps),
        "prompt": prompt,
        "solution": _solution(step, plan),
        "tool": step.tool,
    }
    # Optional in the contract: only a conditional step says which branch it labels.
    return (row | {"condition": step.condition}) if step.condition else row


class ScenarioBuilder:
    """Draws scenarios with one RNG, keeping every request unique across all files (unless
    `unique_requests` is off: a corpus drawing many times more requests than a template has
    slot values); `walked`: conditional steps reasoned in the walked form (same draws);
    `paraphrased`: requests worded by the phrase tables' `paraphrases`, not their `requests`."""

    def __init__(
        self,
        seed: int | str,
        catalogue: Catalogue,
        *,
        unique_requests: bool = True,
        walked: bool = False,
        paraphrased: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.catalogue = catalogue
        self.unique_requests = unique_requests
        self.walked = walked
        self.paraphrased = paraphrased
        self.seen: set[str] = set()
        self.phrasing_of: dict[str, str] = {}
        self.planted: list[str] = []
        self.lang_turn = 1

    def langs(self, n: int) -> list[Lang]:
        """n languages, half each; odd counts alternate which language gets the extra row."""
        self.lang_turn = 1 - self.lang_turn
        langs = [LANGS[(i + self.lang_turn) % 2] for i in range(n)]
        self.rng.shuffle(langs)
        return langs

    def phrasings(self, langs: list[Lang], requests: PhraseList, held_out: int) -> list[int]:
        """A request index per entry of `langs`, cycling through that language's trained ones."""
        per_lang = {}
        for lang in LANGS:
            trained = _trained_count(requests, lang, held_out)
            indices = [i % trained for i in range(langs.count(lang))]
            self.rng.shuffle(indices)
            per_lang[lang] = iter(indices)
        return [next(per_lang[lang]) for lang in langs]

    def single_jobs(self, split: Split) -> list[SingleJob]:
        jobs = []
        for tool, rows in counts().single_rows.items():
            langs = self.langs(rows.of(split))
            phrasings = self.phrasings(langs, tool_phrases(tool).requests, HELD_OUT_SINGLE)
            jobs += [SingleJob(tool, *job) for job in zip(langs, phrasings, strict=True)]
        langs = self.langs(counts().planted_rows.of(split))
        withdraw = tool_phrases("withdraw").requests
        phrasings = [
            self.rng.randrange(_trained_count(withdraw, lang, HELD_OUT_SINGLE)) for lang in langs
        ]
        jobs += [
            SingleJob("withdraw", lang, phrasing, planted=True)
            for lang, phrasing in zip(langs, phrasings, strict=True)
        ]
        return jobs

    def multi_jobs(self, split: Split) -> list[MultiJob]:
        jobs = []
        for name, scenarios in counts().multi_scenarios.items():
            pattern, n = PATTERNS[name], scenarios.of(split)
            fails = round(n * CONDITION_FAILS_SHARE) if pattern.conditional else 0
            condition_holds = [False] * fails + [True] * (n - fails)
            self.rng.shuffle(condition_holds)
            langs = self.langs(n)
            phrasings = self.phrasings(langs, pattern.phrases.requests, HELD_OUT_MULTI)
            jobs += [
                MultiJob(name, *job) for job in zip(langs, phrasings, condition_holds, strict=True)
            ]
        return jobs

    def wordings(self, phrases: ToolPhrases | ScenarioPhrases) -> PhraseList:
        """The request templates this builder draws from a phrase table."""
        if not self.paraphrased:
            return phrases.requests
        if phrases.paraphrases is None:
            raise ValueError("a paraphrased builder drew from a phrase table without paraphrases")
        return phrases.paraphrases

    def request(self, template: str, lang: Lang) -> tuple[str, Slots]:
        """The template filled with fresh slot values, never a request drawn before."""
        for _ in range(500):
            slots = draw_slots(self.rng, lang)
            request = template.format(**slots.placeholders())
            if lang == "en":
                request = request[0].upper() + request[1:]
            if not self.unique_requests:
                return request, slots
            if normalise_prompt(request) not in self.seen:
                self.seen.add(normalise_prompt(request))
                return request, slots
        raise RuntimeError(f"cannot draw a unique request for template {template!r}")

    def single_rows(self, split: str, jobs: list[SingleJob]) -> list[dict[str, Any]]:
        drawn = []
        for job in jobs:
            template = self.wordings(tool_phrases(job.tool)).of(job.lang)[job.phrasing]
            request, slots = self.request(template, job.lang)
            if job.planted:
                step = planted_check_first(slots)
            else:
                step = single_step(job.tool, slots, job.phrasing)
            phrasing_id = f"{job.tool}.{job.lang}.{job.phrasing}"
            drawn.append(_Drawn(request, job.lang, [step], phrasing_id, job.planted))
        return self._numbered_rows(split, "single", drawn)

    def multi_rows(self, split: str, jobs: list[MultiJob]) -> list[dict[str, Any]]:
        drawn = []
        for job in jobs:
            pattern = PATTERNS[job.pattern]
            template = self.wordings(pattern.phrases).of(job.lang)[job.phrasing]
            request, slots = self.request(template, job.lang)
            steps = pattern.steps(self.rng, slots, job.condition_holds, walked=self.walked)
            phrasing_id = f"{job.pattern}.{job.lang}.{job.phrasing}"
            drawn.append(_Drawn(request, job.lang, steps, phrasing_id))
        return self._numbered_rows(split, "multi", drawn)

    def _numbered_rows(self, split: str, kind: Kind, drawn: list[_Drawn]) -> list[dict[str, Any]]:
        """Rows of the shuffled scenarios, numbered; a multi-step scenario gives a row per step."""
        self.rng.shuffle(drawn)
        rows = []
        for number, scenario in enumerate(drawn, 1):
            scenario_id = f"{split}-{'s' if kind == 'single' else 'm'}-{number:04d}"
            for index in range(len(scenario.steps)):
                row_id = scenario_id if kind == "single" else f"{scenario_id}-{index + 1}"
                row = _row(row_id, scenario_id, kind, index, scenario)
                rows.append(self._checked(row, scenario.phrasing_id))
            if scenario.planted:
                self.planted.append(scenario_id)
        return rows

    def _checked(self, row: dict[str, Any], phrasing_id: str) -> dict[str, Any]:
        params = json.loads(row["solution"])["action"]["params"]
        error = self.catalogue.params_error(row["tool"], params)
        if error is not None:
            raise ValueError(f"generated row {row['id']}: invalid {row['tool']} params: {error}")
        self.phrasing_of[row["id"]] = phrasing_id
        return row


def _unseen_jobs() -> tuple[list[SingleJob], list[MultiJob]]:
    """Jobs for the held-out requests only."""
    single = [
        SingleJob(tool, lang, phrasing)
        for tool in counts().single_rows
        for lang in LANGS
        for phrasing in _held_out(tool_phrases(tool).requests, lang, HELD_OUT_SINGLE)
        for _ in range(UNSEEN_DRAWS_PER_PHRASING)
    ]
    multi = [
        MultiJob(name, lang, phrasing, draw % 2 == 0 or not PATTERNS[name].conditional)
        for name in counts().multi_scenarios
        for lang in LANGS
        for phrasing in _held_out(PATTERNS[name].phrases.requests, lang, HELD_OUT_MULTI)
        for draw in range(UNSEEN_DRAWS_PER_PHRASING)
    ]
    return single, multi


def conditional_redraws(
    seed: int,
    catalogue: Catalogue,
    *,
    rounds: int = REDRAW_ROUNDS,
    excluded_requests: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The conditional steps of `rounds` fresh draws of the training scenarios (data/aux's
    conditional.jsonl), none whose request is one of `excluded_requests`.

    The 225 conditional training steps give a model trained from scratch 225 figure pairs to
    compare, six times each: it learns to write plausible figures rather than copy the prompt's,
    and decides close to chance. These are the same scenarios drawn again — trained templates and
    wording, new slot values and balances, each branch as often as in the shipped rows — for SFT
    to mix in (`data.aux_share`); never counted among the 454 / 823 rows, from their own RNG (the
    shipped scenarios do not depend on them), never an unseen-phrasing template (only trained
    ones are drawn)."""
    excluded = {normalise_prompt(request) for request in excluded_requests}
    builder = ScenarioBuilder(f"redraws-{seed}", catalogue, unique_requests=False)
    rows = []
    for round_number in range(1, rounds + 1):
        drawn = builder.multi_rows(f"redraw{round_number}", builder.multi_jobs("train"))
        rows += [
            row
            for row in drawn
            if "condition" in row and normalise_prompt(request_text(row["prompt"])) not in excluded
        ]
    return rows


def phrasing_rows(
    seed: int,
    catalogue: Catalogue,
    *,
    draws: int = PHRASING_DRAWS,
    excluded_requests: Iterable[str] = (),
    walked: bool = False,
) -> list[dict[str, Any]]:
    """The training scenarios worded by the phrase tables' `paraphrases` (data/aux's
    phrasings.jsonl): each paraphrase of a tool drawn `draws` times as a single-step row, each of
    a pattern `draws` times as a scenario (a conditional one taking each branch in turn); from an
    RNG of their own, never counted among the 454 / 823 rows, no request one of
    `excluded_requests`. A model trained from scratch learns only the wording it is shown:
    8 single-step and 4 multi-step requests per language and intent, in the shipped rows.
    `walked`: the same draws, conditional steps reasoned in the walked form."""
    builder = ScenarioBuilder(f"phrasings-{seed}", catalogue, paraphrased=True, walked=walked)
    builder.seen = {normalise_prompt(request) for request in excluded_requests}
    single = [
        SingleJob(tool, lang, phrasing)
        for tool in counts().single_rows
        if (paraphrases := tool_phrases(tool).paraphrases) is not None
        for lang in LANGS
        for phrasing in range(len(paraphrases.of(lang)))
        for _ in range(draws)
    ]
    multi = [
        MultiJob(name, lang, phrasing, draw % 2 == 0 or not PATTERNS[name].conditional)
        for name in counts().multi_scenarios
        if (paraphrases := PATTERNS[name].phrases.paraphrases) is not None
        for lang in LANGS
        for phrasing in range(len(paraphrases.of(lang)))
        for draw in range(draws)
    ]
    return builder.single_rows("phrasing", single) + builder.multi_rows("phrasing", multi)


def _split_files(builder: ScenarioBuilder, split: Split) -> dict[str, list[dict[str, Any]]]:
    """A split's single-step and multi-step rows, drawn in that order."""
    return {
        f"{split}/single_step.jsonl": builder.single_rows(split, builder.single_jobs(split)),
        f"{split}/multistep.jsonl": builder.multi_rows(split, builder.multi_jobs(split)),
    }


def walked_multistep(seed: int, catalogue: Catalogue) -> list[dict[str, Any]]:
    """The multi-step training rows of `seed` drawn again with their conditional steps reasoned
    in the walked form: the training split is drawn first, so these are the shipped rows but
    for those 225 thoughts."""
    return _split_files(ScenarioBuilder(seed, catalogue, walked=True), "train")[
        "train/multistep.jsonl"
    ]


def build_dataset(seed: int = 0, catalogue: Catalogue | None = None) -> Dataset:
    """All shipped rows for `seed`; raises if any generated params break the catalogue's schema."""
    catalogue = catalogue or load_catalogue()
    builder = ScenarioBuilder(seed, catalogue)
    files = _split_files(builder, "train") | _split_files(builder, "eval")
    unseen_single, unseen_multi = _unseen_jobs()
    unseen = builder.single_rows("unseen", unseen_single) + builder.multi_rows(
        "unseen", unseen_multi
    )
    files["eval/unseen_phrasing.jsonl"] = unseen
    sizes = (len(files["train/single_step.jsonl"]), len(files["train/multistep.jsonl"]))
    if sizes != (TRAIN_SINGLE_ROWS, TRAIN_MULTI_ROWS):
        raise ValueError(f"train sizes {sizes}, expected {(TRAIN_SINGLE_ROWS, TRAIN_MULTI_ROWS)}")
    held_out_requests = [
        request_text(row["prompt"])
        for name, rows in files.items()
        if name.startswith("eval/")
        for row in rows
    ]
    return Dataset(
        files=files,
        planted_ids=builder.planted,
        phrasing_of=builder.phrasing_of,
        exercises=build_exercises(seed, catalogue),
        redraws=conditional_redraws(seed, catalogue, excluded_requests=held_out_requests),
        walked_multistep=walked_multistep(seed, catalogue),
        walked_drills=comparison_drills(seed, WALKED_DRILLS, restate=drill_figures(walked)),
        phrasings=phrasing_rows(seed, catalogue, excluded_requests=held_out_requests),
        walked_phrasings=phrasing_rows(
            seed, catalogue, excluded_requests=held_out_requests, walked=True
        ),
    )


def write_dataset(dataset: Dataset, out: Path | str) -> list[Path]:
    """Write the dataset's files under `out` (train/, eval/, aux/, planted_ambiguity.json)."""
    out = Path(out)
    written = []
    for name, rows in dataset.rows_by_file().items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        written.append(path)
    planted = out / PLANTED_FILE
    payload = {"ids": dataset.planted_ids, "why": PLANTED_WHY}
    planted.write_text(
        json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8", newline="\n"
    )
    written.append(planted)
    return written
