"""One typed training config; the named presets (`smoke`, `cpu`, `gpu`) are YAML data over it.

The config is flat so that any field can be overridden by name — from the command line, from a
flow parameter, or in a test — and it is written next to the model so a run can be reproduced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolgrpo.data import DATA_DIR
from toolgrpo.training.rewards import RewardWeights

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
CONFIG_FILENAME = "train_config.json"


class ConfigError(ValueError):
    """A training config that cannot be used, with a message that says which field and why."""


class TrainConfig(BaseModel):
    """Everything a training stage reads: model, data, SFT and GRPO settings, seed, checkpoints."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    preset: str = "custom"
    seed: int = 0

    # Model. No `base_model` means a tiny Qwen2 built locally (training.model.build_tiny).
    base_model: str | None = None
    hidden_size: int = Field(256, gt=0)
    num_layers: int = Field(4, gt=0)
    num_heads: int = Field(4, gt=0)
    vocab_size: int = Field(2048, ge=300)
    split_digits: bool = True
    lora_r: int = Field(0, ge=0, description="0 trains every weight; > 0 trains a LoRA adapter")
    lora_alpha: int = Field(32, gt=0)
    lora_target_modules: str | list[str] = "all-linear"
    bf16: bool = False
    use_cpu: bool = True
    use_vllm: bool = False
    # TRL turns it on by default; it recomputes activations (about a third more compute), which
    # only pays off when memory is short — a large model on a GPU.
    gradient_checkpointing: bool = False
    num_processes: int = Field(1, ge=1, description="> 1 launches the stage with accelerate")

    # Data: the shipped rows by default; relative paths are relative to the working directory.
    train_single_step: Path = DATA_DIR / "train" / "single_step.jsonl"
    train_multistep: Path = DATA_DIR / "train" / "multistep.jsonl"
    max_train_rows: int | None = Field(None, gt=0, description="a subset of rows, for smoke runs")
    eval_max_rows: int | None = Field(None, gt=0, description="rows per eval file, quick checks")
    # The condition-fails branch (a multi-step row labelled `respond`) is ~7% of the rows; repeating
    # it keeps it in most batches of both stages.
    condition_fails_repeat: int = Field(1, ge=1)

    # SFT warm start: single-step rows plus this share of multi-step scenarios (whole scenarios).
    sft_multistep_fraction: float = Field(0.10, ge=0.0, le=1.0)
    sft_epochs: float = Field(12, gt=0)
    sft_learning_rate: float = Field(2e-3, gt=0)
    sft_batch_size: int = Field(16, gt=0)
    sft_max_length: int = Field(1024, gt=0)

    # GRPO + NGRPO on all training rows, from the SFT model.
    grpo_max_steps: int = Field(70, gt=0)
    grpo_learning_rate: float = Field(1e-4, gt=0)
    grpo_prompts_per_step: int = Field(4, gt=0)
    num_generations: int = Field(8, ge=2)  # case study: 4 → 8
    max_completion_length: int = Field(350, gt=0)  # case study: 200 → 350
    temperature: float = Field(1.0, gt=0)
    beta: float = Field(0.0, ge=0)
    epsilon: float = Field(0.2, gt=0)
    epsilon_high: float | None = Field(None, gt=0)
    ngrpo_scope: Literal["none", "zero_std", "all"] = "zero_std"
    ngrpo_max_reward: float | None = Field(None, gt=0, description="None: the reward's maximum")
    reward_weights: dict[str, float] = Field(
        default_factory=dict, description="points per reward component (training.rewards)"
    )

    # Checkpoints and logs.
    save_steps: int = Field(50, gt=0)
    save_total_limit: int = Field(2, gt=0)
    logging_steps: int = Field(1, gt=0)
    torch_threads: int | None = Field(None, gt=0, description="CPU threads; None: torch's default")

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.base_model is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        try:
            RewardWeights(**self.reward_weights)
        except (TypeError, ValueError) as error:
            raise ValueError(f"reward_weights: {error}") from None
        return self

    @property
    def weights(self) -> RewardWeights:
        return RewardWeights(**self.reward_weights)

    def data_path(self, path: Path) -> Path:
        """`path` resolved against the working directory when it is relative."""
        return path.resolve()

    def trainer_arguments(self, output_dir: Path) -> dict[str, Any]:
        """The `TrainingArguments` both stages share: precision, device, seeds, checkpoints."""
        return {
            "output_dir": str(output_dir),
            "seed": self.seed,
            "data_seed": self.seed,
            "bf16": self.bf16,
            "use_cpu": self.use_cpu,
            "gradient_checkpointing": self.gradient_checkpointing,
            "save_strategy": "steps",
            "save_steps": self.save_steps,
            "save_total_limit": self.save_total_limit,
            "logging_steps": self.logging_steps,
            "report_to": "none",
            "disable_tqdm": True,  # the Prefect task streams lines; progress bars only add noise
        }

    def write(self, path: Path | str) -> Path:
        """Write the config as JSON (the file `read_config` loads back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return path


def _validated(values: dict[str, Any], source: str) -> TrainConfig:
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'config'}: {item['msg']}"
            for item in error.errors()
        )
        raise ConfigError(f"{source}: invalid training config: {problems}") from None


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str, **overrides: Any) -> TrainConfig:
    """The named preset with `overrides` applied field by field (unknown fields are an error)."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; choose one of {preset_names()}")
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return _validated({**values, "preset": name, **overrides}, f"preset {name!r}")


def read_config(path: Path | str) -> TrainConfig:
    """The config in a JSON file written by `TrainConfig.write`."""
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read training config: {error}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a training config is a JSON object of field: value")
    return _validated(values, str(path))
