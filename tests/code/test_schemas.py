"""Every row rule of the sample contract: a row that breaks it is reported by file:line and name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrpo.schemas.data_quality import DataReport
from toolgrpo.schemas.samples import (
    check_names,
    check_rule,
    condition_branch,
    is_condition_fails,
    is_conditional,
    normalise_prompt,
    normalised_prompt,
)
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import validate_samples
from toolgrpo.validation.gate import find_label_conflicts


def solution(tool: str = "check_balance", params: Any = None, **fields: Any) -> str:
    body = {
        "thought": "The user asks for the balance, so check it first.",
        "action": {"tool": tool, "params": {"account": "ACC001"} if params is None else params},
        "plan": ["check the balance"],
    }
    return json.dumps({**body, **fields}, ensure_ascii=False)


SINGLE = {
    "id": "s-1",
    "scenario_id": "s",
    "kind": "single",
    "lang": "en",
    "step": 1,
    "n_steps": 1,
    "prompt": "What is the balance of ACC001?",
    "solution": solution(),
    "tool": "check_balance",
}
MULTI_STEP_2 = {
    "id": "m-2",
    "scenario_id": "m",
    "kind": "multi",
    "lang": "zh",
    "step": 2,
    "n_steps": 2,
    "prompt": "查一下 ACC001 余额，够的话转 10万 到 ACC002\n\nPrevious steps:\n"
    "Step 1: check_balance → 余额 500,000",
    "solution": json.dumps(
        {
            "thought": "余额足够，所以转账。",
            "action": {
                "tool": "transfer_funds",
                "params": {"from_account": "ACC001", "to_account": "ACC002", "amount": 100000},
            },
            "plan": ["转账 10万"],
        },
        ensure_ascii=False,
    ),
    "tool": "transfer_funds",
}


def validate_rows(tmp_path: Path, rows: list[dict[str, Any]]) -> DataReport:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return validate_samples.fn(load_samples.fn([path]))


@dataclass(frozen=True)
class Violation:
    check: str
    row: dict[str, Any]  # replaces line 2 of a file whose line 1 is a valid row


# Each entry breaks one rule on line 2; the file's other rows stay valid.
VIOLATIONS = [
    Violation("id_unique", {**MULTI_STEP_2, "id": "s-1"}),
    Violation("kind_known", {**SINGLE, "id": "x", "kind": "pair"}),
    Violation("steps_match_kind", {**SINGLE, "id": "x", "n_steps": 2}),
    Violation("steps_match_kind", {**MULTI_STEP_2, "n_steps": 1, "step": 1, "prompt": "hi"}),
    Violation("steps_match_kind", {**MULTI_STEP_2, "step": 3, "n_steps": 2}),
    Violation("lang_known", {**SINGLE, "id": "x", "lang": "fr"}),
    Violation(
        "tool_in_catalogue", {**SINGLE, "id": "x", "tool": "fly", "solution": solution("fly")}
    ),
    Violation("solution_is_json_object", {**SINGLE, "id": "x", "solution": "{'thought': 'x'}"}),
    Violation("solution_is_json_object", {**SINGLE, "id": "x", "solution": '["a"]'}),
    Violation("solution_is_json_object", {**SINGLE, "id": "x", "solution": solution() + " ok"}),
    Violation("solution_has_thought", {**SINGLE, "id": "x", "solution": solution(thought="  ")}),
    Violation("solution_has_thought", {**SINGLE, "id": "x", "solution": solution(thought=5)}),
    Violation("solution_has_thought", {**SINGLE, "id": "x", "solution": solution(thought=None)}),
    Violation(
        "solution_has_action_tool",
        {**SINGLE, "id": "x", "solution": solution(action={"params": {"account": "ACC001"}})},
    ),
    Violation(
        "solution_has_params_object",
        {**SINGLE, "id": "x", "solution": solution(params='{"account": "ACC001"}')},
    ),
    Violation(
        "solution_plan_is_string_list", {**SINGLE, "id": "x", "solution": solution(plan="check")}
    ),
    Violation(
        "solution_plan_is_string_list", {**SINGLE, "id": "x", "solution": solution(plan=["a", 1])}
    ),
    Violation(
        "solution_plan_is_string_list", {**SINGLE, "id": "x", "solution": solution(plan='["a"]')}
    ),
    Violation("tool_matches_solution", {**SINGLE, "id": "x", "tool": "withdraw"}),
    Violation("params_match_schema", {**SINGLE, "id": "x", "solution": solution(params={})}),
    Violation(
        "params_match_schema",
        {**SINGLE, "id": "x", "solution": solution(params={"account": "ACC001", "pin": "1234"})},
    ),
    Violation(
        "params_match_schema",
        {**SINGLE, "id": "x", "solution": solution(params={"account": "savings"})},
    ),
    Violation(
        "params_match_schema",
        {
            **SINGLE,
            "id": "x",
            "tool": "withdraw",
            "solution": solution("withdraw", {"account": "ACC001", "amount": 0}),
        },
    ),
    Violation(
        "params_match_schema",
        {
            **SINGLE,
            "id": "x",
            "tool": "place_order",
            "solution": solution("place_order", {"symbol": "AAPL", "side": "hold", "quantity": 1}),
        },
    ),
    Violation("condition_known", {**MULTI_STEP_2, "condition": "maybe"}),
    Violation("condition_after_first_step", {**SINGLE, "id": "x", "condition": "holds"}),
    Violation("condition_matches_tool", {**MULTI_STEP_2, "condition": "fails"}),
    Violation(
        "condition_matches_tool",
        {
            **MULTI_STEP_2,
            "condition": "holds",
            "tool": "respond",
            "solution": solution("respond", {"message": "余额不足。"}),
        },
    ),
    Violation("prompt_not_empty", {**SINGLE, "id": "x", "prompt": " \n "}),
    Violation("prompt_within_length", {**SINGLE, "id": "x", "prompt": "a" * 4_001}),
    Violation(
        "solution_within_length", {**SINGLE, "id": "x", "solution": solution(thought="a" * 4_000)}
    ),
    Violation("id_within_length", {**SINGLE, "id": "x" * 201}),
    Violation("scenario_id_within_length", {**SINGLE, "id": "x", "scenario_id": "s" * 201}),
    Violation(
        "previous_steps_match_step", {**MULTI_STEP_2, "prompt": "查一下 ACC001 余额，够的话转账"}
    ),
    Violation(
        "previous_steps_match_step",
        {**SINGLE, "id": "x", "prompt": SINGLE["prompt"] + "\n\nPrevious steps:\n"},
    ),
    Violation(
        "previous_steps_match_step",
        {**MULTI_STEP_2, "step": 3, "n_steps": 3, "prompt": MULTI_STEP_2["prompt"]},
    ),
]


def test_every_check_has_a_violating_row():
    assert {v.check for v in VIOLATIONS} == set(check_names())


@pytest.mark.parametrize(
    "violation", VIOLATIONS, ids=[f"{v.check}-{i}" for i, v in enumerate(VIOLATIONS)]
)
def test_violating_row_is_reported_with_its_line_and_check(tmp_path, violation):
    report = validate_rows(tmp_path, [SINGLE, violation.row])
    lines = [str(p) for p in report.failures if p.check == violation.check]
    assert any(line.startswith(f"{tmp_path / 'rows.jsonl'}:2: ") for line in lines), report
    assert all(line.endswith(f"[check: {violation.check}]") for line in lines)
    assert not report.ok
    assert report.rows == 2
    assert report.invalid_rows + report.valid_rows == 2


def test_valid_single_and_multi_step_rows_pass(tmp_path):
    report = validate_rows(tmp_path, [SINGLE, {**MULTI_STEP_2, "condition": "holds"}])
    assert report.failures == []
    assert report.ok
    assert (report.valid_rows, report.invalid_rows) == (2, 0)


def test_numeric_looking_strings_are_strings(tmp_path):
    """JSONPath unquotes strings: a thought "5" is a string, only the number 5 is not."""
    row = {**SINGLE, "solution": solution(thought="5", plan=["1", "[2]"])}
    assert validate_rows(tmp_path, [row]).failures == []


def test_multi_step_prompt_lists_previous_steps_reports_the_count(tmp_path):
    step_3 = {**MULTI_STEP_2, "id": "m-3", "step": 3, "n_steps": 3}
    report = validate_rows(tmp_path, [SINGLE, step_3])
    (problem,) = [p for p in report.failures if p.check == "previous_steps_match_step"]
    assert str(problem) == (
        f"{tmp_path / 'rows.jsonl'}:2: step 3 lists 1 previous step(s) (expected 2) "
        "[check: previous_steps_match_step]"
    )


def test_history_section_on_the_wrong_step_is_named(tmp_path):
    with_section = {**SINGLE, "prompt": SINGLE["prompt"] + "\n\nPrevious steps:\n"}
    without_section = {**MULTI_STEP_2, "prompt": "Step 1: check_balance → 500"}
    report = validate_rows(tmp_path, [with_section, without_section])
    assert [p.message for p in report.failures] == [
        "step 1 has a `Previous steps:` section (expected none)",
        "step 2 has no `Previous steps:` section",
    ]


def test_duplicate_ids_are_reported_on_every_row_that_shares_them(tmp_path):
    report = validate_rows(tmp_path, [SINGLE, MULTI_STEP_2, {**MULTI_STEP_2, "id": "s-1"}])
    assert {p.line for p in report.failures if p.check == "id_unique"} == {1, 3}
    assert (report.valid_rows, report.invalid_rows) == (1, 2)


def test_params_failure_says_what_the_schema_rejected(tmp_path):
    row = {**SINGLE, "solution": solution(params={"account": "ACC001", "pin": "1"})}
    (problem,) = validate_rows(tmp_path, [row]).failures
    assert problem.check == "params_match_schema"
    assert "must not contain" in problem.message and "pin" in problem.message


def test_same_prompt_with_different_labels_is_a_label_conflict_not_a_failure(tmp_path):
    relabelled = {
        **SINGLE,
        "id": "s-2",
        "prompt": "  what is the BALANCE of\tACC001? ",
        "tool": "withdraw",
        "solution": solution("withdraw", {"account": "ACC001", "amount": 50}),
    }
    report = validate_rows(tmp_path, [SINGLE, relabelled, MULTI_STEP_2])
    assert report.ok
    (conflict,) = report.conflicts
    assert conflict.prompt == "what is the balance of acc001?"
    assert conflict.tools == ["check_balance", "withdraw"]
    assert [row.location.rsplit(":", 1)[1] for row in conflict.rows] == ["1", "2"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet=st.sampled_from(list("aA \t\u3000")), max_size=4), st.integers(0, 2)
        ),
        max_size=12,
    )
)
def test_label_conflicts_are_the_prompts_python_normalises_alike_with_two_tools(rows):
    """The conflicts found by hashing every row's normalised prompt first are the groups of
    rows whose prompts `normalise_prompt` makes equal and whose tools differ."""
    tools = ["check_balance", "withdraw", "respond"]
    frame = pl.DataFrame(
        {
            "file": "f.jsonl",
            "line": range(1, len(rows) + 1),
            "id": [f"r{i}" for i in range(len(rows))],
            "prompt": [prompt for prompt, _ in rows],
            "tool": [tools[tool] for _, tool in rows],
        },
        schema={
            "file": pl.String,
            "line": pl.Int64,
            "id": pl.String,
            "prompt": pl.String,
            "tool": pl.String,
        },
    )
    groups: dict[str, list[tuple[str, str]]] = {}
    for i, (prompt, tool) in enumerate(rows):
        groups.setdefault(normalise_prompt(prompt), []).append((f"r{i}", tools[tool]))
    expected = {key: members for key, members in groups.items() if len({t for _, t in members}) > 1}
    found = {
        conflict.prompt: [(row.id, row.tool) for row in conflict.rows]
        for conflict in find_label_conflicts(frame)
    }
    assert found == expected


def test_every_check_states_its_rule_in_words():
    for check in check_names():
        assert len(check_rule(check).split()) >= 4, check


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aB 中\t\n\u3000x.")), max_size=30))
def test_one_prompt_normalises_as_the_column_rule_does(prompt):
    column = pl.DataFrame({"prompt": [prompt]}).select(normalised_prompt()).item()
    assert normalise_prompt(prompt) == column


@pytest.mark.parametrize("kind", ["single", "multi"])
@pytest.mark.parametrize("tool", ["respond", "transfer_funds"])
@pytest.mark.parametrize("condition", [None, "holds", "fails"])
def test_one_row_condition_rule_is_the_column_rule(kind, tool, condition):
    frame = pl.DataFrame(
        {"kind": [kind], "tool": [tool], "condition": [condition]},
        schema={"kind": pl.String, "tool": pl.String, "condition": pl.String},
    )
    branch = frame.select(
        condition_branch(pl.col("condition"), pl.col("kind"), pl.col("tool"))
    ).item()
    assert is_condition_fails(kind, tool, condition) == (branch == "condition_fails")
    assert is_conditional(kind, tool, condition) == (branch is not None)


# --- params checked in polars (`schemas.params_check`) ------------------------------------------

_ODD_VALUES: list[Any] = [
    *["ACC001", "ACC1234", "acc001", "ACC٠٠١", "ACC00１", "", "x", "é", 'a"b', "a\\b", "tab\there"],
    *["buy", "Buy", "sell ", "AMZN", "AMZNXX", "living_room", "hallway", "front"],
    *[0, -0.0, 0.0, 1, 1.5, -1, 24, 100, 101, 365, 366, 1e3, 1e-7, 10**15 - 1, 10**16, 2.5e300],
    *[True, False, None, [1], {"a": 1}],
]


def _params_cases(catalogue) -> list[tuple[str, str]]:
    """Per tool: each property set to each odd value, left out, doubled and joined by another
    key, as compact JSON (what `parse_solution` reads)."""
    cases = []
    for tool in catalogue.tools:
        names = list(tool.params.get("properties", {}))
        base = dict.fromkeys(names, "ACC001")
        for name in names:
            cases += [(tool.name, {**base, name: value}) for value in _ODD_VALUES]
            cases.append((tool.name, {k: v for k, v in base.items() if k != name}))
        cases.append((tool.name, {**base, "extra": 1}))
    texts = [(t, json.dumps(p, ensure_ascii=False, separators=(",", ":"))) for t, p in cases]
    texts += [
        (t, p.replace("}", ',"' + n + '":"ACC002"}')) for t, p in texts[:40] for n in ["account"]
    ]
    return texts


def _domain(domain: str):
    from bench.domains import smart_home
    from toolgrpo.data import DATA_DIR
    from toolgrpo.schemas.catalogue import default_catalogue

    if domain == "finance":
        rows = [json.loads(line) for p in DATA_DIR.glob("*/*.jsonl") for line in p.open()]
        return default_catalogue(), rows
    return smart_home.catalogue(), smart_home.rows(0)


def _proven(catalogue, cases: list[tuple[str, str]]) -> list[bool]:
    from toolgrpo.schemas.params_check import plainly_valid

    frame = pl.DataFrame(cases, schema=["action_tool", "action_params"], orient="row")
    return plainly_valid(frame, catalogue)


@pytest.mark.parametrize("domain", ["finance", "smart home"])
def test_params_polars_proves_valid_fastjsonschema_finds_valid(domain):
    """Every params object polars proves valid, fastjsonschema finds valid: odd values of every
    type in every param, params left out, doubled, or joined by another key."""
    catalogue, _ = _domain(domain)
    cases = _params_cases(catalogue)
    proven = _proven(catalogue, cases)
    valid = [catalogue.params_error(t, json.loads(p)) is None for t, p in cases]
    assert [case for case, p, v in zip(cases, proven, valid, strict=True) if p and not v] == []
    assert 0 < sum(proven) < sum(valid)  # it proves some, and leaves the odd ones to Python


@pytest.mark.parametrize("domain", ["finance", "smart home"])
def test_params_of_real_rows_are_proven_in_polars(domain):
    """A domain's rows have plain params: polars proves every one (none left to Python)."""
    catalogue, rows = _domain(domain)
    cases = []
    for row in rows:
        action = json.loads(row["solution"])["action"]
        params = json.dumps(action["params"], ensure_ascii=False, separators=(",", ":"))
        cases.append((action["tool"], params))
    assert all(_proven(catalogue, cases))


# --- the solutions' parts (`schemas.samples.solution_parts`) ------------------------------------


def _odd_solutions() -> list[str]:
    """Solutions whose params and plan hold each odd value, written with spaces, escapes and
    repeated keys, and texts that are not one JSON object."""
    texts = [solution(params={"account": value, "n": [value]}) for value in _ODD_VALUES]
    texts += [solution(plan=[str(value), "x"]) for value in _ODD_VALUES]
    texts += [
        json.dumps({"thought": "t", "action": {"tool": "t", "params": {"a": 1e-7, "b": 10**20}}}),
        '{"thought": "\\u00e9\\n\\ud83d\\ude00", "action": {"tool": "x", "params": {}}}',
        '{"thought": "a", "thought": "b", "action": {"tool": "x", "params": {"k": 1, "k": 2}}}',
        '{"thought": "t", "action": {"tool": "x", "params": {"k": NaN}}}',
        '{"thought": "\\ud800", "action": {"tool": "x", "params": {}}}',
        '{"thought": "t", "action": {"tool": "x", "params": {}}, "plan": []}',
        '{"thought": "t", "action": {"tool": "x", "params": {}}, "plan": ["\\u00e9 \\"q\\"\\n"]}',
        '{"thought": "t", "action": {"tool": "x", "params": {}}, "plan": [1, "x"]}',
        '{"thought": "t"} trailing',
        '["not", "an", "object"]',
    ]
    return texts


def test_solution_parts_are_the_json_values_written_as_polars_writes_them():
    """The parts are each solution's JSON values of their type (what Python's json reads, where
    polars reads JSON too), and params and plan are the compact text polars' own JSON functions
    write: the screens read them with `json_path_match` and compare them with polars' output."""
    from toolgrpo.schemas.samples import solution_parts

    texts = _odd_solutions()
    parts = solution_parts(pl.DataFrame({"solution": texts})).to_dicts()
    polars = pl.DataFrame({"solution": texts}).select(
        root=pl.col("solution").str.json_path_match("$"),
        params=pl.col("solution").str.json_path_match("$.action.params"),
        plan=pl.col("solution").str.json_path_match("$.plan"),
        first_planned=pl.col("solution").str.json_path_match("$.plan[0]"),
    )
    for text, part, read in zip(texts, parts, polars.iter_rows(named=True), strict=True):
        assert part["solution_is_object"] == (read["root"] or "").startswith("{"), text
        if not part["solution_is_object"]:
            parts_read = ["thought", "action_tool", "action_params", "plan", "first_planned"]
            nothing = dict.fromkeys(parts_read)
            assert part == {"solution": text, "solution_is_object": False, **nothing}
            continue
        value = json.loads(text)
        thought, action = value.get("thought"), value.get("action")
        assert part["thought"] == (thought if isinstance(thought, str) else None), text
        assert part["action_tool"] == action.get("tool"), text
        assert part["action_params"] == read["params"], text
        strings = all(isinstance(step, str) for step in value.get("plan", [None]))
        assert part["plan"] == (read["plan"] if strings else None), text
        assert part["first_planned"] == (read["first_planned"] if strings else None), text


# --- plainly written solutions read by polars (`schemas.plain_solutions`) -----------------------

# texts with nothing to escape, and texts of characters that end a string, escape, separate or
# nest, or only look like that; numbers as written, with those orjson writes otherwise
_PLAIN_TEXT = st.text(alphabet=st.sampled_from(list("aZ中 :,{}[]\u2028")), max_size=5)
_TRICKY_TEXT = st.one_of(
    _PLAIN_TEXT,
    st.sampled_from([": a", "a, ", ", ", ": ", ",", '"', "\\", "\x01", "\n"]),
)
_NUMBER_TEXT = st.one_of(
    st.from_regex(r"-?(0|[1-9][0-9]{0,16})(\.[0-9]{1,9})?([eE][+-]?[0-9])?", fullmatch=True),
    st.sampled_from(["0", "-0", "1.0", "1.50", "0.00001", "0.000001", "-0.0", "1e2", "7"]),
)


@st.composite
def _solution_texts(draw: st.DrawFn) -> str:
    """A solution as a JSON library or a person may write it, mostly plain: `json.dumps`'s
    separators or others, strings escaped or not (or written raw, as no JSON library would),
    numbers as written, keys repeated or in another order, nested values."""
    item, key = draw(st.sampled_from([(", ", ": "), (",", ":"), (", ", ":"), (" , ", " : ")]))

    def string(text: str) -> str:
        if draw(st.integers(0, 9)) == 0:
            return f'"{text}"'
        return json.dumps(text, ensure_ascii=draw(st.integers(0, 9)) == 0)

    value = st.one_of(
        _TRICKY_TEXT.map(string),
        _NUMBER_TEXT,
        st.sampled_from(["true", "false", "null", "[1]", '{"a": 1}']),
    )
    names = st.sampled_from(["a", "b_1", "a", "é", ""])
    pairs = draw(st.lists(st.tuples(names, value), max_size=4))
    params = "{" + item.join(f"{string(k)}{key}{v}" for k, v in pairs) + "}"
    steps = item.join(string(step) for step in draw(st.lists(_TRICKY_TEXT, max_size=3)))
    action = [f'"tool"{key}{string(draw(_PLAIN_TEXT))}', f'"params"{key}{params}']
    fields = {
        "thought": string(draw(_TRICKY_TEXT)),
        "action": "{" + item.join(action) + "}",
        "plan": f"[{steps}]",
    }
    order = draw(st.permutations(list(fields))) if draw(st.integers(0, 9)) == 0 else list(fields)
    return "{" + item.join(f'"{name}"{key}{fields[name]}' for name in order) + "}"


@settings(max_examples=500, deadline=None)
@given(st.lists(_solution_texts(), min_size=1, max_size=20))
def test_plain_solutions_read_by_polars_have_the_parts_orjson_reads(texts: list[str]):
    """A solution polars reads as plain has exactly the parts orjson decodes from it; every other
    one is left to orjson, so none is lost."""
    from toolgrpo.schemas.plain_solutions import read_plainly
    from toolgrpo.schemas.samples import _solution_parts

    solutions = pl.Series("solution", texts).unique()
    plain, others = read_plainly(solutions)
    assert sorted([*plain.get_column("solution"), *others]) == sorted(solutions)
    decoded = _solution_parts(plain.get_column("solution"))
    assert plain.to_dicts() == decoded.to_dicts()


def test_solutions_written_by_json_dumps_are_read_by_polars():
    """The shipped solutions (`json.dumps`, as most JSON libraries write) are all plain: the gate
    decodes none of them in Python."""
    from toolgrpo.data import SHIPPED_SAMPLES
    from toolgrpo.schemas.plain_solutions import read_plainly

    solutions = pl.concat([pl.read_ndjson(f).get_column("solution") for f in SHIPPED_SAMPLES])
    assert read_plainly(solutions.unique())[1].is_empty()
