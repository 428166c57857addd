"""The training config: one typed recipe in sections; the presets (`smoke`, `cpu`, `gpu`) are YAML
recipes over it, in the same sections.

Which sections change the trained weights decides what `TrainConfig.weights_key` hashes, the
training cache key of the retrain flow:

- `seed` — every random draw of both stages: yes.
- `data` — the row selection (`max_train_rows`, `condition_fails_repeat`): yes; the file paths
  (rows and tool catalogue): no (the retrain flow hashes the files' bytes themselves).
- `model` — base model or tiny-model shape and tokenizer, LoRA, bf16: yes.
- `sft`, `grpo` — each stage's hyperparameters, NGRPO and the reward: yes.
- `base` — the recipe of `toolgrpo base build`: no (a run reads a built base by
  `model.base_model`; the build keys its own cache).
- `runtime` — device, threads, processes, checkpoints, logging, the eval subset: no.

The `sft`, `grpo` and `runtime` sections name their fields as TRL does, and `sft.py` / `grpo.py`
pass them to `SFTConfig` / `NGRPOConfig` by name (`TrlSection.trl_arguments`): nothing is mapped
by hand, and TRL's defaults hold for every argument a section leaves out. Only the project's own
fields (`own_fields`, e.g. `grpo.prompts_per_step`), the seed and `model.bf16` (the weights'
dtype, so a model setting) become TRL arguments in code. Why not TRL's own parsing (`TrlParser`
/ `HfArgumentParser`, the alignment-handbook way): one recipe drives two TRL stages whose
arguments share names (`learning_rate`, `max_steps`), which one flat parser namespace cannot hold
twice; it would carry TRL's ~200 arguments into every config and cache key; and its errors are
argparse's. Pydantic keeps one-line errors that name the dotted field, rejects unknown fields
(with the closest known one), and does not import TRL, so the flows can read a config without
loading torch.

Overrides are dotted paths (`{"sft.num_train_epochs": 3}`), from `toolgrpo run --set`, a flow
parameter or a test; `overridable_fields()` lists them, and `overrides_model()` is their typed
form (nested sections of unset fields, with their descriptions): the retrain flow's `config`
parameter, which a deployment form lists field by field. The config is written next to each model
so a run can be reproduced.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import importlib.util
import json
import typing
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.catalogue import DEFAULT_CATALOGUE, Catalogue, load_catalogue
from toolgrpo.training.rewards import RewardWeights

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
CONFIG_FILENAME = "train_config.json"
Device = Literal["auto", "cpu", "cuda"]
# the frame pieces written as one token each (`training.model.FRAME_PIECES`)
FramePieces = Literal["none", "all", "all_but_opening"]


# transformers' `SchedulerType` values (a test keeps them equal): importing transformers to read
# them would cost every command that checks a config seconds.
LR_SCHEDULER_TYPES = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
    "greedy",
)
# The largest integer a setting may have: torch, numpy and the trainers count in 64 bits.
MAX_INTEGER = 2**63 - 1


class ConfigError(ValueError):
    """A training config that cannot be used, with a message that says which field and why."""


def one_of(value: str, choices: Collection[str], what: str) -> str:
    """`value` when it is one of `choices`; else raises ValueError listing them, with the
    closest as a "did you mean"."""
    if value in choices:
        return value
    close = difflib.get_close_matches(value, choices, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"{value!r} is not {what} ({hint}one of {', '.join(choices)})")


class Section(BaseModel):
    """A group of settings: an unknown field is an error, and values never change once valid.
    Numbers are checked before any run: no infinity or NaN, no integer beyond 64 bits."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _integers_fit_64_bits(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
            bits = value.bit_length()
            raise ValueError(f"a {bits}-bit integer is beyond 64 bits (at most {MAX_INTEGER:,})")
        return value


class TrlSection(Section):
    """A section whose fields are TRL config arguments under TRL's names, except `own_fields`."""

    own_fields: ClassVar[frozenset[str]] = frozenset()

    def trl_arguments(self) -> dict[str, Any]:
        """The fields TRL takes as they are, by name."""
        return self.model_dump(exclude=set(self.own_fields))


class DataSection(Section):
    """The training rows and the tool catalogue. The row selection changes the weights; the paths
    are not in `weights_key` because the retrain flow hashes the bytes they hold (a moved file is
    not news)."""

    train_single_step: Path = Field(
        DATA_DIR / "train" / "single_step.jsonl",
        description="single-step rows (JSONL); relative paths are relative to the working dir",
    )
    train_multistep: Path = Field(
        DATA_DIR / "train" / "multistep.jsonl", description="multi-step rows (JSONL)"
    )
    max_train_rows: int | None = Field(
        None, gt=0, description="a seeded subset of this many rows, for smoke runs"
    )
    catalogue: Path = Field(
        DEFAULT_CATALOGUE,
        description="the tool catalogue (JSON): the tools the system prompt names and the reward "
        "scores",
    )
    # The condition-fails branch (a multi-step row labelled `respond`) is ~7% of the rows; repeating
    # it keeps it in most batches of both stages.
    condition_fails_repeat: int = Field(
        1, ge=1, description="times each condition-fails row appears in both stages"
    )
    # A model built from scratch has no numeracy: SFT can mix in rows never counted among the
    # training rows: short exercises (56万 → 560000, is 4,937,231 元 at least 56万, 200 × 562.54),
    # or data/aux/conditional.jsonl, fresh draws of the conditional steps (README: Numeracy).
    train_aux: Path = Field(
        DATA_DIR / "aux" / "numeracy.jsonl",
        description="auxiliary rows (JSONL, sample rows) that only SFT mixes in",
    )
    aux_share: float = Field(
        0.0, ge=0, lt=1, description="share of the SFT rows drawn from train_aux; 0: none"
    )

    def training_files(self) -> list[Path]:
        """The single-step and multi-step training rows a run of this config trains on, unless
        it is given others (`toolgrpo run --train`)."""
        return [self.train_single_step, self.train_multistep]

    def mixed_in_aux(self) -> list[Path]:
        """The auxiliary file SFT draws rows from (none when `aux_share` is 0): training data,
        so a flow gates it with the training files."""
        return [self.train_aux] if self.aux_share else []

    def tool_catalogue(self) -> Catalogue:
        """The catalogue at `catalogue` (raises `CatalogueError` when it cannot be used)."""
        return load_catalogue(self.catalogue)


class TinyModelSection(Section):
    """The tokenizer and random Qwen2 built locally when there is no base model: the keyword
    arguments of `training.model.build_tiny`. Changes the weights."""

    hidden_size: int = Field(256, gt=0, description="width of the tiny model")
    num_layers: int = Field(4, gt=0, description="transformer layers")
    num_heads: int = Field(4, gt=0, description="attention heads; must divide hidden_size")
    vocab_size: int = Field(2048, ge=300, description="BPE vocabulary trained on the rows")
    split_digits: bool = Field(True, description="one token per digit (amounts compare by digit)")
    system_prompt_token: bool = Field(
        True,
        description="the constant system prompt as one token: to a model trained from scratch it "
        "carries no information, and as BPE pieces it was 62 of a row's ~150 tokens",
    )
    frame_tokens: FramePieces = Field(
        "none",
        description="constant pieces of the chat frame and of the answer's JSON as one token each "
        "(`training.model.FRAME_PIECES`): `all` (rows ~101 → ~77 tokens), `all_but_opening` "
        '(the assistant header and `{"thought": "` stay BPE pieces)',
    )


class LoraSection(Section):
    """PEFT's `LoraConfig` arguments under PEFT's names; `r` 0 trains every weight instead.
    Changes the weights."""

    r: int = Field(0, ge=0, description="LoRA rank; 0 trains every weight, no adapter")
    lora_alpha: int = Field(32, gt=0, description="LoRA scaling numerator")
    target_modules: str | list[str] = Field("all-linear", description="modules given an adapter")


class ModelSection(Section):
    """What is trained: a base model, or a tiny one built locally, with or without LoRA, and in
    which precision the weights are loaded, trained and saved. Changes the weights."""

    base_model: str | None = Field(
        None, description="local directory or hub id; None builds the tiny model (model.tiny)"
    )
    bf16: bool = Field(False, description="bfloat16 weights and mixed precision (TRL's bf16)")
    tiny: TinyModelSection = TinyModelSection()
    lora: LoraSection = LoraSection()

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelSection:
        if self.base_model is None and self.tiny.hidden_size % self.tiny.num_heads:
            raise ValueError(
                f"tiny.hidden_size {self.tiny.hidden_size} is not divisible by "
                f"tiny.num_heads {self.tiny.num_heads}"
            )
        return self


class SFTSection(TrlSection):
    """The SFT warm start: `trl.SFTConfig` arguments (TRL's names) and which multi-step rows it
    sees. Changes the weights."""

    own_fields = frozenset({"multistep_fraction"})

    multistep_fraction: float = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="share of multi-step scenarios (whole ones) beside every single-step row",
    )
    num_train_epochs: float = Field(12, gt=0, description="epochs over the SFT rows")
    learning_rate: float = Field(2e-3, gt=0, description="peak of the learning-rate schedule")
    per_device_train_batch_size: int = Field(
        16, gt=0, description="rows per micro-batch and process (a step: × accumulation steps)"
    )
    gradient_accumulation_steps: int = Field(1, gt=0, description="micro-batches per step")
    train_sampling_strategy: Literal["random", "group_by_length", "batch_rebalance"] = Field(
        "random",
        description="transformers' sampler; batch_rebalance: each step's random rows split by "
        "length into micro-batches, each padded only to its longest row",
    )
    max_length: int = Field(1024, gt=0, description="tokens per row, prompt and completion")
    lr_scheduler_type: str = Field("cosine", description="a transformers SchedulerType name")

    @field_validator("lr_scheduler_type")
    @classmethod
    def _scheduler_known(cls, name: str) -> str:
        return one_of(name, LR_SCHEDULER_TYPES, "a transformers SchedulerType")

    warmup_steps: float = Field(0.05, ge=0, description="warm-up; below 1, a share of the steps")
    completion_only_loss: bool = Field(True, description="loss on the completion only")

    @property
    def rows_per_process_step(self) -> int:
        """The rows one process trains on per optimiser step (its micro-batches together)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


class GRPOSection(TrlSection):
    """GRPO with NGRPO calibration from the SFT model: `NGRPOConfig` arguments (TRL's names plus
    NGRPO's) and the reward's points. Changes the weights."""

    own_fields = frozenset({"prompts_per_step", "ngrpo_max_reward", "reward_points"})

    max_steps: int = Field(70, gt=0, description="optimiser steps")
    learning_rate: float = Field(
        1e-4, gt=0, description="learning rate (TRL's default schedule: linear decay from it)"
    )
    prompts_per_step: int = Field(
        4, gt=0, description="prompts per optimiser step, each sampled num_generations times"
    )
    num_generations: int = Field(8, ge=2, description="completions per prompt (case study: 4 → 8)")
    max_completion_length: int = Field(
        350, gt=0, description="tokens per completion (case study: 200 → 350); also evaluation's"
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    steps_per_generation: int | None = Field(
        None,
        gt=0,
        description="optimiser steps each generation batch feeds (it holds that many steps' "
        "prompts); None: one, TRL's default",
    )
    num_iterations: int = Field(
        1, ge=1, description="updates on each generation batch (GRPO's μ); > 1 reuses samples"
    )
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 loads no reference model")
    epsilon: float = Field(0.2, gt=0, description="lower clipping bound")
    epsilon_high: float | None = Field(
        None, gt=0, description="upper clipping bound; None: the same as epsilon"
    )
    use_vllm: bool = Field(False, description="generate with vLLM (needs CUDA and vllm installed)")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="colocate: vLLM inside each training process; server: a `trl vllm-serve`",
    )
    vllm_server_base_url: str | None = Field(
        None, description="server mode: the `trl vllm-serve` URL; None: http://0.0.0.0:8000"
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="colocate mode and evaluation: GPU memory share for vLLM"
    )
    vllm_tensor_parallel_size: int = Field(
        1, ge=1, description="colocate mode: GPUs per vLLM engine; divides num_processes"
    )
    ngrpo_scope: Literal["none", "zero_std", "all"] = Field(
        "zero_std", description="groups given NGRPO's virtual full-score sample; none is GRPO"
    )
    ngrpo_max_reward: float | None = Field(
        None, gt=0, description="reward of the virtual sample; None: the reward's maximum"
    )
    ngrpo_zero_std_on: Literal["total", "tool"] = Field(
        "total",
        description="what a zero-std group has equal: the total reward (the case study) or the "
        "tool component's score",
    )
    reward_points: RewardWeights = RewardWeights()

    @model_validator(mode="after")
    def _server_url_needs_server_mode(self) -> GRPOSection:
        if self.vllm_server_base_url is not None and self.vllm_mode != "server":
            raise ValueError("vllm_server_base_url is only read with vllm_mode 'server'")
        return self


class BaseSection(Section):
    """The recipe of `toolgrpo base build` (issue #16's lever 3): the tiny model pretrained as a
    language model on numeracy exercises and fresh scenario prompts (`generator.base_corpus`),
    with the `sft` section's batches and schedule; SFT starts from it via `model.base_model`."""

    exercise_rounds: int = Field(
        10, ge=0, description="numeracy exercises: this many times data/aux's 800 (new figures)"
    )
    request_rounds: int = Field(
        4, ge=0, description="fresh draws of the training scenarios' requests and observations"
    )
    copy_rounds: int = Field(
        0,
        ge=0,
        description="fresh draws of the training scenarios whose every prompt is answered with "
        "the figures it states (accounts, tickers, amounts as written): copying drills",
    )
    num_train_epochs: float = Field(2, gt=0, description="epochs over the corpus")
    learning_rate: float = Field(2e-3, gt=0, description="peak of the learning-rate schedule")
    held_out: list[Path] = Field(
        default_factory=lambda: sorted((DATA_DIR / "eval").glob("*.jsonl")),
        description="files whose prompts the corpus must not contain (the eval files)",
    )


class StageProcesses(Section):
    """GRPO's processes and threads where they differ from the runtime section's: on a CPU,
    sampling from a tiny model is latency-bound, so two one-thread processes beat one process of
    two threads (1.39× per step), while SFT's matmuls gain nothing from processes (1.02×,
    `bench/processes.py`)."""

    num_processes: int | None = Field(None, ge=1, description="None: runtime.num_processes")
    torch_threads: int | None = Field(None, gt=0, description="None: runtime.torch_threads")


# Overrides that undo `runtime.grpo`, so GRPO runs as the runtime section says: for callers that
# give both stages one process layout (ablation arms side by side, benchmark arms).
GRPO_LAYOUT_UNSET: dict[str, Any] = {
    "runtime.grpo.num_processes": None,
    "runtime.grpo.torch_threads": None,
}


class RuntimeSection(TrlSection):
    """Where and how the stages run: device, threads, processes, checkpoints, logs and the eval
    subset. They change no setting of the optimisation, only floating-point detail, so they are
    not in `weights_key`: a busy machine's `torch_threads=1` reuses the trained models."""

    own_fields = frozenset(
        {"device", "num_processes", "accelerate_config", "torch_threads", "eval_max_rows", "grpo"}
    )

    device: Device = Field(
        "cpu",
        description="cpu; cuda (stops without a GPU); auto: CUDA if present, else the CPU (logged)",
    )
    # TRL turns it on by default; it recomputes activations (about a third more compute), which
    # only pays off when memory is short — a large model on a GPU.
    gradient_checkpointing: bool = Field(False, description="recompute activations to save memory")
    num_processes: int = Field(1, ge=1, description="> 1 launches the stage with accelerate")
    accelerate_config: str = Field(
        "multi_gpu",
        description="with num_processes > 1: a config TRL ships (multi_gpu, zero2, zero3, "
        "fsdp2, …) or an accelerate config file",
    )
    torch_threads: int | None = Field(None, gt=0, description="CPU threads; None: torch's default")
    save_steps: int = Field(50, gt=0, description="steps between checkpoints")
    save_total_limit: int = Field(2, gt=0, description="checkpoints kept")
    logging_steps: int = Field(1, gt=0, description="steps between metrics lines")
    eval_max_rows: int | None = Field(None, gt=0, description="rows per eval file, quick checks")
    grpo: StageProcesses = StageProcesses()

    def most_processes(self) -> int:
        """The most processes a stage runs: above 1, accelerate launches it."""
        return max(self.num_processes, self.grpo.num_processes or 1)

    @field_validator("accelerate_config")
    @classmethod
    def _accelerate_config_exists(cls, name: str) -> str:
        accelerate_config_file(name)
        return name


def trl_accelerate_configs() -> dict[str, Path]:
    """The accelerate configs TRL ships, by name (found without importing TRL)."""
    folder = Path(importlib.util.find_spec("trl").origin).parent / "accelerate_configs"
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def accelerate_config_file(name: str) -> Path:
    """The accelerate config file `name` stands for: a path, or a config TRL ships by name."""
    if Path(name).is_file():
        return Path(name)
    shipped = trl_accelerate_configs()
    if name not in shipped:
        raise ValueError(
            f"{name!r} is neither a file nor an accelerate config TRL ships ({', '.join(shipped)})"
        )
    return shipped[name]


def accelerate_engine(name: str) -> tuple[str, int | None]:
    """The `distributed_type` of an accelerate config and, for DeepSpeed, its ZeRO stage."""
    values = yaml.safe_load(accelerate_config_file(name).read_text(encoding="utf-8")) or {}
    zero_stage = (values.get("deepspeed_config") or {}).get("zero_stage")
    return str(values.get("distributed_type", "NO")), zero_stage


# What `weights_key` leaves out: the preset's name, the runtime section, the data paths, and
# where vLLM runs (the same sampling either way).
_NOT_WEIGHTS: dict[str, Any] = {
    "preset": True,
    "runtime": True,
    "data": {"train_single_step", "train_multistep", "train_aux", "catalogue"},
    "base": True,  # read by `toolgrpo base build` only, which keys its own cache (base card)
    "grpo": {
        "vllm_mode",
        "vllm_server_base_url",
        "vllm_gpu_memory_utilization",
        "vllm_tensor_parallel_size",
    },
}


class TrainConfig(Section):
    """Everything a training stage reads, in sections (the module docstring says which change
    the trained weights)."""

    preset: str = "custom"
    seed: int = Field(0, description="seed of both stages, the row draws and the tiny model")
    data: DataSection = DataSection()
    model: ModelSection = ModelSection()
    sft: SFTSection = SFTSection()
    grpo: GRPOSection = GRPOSection()
    base: BaseSection = BaseSection()
    runtime: RuntimeSection = RuntimeSection()

    def for_stage(self, stage: str) -> TrainConfig:
        """This config as `stage` runs it: for GRPO, the processes and threads of `runtime.grpo`
        where it sets them in place of the runtime section's."""
        layout = self.runtime.grpo.model_dump(exclude_none=True) if stage == "grpo" else {}
        if not layout:
            return self
        return self.model_copy(update={"runtime": self.runtime.model_copy(update=layout)})

    @model_validator(mode="after")
    def _completions_split_over_processes(self) -> TrainConfig:
        completions = self.grpo.prompts_per_step * self.grpo.num_generations
        processes = self.for_stage("grpo").runtime.num_processes
        if completions % processes:
            raise ValueError(
                f"grpo.prompts_per_step × grpo.num_generations = {completions} completions per "
                f"step do not split over GRPO's {processes} processes (runtime.num_processes, "
                "runtime.grpo.num_processes)"
            )
        return self

    @model_validator(mode="after")
    def _lora_merges_unsharded_weights(self) -> TrainConfig:
        if self.runtime.most_processes() == 1 or self.model.lora.r == 0:
            return self
        engine, zero_stage = accelerate_engine(self.runtime.accelerate_config)
        if engine == "FSDP" or zero_stage == 3:
            raise ValueError(
                f"runtime.accelerate_config {self.runtime.accelerate_config!r} shards the weights, "
                "which LoRA merges into on save: with model.lora.r > 0 use multi_gpu or zero2, "
                "or train every weight (model.lora.r=0)"
            )
        return self

    @model_validator(mode="after")
    def _vllm_engines_split_processes(self) -> TrainConfig:
        grpo, processes = self.grpo, self.for_stage("grpo").runtime.num_processes
        colocated = grpo.use_vllm and grpo.vllm_mode == "colocate"
        if colocated and processes % grpo.vllm_tensor_parallel_size:
            raise ValueError(
                f"grpo.vllm_tensor_parallel_size {grpo.vllm_tensor_parallel_size} does not divide "
                f"GRPO's process count {processes} (runtime.num_processes, "
                "runtime.grpo.num_processes)"
            )
        return self

    def weights_key(self) -> str:
        """A sha256 of exactly the settings that change the trained weights (seed, model, the
        data's row selection, sft, grpo): the training cache key, with the rows and the code."""
        settings = self.model_dump(mode="json", exclude=_NOT_WEIGHTS)
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

    def trainer_arguments(self, output_dir: Path) -> dict[str, Any]:
        """The `TrainingArguments` both stages share: seeds, precision, runtime, checkpoints."""
        return {
            **self.runtime.trl_arguments(),
            "output_dir": str(output_dir),
            "seed": self.seed,
            "data_seed": self.seed,
            "bf16": self.model.bf16,
            "use_cpu": self.runtime.device == "cpu",
            "save_strategy": "steps",
            "report_to": "none",
            "disable_tqdm": True,  # the Prefect task streams lines; progress bars only add noise
        }

    def with_overrides(self, overrides: Mapping[str, Any]) -> TrainConfig:
        """This config with dotted-path `overrides` applied and validated again."""
        return _overridden(self.model_dump(), overrides, f"preset {self.preset!r}")

    def write(self, path: Path | str) -> Path:
        """Write the config as JSON (the file `read_config` loads back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return path


class OverridableField(NamedTuple):
    """One field an override can set: its type annotation and what it does."""

    annotation: Any
    description: str


def overridable_fields() -> dict[str, OverridableField]:
    """Every field an override can set, by dotted path (`"grpo.max_steps"`), with its type and
    description: what the CLI and the deployment form list."""
    return {path: field for path, field in _leaves(TrainConfig, "") if path != "preset"}


def _fields(cls: type) -> list[tuple[str, Any, str]]:
    """(name, annotation, description) of each field of a section: a pydantic model or a
    dataclass such as the reward's points."""
    if issubclass(cls, BaseModel):
        return [(n, f.annotation, f.description or "") for n, f in cls.model_fields.items()]
    hints = typing.get_type_hints(cls)
    return [
        (f.name, hints[f.name], f.metadata.get("description", "")) for f in dataclasses.fields(cls)
    ]


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and (
        issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)
    )


def _leaves(cls: type, prefix: str) -> Iterator[tuple[str, OverridableField]]:
    """The dotted leaf fields of a section, nested sections expanded."""
    for name, annotation, description in _fields(cls):
        if _is_section(annotation):
            yield from _leaves(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", OverridableField(annotation, description)


class Overrides(BaseModel):
    """Set fields of a training config, in its sections; what is not set keeps the preset's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def dotted(self) -> dict[str, Any]:
        """The fields set, as dotted overrides (`{"grpo.max_steps": 5}`)."""
        return dict(_dotted(self.model_dump(mode="json", exclude_unset=True), ""))

    @classmethod
    def from_dotted(cls, overrides: Mapping[str, Any]) -> Overrides:
        """The model with each dotted override set (`load_preset` checks them more kindly)."""
        return cls.model_validate(_set_dotted({}, overrides))


def _dotted(values: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def _first_paragraph(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split("\n\n")[0].split())


def _overrides_model(cls: type, skip: Collection[str], prefix: str = "") -> type[Overrides]:
    """An `Overrides` model with the fields of section `cls` but the dotted paths `skip`, each
    unset by default, nested sections as nested models, descriptions kept."""
    definitions: dict[str, Any] = {}
    for name, annotation, description in _fields(cls):
        path = f"{prefix}{name}"
        if path in skip:
            continue
        if _is_section(annotation):
            section = _overrides_model(annotation, skip, f"{path}.")
            definitions[name] = (section, Field(None, description=_first_paragraph(annotation)))
        else:
            definitions[name] = (annotation, Field(None, description=description))
    return create_model(
        f"{cls.__name__.removesuffix('Section')}Overrides",
        __base__=Overrides,
        __module__=__name__,
        __doc__=_first_paragraph(cls),
        **definitions,
    )


def overrides_model(skip: Collection[str] = ()) -> type[Overrides]:
    """The typed form of the dotted overrides, every overridable field but `skip` (dotted paths
    a caller sets itself), by section with its description: what a deployment form lists."""
    return _overrides_model(TrainConfig, {"preset", *skip})


# Fields renamed since they were first released, by their old name (a section's prefix or not):
# no spelling of the old name resembles the new one.
RENAMED_FIELDS = {
    "use_cpu": "runtime.device",
    "lora_r": "model.lora.r",
    "sft_epochs": "sft.num_train_epochs",
    "sft_batch_size": "sft.per_device_train_batch_size",
}


def _unknown_field(path: str) -> str:
    """`path: unknown field`, with the field it was renamed to (`runtime.use_cpu` →
    `runtime.device`), else the known fields of the same name (`bf16` → `model.bf16`), else the
    closest one: a typo, or an old flat name such as `grpo_max_steps` (dots and underscores
    compare alike)."""
    name = path.rpartition(".")[2]
    known = {field.replace(".", "_"): field for field in overridable_fields()}
    suggestions = (
        [RENAMED_FIELDS[name]]
        if name in RENAMED_FIELDS
        else [field for field in known.values() if field.rpartition(".")[2] == name]
        or [known[c] for c in difflib.get_close_matches(path.replace(".", "_"), known, n=1)]
    )
    hint = f" (did you mean {' or '.join(map(repr, suggestions))}?)" if suggestions else ""
    return f"{path}: unknown field{hint}"


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as `dotted.field: what is wrong`."""
    path = ".".join(str(part) for part in error["loc"])
    if error["type"] in {"extra_forbidden", "unexpected_keyword_argument"}:
        return _unknown_field(path)
    # Our own checks raise ValueError: their message without pydantic's "Value error, ".
    message = error["ctx"]["error"] if error["type"] == "value_error" else error["msg"]
    return f"{path}: {message}" if path else str(message)


def _validated(values: dict[str, Any], source: str) -> TrainConfig:
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(_problem(item) for item in error.errors())
        raise ConfigError(f"{source}: invalid training config: {problems}") from None


def _overridden(values: dict[str, Any], overrides: Mapping[str, Any], source: str) -> TrainConfig:
    """`values` (nested, as in a preset) with each dotted override set, validated."""
    known = overridable_fields()
    unknown = [path for path in overrides if path not in known]
    if unknown:
        raise ConfigError(f"{source}: " + "; ".join(map(_unknown_field, unknown)))
    return _validated(_set_dotted(copy.deepcopy(values), overrides), source)


def _set_dotted(values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (nested sections) with each dotted override set in place."""
    for path, value in overrides.items():
        *sections, name = path.split(".")
        target = values
        for section in sections:
            target = target.setdefault(section, {})
        target[name] = value
    return values


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` set section by section (a section's other fields kept)."""
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


def _preset_values(name: str, extending: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's sections as its YAML sets them, over those of the preset it `extends` (a
    variant states only what differs); its relative data paths are under the data folder, where
    the files it names ship."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; choose one of {preset_names()}")
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data = values.get("data", {})
    for field_name, value in data.items():
        field = DataSection.model_fields.get(field_name)  # an unknown one fails validation
        if field is not None and field.annotation is Path and isinstance(value, str):
            data[field_name] = DATA_DIR / value
    base = values.pop("extends", None)
    if base is None:
        return values
    if base in (name, *extending):
        raise ConfigError(
            f"presets extend each other in a circle: {' → '.join((*extending, name, base))}"
        )
    return _merged(_preset_values(base, (*extending, name)), values)


def load_preset(name: str, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The named preset with dotted-path `overrides` applied (`{"grpo.max_steps": 5}`); values
    may be strings (`"5"`), as from a command line, and are validated like the preset's."""
    values = _preset_values(name)
    return _overridden({**values, "preset": name}, overrides or {}, f"preset {name!r}")


def read_config(path: Path | str) -> TrainConfig:
    """The config in a JSON file written by `TrainConfig.write`."""
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read training config: {error}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a training config is a JSON object of section: fields")
    return _validated(values, str(path))
