"""The ablation: arm configs, checkpoint discovery, aggregation across seeds, the verdict, and a
smoke-preset flow run end to end."""

import importlib.util
import json
import shutil
from functools import reduce
from pathlib import Path

import pytest

from toolgrpo.ablation.arms import (
    AblationError,
    ArmRun,
    Scores,
    arm_config,
    checkpoint_models,
    start_config,
)
from toolgrpo.ablation.merge import merge_summaries, read_summary
from toolgrpo.ablation.summary import AblationSummary, AcrossSeeds, aggregate_arms
from toolgrpo.ablation.verdict import compare, eval_noise, mean_change, write_verdict
from toolgrpo.data import DATA_DIR
from toolgrpo.flows import ablation as ablation_flow
from toolgrpo.flows import cli
from toolgrpo.flows.ablation import PARAMS_FILE, parse_params, run_ablation
from toolgrpo.reporting.ablation import ablation_markdown
from toolgrpo.reporting.plots import CURVES, learning_curves, plot_learning_curves
from toolgrpo.schemas.run import ZeroStdGroups
from toolgrpo.tasks.train import Supervised
from toolgrpo.training.config import CONFIG_FILENAME, TrainConfig
from toolgrpo.training.config_overrides import load_preset, overridable_fields
from toolgrpo.training.metrics import METRICS_FILENAME, read_metrics, training_seconds
from toolgrpo.validation.gate import DataGateFailed


def _scores(step: int, multi: float, single: float = 0.9) -> Scores:
    return Scores(
        step=step,
        multi=multi,
        single=single,
        overall=(multi + single) / 2,
        condition_fails=None,
        condition_holds=None,
        json_valid=1.0,
    )


def _run(
    arm: str,
    seed: int,
    multi: list[float],
    *,
    start: str = "single_only",
    calibrated: int = 0,
    zero_std: int = 6,
) -> ArmRun:
    """An arm whose multi-step accuracy at steps 0, 5, 10, … is `multi` (step 0 is SFT)."""
    return ArmRun(
        start=start,
        arm=arm,
        seed=seed,
        curve=[_scores(5 * i, value) for i, value in enumerate(multi)],
        groups=ZeroStdGroups(zero=zero_std, changed=calibrated, total=10),
        wall_s=100.0 + seed,
    )


def _summary(runs: list[ArmRun], **fields) -> AblationSummary:
    return AblationSummary(
        preset="cpu",
        steps=10,
        eval_every=5,
        seeds=sorted({run.seed for run in runs}),
        eval_rows=256,
        arms=aggregate_arms(runs),
        runs=runs,
        **fields,
    )


# --- configs -------------------------------------------------------------------------------


def test_partial_start_trains_sft_on_a_tenth_of_the_multi_step_scenarios():
    partial = start_config("cpu", "partial", seed=0, torch_threads=1, overrides={})
    assert partial.sft.multistep_fraction == 0.1
    default = start_config("cpu", "default", seed=0, torch_threads=1, overrides={})
    assert default.sft.multistep_fraction == load_preset("cpu").sft.multistep_fraction


def test_single_only_start_trains_sft_on_no_multi_step_scenario():
    single_only = start_config("cpu", "single_only", seed=3, torch_threads=1, overrides={})
    default = start_config("cpu", "default", seed=3, torch_threads=1, overrides={})
    assert single_only.sft.multistep_fraction == 0.0
    assert default.sft.multistep_fraction == load_preset("cpu").sft.multistep_fraction
    assert (single_only.seed, single_only.runtime.torch_threads) == (3, 1)


def test_arms_differ_from_their_start_only_in_estimator_steps_and_checkpoints():
    start = start_config("cpu", "default", seed=1, torch_threads=2, overrides={})
    arm = arm_config(start, "all", steps=30, eval_every=10)
    changed = {
        path
        for path in overridable_fields()
        if reduce(getattr, path.split("."), arm) != reduce(getattr, path.split("."), start)
    }
    assert changed <= {
        "grpo.ngrpo_scope",
        "grpo.max_steps",
        "runtime.save_steps",
        "runtime.save_total_limit",
    }
    assert (arm.grpo.ngrpo_scope, arm.grpo.max_steps, arm.runtime.save_steps) == ("all", 30, 10)
    assert arm.runtime.save_total_limit >= 4  # checkpoints 10, 20, 30 all kept for evaluation


def test_the_tool_score_arm_is_the_zero_std_scope_deciding_on_the_tool_component():
    start = start_config("cpu", "default", seed=1, torch_threads=2, overrides={})
    arm = arm_config(start, "zero_std_tool", steps=30, eval_every=10)
    assert (arm.grpo.ngrpo_scope, arm.grpo.ngrpo_zero_std_on) == ("zero_std", "tool")
    assert arm_config(start, "zero_std", 30, 10).grpo.ngrpo_zero_std_on == "total"


def test_every_complete_checkpoint_and_the_final_model_are_evaluated(tmp_path):
    for name in ["checkpoint-5", "checkpoint-10", "checkpoint-12", "model", "checkpoint-x"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-7").mkdir()  # killed while saving: no trainer_state.json
    models = checkpoint_models(tmp_path, max_steps=12)
    assert models == {
        5: tmp_path / "checkpoint-5",
        10: tmp_path / "checkpoint-10",
        12: tmp_path / "model",
    }


def test_group_counts_come_from_the_last_line_that_carries_them():
    lines = [
        {"step": 1, "zero_std_groups_total": 2, "calibrated_groups_total": 1, "groups_total": 4},
        {"step": 2, "zero_std_groups_total": 5, "calibrated_groups_total": 3, "groups_total": 8},
        {"step": 2, "train_runtime": 12.0},
    ]
    assert ZeroStdGroups.from_metrics(lines) == ZeroStdGroups(zero=5, changed=3, total=8)


def _bad_training_file(tmp_path: Path) -> Path:
    """A single-step file whose second row names a tool the catalogue lacks."""
    good, *_ = (DATA_DIR / "train" / "single_step.jsonl").read_text(encoding="utf-8").splitlines()
    row = json.loads(good)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n{json.dumps({**row, 'id': 'bad-2', 'tool': 'teleport'})}\n")
    return bad


def test_a_bad_training_row_stops_the_ablation_before_anything_trains(prefect_harness, tmp_path):
    params = parse_params(
        preset="smoke",
        seeds=1,
        arms=["none"],
        starts=["single_only"],
        out=tmp_path / "runs",
        overrides={"data.train_single_step": str(_bad_training_file(tmp_path))},
    )
    with pytest.raises(DataGateFailed) as failed:
        run_ablation(params)
    problems = {(Path(p.file).name, p.line, p.check) for p in failed.value.report.failures}
    assert ("bad.jsonl", 2, "tool_in_catalogue") in problems
    (run_dir,) = (tmp_path / "runs").iterdir()
    # no start, no arm: the gate's report and what a fixed rerun can resume with
    assert {p.name for p in run_dir.iterdir()} == {"data_quality", PARAMS_FILE}
    assert "bad.jsonl:2" in (run_dir / "data_quality" / "report.md").read_text(encoding="utf-8")


def test_a_broken_eval_row_stops_the_ablation_and_the_cli_names_it(
    prefect_harness, tmp_path, capsys
):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a"\n', encoding="utf-8")
    params = parse_params(
        preset="smoke", seeds=1, arms=["none"], starts=["single_only"], out=tmp_path
    )
    with pytest.raises(DataGateFailed) as failed:
        run_ablation(params.model_copy(update={"eval_files": [broken]}))
    assert [(Path(p.file).name, p.line) for p in failed.value.report.failures] == [
        ("broken.jsonl", 1)
    ]
    bad = _bad_training_file(tmp_path)
    code = cli.ablate(
        preset="smoke",
        seeds=1,
        arms="none",
        starts="single_only",
        out=tmp_path / "cli",
        set_=[f"data.train_single_step={bad}"],
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "ablate: data gate failed: 1 of" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"arms": ["none", "bogus"]}, r"arms\.1: Input should be"),
        ({"arms": ["none", "none"]}, r"arms: \['none', 'none'\] names one twice"),
        ({"starts": []}, r"starts: List should have at least 1 item"),
        ({"preset": "nope"}, r"unknown preset 'nope'"),
        ({"overrides": {"no_such_field": 1}}, r"no_such_field: unknown field"),
        ({"eval_files": [Path("missing.jsonl")]}, r"eval files not found: missing\.jsonl"),
    ],
)
def test_bad_settings_are_refused_before_anything_trains(values, message):
    with pytest.raises(AblationError, match=message):
        parse_params(**values)


# --- aggregation ---------------------------------------------------------------------------


def test_aggregation_reports_mean_and_range_across_seeds_at_each_step():
    runs = [
        _run("none", 0, [0.1, 0.2, 0.3]),
        _run("none", 1, [0.3, 0.2, 0.5]),
        _run("zero_std", 0, [0.1, 0.4, 0.6], calibrated=4),
        _run("zero_std", 1, [0.3, 0.5, 0.8], calibrated=2),
    ]
    summary = _summary(runs)
    sft = summary.arm("single_only", "sft")
    assert (sft.step, sft.seeds) == (0, 2)
    assert sft.metrics["multi"] == AcrossSeeds(mean=0.2, low=0.1, high=0.3, n=2)
    ngrpo = summary.arm("single_only", "zero_std")
    assert ngrpo.step == 10
    assert ngrpo.metrics["multi"].mean == pytest.approx(0.7)
    assert (ngrpo.metrics["multi"].low, ngrpo.metrics["multi"].high) == (0.6, 0.8)
    assert [p.step for p in ngrpo.curve] == [0, 5, 10]
    changed = ngrpo.calibrated_share
    assert (changed.mean, changed.low, changed.high) == (pytest.approx(0.3), 0.2, 0.4)
    assert ngrpo.metrics["condition_fails"] is None  # no such rows: no number invented
    assert ngrpo.metrics["condition_holds"] is None


def test_curve_keeps_only_steps_every_seed_evaluated():
    short = _run("none", 1, [0.2, 0.3])
    runs = [_run("none", 0, [0.1, 0.2, 0.3]), short]
    grpo = _summary(runs).arm("single_only", "none")
    assert [p.step for p in grpo.curve] == [0, 5]
    assert grpo.step == 5


def test_spread_prints_the_range_only_when_there_are_several_seeds():
    assert AcrossSeeds.of([0.5]).percent() == "50.0%"
    assert AcrossSeeds.of([0.4, None, 0.6]).percent() == "50.0% (40.0–60.0)"
    assert AcrossSeeds.of([None]) is None


# --- verdict -------------------------------------------------------------------------------


def test_an_arm_wins_only_when_its_per_seed_lead_is_beyond_two_standard_errors():
    assert compare([0.10, 0.12, 0.08], accuracy=0.5) == "better"
    assert compare([-0.10, -0.12, -0.08], accuracy=0.5) == "worse"
    assert compare([0.20, -0.10, 0.05], accuracy=0.5) == "within seed noise"
    assert compare([0.0, 0.0], accuracy=0.5) == "within seed noise"
    assert compare([0.30], accuracy=0.5) == "unreplicated"


def test_a_gap_inside_the_evaluation_sampling_error_is_not_called_a_win():
    # The measured cpu ablation: NGRPO (all) 85.5/86.1% vs GRPO 86.7/89.1% on 165 multi rows.
    gaps = [0.855 - 0.867, 0.861 - 0.891]
    assert compare(gaps, accuracy=0.879) == "worse"
    assert compare(gaps, accuracy=0.879, rows=165) == "within eval noise"
    assert compare(gaps, accuracy=0.879, rows=100_000) == "worse"
    assert eval_noise(0.5, 100) == pytest.approx(2 * (0.5 / 50**0.5))


def test_verdict_pairs_seeds_so_starts_far_apart_do_not_hide_a_lead():
    """The seed ranges overlap (the starts are 20 points apart), yet NGRPO leads on every seed."""
    runs = [
        _run("none", 0, [0.1, 0.15, 0.2]),
        _run("none", 1, [0.3, 0.4, 0.5]),
        _run("zero_std", 0, [0.1, 0.2, 0.25], calibrated=3),
        _run("zero_std", 1, [0.3, 0.5, 0.56], calibrated=3),
    ]
    summary = _summary(runs)
    assert summary.arm("single_only", "zero_std").metrics["multi"].low < 0.5  # ranges overlap
    verdict = write_verdict(summary)
    assert (
        "NGRPO (zero-std) beat GRPO by 5.5 ± 0.5 points (seed by seed +5.0, +6.0; beyond 2 s.e.)"
    ) in verdict


def test_verdict_compares_no_arms_that_share_no_seed():
    runs = [_run("none", 0, [0.1, 0.2, 0.3]), _run("zero_std", 1, [0.1, 0.2, 0.6], calibrated=3)]
    verdict = write_verdict(_summary(runs))
    assert "NGRPO (zero-std) and GRPO share no seed, so they were not compared" in verdict


def test_verdict_states_a_win_with_points_and_the_calibrations_reach():
    runs = [
        _run("none", 0, [0.04, 0.0, 0.0]),
        _run("none", 1, [0.03, 0.01, 0.02]),
        _run("zero_std", 0, [0.04, 0.1, 0.2], calibrated=3),
        _run("zero_std", 1, [0.03, 0.15, 0.22], calibrated=5),
    ]
    verdict = write_verdict(_summary(runs))
    assert "From the single-step-only SFT start (2 seeds)" in verdict
    assert (
        "NGRPO (zero-std) beat GRPO by 20.0 ± 0.0 points (seed by seed +20.0, +20.0; beyond 2 s.e.)"
    ) in verdict
    assert "its calibration changed 40.0% (30.0–50.0) of groups" in verdict
    assert "after 10 GRPO steps" in verdict


def test_verdict_gives_each_arm_s_change_from_its_own_seed_s_sft_checkpoint():
    """Starts 20 points apart hide a lift every seed shows; the paired change does not."""
    runs = [
        _run("none", 0, [0.1, 0.2, 0.3]),
        _run("none", 1, [0.3, 0.5, 0.7]),
        _run("all", 0, [0.1, 0.1, 0.15]),
        _run("all", 1, [0.3, 0.2, 0.31]),
    ]
    verdict = write_verdict(_summary(runs))
    assert (
        "Against each seed's own SFT checkpoint (points; mean ± standard error over seeds): "
        "multi-step GRPO +30.0 ± 10.0 (beyond 2 s.e.), NGRPO (all) +3.0 ± 2.0; "
        "single-step GRPO +0.0 ± 0.0, NGRPO (all) +0.0 ± 0.0."
    ) in verdict
    one_seed = write_verdict(_summary(runs[::2]))
    assert "multi-step GRPO +20.0, NGRPO (all) +5.0;" in one_seed
    # the measured single-step changes (81/91 - 84/91, ...) average a hair under zero
    assert mean_change([81 / 91 - 84 / 91, 90 / 91 - 88 / 91, 85 / 91 - 84 / 91]) == "+0.0 ± 1.7"


def test_a_steady_change_of_a_few_rows_is_flagged_as_within_the_eval_s_sampling_error():
    """NGRPO (total)'s measured single-step changes: 2, 2 and 3 rows of 91, beyond two standard
    errors of three seeds but not of the held-out rows."""
    measured = [86 / 91 - 88 / 91, 85 / 91 - 87 / 91, 86 / 91 - 89 / 91]
    assert mean_change(measured) == "-2.6 ± 0.4 (beyond 2 s.e.)"
    assert mean_change(measured, accuracy=88 / 91, rows=91) == (
        "-2.6 ± 0.4 (beyond 2 s.e., within the 5.3-point sampling error of 91 rows)"
    )
    lift = [0.13, 0.12, 0.11]
    assert mean_change(lift, accuracy=0.56, rows=165) == "+12.0 ± 0.6 (beyond 2 s.e.)"
    assert mean_change([0.2, -0.1], accuracy=0.5, rows=165) == "+5.0 ± 15.0"


def test_verdict_measures_each_change_against_the_rows_of_its_own_file():
    runs = [
        _run("none", seed, [0.5, 0.55, 0.62 + seed / 100], start="partial") for seed in (0, 1, 2)
    ]
    for run in runs:  # single-step 2 rows of 91 down, every seed
        run.curve[-1] = run.curve[-1].model_copy(update={"single": 0.9 - 2 / 91})
    verdict = write_verdict(_summary(runs).model_copy(update={"multi_rows": 165}))
    assert "multi-step GRPO +13.0 ± 0.6 (beyond 2 s.e.)" in verdict
    assert "single-step GRPO -2.2 ± 0.0 (beyond 2 s.e., within the 8.9-point" in verdict
    assert "sampling error of 91 rows)" in verdict


def test_verdict_says_arms_tie_when_the_seeds_disagree():
    runs = [
        _run("none", 0, [0.4, 0.5, 0.60], start="default", calibrated=0),
        _run("none", 1, [0.4, 0.5, 0.70], start="default", calibrated=0),
        _run("all", 0, [0.4, 0.5, 0.75], start="default", calibrated=10),
        _run("all", 1, [0.4, 0.5, 0.65], start="default", calibrated=10),
    ]
    verdict = write_verdict(_summary(runs))
    assert "From the default warm start" in verdict
    assert (
        "NGRPO (all) and GRPO were within the seeds' noise of each other "
        "(+5.0 ± 10.0 points, seed by seed +15.0, -5.0)"
    ) in verdict
    assert "beat" not in verdict


def test_verdict_says_so_when_ngrpo_loses():
    runs = [
        _run("none", 0, [0.4, 0.6, 0.7]),
        _run("none", 1, [0.4, 0.6, 0.8]),
        _run("all", 0, [0.4, 0.3, 0.2], calibrated=9),
        _run("all", 1, [0.4, 0.3, 0.3], calibrated=9),
        _run("zero_std", 0, [0.4, 0.6, 0.7], calibrated=2),
        _run("zero_std", 1, [0.4, 0.6, 0.75], calibrated=2),
    ]
    verdict = write_verdict(_summary(runs))
    assert "NGRPO (all) lost to GRPO by 50.0 ± 0.0 points (seed by seed -50.0, -50.0" in verdict
    assert (
        "Between the scopes, NGRPO (all) lost to NGRPO (zero-std) by 47.5 ± 2.5 points"
    ) in verdict


def test_verdict_names_the_sampling_error_when_seeds_agree_on_a_few_rows():
    runs = [
        _run("none", 0, [0.87, 0.86, 0.867], start="default"),
        _run("none", 1, [0.88, 0.87, 0.891], start="default"),
        _run("all", 0, [0.87, 0.86, 0.855], start="default", calibrated=9),
        _run("all", 1, [0.88, 0.87, 0.861], start="default", calibrated=9),
    ]
    summary = _summary(runs).model_copy(update={"multi_rows": 165})
    verdict = write_verdict(summary)
    assert "NGRPO (all) and GRPO were within the evaluation's sampling error" in verdict
    assert "on 165 multi-step rows" in verdict
    assert "lost" not in verdict


def test_verdict_calls_a_calibration_that_never_fired_plain_grpo():
    runs = [
        _run("none", 0, [0.44, 0.6, 0.65], start="default"),
        _run("zero_std", 0, [0.44, 0.6, 0.65], start="default", calibrated=0),
    ]
    verdict = write_verdict(_summary(runs))
    assert "NGRPO (zero-std)'s calibration never changed a group's advantages" in verdict
    assert "(1 seed)" in verdict


def test_one_seed_is_reported_without_a_spread_claim():
    runs = [_run("none", 0, [0.1, 0.1, 0.1]), _run("zero_std", 0, [0.1, 0.2, 0.3], calibrated=4)]
    verdict = write_verdict(_summary(runs))
    assert "NGRPO (zero-std) was 20.0 points above GRPO with one seed (no spread)" in verdict
    assert "beat" not in verdict


def test_report_has_the_verdict_table_and_a_panel_per_start(tmp_path):
    runs = [
        _run(arm, seed, [0.1, 0.2 + seed / 10, 0.3], start=start, calibrated=3)
        for start in ["single_only", "default"]
        for arm in ["none", "zero_std"]
        for seed in [0, 1]
    ]
    summary = _summary(runs, overrides={"grpo.beta": 0.04})
    plot = plot_learning_curves(summary, tmp_path / "ablation.png")
    markdown = ablation_markdown(summary, write_verdict(summary), plot)
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "| single_only | NGRPO (zero-std) | 10 | 2 | 30.0% (30.0–30.0)" in markdown
    assert "| default | SFT (step 0) | 0 | 2 | 10.0% (10.0–10.0)" in markdown
    assert "Training settings of every stage: `grpo.beta=0.04`." in markdown
    assert "![held-out accuracy per GRPO step](ablation.png)" in markdown


def test_learning_curves_show_each_slice_per_start_as_the_mean_across_seeds():
    runs = [
        _run(arm, seed, [0.1, 0.2 + seed / 10, 0.3], start=start)
        for start in ["single_only", "partial"]
        for arm in ["none", "all"]
        for seed in [0, 1]
    ]
    figure = learning_curves(_summary(runs))
    axes = figure.get_axes()
    assert len(axes) == len(CURVES) * 2  # a row per slice, a column per start
    assert [ax.get_title() for ax in axes[:2]] == [
        "single-step-only SFT start",
        "partial SFT start (single-step + 10% of multi-step scenarios)",
    ]
    assert [axes[2 * row].get_ylabel() for row in range(len(CURVES))] == [
        f"{title} (%)" for title in CURVES.values()
    ]
    multi, single = axes[0], axes[2]  # first column: single_only
    assert [line.get_label() for line in multi.get_lines()] == ["GRPO", "NGRPO (all)"]
    assert list(multi.get_lines()[0].get_ydata()) == pytest.approx([10, 25, 30])
    assert list(single.get_lines()[0].get_ydata()) == pytest.approx([90, 90, 90])
    assert not axes[4].get_lines()  # no condition rows among these: no line drawn, and it says so
    assert [text.get_text() for text in axes[4].texts] == ["no such rows"]


# --- merging ablations run apart -----------------------------------------------------------


def _seed_runs(seed: int, multi: list[float]) -> list[ArmRun]:
    return [_run("none", seed, multi), _run("all", seed, [multi[0], *(m + 0.1 for m in multi[1:])])]


def test_seeds_run_apart_merge_into_the_ablation_that_ran_them_together():
    first, second = _seed_runs(0, [0.1, 0.2, 0.3]), _seed_runs(1, [0.2, 0.4, 0.5])
    merged = merge_summaries(
        {
            "seed0/ablation.json": _summary(first, overrides={"seed": 0, "grpo.beta": 0.04}),
            "seed1/ablation.json": _summary(second, overrides={"seed": 1, "grpo.beta": 0.04}),
        }
    )
    together = _summary(first + second)
    assert merged.arms == together.arms
    assert (merged.seeds, merged.runs) == ([0, 1], together.runs)
    assert merged.overrides == {"grpo.beta": 0.04}  # the seed is what differs
    assert merged.merged_from == ["seed0/ablation.json", "seed1/ablation.json"]
    assert merged.unchecked == []
    assert write_verdict(merged) == write_verdict(together)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("steps", 20, "b: steps is 20 where a has 10: not one experiment"),
        ("eval_every", 2, "b: eval_every is 2 where a has 5"),
        ("eval_rows", 100, "b: eval_rows is 100 where a has 256"),
        ("preset", "smoke", "b: preset is smoke where a has cpu"),
    ],
)
def test_ablations_of_other_shapes_are_not_merged(field, value, message):
    other = _summary(_seed_runs(1, [0.1, 0.2, 0.3])).model_copy(update={field: value})
    with pytest.raises(AblationError, match=message):
        merge_summaries({"a": _summary(_seed_runs(0, [0.1, 0.2, 0.3])), "b": other})


def test_ablations_trained_with_other_settings_are_not_merged():
    summaries = {
        "a": _summary(_seed_runs(0, [0.1, 0.2, 0.3]), overrides={"seed": 0, "grpo.beta": 0.04}),
        "b": _summary(_seed_runs(1, [0.1, 0.2, 0.3]), overrides={"seed": 1}),
    }
    with pytest.raises(
        AblationError, match=r"b: trained with grpo\.beta unset where a has grpo\.beta=0\.04"
    ):
        merge_summaries(summaries)


def test_a_summary_without_recorded_settings_merges_and_is_named_unchecked(tmp_path):
    summaries = {
        "a": _summary(_seed_runs(0, [0.1, 0.2, 0.3]), overrides={"grpo.beta": 0.04}),
        "b": _summary(_seed_runs(1, [0.1, 0.2, 0.3])),  # written before summaries kept them
    }
    merged = merge_summaries(summaries)
    assert (merged.overrides, merged.unchecked) == ({"grpo.beta": 0.04}, ["b"])
    markdown = ablation_markdown(merged, "", tmp_path / "ablation.png")
    assert "Merged from 2 ablations (wall time summed): `a`, `b`." in markdown
    assert "Settings not recorded, so not compared, in `b`." in markdown


def test_an_arm_and_seed_in_two_summaries_is_not_merged():
    runs = _seed_runs(0, [0.1, 0.2, 0.3])
    with pytest.raises(
        AblationError, match="b: the none arm from the single_only start, seed 0, is also in a"
    ):
        merge_summaries({"a": _summary(runs), "b": _summary(runs[:1])})


def test_one_seed_s_start_trained_twice_to_other_scores_is_not_merged():
    """Arms of one seed run apart must start from the same SFT checkpoint: its scores tell."""
    grpo = _run("none", 0, [0.1, 0.2, 0.3])
    other_start = _run("all", 0, [0.15, 0.2, 0.3])
    with pytest.raises(
        AblationError,
        match=r"b: the all arm .* seed 0, starts from SFT scores \(multi-step 0\.15.*"
        r"other than a's \(0\.1",
    ):
        merge_summaries({"a": _summary([grpo]), "b": _summary([other_start])})
    merged = merge_summaries({"a": _summary([grpo]), "b": _summary([_run("all", 0, [0.1, 0.3])])})
    assert {run.arm for run in merged.runs} == {"none", "all"}


def test_an_unreadable_summary_is_named_with_what_is_wrong(tmp_path):
    (tmp_path / "ablation.json").write_text('{"preset": "cpu"}')
    with pytest.raises(
        AblationError, match=r"ablation.json: not an ablation summary \(steps: Field required"
    ):
        read_summary(tmp_path)
    with pytest.raises(AblationError, match=r"nowhere\.json: cannot be read"):
        read_summary(tmp_path / "nowhere.json")
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    with pytest.raises(AblationError, match=r"stopped: no ablation\.json \(an unfinished"):
        read_summary(stopped)
    (tmp_path / "ablation.json").write_text("not json")
    with pytest.raises(AblationError, match="not an ablation summary"):
        read_summary(tmp_path / "ablation.json")


def test_ablate_report_merges_run_folders_and_refuses_what_is_not_one_experiment(
    prefect_harness, tmp_path, capsys
):
    folders = []
    for seed, multi in [(0, [0.1, 0.2, 0.3]), (1, [0.2, 0.4, 0.5])]:
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        summary = _summary(_seed_runs(seed, multi), overrides={"seed": seed})
        (folder / "ablation.json").write_text(summary.model_dump_json())
        folders.append(folder)

    assert cli.ablate_report(*folders, out=tmp_path / "runs") == 0
    (report_dir,) = (tmp_path / "runs").iterdir()
    merged = read_summary(report_dir)
    assert merged.seeds == [0, 1] and len(merged.runs) == 4
    assert {p.name for p in report_dir.iterdir()} >= {"ablation.md", "ablation.png"}
    assert "From the single-step-only SFT start (2 seeds)" in capsys.readouterr().out

    # the merged report merges again, and refuses the seeds it already holds
    assert cli.ablate_report(report_dir, folders[0], out=tmp_path / "runs") == 1
    assert "the none arm from the single_only start, seed 0, is also in" in capsys.readouterr().err
    assert cli.ablate_report(tmp_path / "missing.json", out=tmp_path / "runs") == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.ablate_report(out=tmp_path / "runs") == 2


# --- the flow ------------------------------------------------------------------------------


def _smoke_params(out: Path):
    """Two arms of one start and seed, two GRPO steps each with a checkpoint after the first."""
    return parse_params(
        preset="smoke",
        seeds=1,
        steps=2,
        eval_every=1,
        arms=["none", "zero_std"],
        starts=["single_only"],
        workers=2,
        out=out,
        # the flow is under test, not SFT
        overrides={"sft.num_train_epochs": 1, "runtime.eval_max_rows": 8},
    )


@pytest.mark.slow
def test_smoke_ablation_trains_evaluates_and_reports_every_arm(prefect_harness, tmp_path):
    report = run_ablation(_smoke_params(tmp_path))

    assert report.failed == []
    run_dir = report.markdown_path.parent
    assert {p.name for p in run_dir.iterdir()} >= {"ablation.md", "ablation.json", "ablation.png"}
    summary = AblationSummary.model_validate_json(report.json_path.read_text())
    assert summary.eval_rows == 16  # 8 rows of each held-out file
    assert summary.overrides == {"sft.num_train_epochs": 1, "runtime.eval_max_rows": 8}
    # the stages trained on the rows the data gate passed, as the main job does
    trained = TrainConfig.model_validate_json(
        (run_dir / "single_only" / "seed-0" / CONFIG_FILENAME).read_text()
    )
    assert trained.data.train_single_step == run_dir / "data" / "single_step.jsonl"
    assert (run_dir / "data_quality" / "data_quality.json").is_file()
    assert {(run.arm, run.seed) for run in summary.runs} == {("none", 0), ("zero_std", 0)}
    for run in summary.runs:
        assert [s.step for s in run.curve] == [0, 1, 2]  # SFT, checkpoint-1, final model
        assert run.groups.total == 4  # 2 prompts per step × 2 steps
        assert run.curve[0] == summary.runs[0].curve[0]  # one SFT start shared by both arms
        grpo_dir = run_dir / "single_only" / "seed-0" / run.arm / "grpo"
        assert run.wall_s == training_seconds(read_metrics(grpo_dir / METRICS_FILENAME)) > 0
    assert (run_dir / "single_only" / "seed-0" / "zero_std" / "eval" / "step-1").is_dir()
    assert "From the single-step-only SFT start (1 seed)" in report.verdict
    assert report.verdict in report.markdown_path.read_text()


@pytest.mark.slow
def test_smoke_ablation_runs_its_arms_on_a_dask_cluster(prefect_harness, tmp_path):
    pytest.importorskip("prefect_dask", reason="prefect-dask is an optional extra")
    import distributed

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        params = parse_params(
            preset="smoke",
            seeds=1,
            steps=2,
            eval_every=2,
            arms=["zero_std"],
            starts=["single_only"],
            dask=cluster.scheduler_address,
            out=tmp_path,
            overrides={"sft.num_train_epochs": 1, "runtime.eval_max_rows": 8},
        )
        report = run_ablation(params)
        completed_on_dask = {
            name: prefix.state_counts["memory"]
            for name, prefix in cluster.scheduler.task_prefixes.items()
        }

    assert report.failed == []
    summary = AblationSummary.model_validate_json(report.json_path.read_text())
    assert [(run.arm, [s.step for s in run.curve]) for run in summary.runs] == [
        ("zero_std", [0, 2])
    ]
    # One start and one arm, each computed to completion by a Dask worker.
    assert completed_on_dask == {"train_start": 1, "train_arm": 1}


@pytest.mark.slow
def test_an_interrupted_ablation_leaves_the_next_flow_free_to_train(
    prefect_harness, tmp_path, monkeypatch
):
    def interrupted(_future):  # as Ctrl-C arrives while the flow waits on its arms
        raise KeyboardInterrupt

    monkeypatch.setattr(ablation_flow, "_done", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_ablation(_smoke_params(tmp_path))
    # Its arms were stopped and started no stage; a later flow of this process trains again.
    assert not Supervised.live and not Supervised.stopping


@pytest.mark.slow
def test_a_resumed_ablation_reads_back_what_finished_and_resumes_the_rest(
    prefect_harness, tmp_path
):
    params = _smoke_params(tmp_path)
    run_dir = run_ablation(params).markdown_path.parent
    seed_dir = run_dir / "single_only" / "seed-0"
    finished = {path: path.read_bytes() for path in seed_dir.glob("**/*.json*")}
    # The zero_std arm as a stopped process leaves it: its first checkpoint, nothing after.
    stopped = seed_dir / "zero_std"
    for left in ["arm.json", "eval", "grpo/model", "grpo/checkpoint-2"]:
        shutil.rmtree(stopped / left) if (stopped / left).is_dir() else (stopped / left).unlink()
    metrics = (stopped / "grpo" / METRICS_FILENAME).read_text().splitlines()

    report = run_ablation(params.model_copy(update={"resume": run_dir, "workers": 1}))

    assert report.failed == [] and report.markdown_path.parent == run_dir
    # the start and the finished arm were read back, not trained or evaluated again
    for path, content in finished.items():
        if stopped not in path.parents:
            assert path.read_bytes() == content, path
    # the stopped arm went on from its checkpoint: the first step's metrics line kept as it was
    resumed = (stopped / "grpo" / METRICS_FILENAME).read_text().splitlines()
    assert resumed[0] == metrics[0] and json.loads(resumed[-1])["step"] == 2
    summary = AblationSummary.model_validate_json(report.json_path.read_text())
    assert [[s.step for s in run.curve] for run in summary.runs] == [[0, 1, 2], [0, 1, 2]]
    # its training time counts the first attempt's step too, not only the resumed one's
    resumed_run = next(run for run in summary.runs if run.arm == "zero_std")
    assert resumed_run.wall_s == training_seconds([json.loads(line) for line in resumed])


def test_resuming_needs_an_ablation_folder_started_with_the_same_settings(tmp_path):
    with pytest.raises(AblationError, match="is not an ablation's run folder"):
        parse_params(preset="smoke", resume=tmp_path)
    started = parse_params(preset="smoke", steps=320, seeds=1, workers=2)
    (tmp_path / PARAMS_FILE).write_text(started.model_dump_json())

    parse_params(preset="smoke", steps=320, seeds=1, workers=1, resume=tmp_path)  # may differ
    with pytest.raises(AblationError, match=r"other settings: steps 40 \(started with 320\)"):
        parse_params(preset="smoke", steps=40, seeds=1, resume=tmp_path)
    with pytest.raises(AblationError, match=r"overrides \{'seed': 1\} \(started with \{\}\)"):
        parse_params(preset="smoke", steps=320, seeds=1, overrides={"seed": 1}, resume=tmp_path)


def test_dask_without_prefect_dask_is_refused_before_training(monkeypatch):
    find_spec = importlib.util.find_spec

    def find_all_but_prefect_dask(name, *args):
        return None if name == "prefect_dask" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_all_but_prefect_dask)
    with pytest.raises(AblationError, match=r"pip install 'toolgrpo\[dask\]'"):
        parse_params(dask="local")


@pytest.mark.parametrize(
    ("set_", "message"),
    [
        (["sft.num_train_epochs"], "--set takes FIELD=VALUE"),
        (["no_such_field=1"], "no_such_field"),
    ],
)
def test_ablate_rejects_a_bad_override_before_training(tmp_path, capsys, set_, message):
    assert cli.ablate(seeds=1, out=tmp_path, set_=set_) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_config_overrides_parse_values_as_yaml():
    items = ["sft.num_train_epochs=17", "grpo.ngrpo_scope=all", "grpo.max_steps = 9"]
    assert cli.config_overrides(items) == {
        "sft.num_train_epochs": 17,
        "grpo.ngrpo_scope": "all",
        "grpo.max_steps": 9,
    }
