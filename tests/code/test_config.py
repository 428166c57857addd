"""Presets, dotted overrides, the weights key, the run folder's config file, and the TRL/PEFT
settings built from it."""

import dataclasses
import importlib.util
import json
import os
from collections import Counter
from functools import reduce
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError
from trl import SFTConfig

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.catalogue import default_catalogue
from toolgrpo.schemas.samples import is_condition_fails, is_conditional
from toolgrpo.training import Preset, config_overrides
from toolgrpo.training.__main__ import main as training_main
from toolgrpo.training.config import (
    CONFIG_FILENAME,
    ConfigError,
    GRPOSection,
    RuntimeSection,
    SFTSection,
)
from toolgrpo.training.config_overrides import (
    load_preset,
    overridable_fields,
    overrides_model,
    preset_names,
    read_config,
)
from toolgrpo.training.device import place
from toolgrpo.training.grpo import grpo_config, reward_functions
from toolgrpo.training.model import lora_config
from toolgrpo.training.ngrpo import NGRPOConfig
from toolgrpo.training.rewards import COMPONENT_REWARDS
from toolgrpo.training.samples import (
    SamplesError,
    grpo_rows,
    read_samples,
    sft_rows,
)
from toolgrpo.training.sft import sft_config


def test_four_named_presets_ship_and_the_typed_parameter_lists_each():
    assert set(get_args(Preset)) == set(preset_names()) == {"smoke", "cpu", "pretrained", "gpu"}
    for name in preset_names():
        assert load_preset(name).preset == name


def test_cpu_preset_trains_on_the_walked_rows_and_mixes_in_drills_and_paraphrases(
    tmp_path, monkeypatch
):
    """Its data paths are the shipped walked files, whatever the working directory."""
    monkeypatch.chdir(tmp_path)
    data = load_preset("cpu").data
    files = [data.train_single_step, data.train_multistep, *data.mixed_in_aux()]
    assert [path.relative_to(DATA_DIR).as_posix() for path in files] == [
        "train/single_step.jsonl",
        "aux/walked/multistep.jsonl",
        "aux/walked/comparisons.jsonl",
        "aux/walked/phrasings.jsonl",
    ]
    assert all(path.is_file() for path in files)


def test_a_preset_extending_itself_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(config_overrides, "PRESETS_DIR", tmp_path)
    (tmp_path / "a.yaml").write_text("extends: b\n")
    (tmp_path / "b.yaml").write_text("extends: a\nseed: 3\n")
    with pytest.raises(ConfigError, match="presets extend each other in a circle: a → b → a"):
        load_preset("a")


def test_preset_fields_can_be_overridden_one_by_one():
    config = load_preset("cpu", {"grpo.max_steps": 5, "sft.multistep_fraction": 0.0})
    assert (config.grpo.max_steps, config.sft.multistep_fraction) == (5, 0.0)
    assert config.grpo.num_generations == load_preset("cpu").grpo.num_generations
    assert config.model == load_preset("cpu").model  # the rest of each section is the preset's


def test_override_values_from_a_command_line_are_parsed():
    config = load_preset("cpu", {"grpo.max_steps": "20", "sft.learning_rate": "1e-4"})
    assert (config.grpo.max_steps, config.sft.learning_rate) == (20, 1e-4)
    with pytest.raises(ConfigError, match=r"grpo\.max_steps: Input should be a valid integer"):
        load_preset("cpu", {"grpo.max_steps": "abc"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"grpo.max_step": 5}, "grpo.max_step: unknown field (did you mean 'grpo.max_steps'?)"),
        ({"grpo_max_steps": 5}, "did you mean 'grpo.max_steps'?"),  # the old flat name
        (
            {"torch_threads": 1},
            "did you mean 'runtime.torch_threads' or 'runtime.grpo.torch_threads'?",
        ),
        (
            {"runtime.use_cpu": True},
            "runtime.use_cpu: unknown field (did you mean 'runtime.device'?)",
        ),
        ({"lora_r": 8}, "did you mean 'model.lora.r'?"),  # renamed, unlike its new name
        (
            {"learning_rate": 1},
            "did you mean 'sft.learning_rate' or 'grpo.learning_rate' or 'base.learning_rate'?",
        ),
        ({"sft.multistep_fraction": 1.5}, "sft.multistep_fraction: Input should be less than"),
        ({"grpo.reward_points.params": -0.2}, "grpo.reward_points: reward weights must be >= 0"),
        ({"runtime.grpo.num_processes": 3}, "32 completions per step do not split over GRPO's 3"),
    ],
)
def test_unknown_or_invalid_override_is_one_line_naming_the_field(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_preset("cpu", overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError, match="unknown preset 'tpu'"):
        load_preset("tpu")


def test_every_dotted_field_is_listed_with_its_description():
    fields = overridable_fields()
    assert {"seed", "sft.num_train_epochs", "grpo.reward_points.tool", "model.lora.r"} <= set(
        fields
    )
    assert "preset" not in fields and "grpo" not in fields  # leaves only
    assert fields["runtime.torch_threads"].annotation == int | None
    assert all(field.description for field in fields.values())


def test_overriding_every_listed_field_of_one_preset_gives_another():
    cpu = load_preset("cpu")
    values = {path: reduce(getattr, path.split("."), cpu) for path in overridable_fields()}
    smoke_as_cpu = load_preset("smoke", values)
    assert smoke_as_cpu.model_dump(exclude={"preset"}) == cpu.model_dump(exclude={"preset"})


@pytest.mark.parametrize(
    "overrides",
    [
        {"runtime.torch_threads": 1},
        {"runtime.logging_steps": 5},
        {"runtime.eval_max_rows": 8},
        {"runtime.num_processes": 2},
        {"runtime.save_steps": 7},
        {"data.train_single_step": Path("elsewhere.jsonl")},
    ],
)
def test_weights_key_ignores_what_does_not_change_the_weights(overrides):
    assert load_preset("cpu", overrides).weights_key() == load_preset("cpu").weights_key()


@pytest.mark.parametrize(
    "overrides",
    [
        {"sft.num_train_epochs": 8},
        {"grpo.learning_rate": 2e-5},
        {"model.tiny.hidden_size": 128},
        {"seed": 1},
        {"data.max_train_rows": 100},
        {"grpo.reward_points.tool": 0.6},
    ],
)
def test_weights_key_follows_what_changes_the_weights(overrides):
    assert load_preset("cpu", overrides).weights_key() != load_preset("cpu").weights_key()


@pytest.mark.parametrize(
    ("section", "trl_config"),
    [(SFTSection, SFTConfig), (GRPOSection, NGRPOConfig), (RuntimeSection, SFTConfig)],
)
def test_a_sections_trl_fields_carry_trl_names(section, trl_config):
    trl_names = {field.name for field in dataclasses.fields(trl_config)}
    assert set(section.model_fields) - section.own_fields <= trl_names


def test_config_round_trips_through_its_json_file(tmp_path):
    config = load_preset("smoke", {"seed": 7, "grpo.reward_points.tool": 0.6})
    assert read_config(config.write(tmp_path / CONFIG_FILENAME)) == config


def test_bad_config_file_error_names_file_and_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"grpo": {"num_generations": 1}, "num_generations": 4}))
    with pytest.raises(ConfigError) as error:
        read_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}: invalid training config: ")
    assert "grpo.num_generations: Input should be greater than or equal to 2" in message
    assert "num_generations: unknown field (did you mean 'grpo.num_generations'?)" in message


def test_cpu_grpo_settings_reach_trl(tmp_path):
    args = grpo_config(load_preset("cpu"), tmp_path)
    assert (args.num_generations, args.max_completion_length) == (8, 144)
    assert args.per_device_train_batch_size == 4 * 8  # counts completions
    assert (args.ngrpo_scope, args.ngrpo_max_reward) == ("zero_std", 1.0)
    assert args.use_cpu and not args.bf16


def test_reward_functions_sum_to_the_ground_truth_reward(tmp_path):
    catalogue = default_catalogue()
    rewards = reward_functions(load_preset("cpu"), catalogue)
    assert [f.func for f in rewards] == list(COMPONENT_REWARDS)
    assert all(f.keywords["catalogue"] is catalogue for f in rewards)
    config = load_preset("cpu", {"grpo.reward_points.tool": 0.6})
    assert [f.keywords["weights"].tool for f in reward_functions(config, catalogue)] == [0.6] * 3
    assert grpo_config(config, tmp_path).ngrpo_max_reward == pytest.approx(1.1)


def test_gpu_preset_trains_lora_on_all_linear_layers_in_bf16(tmp_path):
    config = load_preset("gpu")
    lora = lora_config(config.model.lora)
    assert (lora.r, lora.lora_alpha, lora.target_modules) == (16, 32, "all-linear")
    arguments = config.trainer_arguments(tmp_path)
    assert arguments["bf16"] and not arguments["use_cpu"]
    assert config.model.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    # TRL refuses bf16 without an accelerator: placed on a CPU, the gpu settings build there.
    on_cpu = place(config, cuda=False).config
    grpo = grpo_config(on_cpu, tmp_path)
    assert grpo.use_cpu and not grpo.bf16
    assert (grpo.num_generations, grpo.max_completion_length) == (8, 350)
    assert (grpo.epsilon, grpo.epsilon_high) == (0.16, 0.24)
    assert grpo.gradient_checkpointing
    assert lora_config(load_preset("cpu").model.lora) is None


def test_sft_settings_are_the_warm_starts(tmp_path):
    args = sft_config(load_preset("cpu"), tmp_path)
    assert (args.num_train_epochs, args.learning_rate) == (6, 1e-3)
    # 16 rows per step, as 4 length-sorted micro-batches
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 4)
    assert args.train_sampling_strategy == "batch_rebalance"
    assert (args.lr_scheduler_type, args.warmup_steps) == ("cosine", 0.05)
    assert args.completion_only_loss and (args.seed, args.data_seed) == (0, 0)


def test_sft_rows_take_whole_multistep_scenarios():
    config = load_preset("cpu", {"sft.multistep_fraction": 0.1, "data.aux_share": 0.0})
    multi = read_samples(config.data.train_multistep)
    steps_per_scenario = {r["scenario_id"]: r["n_steps"] for r in multi}
    chosen = [r for r in sft_rows(config) if r["kind"] == "multi"]
    scenarios = {r["scenario_id"] for r in chosen}
    assert len(scenarios) == round(0.1 * len(steps_per_scenario))
    assert len(chosen) == sum(steps_per_scenario[s] for s in scenarios)


def test_zero_multistep_fraction_warms_up_on_single_step_rows_only():
    rows = sft_rows(load_preset("cpu", {"sft.multistep_fraction": 0.0, "data.aux_share": 0.0}))
    assert rows and {r["kind"] for r in rows} == {"single"}


def test_aux_share_mixes_that_share_of_aux_rows_into_sft_only():
    plain = load_preset("cpu", {"data.aux_share": 0.0})
    assert len(sft_rows(plain)) == 454 + 823
    mixed = load_preset("cpu")  # drills and paraphrased requests, 1,824 of SFT's 3,101 rows
    rows = sft_rows(mixed)
    aux = [row for row in rows if row["id"].startswith(("phrasing-", "aux-c-"))]
    assert len(aux) == 1824 and len(rows) - len(aux) == 454 + 823
    assert len(grpo_rows(mixed)) == 454 + 823
    assert mixed.weights_key() != plain.weights_key()


def test_a_run_on_its_own_rows_mixes_in_none_of_the_presets_aux_rows(tmp_path):
    """The cpu preset's aux rows paraphrase the shipped finance requests: a team training on its
    own files gets none of them, unless it names an aux file of its own."""
    preset = load_preset("cpu")
    shipped = [Path(os.path.relpath(path)) for path in preset.data.training_files()]
    assert preset.for_training_files(shipped, aux_given=False) is preset
    own = [tmp_path / "single.jsonl", tmp_path / "multi.jsonl"]
    assert preset.for_training_files(own, aux_given=False).data.aux_share == 0.0
    assert preset.for_training_files(own, aux_given=True) is preset


def test_aux_share_beyond_the_file_repeats_every_exercise(tmp_path):
    path = tmp_path / "aux.jsonl"
    path.write_text(
        "".join(f'{{"id": "x{i}", "prompt": "p{i}", "solution": "{{}}"}}\n' for i in range(3))
    )
    config = load_preset("smoke", {"data.train_aux": path, "data.aux_share": 0.5})
    exercises = [row["id"] for row in sft_rows(config) if row["id"].startswith("x")]
    assert Counter(exercises) == dict.fromkeys(["x0", "x1", "x2"], config.data.max_train_rows // 3)


def test_aux_files_with_no_share_to_draw_are_refused_not_ignored(tmp_path):
    with pytest.raises(ConfigError, match=r"data.aux_share is 0.*set data.aux_share too"):
        load_preset("smoke", {"data.train_aux": str(tmp_path / "mine.jsonl")})


def test_the_aux_files_are_one_pool_drawn_from_in_order(tmp_path):
    """Several auxiliary files (one path reads as a list of one): SFT draws from their rows as
    one pool, so each file's share of the draw follows its size."""
    files = []
    for name, size in (("drills", 30), ("phrasings", 10)):
        path = tmp_path / f"{name}.jsonl"
        rows = (f'{{"id": "{name}{i}", "prompt": "p", "solution": "{{}}"}}\n' for i in range(size))
        path.write_text("".join(rows))
        files.append(path)
    one = {"data.train_aux": str(files[0]), "data.aux_share": 0.5}
    assert load_preset("smoke", one).data.train_aux == files[:1]
    config = load_preset("smoke", {"data.train_aux": files, "data.aux_share": 0.5})
    assert config.data.mixed_in_aux() == files
    drawn = Counter(row["id"].rstrip("0123456789") for row in sft_rows(config)[48:])
    assert drawn == {"drills": 36, "phrasings": 12}  # the whole pool once, then 8 of its 40


def test_grpo_trains_on_every_row_and_smoke_on_a_subset():
    assert len(grpo_rows(load_preset("cpu"))) == 454 + 823
    assert len(grpo_rows(load_preset("smoke"))) == load_preset("smoke").data.max_train_rows


def test_unreadable_sample_file_names_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "p", "solution": "{}"}\n{not json\n')
    with pytest.raises(SamplesError, match=r"rows\.jsonl:2: not valid JSON"):
        read_samples(path)


def test_training_command_without_config_exits_2_with_one_line(tmp_path, capsys):
    assert training_main(["sft", "--run-dir", str(tmp_path)]) == 2
    assert f"{tmp_path / CONFIG_FILENAME}: no training config" in capsys.readouterr().err


def test_training_command_with_missing_data_exits_2_naming_the_file(tmp_path, capsys):
    config = load_preset("smoke", {"data.train_single_step": Path("no/such.jsonl")})
    config.write(tmp_path / "given.json")
    assert (
        training_main(["sft", "--run-dir", str(tmp_path), "--config", str(tmp_path / "given.json")])
        == 2
    )
    assert "no/such.jsonl: sample file not found" in capsys.readouterr().err
    assert read_config(tmp_path / CONFIG_FILENAME) == config  # the run folder keeps what it ran


def test_condition_fails_rows_repeat_in_both_stages():
    plain = load_preset("cpu", {"sft.multistep_fraction": 1.0, "data.aux_share": 0.0})
    weighted = load_preset(
        "cpu",
        {"sft.multistep_fraction": 1.0, "data.aux_share": 0.0, "data.condition_fails_repeat": 3},
    )
    for rows in (sft_rows, grpo_rows):
        respond = sum(is_condition_fails(row["kind"], row["tool"]) for row in rows(plain))
        assert respond > 0
        assert len(rows(weighted)) == len(rows(plain)) + 2 * respond


def test_conditional_steps_repeat_among_grpo_prompts_only():
    plain = load_preset("cpu")
    weighted = load_preset("cpu", {"grpo.conditional_repeat": 4})
    conditional = [
        row
        for row in grpo_rows(plain)
        if is_conditional(row["kind"], row["tool"], row.get("condition"))
    ]
    assert {row.get("condition") for row in conditional} == {"holds", "fails"}
    assert len(grpo_rows(weighted)) == len(grpo_rows(plain)) + 3 * len(conditional)
    assert sft_rows(weighted) == sft_rows(plain)


def test_typed_overrides_are_the_dotted_overrides_by_section():
    model = overrides_model(skip={"data.catalogue"})
    dotted = {"grpo.max_steps": 5, "grpo.reward_points.tool": 0.6, "seed": 3}
    typed = model.from_dotted(dotted)
    assert typed.dotted() == dotted
    # What a deployment form sends: nested sections, only the fields filled in.
    form = model.model_validate({"grpo": {"max_steps": "7"}, "runtime": {"device": "cuda"}})
    assert form.dotted() == {"grpo.max_steps": 7, "runtime.device": "cuda"}
    assert load_preset("cpu", form.dotted()).grpo.max_steps == 7
    with pytest.raises(ValidationError):
        model.from_dotted({"data.catalogue": "x.json"})  # skipped: the caller sets it
    with pytest.raises(ValidationError):
        model.model_validate({"grpo": {"max_step": 7}})
    fields = model.model_json_schema()["$defs"]["GRPOOverrides"]["properties"]
    assert fields["max_steps"]["description"] == "optimiser steps"
    # Every overridable field but the skipped one can be set through it.
    preset = load_preset("cpu").model_dump(mode="json")
    every = {
        path: reduce(dict.get, path.split("."), preset)
        for path in overridable_fields()
        if path != "data.catalogue"
    }
    assert model.from_dotted(every).dotted() == every


def test_a_null_in_a_payload_keeps_the_preset_and_a_null_set_by_name_is_a_value():
    model = overrides_model()
    form = model.model_validate({"data": {"max_train_rows": None}, "grpo": None, "seed": None})
    assert form.dotted() == {}
    assert load_preset("smoke", form.dotted()).data.max_train_rows == 48
    every_row = model.from_dotted({"data.max_train_rows": None})  # --set data.max_train_rows=null
    assert load_preset("smoke", every_row.dotted()).data.max_train_rows is None


def test_a_backend_that_is_not_installed_is_a_config_error(tmp_path, monkeypatch):
    config = load_preset("smoke", {"runtime.report_to": "mlflow"})
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"runtime\.report_to is 'mlflow' but mlflow is not"):
        config.tracking_environment(tmp_path / "run" / "sft")
    assert load_preset("smoke").tracking_environment(tmp_path / "run" / "sft") == {}
