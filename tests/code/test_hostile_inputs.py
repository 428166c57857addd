"""Hostile but fair input (issue #19): data shown in reports and terminals stays text, a failed
write loses nothing, apply-review refuses what the next run would reject, and every failure is
one line and an exit code. Each test calls what a user calls: a command of `toolgrpo`, a flow,
or the task a flow runs."""

from __future__ import annotations

import base64
import contextlib
import csv
import gzip
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import unicodedata
from pathlib import Path

import polars as pl
import pytest
import torch
from markdown_it import MarkdownIt
from prediction_rows import prediction_row, predictions_frame
from prefect.settings import PREFECT_API_URL, temporary_settings

from tests.code.test_load import GOOD, row_bytes, write_lines
from tests.code.test_schemas import MULTI_STEP_2, SINGLE, solution
from toolgrpo.evaluation.metrics import compute_metrics
from toolgrpo.flows import cli
from toolgrpo.mining.miner import QUEUE_COLUMNS, REVIEW_COLUMNS, mine_errors
from toolgrpo.mining.review import merged_overrides, overrides_from_review
from toolgrpo.schemas.catalogue import (
    DEFAULT_CATALOGUE,
    CatalogueError,
    compile_params_schema,
    load_catalogue,
)
from toolgrpo.schemas.files import replace_dir, write_csv_file
from toolgrpo.schemas.label_overrides import LabelOverride
from toolgrpo.schemas.problems import shown
from toolgrpo.schemas.run import RunSummary, ZeroStdGroups
from toolgrpo.tasks import mine as mine_tasks
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.mine import mine
from toolgrpo.tasks.report import publish_report
from toolgrpo.training.config import LR_SCHEDULER_TYPES
from toolgrpo.training.model import build_tiny
from toolgrpo.training.rewards import score_completion
from toolgrpo.validation import loader
from toolgrpo.validation.gate import validate_samples

XSS_ID = "eval-s-0009<img src=x onerror=alert(2)>"
XSS_FILE = "<svg onload=alert(3)>.jsonl"
OUTSIDE_IMAGE_ID = 'eval-s-0010<img src="../../../../outside/secret.png">'
MISSING_IMAGE_ID = 'eval-s-0011<img src="nope.png">'
BACKTICK_ID = "eval-s-0012`<img src=x onerror=alert(4)>`"
CLEAR_SCREEN = "\x1b[2J"
TEN_MB = 10_000_000


def rendered(markdown: str) -> str:
    """`markdown` as a permissive viewer shows it: raw HTML passed through."""
    return MarkdownIt("commonmark").enable("table").render(markdown)


def live_tags(html: str) -> list[str]:
    """The tags of `html` that would run or load something, but the run's plots (inlined in
    report.html, linked from report.md)."""
    return re.findall(r'<svg|<img(?! src="(?:data:image/png;base64,|plots/))', html)


# --- reports: text from the data is text -------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_run(prefect_harness, tmp_path_factory):
    """A published run report whose ids, file names and prompts carry the issue's payloads,
    and a secret PNG outside the run folder that an id points at."""
    tmp_path = tmp_path_factory.mktemp("hostile-run")
    secret = tmp_path / "outside" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(b"\x89PNG secret bytes that must stay outside")
    run_dir = tmp_path / "a" / "b" / "c" / "run"
    run_dir.mkdir(parents=True)
    source = f"eval/{Path(XSS_FILE).stem}"
    rows = [
        prediction_row(XSS_ID, "check_balance", "withdraw", source=source, prompt="Withdraw 5"),
        prediction_row(OUTSIDE_IMAGE_ID, "deposit", "withdraw", prompt="Deposit 5"),
        prediction_row(MISSING_IMAGE_ID, "withdraw", "deposit", prompt="Withdraw 9"),
        prediction_row(BACKTICK_ID, "deposit", "respond", prompt="=HYPERLINK(x)"),
        prediction_row("ok", "withdraw", source=source),
    ]
    predictions = predictions_frame(rows)
    metrics = compute_metrics(predictions)
    summary = RunSummary(
        preset="smoke",
        run_dir=run_dir,
        data_hash="0" * 64,
        config_hash="1" * 64,
        rows={f"data/{XSS_FILE}": 5},
        retrained=True,
        models={},
        accuracy={"sft": metrics.accuracy, "grpo": metrics.accuracy},
        zero_std=ZeroStdGroups(zero=0, total=0, changed=0),
        flagged_label_ambiguity=[],
        flagged_label_conflict=[],
        wall_s={},
    )
    published = publish_report.fn(summary, metrics, mine_errors(predictions), [])
    return run_dir, published.html.read_text(encoding="utf-8"), secret


def test_report_html_shows_ids_and_file_names_as_text(hostile_run):
    _, html, _ = hostile_run
    assert live_tags(html) == []
    assert "eval-s-0009&lt;img src=x onerror=alert(2)&gt;" in html
    assert "data/&lt;svg onload=alert(3)&gt;" in html  # a row file, named by folder and stem


def test_report_html_embeds_only_the_runs_own_plots(hostile_run):
    _, html, secret = hostile_run
    assert html.count('src="data:image/png;base64,') == 4  # reward, zero-std, accuracy, confusion
    assert base64.b64encode(secret.read_bytes()).decode() not in html
    assert "secret.png" in html  # the id is shown, as text


def test_report_md_escapes_the_payloads_even_for_a_viewer_that_passes_html(hostile_run):
    run_dir, _, _ = hostile_run
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    assert live_tags(rendered(markdown)) == []
    assert "eval-s-0012`&lt;img src=x onerror=alert(4)&gt;`" in rendered(markdown)


def test_data_quality_report_escapes_problem_lines_and_label_conflicts(prefect_harness, tmp_path):
    payload = "Balance? <img src=x onerror=alert(5)>"
    data = write_lines(
        tmp_path / "rows.jsonl",
        GOOD,
        row_bytes(kind=BACKTICK_ID),
        row_bytes(id="=cmd", lang="fr", prompt=payload),
        row_bytes(id="c-2", prompt=payload, tool="withdraw"),
    )
    assert cli.validate(data, out=tmp_path / "runs") == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    html = rendered((run_dir / "report.md").read_text(encoding="utf-8"))
    assert live_tags(html) == []
    assert "<code>" in html and "`&lt;img src=x onerror=alert(4)&gt;`" in html  # one code span
    assert "balance? &lt;img src=x onerror=alert(5)&gt;" in html  # the conflict's prompt
    failures = pl.read_csv(run_dir / "failures.csv")
    assert "'=cmd" in failures["id"].to_list()  # not a formula in a spreadsheet


def test_control_characters_from_the_data_reach_the_terminal_escaped(
    prefect_harness, tmp_path, capsys
):
    data = write_lines(tmp_path / f"rows{CLEAR_SCREEN}.jsonl", GOOD, row_bytes(lang=CLEAR_SCREEN))
    assert cli.validate(data, out=tmp_path / "runs") == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert 'lang is "\\x1b[2J"' in out and "rows\\x1b[2J.jsonl:2" in out
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "\x1b" not in (run_dir / "report.md").read_text(encoding="utf-8")


def test_csv_cells_that_start_a_formula_are_neutralised_and_read_back(prefect_harness, tmp_path):
    rows = [prediction_row(f"{start}cmd", "deposit", "withdraw") for start in "=+-@"]
    mine.fn(predictions_frame(rows), None, tmp_path)
    with (tmp_path / "review_queue.csv").open(encoding="utf-8", newline="") as handle:
        queue = list(csv.DictReader(handle))
    assert sorted(row["id"] for row in queue) == ["'+cmd", "'-cmd", "'=cmd", "'@cmd"]
    for row in queue:
        row.update(decision="keep", reviewer="ana", reason="checked")
    reviewed = write_review(tmp_path / "reviewed.csv", queue)
    overrides = tmp_path / "label_overrides.jsonl"
    assert cli.apply_review(reviewed, overrides=overrides, allow_unknown=True) == 0
    ids = [json.loads(line)["id"] for line in overrides.read_text(encoding="utf-8").splitlines()]
    assert sorted(ids) == ["+cmd", "-cmd", "=cmd", "@cmd"]


# --- writes: all or nothing -------------------------------------------------------------------


def disk_full_after_half(monkeypatch) -> None:
    """Every text write puts half its text on disk, then fails as a full disk does."""

    def write_half(self, text, encoding=None, errors=None, newline=None):
        with open(self, "w", encoding=encoding) as handle:
            handle.write(text[: len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", write_half)


def test_failing_overrides_write_leaves_the_old_file_intact(
    prefect_harness, tmp_path, monkeypatch, capsys
):
    overrides = tmp_path / "label_overrides.jsonl"
    old = "".join(
        json.dumps({"id": f"r-{i}", "tool": "withdraw", "reason": "r", "reviewer": "ana"}) + "\n"
        for i in range(20_000)
    )
    overrides.write_text(old, encoding="utf-8")
    data, reviewed = review_case(tmp_path, decision="keep")
    disk_full_after_half(monkeypatch)

    assert cli.apply_review(reviewed, overrides=overrides, data=[data]) == 2

    assert overrides.read_text(encoding="utf-8") == old
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert capsys.readouterr().err.splitlines() == [
        f"toolgrpo mine apply-review: cannot write {overrides}: No space left on device; "
        "the file is unchanged"
    ]


def test_failing_csv_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = write_csv_file(pl.DataFrame({"id": ["a", "b"]}), tmp_path / "failures.csv")
    old = path.read_bytes()

    def write_half(self, file, **kwargs):
        Path(file).write_bytes(b"id\nx")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_csv", write_half)
    with pytest.raises(OSError, match="the file is unchanged"):
        write_csv_file(pl.DataFrame({"id": ["c"]}), path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["failures.csv"]


def test_failing_folder_write_leaves_the_old_folder_intact_and_a_good_one_replaces_it(tmp_path):
    """A base folder is published whole: a build that fails half-way leaves the old base as it
    was (and no temporary folder), one that succeeds replaces every file."""
    base = replace_dir(tmp_path / "base", lambda folder: (folder / "a").write_text("old"))

    def write_half(folder: Path) -> None:
        (folder / "a").write_text("cut")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="the folder is unchanged"):
        replace_dir(base, write_half)
    assert [p.name for p in tmp_path.iterdir()] == ["base"] and (base / "a").read_text() == "old"
    replace_dir(base, lambda folder: (folder / "b").write_text("new"))
    assert [p.name for p in base.iterdir()] == ["b"] and [p.name for p in tmp_path.iterdir()] == [
        "base"
    ]


# --- apply-review: refuse now what the next run would reject ---------------------------------

ROW = {**SINGLE, "id": "r-1"}  # check_balance, params {"account": "ACC001"}
CONDITIONAL = {**MULTI_STEP_2, "id": "m-2", "condition": "holds"}  # transfer_funds
REPLY = solution("respond", {"message": "余额不足"})


def write_review(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*QUEUE_COLUMNS, *REVIEW_COLUMNS])
        writer.writeheader()
        writer.writerows(rows)
    return path


def decided(row_id: str, label: str, decision: str, **cells: str) -> dict[str, str]:
    """A queue row with its review columns filled in."""
    base = dict.fromkeys([*QUEUE_COLUMNS, *REVIEW_COLUMNS], "")
    return {**base, "id": row_id, "label": label, "decision": decision, "reviewer": "ana",
            "reason": "reviewed", **cells}  # fmt: skip


def review_case(tmp_path: Path, *rows: dict[str, str], **one: str) -> tuple[Path, Path]:
    """A data file with ROW and CONDITIONAL, and a review of `rows` (or of ROW, decided `one`)."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in (ROW, CONDITIONAL)), encoding="utf-8")
    rows = rows or (decided("r-1", "check_balance", **one),)
    return data, write_review(tmp_path / "reviewed.csv", list(rows))


@pytest.fixture
def apply_review(prefect_harness, tmp_path, capsys):
    """apply-review on the overrides file in `tmp_path`: (exit status, stderr lines, path)."""

    def run(reviewed: Path, data: Path, **options) -> tuple[int, list[str], Path]:
        overrides = tmp_path / "label_overrides.jsonl"
        status = cli.apply_review(reviewed, overrides=overrides, data=[data], **options)
        return status, capsys.readouterr().err.splitlines(), overrides

    return run


REFUSED = {
    "relabel whose params do not fit": (
        [decided("r-1", "check_balance", "get_transactions")],
        "override_applicable",
        "the row's params do not fit get_transactions",
    ),
    "unknown tool as the label": (
        [decided("r-1", "launch_rocket", "launch_rocket")],
        "decision_known",
        "label 'launch_rocket' is not a tool",
    ),
    "unknown tool kept": (
        [decided("r-1", "launch_rocket", "keep")],
        "decision_known",
        "label 'launch_rocket' is not a tool",
    ),
    "relabel that breaks the condition rule": (
        [decided("m-2", "transfer_funds", "respond", proposed_solution=REPLY)],
        "condition_matches_tool",
        'would fail: condition "holds" with tool "respond"',
    ),
    "unknown id": (
        [decided("r-404", "check_balance", "keep")],
        "decision_row_known",
        "id r-404 is in none of the data files",
    ),
    "two decisions for one id": (
        [decided("r-1", "check_balance", "keep"), decided("r-1", "check_balance", "withdraw")],
        "decision_unique",
        "id r-1: already decided on line 2",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_apply_review_refuses_what_the_next_gate_would_reject(tmp_path, apply_review, case):
    rows, check, message = REFUSED[case]
    data, reviewed = review_case(tmp_path, *rows)
    status, err, overrides = apply_review(reviewed, data)
    assert status == 1
    *problems, summary = err
    assert len(problems) == 1 and problems[0].startswith(f"{reviewed}:")
    assert message in problems[0] and problems[0].endswith(f"[check: {check}]")
    assert summary == (
        f"toolgrpo mine apply-review: 1 problem(s); nothing was written to {overrides}"
    )
    assert not overrides.exists()


def test_unknown_id_is_written_with_allow_unknown(tmp_path, apply_review):
    data, reviewed = review_case(tmp_path, decided("r-404", "check_balance", "keep"))
    status, _, overrides = apply_review(reviewed, data, allow_unknown=True)
    assert status == 0
    assert json.loads(overrides.read_text(encoding="utf-8"))["id"] == "r-404"


def test_review_saved_by_excel_in_cp1252_says_to_re_save_as_utf8(tmp_path, apply_review):
    data, reviewed = review_case(tmp_path, decided("r-1", "check_balance", "keep", reason="café"))
    reviewed.write_bytes(reviewed.read_text(encoding="utf-8").encode("cp1252"))
    status, err, _ = apply_review(reviewed, data)
    assert status == 1
    assert err[0] == (
        f"{reviewed}:2: not UTF-8 (byte 0xe9); re-save the file as UTF-8 "
        '(Excel: "CSV UTF-8") and run again [check: review_utf8]'
    )


def test_review_with_a_byte_order_mark_is_read(tmp_path, apply_review):
    data, reviewed = review_case(tmp_path, decision="keep")
    reviewed.write_bytes(b"\xef\xbb\xbf" + reviewed.read_bytes())
    status, _, overrides = apply_review(reviewed, data)
    assert status == 0
    assert json.loads(overrides.read_text(encoding="utf-8"))["tool"] == "check_balance"


def test_row_shorter_than_the_header_is_one_located_line(tmp_path, apply_review):
    data, reviewed = review_case(tmp_path, decision="keep")
    with reviewed.open("a", encoding="utf-8") as handle:
        handle.write("r-1,eval,source\n")
    status, err, _ = apply_review(reviewed, data)
    assert (status, err[0]) == (
        1,
        f"{reviewed}:3: 3 cell(s) where the header has 15 [check: review_row_complete]",
    )


def test_half_written_overrides_line_is_named_and_left_alone(tmp_path, apply_review):
    data, reviewed = review_case(tmp_path, decision="keep")
    overrides = tmp_path / "label_overrides.jsonl"
    half = '{"id": "a", "tool": "withdraw", "reason": "r", "reviewer": "ana"}\n{"id": "b", "to'
    overrides.write_text(half, encoding="utf-8")
    status, err, _ = apply_review(reviewed, data)
    assert status == 1
    assert err[0].startswith(f"{overrides}:2: line: Invalid JSON")
    assert err[0].endswith("[check: override_valid]")
    assert overrides.read_text(encoding="utf-8") == half


# --- one line and an exit code ----------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_prefect_api_is_one_line_before_anything_runs(tmp_path, capfd):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    url = f"http://127.0.0.1:{closed_port()}/api"
    started = time.monotonic()
    with temporary_settings({PREFECT_API_URL: url}), pytest.raises(SystemExit) as exit_:
        cli.main(["validate", str(data), "--out", str(tmp_path / "runs")])
    assert exit_.value.code == 2 and time.monotonic() - started < 10
    out, err = capfd.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"toolgrpo: cannot reach the Prefect API at {url}: ")
    assert line.endswith("; unset PREFECT_API_URL to use a temporary local server")
    assert not (tmp_path / "runs").exists()


def test_failing_command_prints_its_lines_and_no_traceback(prefect_harness, tmp_path):
    """The console script in its own process, as a user runs it (on the session's server)."""
    data, reviewed = review_case(tmp_path, decided("r-1", "launch_rocket", "keep"))
    overrides = tmp_path / "label_overrides.jsonl"
    command = [Path(sys.executable).parent / "toolgrpo", "mine", "apply-review", reviewed]
    command += ["--overrides", overrides, "--data", data]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.splitlines()[-2:] == [
        f"{reviewed}:2: id r-1: label 'launch_rocket' is not a tool of data/tools.json "
        "(or 'keep') [check: decision_known]",
        f"toolgrpo mine apply-review: 1 problem(s); nothing was written to {overrides}",
    ]


def test_folder_given_to_validate_is_called_a_folder(tmp_path, capsys):
    assert cli.validate(tmp_path, out=tmp_path / "runs") == 2
    assert capsys.readouterr().err == (
        f"toolgrpo validate: a folder, not a file: {tmp_path} (pass the files in it)\n"
    )


def test_folder_among_sample_files_is_a_located_problem(tmp_path):
    loaded = load_samples.fn([tmp_path])
    assert [str(p) for p in loaded.problems] == [
        f"{tmp_path}: is a folder, not a JSONL or parquet file: pass the files in it "
        "[check: file_readable]"
    ]


# --- oversized values --------------------------------------------------------------------------


def test_ten_megabyte_values_are_cut_and_limited_by_their_own_checks(
    prefect_harness, tmp_path, capsys
):
    huge_tool = "x" * TEN_MB
    huge_thought = solution(thought="t" * TEN_MB)
    data = write_lines(
        tmp_path / "rows.jsonl",
        GOOD,
        row_bytes(id="huge-tool", tool=huge_tool),
        row_bytes(id="huge-thought", solution=huge_thought),
    )
    assert cli.validate(data, out=tmp_path / "runs") == 1
    out = capsys.readouterr().out
    assert len(out) < 5_000
    assert f'tool "{"x" * 200}… ({TEN_MB:,} characters)" is not in the tool catalogue' in out
    assert f"{data}:3: solution has {len(huge_thought)} characters (at most 4000) " in out
    assert "[check: solution_within_length]" in out
    (run_dir,) = (tmp_path / "runs").iterdir()
    for report in ("report.md", "failures.csv", "data_quality.json"):
        assert (run_dir / report).stat().st_size < 50_000, report


# --- a catalogue is data, never a fetcher (issue #42) ------------------------------------------

SECRET = "SECRET-7f3a"


def catalogue_with(tmp_path: Path, params: dict | None = None, text: str | None = None) -> Path:
    """The shipped catalogue with check_balance's params schema replaced by `params` (or the
    file's whole text replaced by `text`)."""
    spec = json.loads(DEFAULT_CATALOGUE.read_text(encoding="utf-8"))
    if params is not None:
        spec["tools"][0]["params"] = params
    path = tmp_path / "tools.json"
    path.write_text(text if text is not None else json.dumps(spec), encoding="utf-8")
    return path


@pytest.fixture
def loopback_server():
    """An HTTP server on 127.0.0.1 that answers every GET with a JSON schema and records the
    paths it was asked for."""
    hits: list[str] = []

    class Recording(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = json.dumps({"type": "string", "pattern": f"^{SECRET}$"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def test_catalogue_ref_to_a_url_or_a_file_is_refused_without_fetching(
    tmp_path, loopback_server, capsys
):
    url, hits = loopback_server
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"type": "string", "pattern": f"^{SECRET}$"}), encoding="utf-8")
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    for ref in (f"{url}/s.json", secret.as_uri(), "secret.json"):
        params = {"type": "object", "properties": {"account": {"$ref": ref}}}
        catalogue = catalogue_with(tmp_path, params)
        started = time.monotonic()
        assert cli.validate(data, out=tmp_path / "runs", catalogue=catalogue) == 2
        assert time.monotonic() - started < 10
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"toolgrpo validate: {catalogue}: not a tool catalogue: ")
        assert f"tool 'check_balance': $ref '{ref}' is not a local #/… reference" in line
        assert SECRET not in line
    assert hits == []
    assert not (tmp_path / "runs").exists()


def test_catalogue_ref_under_a_remote_base_uri_is_not_fetched(loopback_server):
    """A `$id` makes even a relative-looking reference a URL; nothing may fetch it."""
    url, hits = loopback_server
    params = {"$id": f"{url}/base.json", "properties": {"a": {"$ref": "#/definitions/a"}}}
    params["definitions"] = {"a": {"type": "string"}}
    with contextlib.suppress(ValueError):
        compile_params_schema(params)
    assert hits == []


BAD_SCHEMAS = {
    "invalid pattern": (
        {"type": "object", "properties": {"account": {"type": "string", "pattern": "("}}},
        "tool 'check_balance': pattern '(' is not a regular expression: missing ): (",
    ),
    "backreference": (
        {"type": "string", "pattern": r"^(a)\1$"},
        r"tool 'check_balance': pattern '^(a)\\1$' is not a regular expression",
    ),
    "recursive schema": (
        {"type": "object", "properties": {"next": {"$ref": "#"}}},
        "tool 'check_balance': recursive schema: $ref # -> #",
    ),
    "reference to nothing": (
        {"type": "object", "properties": {"a": {"$ref": "#/definitions/nope"}}},
        "tool 'check_balance': $ref '#/definitions/nope' points at nothing in the schema",
    ),
}


@pytest.mark.parametrize("case", BAD_SCHEMAS)
def test_unusable_params_schema_is_one_line_naming_the_tool(tmp_path, capsys, case):
    params, message = BAD_SCHEMAS[case]
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    catalogue = catalogue_with(tmp_path, params)
    assert cli.validate(data, out=tmp_path / "runs", catalogue=catalogue) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert message in line and "Traceback" not in captured.out + captured.err


def test_catalogue_with_a_key_twice_is_refused_naming_where(tmp_path):
    shipped = DEFAULT_CATALOGUE.read_text(encoding="utf-8")
    twice = catalogue_with(tmp_path, text=shipped.replace('"tools":', '"tools": [], "tools":', 1))
    with pytest.raises(CatalogueError, match=r"key 'tools' appears twice"):
        load_catalogue(twice)
    spec = json.loads(shipped)
    inner = json.dumps(spec).replace('"type": "object"', '"type": "object", "type": "array"', 1)
    with pytest.raises(CatalogueError, match=r"tool 'check_balance': key 'type' appears twice"):
        load_catalogue(catalogue_with(tmp_path, text=inner))


def test_backtracking_pattern_costs_linear_time_on_rows_and_model_output(tmp_path):
    """`^(a+)+$` against 30 a's and a b: minutes with a backtracking engine."""
    params = {
        "type": "object",
        "properties": {"account": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["account"],
    }
    catalogue = load_catalogue(catalogue_with(tmp_path, params))
    hostile = {"account": "a" * 30 + "b"}
    answer = solution("check_balance", hostile)
    # the params rule also reads a request's words with the param's pattern
    asked = row_bytes(
        id="redos-request",
        prompt=f"Check the balance of {'a' * 60}b please",
        solution=solution("check_balance", {"account": "aaa"}),
    )
    data = write_lines(tmp_path / "rows.jsonl", row_bytes(id="redos", solution=answer), asked)
    started = time.monotonic()
    report = validate_samples(load_samples.fn([data], catalogue=catalogue), catalogue=catalogue)
    assert [p.check for p in report.failures] == ["params_match_schema"]
    scored = score_completion(answer, answer, catalogue=catalogue)
    assert scored.params == 0.0
    assert time.monotonic() - started < 10
    assert catalogue.params_valid("check_balance", {"account": "a" * 100_000})


# --- only regular files are read (issue #42) ---------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    """A named pipe with no writer: opening it to read would wait forever. A watchdog opens
    its other end after 20 s, so a reader that did open it fails the test instead of hanging."""
    path = tmp_path / "rows.jsonl"
    os.mkfifo(path)
    done = threading.Event()

    def unblock():
        if not done.wait(20):
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    watchdog = threading.Thread(target=unblock, daemon=True)
    watchdog.start()
    yield path
    done.set()


def test_named_pipe_or_device_as_a_data_file_is_one_line_without_opening_it(tmp_path, fifo, capsys):
    for path, kind in ((fifo, "a named pipe (FIFO)"), (Path("/dev/zero"), "a character device")):
        started = time.monotonic()
        assert cli.validate(path, out=tmp_path / "runs") == 2
        assert time.monotonic() - started < 10
        assert capsys.readouterr().err == (
            f"toolgrpo validate: {path} is {kind}, not a regular file: only regular files are "
            "read\n"
        )
        (problem,) = load_samples.fn([path]).problems
        assert str(problem) == (
            f"{path}: is {kind}, not a regular file: only regular files are read "
            "[check: file_readable]"
        )


def test_named_pipe_as_catalogue_review_or_predictions_is_one_line(tmp_path, fifo, capsys):
    data = write_lines(tmp_path / "data.jsonl", GOOD)
    started = time.monotonic()
    assert cli.validate(data, out=tmp_path / "runs", catalogue=fifo) == 2
    assert cli.apply_review(fifo, overrides=tmp_path / "o.jsonl", data=[data]) == 2
    assert cli.mine(predictions=fifo, out=tmp_path / "runs") == 2
    assert time.monotonic() - started < 10
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all("a named pipe (FIFO), not a regular file" in x for x in lines)


def test_gzip_named_jsonl_is_refused_the_same_by_both_readers(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(gzip.compress(GOOD + b"\n"))
    why = "is gzip-compressed: decompress it first (gunzip) and pass that file"
    for line_by_line in (False, True):
        loaded = loader.load_samples([path], line_by_line=line_by_line)
        assert [str(p) for p in loaded.problems] == [f"{path}: {why} [check: file_readable]"]
    assert cli.validate(path, out=tmp_path / "runs") == 2
    assert capsys.readouterr().err == f"toolgrpo validate: {path} {why}\n"


@pytest.fixture
def sigterm_restored():
    """The process's SIGTERM handler as it was before the test (`cli.main` installs its own)."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_during_a_read_exits_143_with_one_line(
    prefect_harness, tmp_path, monkeypatch, capfd, sigterm_restored
):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)

    def read_slowly_and_get_terminated(path):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(3)  # the flow stops once its running task returns
        return None

    monkeypatch.setattr(loader, "input_problem", read_slowly_and_get_terminated)
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["validate", str(data), "--out", str(tmp_path / "runs")])
    assert exit_.value.code == 143 and time.monotonic() - started < 25
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert err.splitlines()[-1] == "toolgrpo: stopped by SIGTERM"


# --- two reviewers at once (issue #42) ---------------------------------------------------------


def test_two_apply_reviews_at_once_keep_both_decisions(tmp_path, monkeypatch, capsys):
    """Two merges into one overrides file, each slowed between its read and its write: without
    the lock the second write replaces the first's decision."""
    overrides = tmp_path / "label_overrides.jsonl"
    old = [
        LabelOverride(id=f"r-{i}", tool="withdraw", reason="r", reviewer="ana") for i in range(5)
    ]
    overrides.write_text(merged_overrides([], old), encoding="utf-8")
    read = mine_tasks.read_overrides

    def read_slowly(path):
        found = read(path)
        time.sleep(0.5)  # both have read before either writes, unless one waits
        return found

    monkeypatch.setattr(mine_tasks, "read_overrides", read_slowly)
    decisions = [
        LabelOverride(id=f"new-{who}", tool="deposit", reason="checked", reviewer=who)
        for who in ("ana", "bo")
    ]
    errors: list[BaseException] = []

    def apply(decision):
        try:
            mine_tasks.write_label_overrides.fn([decision], overrides)
        except BaseException as error:
            errors.append(error)

    reviewers = [threading.Thread(target=apply, args=(d,)) for d in decisions]
    for reviewer in reviewers:
        reviewer.start()
    for reviewer in reviewers:
        reviewer.join(30)
    assert errors == []
    ids = [json.loads(line)["id"] for line in overrides.read_text(encoding="utf-8").splitlines()]
    assert sorted(ids) == sorted([*(o.id for o in old), "new-ana", "new-bo"])
    assert capsys.readouterr().out == (
        f"waiting for another apply-review to finish writing {overrides}\n"
    )


# --- model folders (issue #42) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised tiny model, saved as training saves one (safetensors)."""
    texts = [json.loads(GOOD)["prompt"], json.loads(GOOD)["solution"]] * 10
    tokenizer, model = build_tiny(texts, hidden_size=32, num_layers=1, vocab_size=300)
    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


def cut_weights_short(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def pickle_weights(folder: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")


def widen_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(hidden_size=64, intermediate_size=256)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


BROKEN_MODELS = {
    "truncated safetensors": (cut_weights_short, "the weights file is corrupt or cut short"),
    "pickled weights": (pickle_weights, "its weights are pickled (pytorch_model.bin)"),
    "shapes that do not match": (widen_config, "the weights' shapes do not match config.json"),
}


@pytest.mark.parametrize("case", BROKEN_MODELS)
def test_broken_model_folder_is_one_line_exit_2(
    prefect_harness, tiny_model_dir, tmp_path, capsys, case
):
    damage, message = BROKEN_MODELS[case]
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    damage(folder)
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    started = time.monotonic()
    assert cli.evaluate(model=folder, data=[data], out=tmp_path / "runs", torch_threads=1) == 2
    assert time.monotonic() - started < 10
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"toolgrpo evaluate: {folder}: ") and message in last


def test_max_new_tokens_beyond_the_models_positions_is_refused(
    prefect_harness, tiny_model_dir, tmp_path, capsys
):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    started = time.monotonic()
    status = cli.evaluate(
        model=tiny_model_dir, data=[data], out=tmp_path / "runs", max_new_tokens=100_000_000
    )
    assert status == 2 and time.monotonic() - started < 10
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("toolgrpo evaluate: max_new_tokens 100,000,000 is beyond the model's ")


# --- config values checked before any run (issue #42) ------------------------------------------

BAD_SETTINGS = {
    "sft.lr_scheduler_type=evil": "sft.lr_scheduler_type: 'evil' is not a transformers "
    "SchedulerType (one of linear, cosine,",
    "sft.lr_scheduler_type=cosin": "(did you mean 'cosine'? one of linear,",
    "sft.learning_rate=.inf": "sft.learning_rate: Input should be a finite number",
    "grpo.learning_rate=.nan": "grpo.learning_rate: Input should be a finite number",
    f"grpo.max_steps={10**400}": "grpo.max_steps: a 1329-bit integer is beyond 64 bits",
}


@pytest.mark.parametrize("setting", BAD_SETTINGS)
def test_unusable_setting_is_one_line_before_any_run(tmp_path, capsys, setting):
    started = time.monotonic()
    assert cli.run(preset="smoke", set_=[setting], out=tmp_path / "runs") == 2
    assert time.monotonic() - started < 10
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("toolgrpo run: preset 'smoke': invalid training config: ")
    assert BAD_SETTINGS[setting] in line
    assert not (tmp_path / "runs").exists()


def test_scheduler_names_are_transformers_own():
    from transformers.trainer_utils import SchedulerType

    assert tuple(scheduler.value for scheduler in SchedulerType) == LR_SCHEDULER_TYPES


# --- invisible characters shown escaped (issue #42) --------------------------------------------

INVISIBLE = {
    "zero-width space": ("\u200b", "\\u200b"),
    "right-to-left mark": ("\u200f", "\\u200f"),
    "arabic letter mark": ("\u061c", "\\u061c"),
    "line separator": ("\u2028", "\\u2028"),
    "paragraph separator": ("\u2029", "\\u2029"),
    "byte-order mark": ("\ufeff", "\\ufeff"),
    "tag character": ("\U000e0041", "\\U000e0041"),
}


def test_every_format_and_separator_character_is_escaped():
    invisible = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cf", "Zl", "Zp")
    ]
    assert all(shown(character).startswith("\\") for character in invisible)
    assert shown("余额 café ACC001") == "余额 café ACC001"


@pytest.mark.parametrize("case", INVISIBLE)
def test_invisible_characters_in_ids_reach_terminal_csv_and_review_escaped(
    prefect_harness, tmp_path, capsys, case
):
    character, escape = INVISIBLE[case]
    row_id = f"r{character}1"
    twice = row_bytes(id=row_id, scenario_id="s-2")
    data = write_lines(tmp_path / "rows.jsonl", GOOD, row_bytes(id=row_id), twice)
    assert cli.validate(data, out=tmp_path / "runs") == 1
    out = capsys.readouterr().out
    assert character not in out and f'id "r{escape}1" is used by more than one row' in out
    (run_dir,) = (tmp_path / "runs").iterdir()
    for report in ("failures.csv", "report.md"):
        text = (run_dir / report).read_text(encoding="utf-8")
        assert character not in text and f"r{escape}1" in text, report

    data, reviewed = review_case(tmp_path, decided(row_id, "check_balance", "keep"))
    assert cli.apply_review(reviewed, overrides=tmp_path / "o.jsonl", data=[data]) == 1
    err = capsys.readouterr().err
    assert character not in err and f"id r{escape}1 is in none of the data files" in err


def test_review_with_a_problem_on_every_row_prints_a_capped_list(tmp_path, apply_review):
    rows = [decided(f"r-{i}", "launch_rocket", "keep") for i in range(cli.MAX_LISTED_PROBLEMS + 50)]
    data, reviewed = review_case(tmp_path, *rows)
    status, err, _ = apply_review(reviewed, data)
    assert status == 1 and len(err) == cli.MAX_LISTED_PROBLEMS + 2
    assert err[-2] == "... and 50 more problem(s) of the same file(s)"
    assert err[-1].endswith(f"{cli.MAX_LISTED_PROBLEMS + 50} problem(s); nothing was written to "
                            f"{tmp_path / 'label_overrides.jsonl'}")  # fmt: skip


def test_a_long_review_is_streamed_holding_only_its_decisions(tmp_path):
    """Case 12: a queue of 100k rows, two decided, is read in memory that follows the decisions
    (read whole it held every row's cells: ~100 MB here, 7.6 GB at 1M rows)."""
    data, reviewed = review_case(tmp_path, decided("r-1", "check_balance", "keep"))
    pending = dict.fromkeys([*QUEUE_COLUMNS, *REVIEW_COLUMNS], "")
    pending |= {"prompt": "Withdraw 50 rupees from ACC002 " * 4, "label": "withdraw"}
    with reviewed.open("a", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*QUEUE_COLUMNS, *REVIEW_COLUMNS])
        writer.writerows({**pending, "id": f"p-{i}"} for i in range(100_000))
        writer.writerow(decided("r-2", "transfer_funds", "keep"))
    rows = load_samples([data]).frame
    tracemalloc.start()
    try:
        overrides = overrides_from_review(reviewed, rows, allow_unknown=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [override.id for override in overrides] == ["r-1", "r-2"]
    assert peak < 10_000_000, f"peak {peak / 1e6:.0f} MB"
