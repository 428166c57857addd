"""The data-quality flow and `toolgrpo validate`: report files, Prefect artifacts, exit codes, a
red run with its problem lines in the log, counts that add up, escaped text, leakage."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import pickle
import re
from html import unescape
from pathlib import Path

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter
from prefect.logging.handlers import APILogHandler
from prefect.settings import get_current_settings

import toolgrpo.flows.data_quality as data_quality_flow
import toolgrpo.tasks.runs as runs
import toolgrpo.tasks.validate as validate_tasks
from tests.code.test_load import GOOD, row_bytes, write_lines
from toolgrpo.flows.cli import app, validate
from toolgrpo.flows.data_quality import data_quality
from toolgrpo.reporting.data_quality import MAX_LISTED_FAILURES, render_markdown
from toolgrpo.reporting.markdown import markdown_text
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import files_hash
from toolgrpo.tasks.validate import validate_samples
from toolgrpo.validation import context, gate, loader
from toolgrpo.validation.gate import DataGateFailed, count_rows


async def artifact_keys() -> set[str]:
    async with get_client() as client:
        return {artifact.key for artifact in await client.read_artifacts()}


def test_flow_writes_the_report_publishes_artifacts_and_ends_failed(prefect_harness, tmp_path):
    data = write_lines(
        tmp_path / "rows.jsonl", GOOD, b"not json", row_bytes(lang="fr"), row_bytes(id="ok")
    )
    state = data_quality(files=[data], out=tmp_path / "runs", return_state=True)

    assert state.is_failed() and state.message.startswith("data gate failed: 2 of 4 rows invalid")
    report = state.result(raise_on_failure=False).report
    assert not report.ok
    assert (report.rows, report.valid_rows, report.invalid_rows) == (4, 2, 2)
    run_dir = Path(report.run_dir)
    assert run_dir.parent == tmp_path / "runs"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "conflicts.csv",
        "data_quality.json",
        "failures.csv",
        "report.md",
    ]
    failures = pl.read_csv(run_dir / "failures.csv")
    assert failures.select("line", "check").rows() == [(2, "valid_json"), (3, "lang_known")]
    summary = json.loads((run_dir / "data_quality.json").read_text("utf-8"))
    assert summary["ok"] is False and summary["counts"]["lang"] == {"en": 2, "fr": 1}
    markdown = (run_dir / "report.md").read_text("utf-8")
    assert "# Data quality: FAILED" in markdown and f"{data}:3: " in markdown
    assert {
        "data-quality-summary",
        "data-quality-counts",
        "data-quality-failures",
        "data-quality-label-conflicts",
    } <= asyncio.run(artifact_keys())


def test_markdown_report_states_the_rule_of_each_failing_check(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD, b"{", row_bytes(lang="fr"))
    markdown = render_markdown(validate_samples.fn(load_samples.fn([data])))
    assert "| valid_json | 1 | Every line is valid JSON. |" in markdown
    assert '| lang_known | 1 | `lang` is "en" or "zh". |' in markdown


def test_calling_a_failing_data_quality_flow_raises_with_the_report(prefect_harness, tmp_path):
    data = write_lines(tmp_path / "r.jsonl", b"{")
    with pytest.raises(DataGateFailed, match="1 of 1 rows invalid") as failed:
        data_quality(files=[data], out=tmp_path / "runs")
    assert failed.value.report.failures[0].line == 1
    # Prefect pickles a state's exception
    assert pickle.loads(pickle.dumps(failed.value)).report == failed.value.report


def test_validate_exits_0_when_every_row_is_valid(prefect_harness, tmp_path, capsys):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    assert validate(data, out=tmp_path / "runs") == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: 1/1 rows valid") and "report.md" in out


def test_validate_runs_its_flow_without_heartbeats(prefect_harness, tmp_path, monkeypatch):
    """Prefect's sync engine waits for its heartbeat thread at a run's end (up to a second): the
    command's short run sends none; the flow run otherwise (as a deployment runs it) keeps
    Prefect's default."""
    heartbeats = []
    tag_flow_run = data_quality_flow.tag_flow_run

    def tagging(*tags: str) -> None:
        heartbeats.append(get_current_settings().flows.heartbeat_frequency)
        tag_flow_run(*tags)

    monkeypatch.setattr(data_quality_flow, "tag_flow_run", tagging)
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    assert validate(data, out=tmp_path / "runs") == 0
    data_quality(files=[data], out=tmp_path / "runs")
    assert heartbeats == [None, get_current_settings().flows.heartbeat_frequency]
    assert heartbeats[1] is not None


def test_the_gate_and_the_label_checks_read_rows_with_the_cycle_collector_paused(
    tmp_path, monkeypatch
):
    """Each pass of Python's cycle collector scans every live object, holding the GIL: the
    loader, the gate and the label checks (the miner's too) read rows without it, and leave it as
    they found it."""
    seen = []
    for module, name in ((loader, "_read_file"), (gate, "parse_solution"), (context, "_findings")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda *a, real=real: seen.append(gc.isenabled()) or real(*a)
        )
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            loaded = loader.load_samples([data])
            gate.validate_samples(loaded)
            context.label_inconsistencies(loaded.frame)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    assert seen == [False] * 8  # per round: read, parsed, the rules in the gate and alone


def test_validate_exits_1_and_prints_one_line_per_problem(prefect_harness, tmp_path, capsys):
    data = write_lines(tmp_path / "rows.jsonl", GOOD, b"[1]", row_bytes(step="two"))
    assert validate(data, out=tmp_path / "runs") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        f"{data}:2: line is an array, not a JSON object [check: json_object]",
        f"{data}:3: field step is a string 'two': Input should be a valid integer "
        "[check: field_types]",
    ]
    assert lines[2].startswith("FAILED: 1/3 rows valid, 2 problem(s)")


def test_validate_usage_errors_exit_2_without_running_the_flow(tmp_path, capsys):
    assert validate(tmp_path / "missing.jsonl", out=tmp_path / "runs") == 2
    assert validate() == 2
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    assert validate(data, overrides=tmp_path / "nope.jsonl", out=tmp_path / "runs") == 2
    err = capsys.readouterr().err
    assert "no such file: " in err and "no files given" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("arguments", [[], ["missing.jsonl"], ["--out"]])
def test_command_line_usage_errors_exit_2(arguments):
    with pytest.raises(SystemExit) as exit_:
        app(["validate", *arguments])
    assert exit_.value.code == 2


def _flow_run_logs(flow_run_id) -> list[str]:
    APILogHandler().flush()  # logs reach the API in batches
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id={"any_": [flow_run_id]}))
    return [log.message for log in logs]


def test_failed_run_logs_its_problem_lines_up_to_a_cap_then_a_count(
    prefect_harness, tmp_path, monkeypatch
):
    monkeypatch.setattr(validate_tasks, "MAX_LOGGED_PROBLEMS", 2)
    data = write_lines(tmp_path / "rows.jsonl", GOOD, b"[1]", b"{", row_bytes(lang="fr"))
    state = data_quality(files=[data], out=tmp_path / "runs", return_state=True)

    logs = _flow_run_logs(state.state_details.flow_run_id)
    assert f"{data}:2: line is an array, not a JSON object [check: json_object]" in logs
    assert any(line.startswith(f"{data}:3: not JSON") for line in logs)
    assert not any(line.startswith(f"{data}:4:") for line in logs)
    assert any(line.startswith("... and 1 more problem(s): failures.csv in ") for line in logs)
    assert state.is_failed()


def test_a_failed_deployment_run_reads_in_one_screen(prefect_harness, tmp_path):
    """As a deployment's runner runs it (`run_flow` with the run's logger for engine errors):
    the problem lines at ERROR in a red gate task, the verdict artifact on the flow run listing
    the failures first, and no engine traceback after the verdict."""
    from prefect.flow_engine import flow_run_logger, run_flow

    data = write_lines(tmp_path / "rows.jsonl", GOOD, b"[1]")
    parameters = {"files": [str(data)], "out": str(tmp_path / "runs")}
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(data_quality, parameters=parameters)
    with pytest.raises(DataGateFailed):
        run_flow(data_quality, flow_run, parameters, error_logger=flow_run_logger(flow_run))

    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id={"any_": [flow_run.id]}))
        task_runs = {t.name: t for t in client.read_task_runs()}
        artifacts = client.read_artifacts()
        state = client.read_flow_run(flow_run.id).state
    problem = f"{data}:2: line is an array, not a JSON object [check: json_object]"
    assert [log.level for log in logs if log.message == problem] == [logging.ERROR]
    assert not [
        log.message for log in logs if "Traceback" in log.message or "Engine" in log.message
    ]
    assert state.is_failed() and state.message.startswith("data gate failed: 1 of 2 rows invalid")
    assert task_runs["gate verdict"].state.is_failed()
    (verdict,) = [
        a for a in artifacts if a.key == "data-gate-verdict" and a.flow_run_id == flow_run.id
    ]
    assert verdict.task_run_id is None  # the flow run's own artifact, listed first
    assert verdict.data.splitlines()[0].startswith("# Data gate FAILED: 1 of 2 rows invalid")
    assert verdict.data.splitlines()[2] == f"- `{problem}`"


def test_passing_run_is_completed_named_and_tagged_by_its_data(prefect_harness, tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    state = data_quality(train_files=[data], out=tmp_path / "runs", return_state=True)

    assert state.is_completed()
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(state.state_details.flow_run_id)
    assert re.fullmatch(r"data-quality-1-files-\d{8}-\d{4}", flow_run.name)
    assert f"data:{files_hash([data])[:12]}" in flow_run.tags
    # the tags a deployment run has too, so one filter finds runs from the CLI and the schedule
    assert {"toolgrpo", "data-quality"} <= set(flow_run.tags)


def test_the_data_tag_hashes_the_files_bytes_in_order_across_read_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "HASH_CHUNK_BYTES", 7)
    first = write_lines(tmp_path / "a.jsonl", GOOD, b"not json")
    second = write_lines(tmp_path / "b.jsonl", row_bytes(id="b1"))
    whole = hashlib.sha256(first.read_bytes() + second.read_bytes()).hexdigest()

    assert files_hash([first, tmp_path / "missing.jsonl", second]) == whole
    assert files_hash([second, first]) != whole


def test_rows_by_file_add_up_to_the_total_with_unreadable_rows_counted(tmp_path):
    first = write_lines(tmp_path / "a.jsonl", GOOD, b"not json")
    second = write_lines(tmp_path / "b.jsonl", row_bytes(id="b1", lang="fr"), row_bytes(id="b2"))
    loaded = load_samples.fn([first, second])
    report = validate_samples.fn(loaded).model_copy(update={"counts": count_rows(loaded)})

    markdown = render_markdown(report)
    assert "2 of 4 rows valid, 2 invalid" in markdown
    assert f"| {first} | 2 | 1 | 1 |" in markdown
    assert f"| {second} | 2 | 1 | 1 |" in markdown
    assert "## Rows by lang (3 readable rows)" in markdown


def test_a_long_list_of_warnings_shows_its_first_lines_and_where_the_rest_are(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    warnings = [f"rows.jsonl:{line}: a warning" for line in range(MAX_LISTED_FAILURES + 7)]
    report = validate_samples.fn(load_samples.fn([data])).model_copy(update={"warnings": warnings})
    markdown = render_markdown(report)
    assert markdown.count("a warning") == MAX_LISTED_FAILURES
    assert f"rows.jsonl:{MAX_LISTED_FAILURES - 1}: a warning" in markdown
    assert "... 7 more in data_quality.json (`warnings`)" in markdown


@pytest.mark.parametrize("solution", ["not json", '["a list"]', '{"thought": "x"} trailing', ""])
def test_a_solution_that_is_not_a_json_object_is_one_problem_line(tmp_path, solution):
    data = write_lines(tmp_path / "rows.jsonl", row_bytes(solution=solution))
    report = validate_samples.fn(load_samples.fn([data]))
    assert [p.check for p in report.failures] == ["solution_is_json_object"]


def test_a_message_quoting_markup_renders_as_written(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", row_bytes(tool="`rm -rf` *now* <b>|x|</b>"))
    report = validate_samples.fn(load_samples.fn([data]))
    (problem,) = [p for p in report.failures if p.check == "tool_in_catalogue"]

    html = MarkdownIt("commonmark").enable("table").render(render_markdown(report))
    # Each problem line is one code span: shown as written, whatever markup it quotes.
    assert str(problem) in [
        unescape(item) for item in re.findall(r"<li><code>(.*?)</code></li>", html)
    ]


# Controls, format and separator characters (Cc, Cf, Zl, Zp) are shown as escapes instead (#42).
INVISIBLE_CATEGORIES = ["Cs", "Cc", "Cf", "Zl", "Zp"]


@settings(max_examples=500, deadline=None)
@given(
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=INVISIBLE_CATEGORIES),
        max_size=40,
    )
)
@example("--")  # with the list item's own dash, a thematic break
def test_escaped_text_renders_as_the_text_itself(text):
    html = MarkdownIt("commonmark").enable("table").render(f"- {markdown_text(text)}")
    shown = unescape(re.sub(r"</?(ul|li|p)>", "", html))
    assert " ".join(shown.split()) == " ".join(text.split())


def _train_and_eval(tmp_path: Path, eval_row: bytes) -> tuple[Path, Path]:
    train = write_lines(tmp_path / "train.jsonl", GOOD)
    return train, write_lines(tmp_path / "eval.jsonl", eval_row)


def test_eval_row_sharing_a_training_scenario_fails_when_the_roles_are_known(tmp_path):
    train, evaluation = _train_and_eval(tmp_path, row_bytes(id="e1"))  # same scenario and prompt
    loaded = load_samples.fn([train, evaluation])
    report = validate_samples.fn(loaded, [str(train)], [str(evaluation)])

    assert [str(p) for p in report.failures] == [
        f'{evaluation}:1: scenario_id "s" is also in training row {train}:1 '
        "[check: eval_not_in_training]"
    ]
    assert (report.valid_rows, report.invalid_rows) == (1, 1)


def test_eval_row_sharing_only_a_normalised_prompt_is_leakage_too(tmp_path):
    prompt = "  WHAT is the balance   of ACC001? "
    train, evaluation = _train_and_eval(tmp_path, row_bytes(scenario_id="other", prompt=prompt))
    report = validate_samples.fn(
        load_samples.fn([train, evaluation]), [str(train)], [str(evaluation)]
    )
    assert [p.message for p in report.failures] == [f"its prompt is also in training row {train}:1"]


def test_rows_shared_by_files_of_unknown_role_are_only_a_warning(tmp_path):
    train, evaluation = _train_and_eval(tmp_path, row_bytes(id="e1"))
    report = validate_samples.fn(load_samples.fn([train, evaluation]))

    assert report.ok
    assert report.warnings == [
        f"{train} and {evaluation} share 1 scenario_id(s) ('s'): leakage if one trains and the "
        "other evaluates; give the files as --train/--eval to check",
        f"{train} and {evaluation} share 1 normalised prompt(s) ('what is the balance of "
        "acc001?'): leakage if one trains and the other evaluates; give the files as "
        "--train/--eval to check",
    ]


def test_validate_with_roles_exits_1_on_leakage(prefect_harness, tmp_path, capsys):
    train, evaluation = _train_and_eval(tmp_path, row_bytes(id="e1"))
    assert validate(train=[train], eval_=[evaluation], out=tmp_path / "runs") == 1
    assert "[check: eval_not_in_training]" in capsys.readouterr().out
    assert validate(train, evaluation, out=tmp_path / "runs") == 0
    assert "warning: " in capsys.readouterr().out
