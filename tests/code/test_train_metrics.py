"""`train_metrics.jsonl`: one line per logged step, zero-std counts that survive a resume, and a
progress line a person can read every few steps."""

import json
import math
import re

from transformers import TrainerControl, TrainerState, TrainingArguments

from toolgrpo.training.metrics import (
    PROGRESS_LINES,
    MetricsFileCallback,
    duration,
    progress_line,
    read_metrics,
    training_seconds,
)

ARGS = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")


def _ngrpo_logs(zero_std: float, total: float = 4.0) -> dict:
    return {
        "loss": 0.1,
        "reward": 0.7,
        "reward_std": math.nan,
        "frac_reward_zero_std": zero_std / total,
        "ngrpo/zero_std_groups": zero_std,
        "ngrpo/calibrated_groups": 1.0,
        "ngrpo/total_groups": total,
    }


def _log_steps(callback, state, logs_per_step):
    for logs in logs_per_step:
        state.global_step += 1
        callback.on_log(ARGS, state, TrainerControl(), logs=logs)


def test_each_logged_step_writes_a_line_with_zero_std_counts_and_totals(tmp_path):
    path = tmp_path / "train_metrics.jsonl"
    callback = MetricsFileCallback(path)
    state = TrainerState(max_steps=10)
    callback.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(callback, state, [_ngrpo_logs(3), _ngrpo_logs(2)])
    lines = read_metrics(path)
    assert [line["step"] for line in lines] == [1, 2]
    assert lines[1]["max_steps"] == 10
    assert (lines[1]["zero_std_groups"], lines[1]["zero_std_groups_total"]) == (2, 5)
    assert (lines[1]["groups"], lines[1]["groups_total"]) == (4, 8)
    assert lines[1]["calibrated_groups_total"] == 2
    assert lines[0]["reward_std"] is None  # NaN would not be valid JSON
    assert "step_time_s" in lines[0]
    json.loads(path.read_text().splitlines()[0])


def test_resume_drops_lines_past_the_checkpoint_and_continues_the_totals(tmp_path):
    path = tmp_path / "train_metrics.jsonl"
    first = MetricsFileCallback(path)
    state = TrainerState(max_steps=10)
    first.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(first, state, [_ngrpo_logs(3), _ngrpo_logs(2), _ngrpo_logs(4)])

    resumed = MetricsFileCallback(path)  # a new process, restarted from checkpoint-2
    state = TrainerState(max_steps=10, global_step=2)
    resumed.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(resumed, state, [_ngrpo_logs(1)])
    lines = read_metrics(path)
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert lines[-1]["zero_std_groups_total"] == 3 + 2 + 1


def test_sft_lines_carry_no_group_counts(tmp_path):
    path = tmp_path / "train_metrics.jsonl"
    callback = MetricsFileCallback(path)
    state = TrainerState(max_steps=3)
    callback.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(callback, state, [{"loss": 2.0, "learning_rate": 1e-3}])
    (line,) = read_metrics(path)
    assert line["loss"] == 2.0 and "zero_std_groups" not in line


def test_progress_line_says_where_a_stage_is_and_when_it_ends():
    line = progress_line("sft", 120, 480, 2.1, ["loss 0.830"])
    assert line == "sft step 120/480 · loss 0.830 · 2.1 s/step · ETA 13m"
    assert duration(45) == "45s" and duration(540) == "9m" and duration(7500) == "2h 05m"


def test_a_progress_line_is_printed_every_few_steps_not_every_step(tmp_path, capsys):
    callback = MetricsFileCallback(tmp_path / "sft" / "train_metrics.jsonl")
    state = TrainerState(max_steps=100)
    callback.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(callback, state, [{"loss": 2.0, "learning_rate": 1e-3}] * 100)
    lines = capsys.readouterr().out.splitlines()
    every = 100 // PROGRESS_LINES
    assert [line.split(" · ")[0] for line in lines] == [
        f"sft step {step}/100" for step in range(1, 101, every)
    ] + ["sft step 100/100"]
    assert re.fullmatch(r"sft step 1/100 · loss 2\.000 · [\d.]+ s/step · ETA \w+", lines[0])


def test_grpo_progress_shows_reward_zero_std_share_and_tool_accuracy_so_far(tmp_path, capsys):
    callback = MetricsFileCallback(tmp_path / "grpo" / "train_metrics.jsonl")
    state = TrainerState(max_steps=2)
    callback.on_train_begin(ARGS, state, TrainerControl())
    _log_steps(
        callback,
        state,
        [{**_ngrpo_logs(3), "tool_accuracy": 0.25}, {**_ngrpo_logs(1), "tool_accuracy": 0.75}],
    )
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(
        "grpo step 2/2 · reward 0.70 · zero-std 50% of groups · tool accuracy so far 50%"
    )


def test_training_seconds_weighs_each_line_by_the_steps_it_covers():
    """Lines every 2 steps, a resumed attempt's lines after them, the trainer's closing line."""
    lines = [
        {"step": 2, "step_time_s": 1.5},
        {"step": 4, "step_time_s": 2.0},
        {"step": 5, "step_time_s": 3.0},  # the next attempt, resumed from step 4
        {"step": 5, "train_runtime": 3.1},
    ]
    assert training_seconds(lines) == 2 * 1.5 + 2 * 2.0 + 3.0
    assert training_seconds([]) == 0.0


def test_a_resumed_stage_is_paced_from_its_first_step_not_from_its_start(
    tmp_path, capsys, monkeypatch
):
    """A resume loads its optimiser and skips the batches it trained before its first step:
    minutes that are no step's time, and would make the first ETA hours long if they were."""
    # made, train begins, first step begins, step logged, its progress line
    clock = iter([0.0, 0.0, 600.0, 610.0, 610.0])
    monkeypatch.setattr("toolgrpo.training.metrics.time.perf_counter", lambda: next(clock))
    callback = MetricsFileCallback(tmp_path / "grpo" / "train_metrics.jsonl")
    state = TrainerState(max_steps=150, global_step=20)
    callback.on_train_begin(ARGS, state, TrainerControl())
    callback.on_step_begin(ARGS, state, TrainerControl())
    _log_steps(callback, state, [{"loss": 1.0}])
    assert capsys.readouterr().out.split(" · ")[-2:] == ["10.0 s/step", "ETA 22m\n"]
    assert read_metrics(callback.path)[-1]["step_time_s"] == 10.0
