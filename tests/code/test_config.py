"""Presets, overrides, the run folder's config file, and the TRL/PEFT settings built from it."""

import json
from pathlib import Path

import pytest

from toolgrpo.training.__main__ import main as training_main
from toolgrpo.training.config import (
    CONFIG_FILENAME,
    ConfigError,
    load_preset,
    preset_names,
    read_config,
)
from toolgrpo.training.grpo import grpo_config, reward_functions
from toolgrpo.training.model import lora_config
from toolgrpo.training.rewards import COMPONENT_REWARDS
from toolgrpo.training.samples import (
    SamplesError,
    grpo_rows,
    is_condition_fails,
    read_samples,
    sft_rows,
)
from toolgrpo.training.sft import sft_config


def test_three_named_presets_ship():
    assert {"smoke", "cpu", "gpu"} <= set(preset_names())
    for name in ("smoke", "cpu", "gpu"):
        assert load_preset(name).preset == name


def test_preset_fields_can_be_overridden_one_by_one():
    config = load_preset("cpu", grpo_max_steps=5, sft_multistep_fraction=0.0)
    assert (config.grpo_max_steps, config.sft_multistep_fraction) == (5, 0.0)
    assert config.num_generations == load_preset("cpu").num_generations


def test_unknown_or_invalid_override_names_the_field():
    with pytest.raises(ConfigError, match="grpo_steps"):
        load_preset("cpu", grpo_steps=5)
    with pytest.raises(ConfigError, match="sft_multistep_fraction"):
        load_preset("cpu", sft_multistep_fraction=1.5)
    with pytest.raises(ConfigError, match="unknown preset 'tpu'"):
        load_preset("tpu")


def test_config_round_trips_through_its_json_file(tmp_path):
    config = load_preset("smoke", seed=7, reward_weights={"tool": 0.6})
    assert read_config(config.write(tmp_path / CONFIG_FILENAME)) == config


def test_bad_config_file_error_names_file_and_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"num_generations": 1}))
    with pytest.raises(ConfigError, match=r"bad\.json.*num_generations"):
        read_config(path)


def test_negative_reward_weight_is_rejected():
    with pytest.raises(ConfigError, match="reward_weights"):
        load_preset("cpu", reward_weights={"params": -0.2})


def test_cpu_grpo_settings_are_the_case_studys(tmp_path):
    args = grpo_config(load_preset("cpu"), tmp_path)
    assert (args.num_generations, args.max_completion_length) == (8, 350)
    assert args.per_device_train_batch_size == 4 * 8  # counts completions
    assert (args.ngrpo_scope, args.ngrpo_max_reward) == ("zero_std", 1.0)
    assert args.use_cpu and not args.bf16


def test_reward_functions_sum_to_the_ground_truth_reward():
    assert reward_functions(load_preset("cpu")) == list(COMPONENT_REWARDS)
    weighted = reward_functions(load_preset("cpu", reward_weights={"tool": 0.6}))
    assert [f.keywords["weights"].tool for f in weighted] == [0.6] * 3


def test_gpu_preset_trains_lora_on_all_linear_layers_in_bf16(tmp_path):
    config = load_preset("gpu")
    lora = lora_config(config)
    assert (lora.r, lora.target_modules) == (16, "all-linear")
    arguments = config.trainer_arguments(tmp_path)
    assert arguments["bf16"] and not arguments["use_cpu"]
    assert config.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    # TRL refuses bf16 without an accelerator; the rest of the gpu settings build on a CPU.
    on_cpu = config.model_copy(update={"bf16": False, "use_cpu": True})
    grpo = grpo_config(on_cpu, tmp_path)
    assert (grpo.num_generations, grpo.max_completion_length) == (8, 350)
    assert (grpo.epsilon, grpo.epsilon_high) == (0.16, 0.24)
    assert sft_config(on_cpu, tmp_path).completion_only_loss
    assert lora_config(load_preset("cpu")) is None


def test_sft_rows_take_whole_multistep_scenarios():
    config = load_preset("cpu", sft_multistep_fraction=0.1)
    multi = read_samples(config.data_path(config.train_multistep))
    steps_per_scenario = {r["scenario_id"]: r["n_steps"] for r in multi}
    chosen = [r for r in sft_rows(config) if r["kind"] == "multi"]
    scenarios = {r["scenario_id"] for r in chosen}
    assert len(scenarios) == round(0.1 * len(steps_per_scenario))
    assert len(chosen) == sum(steps_per_scenario[s] for s in scenarios)


def test_zero_multistep_fraction_warms_up_on_single_step_rows_only():
    rows = sft_rows(load_preset("cpu", sft_multistep_fraction=0.0))
    assert rows and {r["kind"] for r in rows} == {"single"}


def test_grpo_trains_on_every_row_and_smoke_on_a_subset():
    assert len(grpo_rows(load_preset("cpu"))) == 454 + 823
    assert len(grpo_rows(load_preset("smoke"))) == load_preset("smoke").max_train_rows


def test_unreadable_sample_file_names_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "p", "solution": "{}"}\n{not json\n')
    with pytest.raises(SamplesError, match=r"rows\.jsonl:2: not valid JSON"):
        read_samples(path)


def test_training_command_without_config_exits_2_with_one_line(tmp_path, capsys):
    assert training_main(["sft", "--run-dir", str(tmp_path)]) == 2
    assert f"{tmp_path / CONFIG_FILENAME}: no training config" in capsys.readouterr().err


def test_training_command_with_missing_data_exits_2_naming_the_file(tmp_path, capsys):
    config = load_preset("smoke", train_single_step=Path("no/such.jsonl"))
    config.write(tmp_path / "given.json")
    assert (
        training_main(["sft", "--run-dir", str(tmp_path), "--config", str(tmp_path / "given.json")])
        == 2
    )
    assert "no/such.jsonl: sample file not found" in capsys.readouterr().err
    assert read_config(tmp_path / CONFIG_FILENAME) == config  # the run folder keeps what it ran


def test_condition_fails_rows_repeat_in_both_stages():
    plain = load_preset("cpu", sft_multistep_fraction=1.0)
    weighted = load_preset("cpu", sft_multistep_fraction=1.0, condition_fails_repeat=3)
    for rows in (sft_rows, grpo_rows):
        respond = sum(map(is_condition_fails, rows(plain)))
        assert respond > 0
        assert len(rows(weighted)) == len(rows(plain)) + 2 * respond
