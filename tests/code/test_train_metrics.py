"""`train_metrics.jsonl`: one line per logged step, zero-std counts that survive a resume."""

import json
import math

from transformers import TrainerControl, TrainerState, TrainingArguments

from toolgrpo.training.metrics import MetricsFileCallback, read_metrics

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
