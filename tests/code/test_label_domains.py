"""The label checks on two domains: the shipped finance catalogue and a smart-home one written
for the bench (`bench/domains/smart_home.py`: English only, keywords as a team writes them).
Silent on each domain's clean rows, and the planted mistakes found, wrong params among them."""

from __future__ import annotations

import json
import random
from collections import Counter

import polars as pl
import pytest

from bench import planting
from bench.domains import smart_home
from bench.mine import KINDS, ROWS_PER_KIND, plant_mistakes
from tests.code.prediction_rows import prediction_row, predictions_frame
from tests.code.test_context import loaded_rows
from toolgrpo.common.wording import (
    keyword_hits,
    keyword_patterns,
    request_names,
    thought_action_consistent,
)
from toolgrpo.data import DATA_DIR
from toolgrpo.mining.categorise import Category
from toolgrpo.mining.miner import mine_errors
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.samples import condition_branch, parse_solution
from toolgrpo.validation import screens as screens_module
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.label_rules import PARAMS_MATCH_REQUEST, RULES, STEP_NAMED_BY_REQUEST
from toolgrpo.validation.screens import NEEDED, PARTS_READ, ROW, screens
from toolgrpo.validation.spread import Spread

HOME = smart_home.catalogue()


def _shipped_training_rows() -> list[dict]:
    paths = sorted((DATA_DIR / "train").glob("*.jsonl"))
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tuned", [True, False])
def test_the_checks_stay_silent_on_another_domains_clean_rows(seed, tuned):
    """At most 1% of the smart-home rows flagged (today none), with the team's first keywords
    and after its tuning pass: thoughts that report an earlier result before acting included."""
    rows = smart_home.rows(seed)
    found = planting.context_findings(rows, smart_home.catalogue(tuned))
    assert len({f.id for f in found}) <= 0.01 * len(rows), [f.evidence for f in found][:5]


@pytest.mark.parametrize("domain", ["finance", "smart home"])
def test_the_screens_leave_the_rules_few_rows_of_clean_data(tmp_path, monkeypatch, domain):
    """The screens exist to spare the rules (~0.5 ms a row) the rows they pass. On a domain's
    clean rows the rules read at most 1 row in 10 (today: 4% of the finance rows and 6% of
    the smart-home rows, for the thought rule), and the params and figures rules, which the
    screens themselves call on the rows polars leaves, none."""
    judged: Counter[object] = Counter()
    spread_map = Spread.map

    def counted(self, function, items, *shared, **options):
        judged[function] += len(items)
        return spread_map(self, function, items, *shared, **options)

    monkeypatch.setattr(Spread, "map", counted)
    if domain == "finance":
        rows, catalogue = _shipped_training_rows(), default_catalogue()
    else:
        rows, catalogue = smart_home.rows(0), smart_home.catalogue()
    frame = loaded_rows(tmp_path, *rows).with_row_index(ROW)
    branch = condition_branch(pl.col("condition"), pl.col("kind"), pl.col("tool"))
    flags = screens(frame.with_columns(branch=branch), catalogue)
    shares = flags.select(pl.col(rule.__name__ for rule in RULES), NEEDED).mean().row(0, named=True)
    assert max(shares.values()) <= 0.1, shares
    assert judged[screens_module._params_flagged] == judged[screens_module._figures_hold] == 0


def test_a_thought_reporting_the_reading_then_acting_is_consistent(tmp_path):
    """The issue's false alarm: "reading" names read_sensor, the step sets the thermostat."""
    request = "Check the temperature in the office, then set it to 24 degrees."
    thoughts = [
        "The reading is in, now the user wants 24 degrees, so I set the thermostat.",
        "Got the reading of 19 degrees, and the user wants it warmer, so I take care of it.",
    ]
    rows = [
        {
            "id": f"h-{i}",
            "scenario_id": f"h{i}",
            "kind": "multi",
            "lang": "en",
            "step": 2,
            "n_steps": 2,
            "prompt": f"{request}\n\nPrevious steps:\nStep 1: read_sensor → office 19 degrees",
            "solution": json.dumps(
                {
                    "thought": thought,
                    "action": {
                        "tool": "set_thermostat",
                        "params": {"room": "office", "temperature": 24},
                    },
                    "plan": ["set the thermostat to 24"],
                }
            ),
            "tool": "set_thermostat",
        }
        for i, thought in enumerate(thoughts)
    ]
    assert label_inconsistencies(loaded_rows(tmp_path, *rows), HOME) == []


def _door_step(step: int, tool: str, door: str, history: str = "") -> dict:
    request = "Lock the patio door, and after that open the back door for the cleaner."
    thought = f"Then I {tool.removesuffix('_door')} the {door} door."
    solution = {"thought": thought, "action": {"tool": tool, "params": {"door": door}}}
    return {
        "id": f"d-{step}",
        "scenario_id": "d",
        "kind": "multi",
        "lang": "en",
        "step": step,
        "n_steps": 2,
        "prompt": request + history,
        "solution": json.dumps(solution | {"plan": [thought]}),
        "tool": tool,
    }


@pytest.mark.parametrize(("last", "flagged"), [("unlock_door", False), ("lock_door", True)])
def test_a_last_step_redoing_a_tool_the_request_names_once(tmp_path, last, flagged):
    """ "Lock the patio door, and after that open the back door": one lock asked for and done,
    so a second lock last (the rewrite kind's misses) is flagged, naming the unlock."""
    history = "\n\nPrevious steps:\nStep 1: lock_door → the patio door is locked"
    rows = [_door_step(1, "lock_door", "patio"), _door_step(2, last, "back", history)]
    frame = loaded_rows(tmp_path, *rows)
    found = label_inconsistencies(frame, HOME)
    assert found == label_inconsistencies(frame, HOME, screen=False)
    expected = [("d-2", STEP_NAMED_BY_REQUEST, "unlock_door")] if flagged else []
    assert [(f.id, f.check, f.alternative) for f in found] == expected


def test_phrases_the_catalogue_says_name_no_tool_are_skipped_by_both_readers():
    """A team's `not_naming` phrase ("dark outside" holds lights_off's "dark") is no request for
    that tool, nor a thought's announcement of it; without it, both read one."""
    request, thought = (
        "Play some jazz while it is dark outside",
        "It is dark outside; jazz it is.",
    )
    solution = {"thought": thought, "action": {"tool": "play_music", "params": {}}}
    assert request_names(request, HOME).keys() == {"lights_off", "play_music"}
    assert not thought_action_consistent(json.dumps(solution), HOME)

    told = Catalogue.model_validate(HOME.model_dump() | {"not_naming": {"en": ["dark outside"]}})
    assert request_names(request, told).keys() == {"play_music"}
    assert thought_action_consistent(json.dumps(solution), told)


def _recall(found: set[str], key: dict[str, str], kind: str) -> float:
    ids = {i for i, k in key.items() if k == kind}
    assert len(ids) == ROWS_PER_KIND
    return len(ids & found) / len(ids)


def test_planted_mistakes_are_found_on_the_shipped_domain():
    """Every kind at >= 80% (wrong params too), nothing else flagged."""
    rows, key = plant_mistakes(_shipped_training_rows(), seed=0)
    found = {f.id for f in planting.context_findings(rows, default_catalogue())}
    assert found <= set(key)
    assert all(_recall(found, key, kind) >= 0.8 for kind in KINDS)


@pytest.mark.parametrize("seed", [0, 2])
def test_planted_mistakes_are_found_on_the_second_domain(seed):
    rows = smart_home.rows(seed)
    kinds = smart_home.kinds(HOME)
    planted, key = planting.plant_mistakes(rows, kinds, ROWS_PER_KIND, seed)
    found = {f.id for f in planting.context_findings(planted, HOME)}
    assert found <= set(key)
    assert _recall(found, key, planting.WRONG_PARAMS) >= 0.8
    assert all(_recall(found, key, kind) >= 0.8 for kind in kinds)


def test_wrong_params_are_planted_from_the_params_schemas_alone():
    """Swapped from/to, another enum member, a number ×10: the gate still accepts each."""
    rng = random.Random(0)
    rows = [r for r in smart_home.rows(0) if r["tool"] in ("move_music", "lights_on")]
    plant = planting.wrong_params(HOME)
    for row in rows[:40]:
        (wrong,) = plant([row], rng)
        params = json.loads(wrong["solution"])["action"]["params"]
        assert params != json.loads(row["solution"])["action"]["params"]
        assert HOME.params_valid(row["tool"], params)


def test_the_screens_keep_every_finding_on_the_second_domain(tmp_path):
    """Screened findings equal every rule on every row (new and changed rules included) on
    planted smart-home rows."""
    rows = smart_home.rows(0)
    planted, _ = planting.plant_mistakes(rows, smart_home.kinds(HOME), ROWS_PER_KIND, 0)
    frame = loaded_rows(tmp_path, *[{k: v for k, v in r.items() if v is not None} for r in planted])
    screened = label_inconsistencies(frame, HOME)
    assert screened == label_inconsistencies(frame, HOME, screen=False)
    assert PARAMS_MATCH_REQUEST in {f.check for f in screened}
    # as the data gate hands them over: with the solutions' parts its contract parsed
    parsed = parse_solution(frame, HOME).select(*frame.columns, *PARTS_READ)
    assert label_inconsistencies(parsed, HOME) == screened


def test_wrong_params_reach_the_review_queue_as_a_label_inconsistency(tmp_path):
    """ "Buy 200 AMZN" labelled side sell: the miner lists it with the rule's evidence."""
    solution = {
        "thought": "The user wants to buy 200 AMZN, so I place an order.",
        "action": {
            "tool": "place_order",
            "params": {"symbol": "AMZN", "side": "sell", "quantity": 200},
        },
        "plan": ["buy 200 AMZN"],
    }
    row = {
        "id": "o-1",
        "scenario_id": "o-1",
        "kind": "single",
        "lang": "en",
        "step": 1,
        "n_steps": 1,
        "prompt": "Buy 200 AMZN for me.",
        "solution": json.dumps(solution),
        "tool": "place_order",
    }
    labels = loaded_rows(tmp_path, row)
    predictions = predictions_frame([prediction_row("o-1", "place_order", prompt=row["prompt"])])
    report = mine_errors(predictions, labels=labels)
    (finding,) = report.findings
    assert finding.category == Category.LABEL_INCONSISTENCY
    assert finding.evidence.startswith(
        f'{PARAMS_MATCH_REQUEST}: side sell, where the request states buy ("Buy")'
    )


@pytest.mark.parametrize(("request_text", "flagged"), [("mode 2", True), ("mode 3", False)])
def test_a_member_keyword_with_a_digit_is_read_with_the_digits_written(
    tmp_path, request_text, flagged
):
    """A team names a thermostat mode by its number ("mode 2" is heat): the params screen reads
    such requests as written, not with their digits zeroed ("mode 0" names no mode), so
    "mode 2" labelled cool is flagged; "mode 3" is not."""
    values = smart_home.catalogue_values()
    (thermostat,) = [tool for tool in values["tools"] if tool["name"] == "set_thermostat"]
    thermostat["params"]["properties"]["mode"]["x-keywords"]["heat"].append("mode 2")
    home = Catalogue.model_validate(values)
    params = {"room": "hallway", "temperature": 21, "mode": "cool"}
    thought = "I set the hallway to 21 degrees."
    solution = {"thought": thought, "action": {"tool": "set_thermostat", "params": params}}
    row = {
        "id": "t-1",
        "scenario_id": "t",
        "kind": "single",
        "lang": "en",
        "step": 1,
        "n_steps": 1,
        "prompt": f"Set the hallway thermostat to 21 degrees, {request_text}.",
        "solution": json.dumps(solution | {"plan": [thought]}),
        "tool": "set_thermostat",
    }
    frame = loaded_rows(tmp_path, row)
    found = label_inconsistencies(frame, home)
    assert found == label_inconsistencies(frame, home, screen=False)
    assert [(f.id, f.check) for f in found] == ([("t-1", PARAMS_MATCH_REQUEST)] if flagged else [])


def _words(catalogue: Catalogue) -> list[str]:
    tools = catalogue.tools
    return [w for tool in tools for lang in ("en", "zh") for w in tool.keywords.texts(lang)]


@pytest.mark.parametrize("catalogue", [default_catalogue(), HOME], ids=["finance", "smart home"])
def test_a_tool_whose_keywords_a_text_does_not_hold_is_one_its_pattern_does_not_match(catalogue):
    """The substring test before each tool's search changes no hit: texts of the keywords'
    words in any case, cut, run together and among the letters IGNORECASE folds onto ASCII."""
    patterns = keyword_patterns(catalogue)
    searched = {name: keywords._replace(held=None) for name, keywords in patterns.items()}
    folded = str.maketrans({"s": "ſ", "k": "\u212a", "i": "ı", "I": "İ"})
    pieces = [
        piece
        for word in _words(catalogue)
        for piece in (word, word.upper(), word.title(), word.translate(folded), word[:3], word[1:])
    ]
    pieces += [" ", "  ", ", ", "\n", "ACC123", "100", "不", "x"]
    rng = random.Random(0)
    for _ in range(3_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert keyword_hits(text, patterns) == keyword_hits(text, searched), text


def test_params_polars_cannot_read_go_to_the_rule_where_the_solution_names_them(tmp_path):
    """A tool whose from/to params have no pattern, member or amount to screen (a robot moved
    between places named freely), in a solution that is JSON only to the rules' lenient reading
    (text after it): polars reads no value, so the row goes to the rule because its solution
    names the params, and the rule finds them reversed."""
    values = smart_home.catalogue_values()
    move = {"from_place": {"type": "string"}, "to_place": {"type": "string"}}
    values["tools"].append(
        {
            "name": "move_robot",
            "description": {"en": "Move the cleaning robot from one place to another."},
            "keywords": {"en": ["move the robot", "send the robot"]},
            "params": {"type": "object", "properties": move, "required": list(move)},
        }
    )
    catalogue = Catalogue.model_validate(values)
    params = {"from_place": "kitchen", "to_place": "hallway"}
    action = {"tool": "move_robot", "params": params}
    solution = {"thought": "Move it.", "action": action, "plan": ["move the robot"]}
    row = {
        "id": "m-1",
        "scenario_id": "m",
        "kind": "single",
        "lang": "en",
        "step": 1,
        "n_steps": 1,
        "prompt": "Move the robot from the hallway to the kitchen.",
        "solution": json.dumps(solution) + " and so on",
        "tool": "move_robot",
    }
    frame = loaded_rows(tmp_path, row)
    parsed = parse_solution(frame, catalogue).select(*frame.columns, *PARTS_READ)
    assert parsed.get_column("action_params").to_list() == [None]
    reference = label_inconsistencies(frame, catalogue, screen=False)
    assert [found.check for found in reference] == [PARAMS_MATCH_REQUEST]
    assert label_inconsistencies(parsed, catalogue) == reference
