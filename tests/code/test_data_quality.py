"""The data-quality flow and `toolgrpo validate`: report files, Prefect artifacts, exit codes."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path

import polars as pl
import pytest
from prefect.client.orchestration import get_client

from tests.code.test_load import GOOD, row_bytes, write_lines
from toolgrpo.flows.cli import app, validate
from toolgrpo.flows.data_quality import data_quality
from toolgrpo.reporting.data_quality import render_markdown
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import enforce_data_gate, validate_samples
from toolgrpo.validation.gate import DataGateFailed


async def artifact_keys() -> set[str]:
    async with get_client() as client:
        return {artifact.key for artifact in await client.read_artifacts()}


def test_flow_writes_the_report_and_publishes_artifacts(prefect_harness, tmp_path):
    data = write_lines(
        tmp_path / "rows.jsonl", GOOD, b"not json", row_bytes(lang="fr"), row_bytes(id="ok")
    )
    report = data_quality(files=[data], out=tmp_path / "runs")

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


def test_failed_gate_raises_with_the_report_attached(tmp_path):
    report = validate_samples.fn(load_samples.fn([write_lines(tmp_path / "r.jsonl", b"{")]))
    with pytest.raises(DataGateFailed, match="1 of 1 rows invalid") as failed:
        enforce_data_gate.fn(report)
    assert failed.value.report is report
    # Prefect pickles a task's exception into its state
    assert pickle.loads(pickle.dumps(failed.value)).report == report
    passing = validate_samples.fn(load_samples.fn([write_lines(tmp_path / "ok.jsonl", GOOD)]))
    assert enforce_data_gate.fn(passing) is passing


def test_validate_exits_0_when_every_row_is_valid(prefect_harness, tmp_path, capsys):
    data = write_lines(tmp_path / "rows.jsonl", GOOD)
    assert validate(data, out=tmp_path / "runs") == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: 1/1 rows valid") and "report.md" in out


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
