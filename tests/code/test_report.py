"""The retrain flow's pieces that need no training: fingerprint, eval rows, report rendering, the
headline and its goals, the smoke preset's note."""

from pathlib import Path

import polars as pl
import pytest
from matplotlib.figure import Figure
from prediction_rows import prediction_row, predictions_frame

from toolgrpo.evaluation.metrics import compute_metrics
from toolgrpo.evaluation.predict import evaluation_rows
from toolgrpo.mining.miner import mine_errors
from toolgrpo.reporting.headline import headline_markdown
from toolgrpo.reporting.run_report import before_after_rows, report_html, report_markdown
from toolgrpo.schemas.run import Headline, RunSummary, StageTraining, ZeroStdGroups
from toolgrpo.tasks.train import fingerprint, training_code
from toolgrpo.training.config_overrides import load_preset, with_overrides


def _headline(value: float, sources: tuple[str, ...] = ("eval/a", "eval/b")) -> Headline:
    return Headline(
        overall=value, single=value, multi=value, condition_fails=None, condition_holds=None,
        scenario=value, by_step={1: value, 2: value}, by_source=dict.fromkeys(sources, value),
        n={"overall": 8, "single": 4, "multi": 4, "condition_fails": 0, "condition_holds": 0,
           "scenario": 2, "step 1": 6, "step 2": 2, **dict.fromkeys(sources, 4)},
    )  # fmt: skip


MULTI = {"n_steps": 2, "source": "eval/multistep"}


@pytest.fixture
def mixed_predictions():
    return predictions_frame(
        [
            prediction_row("s1", "check_balance", source="eval/single_step"),
            prediction_row("s2", "withdraw", "check_balance", source="eval/single_step"),
            prediction_row("m1", "check_balance", kind="multi", step=1, scenario_id="m", **MULTI),
            prediction_row("m2", "transfer_funds", kind="multi", step=2, scenario_id="m", **MULTI),
        ]
    )


def test_zero_std_line_matches_the_case_study():
    assert ZeroStdGroups(zero=3243, total=5108, changed=0).line() == "Zero std: 3243/5108 (63.5%)"
    assert ZeroStdGroups(zero=0, total=0, changed=0).line() == "Zero std: 0/0 (0.0%)"


def test_fingerprint_follows_data_and_config_but_not_data_paths_or_runtime(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n', encoding="utf-8")
    config = load_preset("smoke")
    key = fingerprint([rows], config)
    moved = with_overrides(config, {"data.train_single_step": tmp_path / "elsewhere.jsonl"})
    assert fingerprint([rows], moved) == key
    assert fingerprint([rows], with_overrides(config, {"runtime.torch_threads": 1})) == key
    assert fingerprint([rows], with_overrides(config, {"grpo.max_steps": 9})) != key
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
    assert rows[0] == {"accuracy": "overall", "n": "8", "sft": "50.0%", "grpo": "75.0%"}
    assert {"accuracy": "condition_fails", "n": "0", "sft": "–", "grpo": "–"} in rows
    assert [row["accuracy"] for row in rows[-3:]] == ["step 2", "eval/a", "eval/b"]
    assert rows[-1] == {"accuracy": "eval/b", "n": "4", "sft": "50.0%", "grpo": "75.0%"}


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


def _summary(preset: str, wall_s: float = 300.0) -> RunSummary:
    sources = ("eval/multistep", "eval/single_step")
    return RunSummary(
        preset=preset,
        run_dir=Path("/runs/r"),
        data_hash="a" * 64,
        config_hash="b" * 64,
        rows={"data/train/single_step.jsonl": 454, "data/eval/single_step.jsonl": 165},
        retrained=True,
        models={},
        accuracy={"sft": _headline(0.5, sources), "grpo": _headline(0.85, sources)},
        zero_std=ZeroStdGroups(zero=28, total=160, changed=1),
        flagged_label_ambiguity=[],
        flagged_label_conflict=[],
        wall_s={"sft": wall_s},
    )


def test_a_resumed_runs_headline_says_what_each_stage_did():
    training = {
        "sft": StageTraining(trained_here=False, steps=12, wall_s=0.0),
        "grpo": StageTraining(trained_here=True, steps=150, resumed_from_step=20, wall_s=342.4),
    }
    summary = _summary("cpu").model_copy(update={"training": training})
    markdown = headline_markdown(summary, "/report")
    assert markdown.splitlines()[0].endswith("resumed an interrupted training")
    assert "- grpo: resumed from checkpoint 20: trained steps 21-150 in 342 s" in markdown
    assert "- sft: reused an earlier run's model (data and config unchanged)" in markdown


def test_the_headline_and_report_name_the_fields_set_on_top_of_the_preset(mixed_predictions):
    summary = _summary("cpu").model_copy(update={"overrides": {"grpo.max_steps": 5, "seed": 3}})
    first = headline_markdown(summary, "/report").splitlines()[0]
    assert first.startswith("## Retrain `cpu` with `grpo.max_steps=5`, `seed=3`: ")
    assert headline_markdown(_summary("cpu"), "/report").startswith("## Retrain `cpu`: ")
    metrics = compute_metrics(mixed_predictions)
    report = report_markdown(summary, metrics, mine_errors(mixed_predictions), {})
    assert report.startswith("# toolgrpo retrain — preset `cpu` with `grpo.max_steps=5`")


def test_headline_lists_each_eval_file_with_n_and_the_change():
    markdown = headline_markdown(_summary("cpu"), "/artifacts/artifact/1234")
    assert "| rows | n | sft | grpo | change |" in markdown
    assert "| eval/multistep | 4 | 50.0% | 85.0% | +35.0 pts |" in markdown
    assert "| overall | 8 | 50.0% | 85.0% | +35.0 pts |" in markdown
    assert "`Zero std: 28/160 (17.5%)`" in markdown
    assert "](/artifacts/artifact/1234)" in markdown


def test_a_headline_whose_report_artifact_was_not_sent_points_to_the_file():
    markdown = headline_markdown(_summary("cpu"), None)
    assert "](" not in markdown and "report.html:" in markdown


def test_headline_says_which_goals_of_the_preset_were_met():
    markdown = headline_markdown(_summary("cpu", wall_s=900), "/report")
    assert markdown.startswith("## Retrain `cpu`: 1 of 4 goals met, trained on this run's data")
    assert "- ✅ eval/multistep ≥ 80.0%: 85.0%" in markdown
    assert "- – condition_fails ≥ 80.0%: not measured" in markdown
    assert "- ❌ eval/single_step ≥ 95.0%: 85.0%" in markdown
    assert "- ❌ wall time ≤ 10 min: 15.0 min" in markdown


def test_the_pretrained_presets_goals_include_unseen_wording_and_both_branches():
    markdown = headline_markdown(_summary("pretrained"), "/report")
    assert markdown.startswith("## Retrain `pretrained`: ")
    assert "of 5 goals met" in markdown.splitlines()[0]
    assert "eval/unseen_phrasing ≥ 85.0%" in markdown
    assert "condition_holds ≥ 85.0%" in markdown and "wall time" not in markdown


def test_smoke_reports_say_at_the_top_that_near_zero_accuracy_is_expected(mixed_predictions):
    summary = _summary("smoke")
    metrics = compute_metrics(mixed_predictions)
    report = report_markdown(summary, metrics, mine_errors(mixed_predictions), {"plot": "p.png"})
    title, note = report.split("\n\n")[:2]
    assert title == "# toolgrpo retrain — preset `smoke`"
    assert note.startswith("> **Smoke run: a plumbing check, not a measurement.**")
    assert "Rows evaluated: eval/multistep 2, eval/single_step 2." in report
    # train/ and eval/ both hold a single_step file: each named by its folder
    assert "train/single_step 454, eval/single_step 165" in report
    assert "| accuracy | n | sft | grpo |" in report
    assert "![plot](p.png)" in report
    headline = headline_markdown(summary, "/report")
    assert headline.split("\n\n")[1].startswith("> **Smoke run")
    assert "goals met" not in headline
    assert "Smoke run" not in report_markdown(
        _summary("cpu"), metrics, mine_errors(mixed_predictions), {}
    )
