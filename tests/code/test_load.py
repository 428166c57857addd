"""Loading sample files: bad input is one located problem line, never a traceback or a lost row."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from prefect import flow

from tests.code.test_schemas import MULTI_STEP_2, SINGLE, solution
from toolgrpo.data import DATA_DIR
from toolgrpo.generator.numeracy import EXERCISES_FILE
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.validate import validate_samples, write_training_rows
from toolgrpo.validation import gate, loader
from toolgrpo.validation.read_ahead import Roles, read_ahead

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


# Lines polars reads natively: plain rows, however written.
PLAIN_LINES = [
    GOOD,
    json.dumps({**SINGLE, "id": "spaced"}, separators=("\t, ", " :\t ")).encode(),
    row_bytes(id="with-condition", condition="holds"),
    row_bytes(id="null-condition", condition=None),
    row_bytes(id="escapes", prompt='caf\u00e9 "quoted" \\ / \n tab\t \u0000'),
    json.dumps({**SINGLE, "id": "ascii", "prompt": "转账 é"}).encode(),  # \u escapes
    row_bytes(id="extra", note="ignored", count=-3, flag=None),
    row_bytes(id="crlf") + b"\r",
]
# Lines that only pydantic reads as it always did: not JSON, not rows, or JSON polars would read
# differently (coercing a type, keeping the first of two equal keys, decoding a surrogate).
NOT_PLAIN_LINES = [
    b"\xef\xbb\xbf" + GOOD,  # a byte-order mark: tolerated on line 1 only
    row_bytes(id="extra-nested", more={"id": 5}, tags=[1, 2]),
    row_bytes(id="extra-float", score=0.5),
    b'{"id": "broken", "kind": ',
    b'["id", "x"]',
    b'"a row"',
    b"null",
    b"{}",
    row_bytes(id="wrong-type", step="two"),
    row_bytes(id="bool-int", n_steps=True),
    row_bytes(id="float-int", step=1.0),
    row_bytes(id="big-int", step=2**63 - 1),
    row_bytes(id=5),
    row_bytes(id="number-tool", tool=7),
    row_bytes(id="object-prompt", prompt={"text": "hi"}),
    row_bytes(id="null-prompt", prompt=None),
    row_bytes(id="int-condition", condition=3),
    row_bytes(id="bool-condition", condition=True),
    json.dumps({k: v for k, v in SINGLE.items() if k != "tool"}).encode(),
    json.dumps({k: v for k, v in SINGLE.items() if k != "id"}).encode()[:-1] + b', "kind": "x"}',
    GOOD[:-1] + b', "tool": "withdraw"}',  # a duplicate key: pydantic keeps the last
    GOOD[:-1] + b', "condition": "holds", "condition": null}',
    GOOD.replace(b'"id"', b'"\\u0069d"', 1),  # keys with escapes
    GOOD[:-1] + b', "x\\"id": "x"}',
    row_bytes(id="lone-surrogate").replace(b"lone-surrogate", b"\\ud800"),
    row_bytes(id="emoji").replace(b"emoji", b"\\ud83d\\ude00"),
    b'{"id": "x\xff\xfe"}',
    row_bytes(id="bad-utf8", prompt="ok").replace(b"ok", b"o\xffk"),
    row_bytes(id="replacement-char", prompt="\ufffd"),
    row_bytes(id="trailing") + b" x",
    row_bytes(id="two-objects") + row_bytes(id="second-object"),
    row_bytes(id="raw-tab", prompt="a\tb").replace(b"\\t", b"\t"),
]
BLANK_LINES = [b"", b"   ", b"\x0b\x0c\r"]


def test_rows_read_ahead_are_the_next_loads_when_the_files_are_unchanged(tmp_path):
    """`toolgrpo validate` reads the files as soon as its arguments are checked: the flow's load
    takes those rows (once), and reads again when anything differs."""
    path = write_lines(tmp_path / "rows.jsonl", GOOD)
    read_ahead([path])
    ahead = load_samples.fn([path])
    assert ahead.frame["id"].to_list() == [SINGLE["id"]]
    assert load_samples.fn([path]) is not ahead  # taken once
    read_ahead([path])
    assert load_samples.fn([path, path]).rows_read == 2  # other arguments: read again


def test_a_file_rewritten_after_the_read_ahead_is_read_again(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", GOOD)
    read_ahead([path])
    write_lines(path, GOOD, row_bytes())
    assert load_samples.fn([path]).frame["id"].to_list() == [SINGLE["id"], "second"]


def test_the_load_waits_for_rows_still_being_read_ahead_and_reads_again_after_a_failure(
    tmp_path, monkeypatch
):
    """The read ahead runs on a thread of its own: the flow's load takes its rows once it is
    done, and reads the files itself when it failed."""
    path = write_lines(tmp_path / "rows.jsonl", GOOD)
    real, reads, release = loader.load_samples, [], threading.Event()

    def slow(*args):
        reads.append(threading.current_thread().name)
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(loader, "load_samples", slow)
    read_ahead([path])
    threading.Timer(0.3, release.set).start()
    assert load_samples.fn([path]).frame["id"].to_list() == [SINGLE["id"]]
    assert reads == ["read-ahead"]  # taken, not read again

    def failing(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(loader, "load_samples", failing)
    read_ahead([path])
    monkeypatch.setattr(loader, "load_samples", real)
    assert load_samples.fn([path]).frame["id"].to_list() == [SINGLE["id"]]


@flow
def load_and_check(paths: list[Path], train: list[str], evaluation: list[str]) -> object:
    return validate_samples(load_samples(paths), train, evaluation)


def test_rows_checked_ahead_are_the_next_checks_of_those_rows_with_those_roles(
    prefect_harness, tmp_path, monkeypatch
):
    """`toolgrpo validate` also checks the rows it reads ahead: the flow's check takes that report
    (once) when it checks the rows its load took, with the same roles and catalogue; any other
    check, or one after the check ahead failed, runs in the task. Files rewritten since are read
    again once the check ahead is done (never two frames of them checked and read at once)."""
    path = write_lines(tmp_path / "rows.jsonl", GOOD, row_bytes())
    real_check, real_load, done = gate.validate_samples, loader.load_samples, []

    def ahead() -> bool:
        return threading.current_thread().name == "read-ahead"

    def checked(*args):
        if ahead() and fail_ahead:
            raise MemoryError
        time.sleep(0.3 if ahead() else 0)  # a check ahead slower than a read
        report = real_check(*args)
        done.append("checked ahead" if ahead() else "checked")
        return report

    def loaded(*args):
        rows = real_load(*args)
        done.append("read ahead" if ahead() else "read")
        return rows

    monkeypatch.setattr(gate, "validate_samples", checked)
    monkeypatch.setattr(loader, "load_samples", loaded)
    fail_ahead = False
    read_ahead([path], roles=Roles((), ()))
    assert load_and_check([path], [], []).rows == 2
    assert done == ["read ahead", "checked ahead"]  # taken, not checked again
    assert load_and_check([path], [], []).rows == 2
    assert done[2:] == ["read", "checked"]  # taken once

    read_ahead([path], roles=Roles((str(path),), ()))
    assert load_and_check([path], [], [str(path)]).rows == 2  # other roles
    assert done[4:] == ["read ahead", "checked ahead", "checked"]
    fail_ahead = True
    read_ahead([path], roles=Roles((), ()))
    assert load_and_check([path], [], []).rows == 2
    assert done[7:] == ["read ahead", "checked"]

    fail_ahead = False
    read_ahead([path], roles=Roles((), ()))
    write_lines(path, GOOD)
    assert load_and_check([path], [], []).rows == 1
    assert done[9:] == ["read ahead", "checked ahead", "read", "checked"]


def test_the_read_ahead_needs_neither_prefect_nor_the_checks_libraries():
    """`toolgrpo validate` starts reading before it imports Prefect (~1 s) and pandera (~0.5 s):
    the modules the read runs need neither."""
    imported = "import sys, toolgrpo.validation.read_ahead; print(sorted(sys.modules))"
    modules = subprocess.run(
        [sys.executable, "-c", imported], capture_output=True, text=True, check=True
    ).stdout
    assert "'prefect'" not in modules and "'pandera'" not in modules


def test_only_plain_lines_are_read_by_polars(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", *NOT_PLAIN_LINES, *PLAIN_LINES)
    native, rows, _ = loader._read_jsonl_natively(path, str(path))
    assert native["line"].to_list() == list(range(len(NOT_PLAIN_LINES) + 1, rows + 1))


def loaded_both_ways(paths: list[Path], overrides: Path | None = None) -> loader.LoadedSamples:
    """What the native readers load from `paths`, after checking that the line-by-line reader
    loads the same: the same frame, problems (in order), row counts, overrides and warnings."""
    native, line_by_line = (
        loader.load_samples(paths, overrides, line_by_line=slow) for slow in (False, True)
    )
    assert native.problems == line_by_line.problems
    assert native.frame.equals(line_by_line.frame)
    assert replace(native, frame=None) == replace(line_by_line, frame=None)
    return native


def test_native_reader_gives_the_line_by_line_rows_and_problems(tmp_path):
    mixed = [*NOT_PLAIN_LINES, *PLAIN_LINES, *BLANK_LINES, *NOT_PLAIN_LINES[1:], *PLAIN_LINES]
    loaded = loaded_both_ways([write_lines(tmp_path / "rows.jsonl", *mixed)])
    assert loaded.frame.height > 2 * len(PLAIN_LINES) and len(loaded.problems) > 40


def test_native_reader_reads_a_file_of_plain_rows_as_pydantic_does(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", *(row_bytes(id=f"r{i}") for i in range(50)))
    loaded = loaded_both_ways([path])
    assert loaded.frame.height == 50 and loaded.problems == []


def test_a_file_of_plain_lines_only_goes_whole_to_the_ndjson_reader(tmp_path, monkeypatch):
    """Plain rows and blank lines: the file's bytes are read whole, not line by line, unless a
    blank line is one the NDJSON reader cannot skip."""
    read_whole, read_lines = [], []
    for name, calls in (("read_ndjson", read_whole), ("read_lines", read_lines)):
        read = getattr(pl, name)
        monkeypatch.setattr(
            pl, name, lambda *a, _r=read, _c=calls, **k: _c.append(1) or _r(*a, **k)
        )
    loaded = loaded_both_ways([write_lines(tmp_path / "rows.jsonl", *PLAIN_LINES, *PLAIN_LINES)])
    assert read_whole and loaded.frame.height == 2 * len(PLAIN_LINES) and loaded.problems == []
    for blank, whole in ((b"", True), (b" \t\r", True), (b"\x0b", False)):
        read_lines.clear()
        blanks = [*PLAIN_LINES, blank, *PLAIN_LINES, blank]
        loaded = loaded_both_ways([write_lines(tmp_path / "blank.jsonl", *blanks)])
        assert loaded.frame.height == 2 * len(PLAIN_LINES) and loaded.problems == []
        rows = len(PLAIN_LINES)
        assert loaded.frame["line"].to_list() == [
            *range(1, rows + 1),
            *range(rows + 2, 2 * rows + 2),
        ]
        assert (not read_lines) == whole, blank
        only_blank = loaded_both_ways([write_lines(tmp_path / "only-blank.jsonl", blank, blank)])
        assert only_blank.frame.is_empty() and only_blank.rows_read == 0


def test_native_reader_keeps_overrides_and_file_order(tmp_path):
    first = write_lines(tmp_path / "a.jsonl", GOOD, b"{", row_bytes(id="w", tool="withdraw"))
    second = write_lines(tmp_path / "b.jsonl", row_bytes(id="b1"), row_bytes(id="b1"))
    new_solution = solution("deposit", {"account": "ACC001", "amount": 50})
    overrides = write_lines(
        tmp_path / "o.jsonl", override(id="w", tool="deposit", solution=new_solution)
    )
    loaded = loaded_both_ways([first, second, first], overrides)
    assert [o.row for o in loaded.overrides] == [f"{first}:3", f"{first}:3"]


PARQUET_FRAMES = {
    "typed columns, a null": pl.DataFrame(
        [SINGLE, {**MULTI_STEP_2, "prompt": None}, {**SINGLE, "id": "s-2"}]
    ),
    "narrow integers, no condition, extra columns": pl.DataFrame(
        [{**SINGLE, "line": 9, "file": "x"}, {**MULTI_STEP_2, "line": 10, "file": "y"}]
    )
    .drop("condition", strict=False)
    .with_columns(pl.col("step", "n_steps").cast(pl.Int8)),
    "a column of another type": pl.DataFrame([{**SINGLE, "step": "1"}]),
    "a float column": pl.DataFrame([SINGLE]).with_columns(pl.col("step").cast(pl.Float64)),
    "a missing column": pl.DataFrame([SINGLE]).drop("tool"),
    "a condition column of integers": pl.DataFrame([{**SINGLE, "condition": 1}]),
    "no rows": pl.DataFrame([SINGLE]).clear(),
}


@pytest.mark.parametrize("kind", PARQUET_FRAMES)
def test_native_parquet_reader_gives_the_row_by_row_rows_and_problems(tmp_path, kind):
    path = tmp_path / "rows.parquet"
    PARQUET_FRAMES[kind].write_parquet(path)
    loaded_both_ways([path])


def test_stages_read_the_gated_rows_with_overrides_applied_aux_rows_included(tmp_path):
    """What a stage trains on is what the gate passed: an override of an auxiliary row (which SFT
    mixes in) reaches SFT's file as it reaches the training files."""
    shipped = DATA_DIR / "train" / "multistep.jsonl"
    shipped_lines = shipped.read_bytes().splitlines()
    conditional = next(line for line in shipped_lines if b'"condition": "' in line)
    multi = write_lines(tmp_path / "multi.jsonl", *shipped_lines[:3], conditional)
    single = write_lines(tmp_path / "single.jsonl", json.dumps(SINGLE).encode())
    aux_lines = (DATA_DIR / EXERCISES_FILE).read_bytes().splitlines()[:2]
    aux = write_lines(tmp_path / "aux.jsonl", *aux_lines)
    relabelled = json.loads(aux_lines[1])["id"]
    overrides = write_lines(
        tmp_path / "overrides.jsonl",
        json.dumps(
            {
                "id": relabelled,
                "tool": "check_balance",
                "solution": solution("check_balance", {"account": "ACC001"}),
                "reason": "test",
                "reviewer": "qa",
            }
        ).encode(),
    )
    loaded = loader.load_samples([single, multi, aux], overrides)

    written = write_training_rows(loaded.frame, [single, multi], [aux], tmp_path / "data")

    def tools(field: str) -> dict[str, str]:
        return dict(pl.read_ndjson(written[field]).select("id", "tool").iter_rows())

    assert tools("data.train_single_step") == {SINGLE["id"]: SINGLE["tool"]}
    shipped_rows = [json.loads(line) for line in multi.read_bytes().splitlines()]
    assert list(tools("data.train_multistep")) == [row["id"] for row in shipped_rows]
    # GRPO's arithmetic component reads each step's branch: it survives the gate
    branches = pl.read_ndjson(written["data.train_multistep"])["condition"].to_list()
    assert branches == [row.get("condition") for row in shipped_rows]
    assert "holds" in branches or "fails" in branches
    assert tools("data.train_aux")[relabelled] == "check_balance"
    assert set(write_training_rows(loaded.frame, [single, multi], [], tmp_path / "d2")) == {
        "data.train_single_step",
        "data.train_multistep",
    }
