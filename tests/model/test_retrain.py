"""The main job end to end on the smoke preset: gate, train, evaluate, mine, report, cache."""

import json
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from prefect import get_client
from transformers import AutoModelForCausalLM

from toolgrpo.flows.retrain import SHIPPED_EVAL_FILES, RetrainOverrides, retrain
from toolgrpo.tasks.cache_locks import ProcessFileLocks
from toolgrpo.tasks.runs import files_hash
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.orphans import this_process
from toolgrpo.validation.gate import DataGateFailed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_summary(prefect_harness, tmp_path_factory):
    return retrain(preset="smoke", out=tmp_path_factory.mktemp("runs"), audit_folds=3)


def test_retrain_writes_summary_for_automation(smoke_summary):
    summary = json.loads((smoke_summary.run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["retrained"] is True
    assert sorted(summary["accuracy"]) == ["grpo", "sft"]
    for stage in ("sft", "grpo"):
        accuracy = summary["accuracy"][stage]
        assert {"overall", "single", "multi", "condition_fails", "by_step"} <= set(accuracy)
        assert 0.0 <= accuracy["overall"] <= 1.0
    assert sorted(summary["rows"].values())[-2:] == [454, 823]
    assert summary["zero_std"]["total"] > 0
    assert summary["zero_std"]["zero"] <= summary["zero_std"]["total"]
    assert set(summary["wall_s"]) >= {"data gate", "sft", "grpo", "evaluate", "mine"}
    assert isinstance(summary["flagged_label_ambiguity"], list)


def test_retrain_leaves_loadable_models(smoke_summary):
    model = AutoModelForCausalLM.from_pretrained(smoke_summary.models["grpo"])
    assert model.num_parameters() > 0


def test_report_is_self_contained_with_plots(smoke_summary):
    run_dir = smoke_summary.run_dir
    for name in ("reward", "zero_std", "accuracy", "confusion"):
        assert (run_dir / "plots" / f"{name}.png").stat().st_size > 5_000
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == 4
    assert "Zero std: " in html
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "Tool accuracy before and after GRPO" in markdown
    assert (run_dir / "mining" / "review_queue.csv").is_file()


def test_unchanged_data_and_config_reuse_the_trained_models(smoke_summary):
    again = retrain(preset="smoke", out=smoke_summary.run_dir.parent, audit_folds=3)
    assert again.retrained is False
    assert again.run_dir != smoke_summary.run_dir
    assert again.models == smoke_summary.models
    assert not (again.run_dir / "sft").exists()
    assert not list((again.run_dir / "audit").glob("fold-*/sft"))
    assert (again.run_dir / "report.html").is_file()


def test_cross_fitted_audit_scores_each_training_row_with_a_model_that_never_saw_it(
    smoke_summary,
):
    run_dir = smoke_summary.run_dir
    cross_fitted = pl.read_parquet(run_dir / "audit" / "predictions.parquet")
    in_sample = pl.read_parquet(run_dir / "eval_train" / "predictions.parquet")
    assert cross_fitted["id"].to_list() == in_sample["id"].to_list()
    folds = sorted((run_dir / "audit").glob("fold-*-of-3"))
    assert len(folds) == 3
    for fold in folds:
        trained = pl.concat(
            [pl.read_ndjson(path).select("scenario_id") for path in (fold / "data").glob("*.jsonl")]
        )
        scored = pl.read_parquet(fold / "eval" / "predictions.parquet")
        assert not set(scored["scenario_id"]) & set(trained["scenario_id"])
        assert (fold / "sft" / "model" / "config.json").is_file()
    findings = json.loads((run_dir / "mining" / "findings.json").read_text(encoding="utf-8"))
    assert findings["label_issues_out_of_sample"] is True


SMOKE_TRAIN_FILES = load_preset("smoke").data.training_files()


def test_invalid_row_stops_the_flow_before_training(prefect_harness, tmp_path):
    good = SMOKE_TRAIN_FILES
    bad = tmp_path / "bad.jsonl"
    row = json.loads(good[0].read_text(encoding="utf-8").splitlines()[0])
    bad.write_text(json.dumps({**row, "id": "bad-1", "tool": "teleport"}) + "\n", encoding="utf-8")
    out = tmp_path / "runs"
    with pytest.raises(DataGateFailed) as failed:
        retrain(preset="smoke", train_files=[*good, bad], out=out)
    assert any(p.file.endswith("bad.jsonl") and p.line == 1 for p in failed.value.report.failures)
    (run_dir,) = out.iterdir()
    assert not (run_dir / "sft").exists()
    assert "bad.jsonl:1" in (run_dir / "data_quality" / "report.md").read_text(encoding="utf-8")


def test_rows_sft_mixes_in_pass_the_gate_too(prefect_harness, tmp_path):
    """An auxiliary file (`data.train_aux`) is training data when `data.aux_share` mixes it in:
    a bad row there stops the run before training, like one in a training file."""
    row = json.loads(SMOKE_TRAIN_FILES[0].read_text(encoding="utf-8").splitlines()[0])
    aux = tmp_path / "aux.jsonl"
    aux.write_text(json.dumps({**row, "id": "aux-1", "tool": "teleport"}) + "\n", encoding="utf-8")
    mixed = RetrainOverrides.from_dotted({"data.train_aux": str(aux), "data.aux_share": 0.2})
    state = retrain(preset="smoke", config=mixed, out=tmp_path / "runs", return_state=True)
    with pytest.raises(DataGateFailed) as failed:
        state.result()
    assert {(Path(p.file).name, p.line) for p in failed.value.report.failures} == {("aux.jsonl", 1)}
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert not (run_dir / "sft").exists()
    # and the run's data tag hashes them with the training and eval rows
    with get_client(sync_client=True) as client:
        tags = client.read_flow_run(state.state_details.flow_run_id).tags
    assert f"data:{files_hash([*SMOKE_TRAIN_FILES, aux, *SHIPPED_EVAL_FILES])[:12]}" in tags


def test_a_run_without_training_files_gates_the_presets(prefect_harness, tmp_path):
    """The cpu preset names the walked multi-step rows, drills and paraphrases: a run given no
    training files gates (and would train on) those, not the shipped data/train/multistep.jsonl.
    An eval file with a bad row stops it before training, so the gate's file list is all there
    is to read."""
    row = json.loads(SMOKE_TRAIN_FILES[0].read_text(encoding="utf-8").splitlines()[0])
    bad_eval = tmp_path / "eval.jsonl"
    bad_row = json.dumps({**row, "id": "e-1", "tool": "teleport"})
    bad_eval.write_text(bad_row + "\n", encoding="utf-8")
    out = tmp_path / "runs"
    with pytest.raises(DataGateFailed) as failed:
        retrain(preset="cpu", eval_files=[bad_eval], out=out)
    cpu = load_preset("cpu").data
    expected = [*cpu.training_files(), *cpu.train_aux, bad_eval]
    assert failed.value.report.files == [str(path) for path in expected]
    assert "aux/walked/multistep.jsonl" in str(cpu.train_multistep)


def test_two_runs_of_the_same_data_and_config_at_once_train_once(prefect_harness, tmp_path):
    seed = RetrainOverrides.from_dotted({"seed": 7})  # a cache entry of its own
    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(
                retrain, preset="smoke", config=seed, out=tmp_path / name, audit_training_rows=False
            )
            for name in ("first", "second")
        ]
        summaries = [run.result() for run in runs]
    trained = [summary for summary in summaries if summary.retrained]
    assert len(trained) == 1  # the other waited for it, then reused its models
    assert summaries[0].models == summaries[1].models
    assert sum((summary.run_dir / "sft").exists() for summary in summaries) == 1


def test_a_lock_left_by_a_dead_process_is_free(tmp_path):
    locks = ProcessFileLocks(tmp_path)
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = f"{socket.gethostname()}:{ended.pid}"
    (tmp_path / "sft-key.lock").write_text(
        json.dumps({"holder": "a", "expiration": None, "process": dead})
    )
    assert locks.holder_process("sft-key") is None
    assert not (tmp_path / "sft-key.lock").exists()
    assert locks.acquire_lock("sft-key", holder="b", acquire_timeout=1)
    assert locks.holder_process("sft-key") == this_process()
