"""The retrain flow's pieces that need no training: fingerprint, eval rows, report rendering."""

import polars as pl
from matplotlib.figure import Figure

from toolgrpo.evaluation.metrics import Headline
from toolgrpo.evaluation.predict import evaluation_rows
from toolgrpo.flows.retrain import fingerprint, training_code
from toolgrpo.reporting.run_report import before_after_rows, report_html
from toolgrpo.schemas.run import ZeroStdGroups
from toolgrpo.training.config import load_preset


def _headline(value: float) -> Headline:
    return Headline(
        overall=value, single=value, multi=value, condition_fails=None, condition_holds=None,
        scenario=value, by_step={1: value, 2: value}, by_source={"eval/a": value, "eval/b": value},
    )  # fmt: skip


def test_zero_std_line_matches_the_case_study():
    assert ZeroStdGroups(zero=3243, total=5108, changed=0).line() == "Zero std: 3243/5108 (63.5%)"
    assert ZeroStdGroups(zero=0, total=0, changed=0).line() == "Zero std: 0/0 (0.0%)"


def test_fingerprint_follows_data_and_config_but_not_data_paths_or_runtime(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n', encoding="utf-8")
    config = load_preset("smoke")
    key = fingerprint([rows], config)
    moved = config.with_overrides({"data.train_single_step": tmp_path / "elsewhere.jsonl"})
    assert fingerprint([rows], moved) == key
    assert fingerprint([rows], config.with_overrides({"runtime.torch_threads": 1})) == key
    assert fingerprint([rows], config.with_overrides({"grpo.max_steps": 9})) != key
    rows.write_text('{"id": "b"}\n', encoding="utf-8")
    assert fingerprint([rows], config) != key


def test_fingerprint_follows_the_training_code(tmp_path):
    rows, trainer = tmp_path / "rows.jsonl", tmp_path / "trainer.py"
    rows.write_text('{"id": "a"}\n', encoding="utf-8")
    trainer.write_text("LEARNING_RATE = 1\n", encoding="utf-8")
    config = load_preset("smoke")
    key = fingerprint([rows], config, code=[trainer])
    trainer.write_text("LEARNING_RATE = 2\n", encoding="utf-8")
    assert fingerprint([rows], config, code=[trainer]) != key
    assert any(path.name == "sft.py" for path in training_code())


def test_evaluation_rows_cap_each_file():
    frame = pl.DataFrame(
        {"file": ["d/eval/a.jsonl"] * 3 + ["d/eval/unseen.jsonl"] * 2, "id": list("vwxyz")}
    )
    capped = evaluation_rows(frame, max_rows=2)
    assert capped["id"].to_list() == ["v", "w", "y", "z"]
    assert evaluation_rows(frame, None).height == 5


def test_before_after_rows_put_stages_side_by_side():
    rows = before_after_rows({"sft": _headline(0.5), "grpo": _headline(0.75)})
    assert rows[0] == {"accuracy": "overall", "sft": "50.0%", "grpo": "75.0%"}
    assert {"accuracy": "condition_fails", "sft": "–", "grpo": "–"} in rows
    assert [row["accuracy"] for row in rows[-3:]] == ["step 2", "eval/a", "eval/b"]
    assert rows[-1] == {"accuracy": "eval/b", "sft": "50.0%", "grpo": "75.0%"}


def test_report_html_inlines_its_plots(tmp_path):
    figure = Figure(figsize=(2, 2))
    figure.subplots().plot([0, 1], [0, 1])
    (tmp_path / "plots").mkdir()
    figure.savefig(tmp_path / "plots" / "x.png")
    markdown = "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![x](plots/x.png)"
    html = report_html(markdown, tmp_path, [tmp_path / "plots" / "x.png"])
    assert 'src="data:image/png;base64,' in html
    assert "<table>" in html
    assert "plots/x.png" not in html
