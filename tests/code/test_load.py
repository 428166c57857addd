"""Loading sample files: bad input is one located problem line, never a traceback or a lost row."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from tests.code.test_schemas import MULTI_STEP_2, SINGLE, solution
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.validate import validate_samples

GOOD = json.dumps(SINGLE, ensure_ascii=False).encode()


def write_lines(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def row_bytes(**changes: object) -> bytes:
    return json.dumps({**SINGLE, "id": "second", **changes}, ensure_ascii=False).encode()


BAD_LINES = {
    "broken JSON": (b'{"id": "x", "kind": ', "valid_json", "not JSON"),
    "JSON array instead of an object": (b'["id", "x"]', "json_object", "an array, not"),
    "JSON string instead of an object": (b'"a row"', "json_object", "a string, not"),
    "missing fields": (
        json.dumps(
            {k: v for k, v in json.loads(row_bytes()).items() if k not in ("step", "tool")}
        ).encode(),
        "required_fields",
        "missing field(s): step, tool",
    ),
    "wrong type": (row_bytes(step="two"), "field_types", "field step is a string 'two'"),
    "boolean for an integer": (row_bytes(n_steps=True), "field_types", "field n_steps"),
    "invalid UTF-8": (b'{"id": "x\xff\xfe"}', "valid_utf8", "not valid UTF-8"),
}


@pytest.mark.parametrize("kind", BAD_LINES)
def test_bad_line_is_one_located_problem_and_counted_invalid(tmp_path, kind):
    line, check, message = BAD_LINES[kind]
    path = write_lines(tmp_path / "rows.jsonl", GOOD, line, row_bytes(id="third"))
    report = validate_samples.fn(load_samples.fn([path]))
    (problem,) = report.failures
    assert str(problem).startswith(f"{path}:2: ")
    assert str(problem).endswith(f"[check: {check}]")
    assert message in problem.message
    assert (report.rows, report.valid_rows, report.invalid_rows) == (3, 2, 1)
    if check in ("field_types", "required_fields"):
        assert problem.id == "second"


def test_unknown_tool_is_reported_by_the_schema(tmp_path):
    path = write_lines(
        tmp_path / "rows.jsonl", GOOD, row_bytes(tool="fly", solution=solution("fly"))
    )
    report = validate_samples.fn(load_samples.fn([path]))
    assert [str(p) for p in report.failures] == [
        f'{path}:2: tool "fly" is not in the tool catalogue [check: tool_in_catalogue]'
    ]


def test_empty_file_is_a_problem_not_a_pass(tmp_path):
    path = write_lines(tmp_path / "empty.jsonl", b"", b"  ")
    report = validate_samples.fn(load_samples.fn([path]))
    assert [str(p) for p in report.failures] == [f"{path}: no rows [check: file_not_empty]"]
    assert not report.ok and report.rows == 0


def test_missing_file_is_a_problem(tmp_path):
    report = validate_samples.fn(load_samples.fn([tmp_path / "nope.jsonl"]))
    assert [p.check for p in report.failures] == ["file_exists"]


def test_file_with_only_bad_lines_still_counts_every_row(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", b"[]", b"{", b"null")
    report = validate_samples.fn(load_samples.fn([path]))
    assert (report.rows, report.valid_rows, report.invalid_rows) == (3, 0, 3)
    assert [p.line for p in report.failures] == [1, 2, 3]


def test_blank_lines_are_not_rows_but_keep_line_numbers(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", GOOD, b"", row_bytes(lang="fr"))
    report = validate_samples.fn(load_samples.fn([path]))
    assert report.rows == 2
    assert [(p.line, p.check) for p in report.failures] == [(3, "lang_known")]


def test_rows_of_several_files_keep_their_own_file_and_line(tmp_path):
    first = write_lines(tmp_path / "a.jsonl", GOOD)
    second = write_lines(tmp_path / "b.jsonl", row_bytes(), row_bytes(id="s-1"))
    report = validate_samples.fn(load_samples.fn([first, second]))
    assert sorted((p.file, p.line) for p in report.failures) == [
        (str(first), 1),
        (str(second), 2),
    ]
    assert {p.check for p in report.failures} == {"id_unique"}


def test_parquet_rows_are_located_by_row_number(tmp_path):
    path = tmp_path / "rows.parquet"
    pl.DataFrame([SINGLE, {**MULTI_STEP_2, "lang": "fr"}]).write_parquet(path)
    report = validate_samples.fn(load_samples.fn([path]))
    assert [str(p) for p in report.failures] == [
        f'{path}:2: lang is "fr" (expected "en" or "zh") [check: lang_known]'
    ]


def test_parquet_with_a_wrong_column_type_reports_each_row(tmp_path):
    path = tmp_path / "rows.parquet"
    pl.DataFrame([{**SINGLE, "step": "1"}]).write_parquet(path)
    report = validate_samples.fn(load_samples.fn([path]))
    assert [(p.line, p.check) for p in report.failures] == [(1, "field_types")]


def test_corrupt_parquet_is_a_problem(tmp_path):
    path = write_lines(tmp_path / "rows.parquet", b"not parquet")
    report = validate_samples.fn(load_samples.fn([path]))
    assert [p.check for p in report.failures] == ["file_readable"]


def test_validation_never_modifies_the_input_files(tmp_path):
    jsonl = write_lines(tmp_path / "rows.jsonl", GOOD, b"{broken", row_bytes(id="s-1", tool="x"))
    overrides = write_lines(
        tmp_path / "overrides.jsonl",
        json.dumps({"id": "s-1", "tool": "withdraw", "reason": "r", "reviewer": "me"}).encode(),
    )
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (jsonl, overrides)}
    validate_samples.fn(load_samples.fn([jsonl], overrides=overrides))
    assert before == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (jsonl, overrides)}


def override(**fields: object) -> bytes:
    return json.dumps({"reason": "check-first policy", "reviewer": "ana", **fields}).encode()


def test_override_whose_params_do_not_fit_the_new_tool_is_not_applied(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    overrides = write_lines(
        tmp_path / "o.jsonl",
        override(id="s-1", tool="get_transactions", solution=None),  # needs `days`
        override(id="s-9", tool="respond"),
    )
    loaded = load_samples.fn([data], overrides=overrides)
    assert [(p.line, p.check) for p in loaded.problems] == [(1, "override_applicable")]
    assert "give a full `solution`" in loaded.problems[0].message
    assert loaded.warnings == [f"{overrides}:2: override for id 's-9' matches no row"]
    assert loaded.frame["tool"].to_list() == ["check_balance"]
    assert loaded.overrides == []


def test_override_with_a_full_solution_replaces_the_label(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    new_solution = solution("withdraw", {"account": "ACC001", "amount": 50})
    overrides = write_lines(
        tmp_path / "o.jsonl", override(id="s-1", tool="withdraw", solution=new_solution)
    )
    loaded = load_samples.fn([data], overrides=overrides)
    assert loaded.problems == []
    row = loaded.frame.row(0, named=True)
    assert (row["tool"], row["solution"]) == ("withdraw", new_solution)
    (applied,) = loaded.overrides
    assert (applied.row, applied.override) == (f"{data}:1", f"{overrides}:1")
    assert (applied.old_tool, applied.new_tool, applied.reviewer) == (
        "check_balance",
        "withdraw",
        "ana",
    )


def test_override_without_solution_relabels_when_params_still_fit(tmp_path):
    data = write_lines(
        tmp_path / "rows.jsonl",
        row_bytes(
            id="w",
            tool="withdraw",
            solution=solution("withdraw", {"account": "ACC002", "amount": 50}),
        ),
    )
    overrides = write_lines(tmp_path / "o.jsonl", override(id="w", tool="deposit"))
    loaded = load_samples.fn([data], overrides=overrides)
    report = validate_samples.fn(loaded)
    assert report.ok
    parsed = json.loads(loaded.frame["solution"][0])
    assert parsed["action"] == {"tool": "deposit", "params": {"account": "ACC002", "amount": 50}}
    assert parsed["thought"] == json.loads(SINGLE["solution"])["thought"]
    assert [o.id for o in report.overrides] == ["w"]


def test_bad_override_lines_fail_the_gate_with_their_location(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    overrides = write_lines(
        tmp_path / "o.jsonl",
        b'{"id": "s-1"}',
        override(id="s-1", tool="respond", solution='{"thought": "x"}'),
        override(id="s-1", tool="withdraw"),
    )
    report = validate_samples.fn(load_samples.fn([data], overrides=overrides))
    checks = [(p.file, p.line, p.check) for p in report.failures if p.file == str(overrides)]
    assert checks == [(str(overrides), 1, "override_valid"), (str(overrides), 3, "override_unique")]
    assert not report.ok
    assert report.rows == 1  # override lines are not data rows


def test_run_dirs_are_new_time_stamped_and_never_reused(tmp_path, monkeypatch):
    first = new_run_dir(tmp_path, "data-quality")
    assert re.fullmatch(r"\d{8}-\d{6}-data-quality-[0-9a-f]{6}", first.name)
    assert list(first.iterdir()) == []

    suffixes = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr("toolgrpo.tasks.runs.secrets.token_hex", lambda nbytes: next(suffixes))
    monkeypatch.setattr("toolgrpo.tasks.runs.datetime", FrozenClock)
    assert new_run_dir(tmp_path, "x").name == "20260101-120000-x-aaaaaa"
    assert new_run_dir(tmp_path, "x").name == "20260101-120000-x-bbbbbb"


class FrozenClock:
    @staticmethod
    def now() -> datetime:
        return datetime(2026, 1, 1, 12, 0, 0)
