"""Predictions of a saved model on sample rows: its answers, their checks, per-tool probabilities.

`predict` turns a model directory and sample rows into the predictions frame
(`schemas.predictions.Predictions`) that metrics and mining read. It decodes each answer whole
(`decode`: what the JSON and params checks need), or only up to its tool slot and then scores
the tools (`score`: mining's training audit, which reads the tool and its probabilities only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from toolgrpo.common.cpus import usable_cpus
from toolgrpo.common.wording import thought_action_consistent
from toolgrpo.evaluation.decoding import (
    EvaluationError,
    action_slot_prefix,
    encode_prompts,
    generate_completions,
    generate_with_vllm,
    load_trained_model,
    tool_probabilities,
)
from toolgrpo.evaluation.device import CPU_BATCH_SIZES, EvalDevice, cuda_batch_sizes, eval_device
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import Completion, first_json_object, written_action
from toolgrpo.schemas.predictions import probability_columns, validate_predictions
from toolgrpo.schemas.samples import NO_CONDITION, sample_source
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config import CONFIG_FILENAME, Device
from toolgrpo.training.config_overrides import read_config

# Room left above the longest labelled solution: a longer answer is a runaway, not a format.
MAX_NEW_TOKENS_MARGIN = 1.25
# decode: each answer whole, checked; score: the answer up to its tool slot, then tools scored.
PredictionMode = Literal["decode", "score"]
SAMPLE_COLUMNS = ["id", "scenario_id", "kind", "lang", "step", "n_steps", "source", "prompt"]
# What only a whole decoded answer shows (`completion_checks`); null on a scored row.
DECODED_CHECKS = ["parsed_ok", "params_valid", "params_exact", "consistent"]
_CHECKS_SCHEMA = {"predicted_tool": pl.String} | dict.fromkeys(DECODED_CHECKS, pl.Boolean)


class EvalSettings(BaseModel):
    """How completions are decoded and tools scored, and where (`evaluation.device`)."""

    model_config = ConfigDict(frozen=True)
    max_new_tokens: int | None = Field(
        None,
        gt=0,
        description="None: the rows' longest solution in tokens plus 25% (`fitted_max_new_tokens`)",
    )
    device: Device = Field("auto", description="auto: where the model trained (its config)")
    batch_size: int | None = Field(
        None, gt=0, description="prompts decoded together; None: 32 on the CPU, what fits a GPU"
    )
    score_batch_size: int | None = Field(
        None, gt=0, description="rows whose tools are scored together; None: 16 / what fits"
    )
    # Threads beyond the cores a process may use only contend: on two busy cores, two threads
    # ran a tiny model ~20x slower than one.
    torch_threads: int | None = Field(
        None, ge=1, description="CPU threads (on the CPU only); None: the CPUs the process may use"
    )


DEFAULT_SETTINGS = EvalSettings()


def evaluation_rows(frame: pl.DataFrame, max_rows: int | None) -> pl.DataFrame:
    """At most `max_rows` rows of each file (quick runs); evaluation names slices by file."""
    if max_rows is None:
        return frame
    return frame.filter(pl.int_range(pl.len()).over("file") < max_rows)


def _label(solution: object) -> tuple[str | None, Any]:
    """The labelled tool and params of a row's solution (a JSON string)."""
    return written_action(first_json_object(solution))


def completion_checks(completion: str, solution: str, catalogue: Catalogue) -> dict[str, Any]:
    """What the model's output says and how it fares: tool, format, params, consistency.

    Never raises: malformed output gives a null tool and false checks.
    """
    parsed = first_json_object(completion)
    tool, params = written_action(parsed)
    label_tool, label_params = _label(solution)
    try:
        Completion.model_validate(parsed)
        parsed_ok = True
    except ValueError:
        parsed_ok = False
    params_valid = tool is not None and catalogue.params_valid(tool, params)
    return {
        "predicted_tool": tool,
        "parsed_ok": parsed_ok,
        "params_valid": params_valid,
        "params_exact": tool is not None and tool == label_tool and params == label_params,
        "consistent": thought_action_consistent(completion, catalogue),
    }


def fitted_max_new_tokens(tokenizer: PreTrainedTokenizerBase, solutions: list[str]) -> int:
    """Tokens a completion may take: the longest of `solutions` (with its end token) plus
    `MAX_NEW_TOKENS_MARGIN`. A longer answer is a runaway that held its whole batch up to the
    limit (`max_completion_length` 350, where answers average ~65 tokens)."""
    lengths = [len(ids) + 1 for ids in tokenizer(solutions, add_special_tokens=False)["input_ids"]]
    return math.ceil(MAX_NEW_TOKENS_MARGIN * max(lengths, default=1))


def decode(
    model_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    prompts: list[str],
    device: EvalDevice,
    *,
    max_new_tokens: int,
    batch_size: int,
    up_to_tool_slot: bool = False,
    on_batch: Callable[[int], None] | None = None,
    catalogue: Catalogue | None = None,
) -> list[str]:
    """Greedy completions with vLLM where `device` says so, else with our batched loop
    (`up_to_tool_slot`, `on_batch`: see `generate_completions`)."""
    if device.vllm:
        grpo = read_config(Path(model_dir) / CONFIG_FILENAME).grpo
        return generate_with_vllm(
            model_dir,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            dtype=device.dtype,
            gpu_memory_utilization=grpo.vllm_gpu_memory_utilization,
            up_to_tool_slot=up_to_tool_slot,
            catalogue=catalogue,
        )
    return generate_completions(
        tokenizer,
        model,
        prompts,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        on_batch=on_batch,
        up_to_tool_slot=up_to_tool_slot,
        catalogue=catalogue,
    )


def _scored_checks(probabilities: np.ndarray, catalogue: Catalogue) -> list[dict[str, Any]]:
    """The checks of rows scored, not decoded: the most probable tool, and null (not measured)
    for everything only the whole answer shows."""
    names = np.asarray(catalogue.names)[probabilities.argmax(axis=1)]
    return [{"predicted_tool": str(name), **dict.fromkeys(DECODED_CHECKS)} for name in names]


def predict(
    model_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings = DEFAULT_SETTINGS,
    catalogue: Catalogue | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    device: EvalDevice | None = None,
    mode: PredictionMode = "decode",
) -> pl.DataFrame:
    """The predictions frame of the model in `model_dir` on `samples` (validated), evaluated on
    `device` (default: `eval_device` of the model and `settings.device`).

    `samples` has the data contract's columns plus `source` (see `sample_source`) or the
    loader's `file` column, from which `source` is derived. `on_progress(done, total)` follows
    the decoding, the bulk of the time. `mode` `score` decodes each answer only up to its tool
    slot: the predicted tool is then the most probable one, and the completion and the checks
    only the whole answer gives (JSON, params, consistency) are null, not measured.
    """
    catalogue = catalogue or default_catalogue()
    if "source" not in samples.columns and "file" in samples.columns:
        sources = [sample_source(Path(file)) for file in samples["file"]]
        samples = samples.with_columns(source=pl.Series(sources, dtype=pl.String))
    missing = [c for c in [*SAMPLE_COLUMNS, "solution", "tool"] if c not in samples.columns]
    if missing:
        raise EvaluationError(f"sample rows lack columns {missing}")
    device = device or eval_device(model_dir, settings.device)
    if device.device == "cpu":
        torch.set_num_threads(settings.torch_threads or usable_cpus())
    tokenizer, model = load_trained_model(model_dir, device)
    prompts, solutions = samples["prompt"].to_list(), samples["solution"].to_list()
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if settings.max_new_tokens and positions and settings.max_new_tokens >= positions:
        raise EvaluationError(
            f"max_new_tokens {settings.max_new_tokens:,} is beyond the model's {positions:,} "
            f"positions (config.json max_position_embeddings): give fewer than {positions:,}"
        )
    max_new_tokens = settings.max_new_tokens or fitted_max_new_tokens(tokenizer, solutions)
    if positions:  # the fitted length of very long solutions: as many as the model can place
        max_new_tokens = min(max_new_tokens, positions - 1)
    fitted = CPU_BATCH_SIZES
    if device.device == "cuda":
        longest_prompt = max(map(len, encode_prompts(tokenizer, prompts, catalogue)), default=0)
        tokens_per_row = longest_prompt + max_new_tokens
        fitted = cuda_batch_sizes(model.config, device.dtype, tokens_per_row, len(catalogue.names))
    on_batch = None if on_progress is None else lambda done: on_progress(done, len(prompts))
    completions = decode(
        model_dir,
        tokenizer,
        model,
        prompts,
        device,
        max_new_tokens=max_new_tokens,
        batch_size=settings.batch_size or fitted[0],
        up_to_tool_slot=mode == "score",
        on_batch=on_batch,
        catalogue=catalogue,
    )
    contexts = [
        chat_prompt(tokenizer, prompt, catalogue) + action_slot_prefix(completion)
        for prompt, completion in zip(prompts, completions, strict=True)
    ]
    probabilities = tool_probabilities(
        tokenizer,
        model,
        contexts,
        catalogue.names,
        batch_size=settings.score_batch_size or fitted[1],
    )
    # scored up to the tool slot, a row has no whole answer to show
    shown: list[str | None] = [None] * len(prompts) if mode == "score" else list(completions)
    if mode == "score":
        checks = _scored_checks(probabilities, catalogue)
    else:
        checks = [
            completion_checks(completion, solution, catalogue)
            for completion, solution in zip(completions, solutions, strict=True)
        ]
    frame = pl.concat(
        [
            samples.select(
                pl.col(["id", "scenario_id", "source"]).cast(pl.String),
                pl.col(["kind", "lang", "prompt"]),
                pl.col(["step", "n_steps"]).cast(pl.Int64),
                pl.col("tool").alias("label_tool"),
                pl.col("condition") if "condition" in samples.columns else NO_CONDITION,
            ),
            pl.DataFrame(checks, schema=_CHECKS_SCHEMA),
            pl.DataFrame({"completion": shown}, schema={"completion": pl.String}),
            pl.DataFrame(probabilities, schema=probability_columns(catalogue), orient="row"),
        ],
        how="horizontal",
    )
    order = [*SAMPLE_COLUMNS, "label_tool", "predicted_tool", "completion"]
    return validate_predictions(frame.select(*order, pl.exclude(order)), catalogue)
