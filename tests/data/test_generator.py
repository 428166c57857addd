"""The shipped dataset's contract (counts, splits, labels, phrasing hold-out, reproducibility)
and the generator's structure: phrase files, step builders, placeholders."""

from __future__ import annotations

import difflib
import json
import random
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from toolgrpo.common.wording import thought_action_consistent
from toolgrpo.data import DATA_DIR
from toolgrpo.flows.cli import generate
from toolgrpo.generator.base_corpus import FIGURE_SEPARATOR, Passage, base_corpus
from toolgrpo.generator.build import (
    HELD_OUT_MULTI,
    HELD_OUT_SINGLE,
    PHRASINGS_FILE,
    PLANTED_FILE,
    REDRAWS_FILE,
    WALKED_DRILLS,
    WALKED_DRILLS_FILE,
    WALKED_MULTISTEP_FILE,
    WALKED_PHRASINGS_FILE,
    Dataset,
    build_dataset,
)
from toolgrpo.generator.comparisons import drill_figures, walked
from toolgrpo.generator.numeracy import EXERCISES_FILE, comparison_drills, product_working
from toolgrpo.generator.phrases import (
    LANGS,
    PHRASES_DIR,
    PhraseList,
    counts,
    planted_phrases,
    tool_phrases,
    vocabulary,
)
from toolgrpo.generator.scenarios import PATTERNS
from toolgrpo.generator.slots import draw_slots
from toolgrpo.generator.steps import STEP_BUILDERS
from toolgrpo.schemas.catalogue import load_catalogue
from toolgrpo.schemas.completion import Completion
from toolgrpo.schemas.figures import figures_in
from toolgrpo.schemas.samples import normalise_prompt
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import validate_samples

FILES = [
    "train/single_step.jsonl",
    "train/multistep.jsonl",
    "eval/single_step.jsonl",
    "eval/multistep.jsonl",
    "eval/unseen_phrasing.jsonl",
]
ROW_KEYS = ["id", "scenario_id", "kind", "lang", "step", "n_steps", "prompt", "solution", "tool"]
LOGIC_WORDS = {
    "en": ["first", "then", "before", "because", "therefore", "need to", "in order to", "since"],
    "zh": ["先", "首先", "然后", "因为", "所以", "之前", "需要", "为了"],
}
HISTORY_MARK = "\n\nPrevious steps:\n"


def _read(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA_DIR / name).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def shipped() -> dict[str, list[dict]]:
    return {name: _read(name) for name in FILES}


@pytest.fixture(scope="module")
def all_rows(shipped) -> list[dict]:
    return [row for rows in shipped.values() for row in rows]


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return build_dataset(0)


def _keywords(tool: str) -> list[str]:
    keywords = load_catalogue().tool(tool).keywords
    return [word.lower() for word in [*keywords.en, *keywords.zh]]


def _request(row: dict) -> str:
    return row["prompt"].split(HISTORY_MARK)[0]


def _request_lists() -> dict[str, PhraseList]:
    """Every tool's and pattern's requests, by name."""
    tools = {tool: tool_phrases(tool).requests for tool in counts().single_rows}
    return tools | {name: pattern.phrases.requests for name, pattern in PATTERNS.items()}


def test_generate_command_reproduces_shipped_files_byte_for_byte(tmp_path: Path):
    for out in (tmp_path / "a", tmp_path / "b"):
        assert generate(seed=0, out=out) == 0
    written = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*"))
    aux = [
        EXERCISES_FILE,
        REDRAWS_FILE,
        WALKED_MULTISTEP_FILE,
        WALKED_DRILLS_FILE,
        PHRASINGS_FILE,
        WALKED_PHRASINGS_FILE,
    ]
    aux.append(PLANTED_FILE)
    assert {*FILES, *aux} <= set(written)
    for name in [p for p in written if (tmp_path / "a" / p).is_file()]:
        first = (tmp_path / "a" / name).read_bytes()
        assert first == (tmp_path / "b" / name).read_bytes(), f"{name} differs between runs"
        assert first == (DATA_DIR / name).read_bytes(), f"{name} differs from the shipped file"


def test_generate_command_reports_an_unwritable_output_folder(tmp_path: Path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert generate(seed=0, out=blocker) == 2
    assert capsys.readouterr().err.startswith(f"toolgrpo data generate: cannot write {blocker}")
    assert blocker.read_text() == "not a folder"


def test_every_phrase_file_loads_and_each_is_used_by_a_catalogue_tool_or_pattern():
    tools = load_catalogue().names
    expected = {f"tools/{tool}.yaml" for tool in tools}
    expected |= {"planted.yaml", "vocabulary.yaml", "counts.yaml", "numeracy.yaml"}
    expected |= {f"scenarios/{name}.yaml" for name in PATTERNS}
    found = {path.relative_to(PHRASES_DIR).as_posix() for path in PHRASES_DIR.rglob("*.yaml")}
    assert found == expected
    assert planted_phrases().thought and vocabulary().symbols  # each loader validates its file
    assert set(counts().single_rows) == set(tools)
    assert set(counts().multi_scenarios) == set(PATTERNS)
    for name, requests in _request_lists().items():
        # enough requests per language to keep some for train after the unseen hold-out
        least = 10 if name in tools else 5
        assert all(len(requests.of(lang)) >= least for lang in LANGS), name


def test_step_builders_cover_every_catalogue_tool_and_every_scenario_step():
    assert set(STEP_BUILDERS) == set(load_catalogue().names)
    for name, pattern in PATTERNS.items():
        assert {step.tool for step in pattern.phrases.steps} <= set(STEP_BUILDERS), name


def test_requests_name_only_slot_placeholders():
    slot_names = set(draw_slots(random.Random(0), "en").placeholders())
    for name, requests in _request_lists().items():
        for lang in LANGS:
            for template in requests.of(lang):
                fields = {field for _, field, _, _ in string.Formatter().parse(template) if field}
                assert fields <= slot_names, (name, lang, template)


def test_train_files_have_the_case_study_row_counts(shipped):
    assert len(shipped["train/single_step.jsonl"]) == 454
    assert len(shipped["train/multistep.jsonl"]) == 823


def test_eval_files_are_about_a_fifth_of_train(shipped):
    for kind in ("single_step", "multistep"):
        ratio = len(shipped[f"eval/{kind}.jsonl"]) / len(shipped[f"train/{kind}.jsonl"])
        assert 0.15 <= ratio <= 0.25, (kind, ratio)


def test_rows_follow_the_contract_key_order_and_kinds(all_rows):
    for row in all_rows:
        assert list(row) in (ROW_KEYS, [*ROW_KEYS, "condition"]), row["id"]
        assert row["kind"] in ("single", "multi") and row["lang"] in ("en", "zh")
        if row["kind"] == "single":
            assert row["step"] == row["n_steps"] == 1, row["id"]
        else:
            assert 1 <= row["step"] <= row["n_steps"] and row["n_steps"] in (2, 3), row["id"]


def test_ids_are_unique_across_all_files(all_rows):
    ids = Counter(row["id"] for row in all_rows)
    assert [i for i, n in ids.items() if n > 1] == []


def test_multi_step_scenarios_are_expanded_one_row_per_step(shipped):
    for name in ("train/multistep.jsonl", "eval/multistep.jsonl"):
        steps: dict[str, list[int]] = {}
        for row in shipped[name]:
            steps.setdefault(row["scenario_id"], []).append(row["step"])
            assert row["id"] == f"{row['scenario_id']}-{row['step']}"
        for scenario, seen in steps.items():
            assert sorted(seen) == list(range(1, len(seen) + 1)), scenario


def test_eval_scenarios_and_requests_never_occur_in_train(shipped):
    train = shipped["train/single_step.jsonl"] + shipped["train/multistep.jsonl"]
    held_out = [row for name in FILES if name.startswith("eval/") for row in shipped[name]]
    assert {r["scenario_id"] for r in train}.isdisjoint({r["scenario_id"] for r in held_out})
    train_requests = {normalise_prompt(_request(r)) for r in train}
    leaked = [r["id"] for r in held_out if normalise_prompt(_request(r)) in train_requests]
    assert leaked == []


def _template_pattern(template: str) -> re.Pattern[str]:
    """A request template as a regex: its words literal, each placeholder any text."""
    parts = string.Formatter().parse(template)
    return re.compile(
        "".join(re.escape(text) + (".+?" if field else "") for text, field, _, _ in parts),
        re.IGNORECASE,
    )


@pytest.fixture(scope="module")
def base_passages(shipped) -> list[Passage]:
    """A small base corpus (two draws of the scenarios' prompts, one of copy drills), the eval
    prompts left out as the base build leaves them out."""
    held_out = [
        row["prompt"] for name in FILES if name.startswith("eval/") for row in shipped[name]
    ]
    return base_corpus(
        0,
        load_catalogue(),
        exercise_rounds=1,
        request_rounds=2,
        copy_rounds=1,
        excluded_prompts=held_out,
    )


def test_no_eval_prompt_or_unseen_template_occurs_in_training_or_exercise_rows(
    shipped, dataset, base_passages
):
    """Held-out numbers are honest: no eval prompt is trained on, the unseen-phrasing templates
    match no training, exercise or base-corpus request, and the exercises match no request
    template at all."""
    exercises = _read(EXERCISES_FILE)
    corpus = [{"id": f"base-{i}", "prompt": p.prompt} for i, p in enumerate(base_passages)]
    trained = shipped["train/single_step.jsonl"] + shipped["train/multistep.jsonl"] + exercises
    trained += corpus + _read(REDRAWS_FILE) + _read(WALKED_MULTISTEP_FILE) + _read(PHRASINGS_FILE)
    trained += _read(WALKED_PHRASINGS_FILE)
    exercises += _read(WALKED_DRILLS_FILE)
    held_out = [row for name in FILES if name.startswith("eval/") for row in shipped[name]]
    trained_prompts = {normalise_prompt(row["prompt"]) for row in trained}
    assert [r["id"] for r in held_out if normalise_prompt(r["prompt"]) in trained_prompts] == []
    templates = {
        (name, lang, index): _template_pattern(template)
        for name, requests in _request_lists().items()
        for lang in LANGS
        for index, template in enumerate(requests.of(lang))
    }
    unseen_ids = [r["id"] for r in dataset.files["eval/unseen_phrasing.jsonl"]]
    unseen_phrasings = {dataset.phrasing_of[i] for i in unseen_ids}
    unseen = {k: p for k, p in templates.items() if ".".join(map(str, k)) in unseen_phrasings}
    assert unseen
    for row in trained:
        request = _request(row)
        assert not [k for k, p in unseen.items() if p.fullmatch(request)], row["id"]
    for row in exercises:
        assert not [k for k, p in templates.items() if p.fullmatch(row["prompt"])], row["id"]


def test_paraphrases_are_new_wordings_with_their_tables_placeholders():
    """Every table but respond's (whose requests pair with replies) has paraphrases in both
    languages: none a request of its table (trained or held out), each with the placeholders
    one of its requests has."""
    tables = {tool: tool_phrases(tool) for tool in counts().single_rows if tool != "respond"}
    tables |= {name: pattern.phrases for name, pattern in PATTERNS.items()}
    for name, phrases in tables.items():
        assert phrases.paraphrases is not None, name
        for lang in LANGS:
            requests = phrases.requests.of(lang)
            placeholders = {_placeholders(request) for request in requests}
            written = {request.lower() for request in requests}
            for paraphrase in phrases.paraphrases.of(lang):
                assert _placeholders(paraphrase) in placeholders, (name, paraphrase)
                assert paraphrase.lower() not in written, (name, paraphrase)


def test_the_unseen_templates_are_no_closer_to_the_paraphrases_than_to_the_trained_requests():
    """Paraphrases teach wording, not the held-out templates: per language, a held-out template's
    best match among its table's paraphrases is on average no closer (difflib's ratio, the
    placeholders alike) than its best match among the trained requests (measured: 0.53 vs 0.52
    in English, 0.58 vs 0.60 in Chinese), and never a near copy."""

    def similarity(a: str, b: str) -> float:
        def shape(text: str) -> str:
            return re.sub(r"\{\w+\}", "#", text.lower())

        return difflib.SequenceMatcher(None, shape(a), shape(b)).ratio()

    tables = {tool: tool_phrases(tool) for tool in counts().single_rows if tool != "respond"}
    tables |= {name: pattern.phrases for name, pattern in PATTERNS.items()}
    held_out = {name: HELD_OUT_SINGLE for name in counts().single_rows} | dict.fromkeys(
        PATTERNS, HELD_OUT_MULTI
    )
    for lang in LANGS:
        to_trained, to_paraphrases = [], []
        for name, phrases in tables.items():
            assert phrases.paraphrases is not None
            requests = phrases.requests.of(lang)
            trained, unseen = requests[: -held_out[name]], requests[-held_out[name] :]
            for template in unseen:
                to_trained.append(max(similarity(template, t) for t in trained))
                nearest = max(similarity(template, p) for p in phrases.paraphrases.of(lang))
                assert nearest < 0.9, (name, template)
                to_paraphrases.append(nearest)
        assert sum(to_paraphrases) / len(to_paraphrases) <= sum(to_trained) / len(to_trained) + 0.02


def test_phrasing_rows_are_the_training_scenarios_worded_by_the_paraphrases(dataset):
    phrasings = _read(PHRASINGS_FILE)
    assert phrasings == dataset.phrasings
    shipped_ids = {r["id"] for rows in dataset.files.values() for r in rows}
    assert shipped_ids.isdisjoint(r["id"] for r in phrasings)
    assert Counter(r["lang"] for r in phrasings if r["step"] == 1)["en"] > 100
    kinds = Counter((r["kind"], r.get("condition")) for r in phrasings)
    assert kinds[("single", None)] > 300 and kinds[("multi", "holds")] > 50
    assert kinds[("multi", "fails")] > 50


def _placeholders(template: str) -> frozenset[str]:
    return frozenset(field for _, field, _, _ in string.Formatter().parse(template) if field)


def test_exercises_are_respond_rows_outside_the_counted_training_rows(dataset):
    exercises = _read(EXERCISES_FILE)
    assert exercises == dataset.exercises and len(exercises) == 800
    assert {(r["kind"], r["step"], r["tool"]) for r in exercises} == {("single", 1, "respond")}
    assert Counter(r["lang"] for r in exercises) == {"en": 400, "zh": 400}
    shipped_ids = {r["id"] for rows in dataset.files.values() for r in rows}
    assert shipped_ids.isdisjoint(r["id"] for r in exercises)
    # The reasoning names the figures compared (balance, price): the consistency heuristic's
    # keywords, not an announced tool; what matters is a logic word and a plan, as for the reward.
    for row in exercises:
        solution = json.loads(row["solution"])
        assert any(word in solution["thought"].lower() for word in LOGIC_WORDS[row["lang"]])
        assert solution["plan"] and all(solution["plan"]), row["id"]


def test_redraws_are_fresh_conditional_steps_of_the_trained_scenarios(shipped, dataset):
    """Each of the 225 conditional training steps drawn 8 times with new figures, both branches
    and every tool as often as in the shipped rows, each label the one its figures imply (the
    data gate checks that: test_shipped_contract); no eval request, no training prompt and no
    shipped row's id among them."""
    redraws = _read(REDRAWS_FILE)
    assert redraws == dataset.redraws and len(redraws) == 8 * 225
    trained = [r for r in shipped["train/multistep.jsonl"] if "condition" in r]
    assert len(trained) == 225
    assert Counter(r["condition"] for r in redraws) == {
        branch: 8 * n for branch, n in Counter(r["condition"] for r in trained).items()
    }
    assert Counter(r["tool"] for r in redraws) == {
        tool: 8 * n for tool, n in Counter(r["tool"] for r in trained).items()
    }
    held_out = {
        normalise_prompt(_request(r))
        for name in FILES
        if name.startswith("eval/")
        for r in shipped[name]
    }
    assert [r["id"] for r in redraws if normalise_prompt(_request(r)) in held_out] == []
    trained_prompts = {normalise_prompt(r["prompt"]) for r in trained}
    assert [r["id"] for r in redraws if normalise_prompt(r["prompt"]) in trained_prompts] == []
    shipped_ids = {r["id"] for rows in shipped.values() for r in rows}
    assert shipped_ids.isdisjoint(r["id"] for r in redraws)


def test_base_corpus_holds_exercises_prompts_and_copy_drills_but_no_decision(base_passages):
    """The base reads figures, their comparisons and the domain's requests and observations, and
    copies figures from a prompt; every tool decision is left to SFT: a scenario passage is a
    prompt alone or its figures, and every JSON answer is an exercise's `respond`."""
    exercises = [p for p in base_passages if p.answer is not None and p.answer.startswith("{")]
    drills = [p for p in base_passages if p.answer is not None and not p.answer.startswith("{")]
    prompts = [p.prompt for p in base_passages if p.answer is None]
    assert len(exercises) == 800
    assert {json.loads(p.answer)["action"]["tool"] for p in exercises} == {"respond"}
    assert len(prompts) > 2 * 454 and any(HISTORY_MARK in prompt for prompt in prompts)
    # one drill per fresh row that states a figure: every step's prompt, histories included
    assert len(drills) > 1_000 and any(HISTORY_MARK in p.prompt for p in drills)
    for drill in drills:
        figures = drill.answer.split(FIGURE_SEPARATOR)
        assert all(figure in drill.prompt for figure in figures), drill
        assert "Step 1:" not in figures


def test_figures_are_what_a_prompt_states_as_written_in_order():
    prompt = "用 ACC703 买 150 股 META\n\nPrevious steps:\nStep 1: check_balance → 余额 76,521 元"
    assert figures_in(prompt) == ["ACC703", "150", "META", "76,521 元"]
    assert figures_in("Can I send 10万 or $50 to ACC042? OK") == ["10万", "$50", "ACC042", "OK"]
    assert figures_in("no figure here") == []


@pytest.mark.parametrize("padded", [False, True])
def test_comparison_drills_state_both_figures_and_the_verdict_they_imply(tmp_path, padded):
    """Each drill asks with plain digits and restates them (as they are, or zero-padded to 10)
    before the verdict, which is the comparison's (≥ covers); the verdicts balance, half the
    pairs have equal lengths (a third of those sharing leading digits), every row passes the data
    gate, and a seed draws the same."""
    restate = (lambda needed, balance: (f"{needed:010d}", f"{balance:010d}")) if padded else None
    drills = comparison_drills(0, 2000, restate=restate)
    assert drills == comparison_drills(0, 2000, restate=restate)
    assert drills != comparison_drills(1, 2000, restate=restate)
    assert Counter(r["lang"] for r in drills) == {"en": 1000, "zh": 1000}
    verdicts, equal, shared = Counter(), 0, 0
    for row in drills:
        thought = json.loads(row["solution"])["thought"]
        restated = re.match(r"\D*(\d+) · \D*(\d+) → ([^,，]+)", thought).groups()
        assert all((len(figure) == 10) == padded for figure in restated[:2]), thought
        needed, balance, verdict = str(int(restated[0])), str(int(restated[1])), restated[2]
        assert needed in row["prompt"] and balance in row["prompt"], row
        covers = int(balance) >= int(needed)
        assert verdict == {("en", True): "enough", ("en", False): "not enough"}.get(
            (row["lang"], covers), "够" if covers else "不够"
        ), row
        verdicts[covers] += 1
        equal += len(needed) == len(balance)
        shared += len(needed) == len(balance) and needed[0] == balance[0]
    assert 900 < verdicts[True] < 1100 and 800 < equal < 1200 and shared > 250
    path = tmp_path / "drills.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in drills))
    report = validate_samples.fn(load_samples.fn([path]))
    assert [str(p) for p in report.failures] == [] and report.valid_rows == 2000


def test_exercise_working_multiplies_by_place_value():
    assert product_working(150, 633.07) == (
        "150 × 633.07 = 100 × 633.07 + 50 × 633.07 = 63307 + 31653.5 = 94960.5"
    )
    assert product_working(8, 12.5) == "8 × 12.50 = 100"


def test_normalised_prompts_are_unique_across_all_files(all_rows):
    counts = Counter(normalise_prompt(row["prompt"]) for row in all_rows)
    assert [p for p, n in counts.items() if n > 1] == []


def test_unseen_phrasing_rows_use_only_phrasings_absent_from_train(dataset):
    train_ids = [r["id"] for name in FILES[:2] for r in dataset.files[name]]
    unseen_ids = [r["id"] for r in dataset.files["eval/unseen_phrasing.jsonl"]]
    train_phrasings = {dataset.phrasing_of[i] for i in train_ids}
    unseen_phrasings = {dataset.phrasing_of[i] for i in unseen_ids}
    assert unseen_phrasings.isdisjoint(train_phrasings)
    # every phrasing is used somewhere: held out ones in unseen, the rest in train
    every = {
        f"{name}.{lang}.{i}"
        for name, requests in _request_lists().items()
        for lang in LANGS
        for i in range(len(requests.of(lang)))
    }
    assert train_phrasings | unseen_phrasings == every


def test_every_solution_parses_and_its_params_satisfy_the_tool_schema(all_rows):
    catalogue = load_catalogue()
    for row in all_rows:
        solution = Completion.model_validate_json(row["solution"])
        assert solution.action.tool == row["tool"], row["id"]
        error = catalogue.params_error(row["tool"], solution.action.params)
        assert error is None, f"{row['id']}: {error}"


def test_thoughts_give_a_reason_in_the_request_language(all_rows):
    for row in all_rows:
        thought = json.loads(row["solution"])["thought"]
        assert any(word in thought.lower() for word in LOGIC_WORDS[row["lang"]]), row["id"]
        has_chinese = re.search(r"[\u4e00-\u9fff]", thought) is not None
        assert has_chinese == (row["lang"] == "zh"), row["id"]


def test_labelled_thoughts_announce_the_labelled_action(all_rows):
    inconsistent = [row["id"] for row in all_rows if not thought_action_consistent(row["solution"])]
    assert inconsistent == []


def test_plan_lists_the_remaining_steps_current_one_first(all_rows):
    for row in all_rows:
        plan = json.loads(row["solution"])["plan"]
        assert len(plan) == row["n_steps"] - row["step"] + 1, row["id"]
        assert all(isinstance(item, str) and 0 < len(item) <= 60 for item in plan), row["id"]


def test_multi_step_prompt_lists_previous_steps(all_rows):
    for row in all_rows:
        history = re.findall(r"^Step (\d+): ([a-z_]+) → .+$", row["prompt"], flags=re.MULTILINE)
        assert [int(i) for i, _ in history] == list(range(1, row["step"])), row["id"]
        assert (HISTORY_MARK in row["prompt"]) == (row["step"] > 1), row["id"]


def test_previous_steps_are_the_scenarios_earlier_labels(shipped):
    for name in ("train/multistep.jsonl", "eval/multistep.jsonl"):
        labels = {(r["scenario_id"], r["step"]): r["tool"] for r in shipped[name]}
        for row in shipped[name]:
            history = re.findall(r"^Step (\d+): ([a-z_]+) → ", row["prompt"], flags=re.MULTILINE)
            for step, tool in history:
                assert labels[(row["scenario_id"], int(step))] == tool, row["id"]


def test_both_languages_have_between_40_and_60_percent_of_each_file(shipped):
    for name, rows in shipped.items():
        share = sum(row["lang"] == "en" for row in rows) / len(rows)
        assert 0.4 <= share <= 0.6, (name, share)


def test_every_tool_appears_in_single_step_rows(shipped):
    tools = set(load_catalogue().names)
    for name in ("train/single_step.jsonl", "eval/single_step.jsonl"):
        assert {row["tool"] for row in shipped[name]} == tools, name


def test_condition_fails_branch_is_common_in_conditional_scenarios(dataset):
    for name in ("train/multistep.jsonl", "eval/multistep.jsonl"):
        last_steps = [
            row
            for row in dataset.files[name]
            if row["step"] == row["n_steps"]
            and PATTERNS[dataset.phrasing_of[row["id"]].split(".")[0]].conditional
        ]
        fails = sum(row["tool"] == "respond" for row in last_steps) / len(last_steps)
        assert 0.3 <= fails <= 0.6, (name, fails)


def test_exactly_the_conditional_last_steps_say_which_branch_they_label(dataset):
    for name, rows in dataset.files.items():
        for row in rows:
            pattern = dataset.phrasing_of[row["id"]].split(".")[0]
            conditional = pattern in PATTERNS and PATTERNS[pattern].conditional
            if conditional and row["step"] == row["n_steps"]:
                expected = "fails" if row["tool"] == "respond" else "holds"
                assert row.get("condition") == expected, (name, row["id"])
            else:
                assert "condition" not in row, (name, row["id"])


def test_planted_ambiguity_rows_are_withdraw_requests_labelled_check_balance(shipped, dataset):
    planted = json.loads((DATA_DIR / PLANTED_FILE).read_text(encoding="utf-8"))
    balance_words = _keywords("check_balance")
    for split in ("train", "eval"):
        rows = {row["id"]: row for row in shipped[f"{split}/single_step.jsonl"]}
        ids = [i for i in planted["ids"] if i.startswith(f"{split}-")]
        assert 0.01 <= len(ids) / len(rows) <= 0.025, (split, len(ids))
        for row_id in ids:
            row = rows[row_id]
            prompt = row["prompt"].lower()
            assert row["tool"] == "check_balance", row_id
            assert dataset.phrasing_of[row_id].startswith("withdraw."), row_id
            assert not any(word in prompt for word in balance_words), row_id
    labels = {row["id"]: row["tool"] for rows in dataset.files.values() for row in rows}
    genuine = [i for i, t in dataset.phrasing_of.items() if t.startswith("withdraw.")]
    assert {labels[i] for i in genuine if i not in planted["ids"]} == {"withdraw"}
    all_ids = {row["id"] for rows in shipped.values() for row in rows}
    assert set(planted["ids"]) <= all_ids and planted["why"]


@pytest.mark.parametrize(
    ("needed", "balance", "expected"),
    [
        ("190000", "197451", ("190000 [6]", "197451 [6] · 1=1 9=9 0<7")),
        ("560000", "4937231", ("560000 [6]", "4937231 [7]")),  # the counts decide
        ("3550", "3550", ("3550 [4]", "3550 [4] · 3=3 5=5 5=5 0=0")),  # equal: every place
        ("562.54", "600", ("562.54 [3]", "600 [3] · 5<6")),  # whole parts only
        ("98404", "91250.5", ("98404 [5]", "91250.5 [5] · 9=9 8>1")),
    ],
)
def test_walked_form_counts_each_figure_then_walks_to_the_first_differing_place(
    needed, balance, expected
):
    assert walked(needed, balance) == expected


# A walked restatement: two counted figures, the words between them, the walk, the verdict.
WALKED_THOUGHT = re.compile(
    r"^(?:\d+ × [\d.]+ = |\D*)(?P<first>[\d.]+) \[(?P<first_count>\d+)\] · (?P<words>\D*)"
    r"(?P<second>[\d.]+) \[(?P<second_count>\d+)\](?: · (?P<walk>[\d=<> ]+))?"
    r" → (?P<verdict>[^,，]+)"
)
# What each verdict claims of the first figure against the second (needed or price, balance or
# limit), for the branch that holds.
CLAIMS = {
    "enough": lambda a, b: a <= b,
    "够": lambda a, b: a <= b,
    "below": lambda a, b: a < b,
    "低于": lambda a, b: a < b,
    "above": lambda a, b: a > b,
    "高于": lambda a, b: a > b,
}


def _check_walk(first: str, second: str, walk: str | None) -> None:
    """The written walk is each place's digits from the first to the first that differs, with
    their true sign; none where the whole parts' counts differ."""
    a, b = first.partition(".")[0], second.partition(".")[0]
    if len(a) != len(b):
        assert walk is None
        return
    pairs = walk.split(" ")
    for place, pair in enumerate(pairs):
        sign = "=" if a[place] == b[place] else "<" if a[place] < b[place] else ">"
        assert pair == f"{a[place]}{sign}{b[place]}"
        assert (sign == "=") == (place < len(pairs) - 1 or a == b)


def _walked_twins(plain_rows: list[dict], walked_rows: list[dict]) -> Counter:
    """Check that `walked_rows` are `plain_rows` row for row but for each conditional step's
    reasoning: both figures restated as digits, counted, walked to the first place that differs,
    then a verdict that the figures bear out and that names the row's branch. Returns the
    branches walked."""
    assert len(walked_rows) == len(plain_rows)
    branches = Counter()
    for plain, row in zip(plain_rows, walked_rows, strict=True):
        solution, plain_solution = json.loads(row["solution"]), json.loads(plain["solution"])
        assert {**row, "solution": ""} == {**plain, "solution": ""}
        assert {**solution, "thought": ""} == {**plain_solution, "thought": ""}
        if "condition" not in row:
            assert solution["thought"] == plain_solution["thought"]
            continue
        branches[row["condition"]] += 1
        stated = WALKED_THOUGHT.match(solution["thought"])
        assert stated, solution["thought"]
        first, second = stated["first"], stated["second"]
        assert int(stated["first_count"]) == len(first.partition(".")[0])
        assert int(stated["second_count"]) == len(second.partition(".")[0])
        _check_walk(first, second, stated["walk"])
        verdict = stated["verdict"]
        negated = verdict.startswith(("not ", "不"))
        assert negated == (row["condition"] == "fails"), solution["thought"]
        claim = CLAIMS[verdict.removeprefix("not ").removeprefix("不")]
        assert claim(float(first), float(second)) != negated, solution["thought"]
    assert branches == Counter(r["condition"] for r in plain_rows if "condition" in r)
    return branches


def test_walked_rows_are_the_shipped_rows_with_each_conditional_step_walked(shipped, dataset):
    """data/aux/walked/multistep.jsonl (the cpu preset's): the shipped multi-step training
    rows with their 225 conditional steps walked."""
    walked_rows = _read(WALKED_MULTISTEP_FILE)
    assert walked_rows == dataset.walked_multistep
    assert len(walked_rows) == 823
    branches = _walked_twins(shipped["train/multistep.jsonl"], walked_rows)
    assert sum(branches.values()) == 225


def test_walked_phrasings_are_the_phrasing_rows_with_each_conditional_step_walked(dataset):
    """data/aux/walked/phrasings.jsonl: the paraphrased rows for a walked recipe."""
    walked_rows = _read(WALKED_PHRASINGS_FILE)
    assert walked_rows == dataset.walked_phrasings
    branches = _walked_twins(_read(PHRASINGS_FILE), walked_rows)
    assert branches["holds"] > 50 and branches["fails"] > 50


def test_walked_drills_write_their_figures_walked(dataset):
    """data/aux/walked/comparisons.jsonl: seed 0's comparison drills with both figures in the
    walked form, the verdict the figures imply."""
    drills = _read(WALKED_DRILLS_FILE)
    assert drills == dataset.walked_drills
    assert drills == comparison_drills(0, WALKED_DRILLS, restate=drill_figures(walked))
    assert len(drills) == WALKED_DRILLS
    for row in drills:
        thought = json.loads(row["solution"])["thought"]
        stated = WALKED_THOUGHT.match(thought)
        assert stated, thought
        _check_walk(stated["first"], stated["second"], stated["walk"])
        covers = int(stated["first"]) <= int(stated["second"])
        assert stated["verdict"] == {"en": "enough" if covers else "not enough"}.get(
            row["lang"], "够" if covers else "不够"
        ), thought
