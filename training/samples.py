"""The rows each training stage learns from, read from the JSONL files a config names."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.samples import is_condition_fails, is_conditional
from toolgrpo.training.chat import system_prompt
from toolgrpo.training.config import TrainConfig

Row = dict[str, Any]
# The ChatML frame around every prompt, so the tokenizer learns its role names as whole tokens.
_CHAT_FRAME = "system\nuser\nassistant\n"


class SamplesError(ValueError):
    """A sample file that a stage cannot read; the message names the file and line."""


def read_samples(path: Path) -> list[Row]:
    """The rows of a JSONL file (the data gate validates contents; this only has to parse)."""
    if not path.is_file():
        raise SamplesError(f"{path}: sample file not found")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SamplesError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        missing = {"prompt", "solution"} - set(row) if isinstance(row, dict) else {"an object"}
        if missing:
            raise SamplesError(f"{path}:{number}: row lacks {sorted(missing)}")
        rows.append(row)
    return rows


def _subset(rows: list[Row], config: TrainConfig) -> list[Row]:
    """At most `data.max_train_rows` rows (seeded draw, smoke runs), the condition-fails branch
    repeated `data.condition_fails_repeat` times."""
    data = config.data
    if data.max_train_rows is not None and len(rows) > data.max_train_rows:
        rows = random.Random(config.seed).sample(rows, data.max_train_rows)
    repeats = [
        data.condition_fails_repeat if is_condition_fails(row["kind"], row["tool"]) else 1
        for row in rows
    ]
    return [row for row, times in zip(rows, repeats, strict=True) for _ in range(times)]


def _training_files(config: TrainConfig) -> tuple[list[Row], list[Row]]:
    """The single-step and the multi-step rows, as the files hold them."""
    return read_samples(config.data.train_single_step), read_samples(config.data.train_multistep)


def sft_rows(config: TrainConfig) -> list[Row]:
    """The warm start's rows: every single-step row plus a seeded share of whole multi-step
    scenarios (the case study's model had seen single-step requests in a previous round), then
    the auxiliary rows (`aux_rows`)."""
    task = sft_task_rows(config)
    return task + aux_rows(config, len(task))


def sft_task_rows(config: TrainConfig) -> list[Row]:
    """`sft_rows` without the auxiliary rows."""
    single, multi = _training_files(config)
    scenarios = sorted({row["scenario_id"] for row in multi})
    chosen = set(
        random.Random(config.seed).sample(
            scenarios, round(config.sft.multistep_fraction * len(scenarios))
        )
    )
    return _subset(single + [row for row in multi if row["scenario_id"] in chosen], config)


def aux_rows(config: TrainConfig, task_rows: int) -> list[Row]:
    """The auxiliary exercises SFT mixes in: `data.aux_share` of all SFT rows, a seeded draw
    from the rows of the `data.train_aux` files, in order, as one pool (the whole pool repeated
    first when the share needs more)."""
    share = config.data.aux_share
    if share == 0:
        return []
    exercises = [row for path in config.data.train_aux for row in read_samples(path)]
    wanted = round(task_rows * share / (1 - share))
    repeats, rest = divmod(wanted, len(exercises))
    return exercises * repeats + random.Random(config.seed).sample(exercises, rest)


def grpo_rows(config: TrainConfig) -> list[Row]:
    """Every training row, single-step and multi-step (as the case study's GRPO round), each
    conditional step `grpo.conditional_repeat` times."""
    single, multi = _training_files(config)
    repeat = config.grpo.conditional_repeat
    return [
        row
        for row in _subset(single + multi, config)
        for _ in range(
            repeat if is_conditional(row["kind"], row["tool"], row.get("condition")) else 1
        )
    ]


def tokenizer_corpus(
    rows: list[Row], catalogue: Catalogue | None = None, *, with_system_prompt: bool = True
) -> list[str]:
    """The text a locally built tokenizer is trained on: what the model reads and writes, with the
    chat frame and (unless it becomes a token of its own) the system prompt naming `catalogue`'s
    tools, once per row, so they are as frequent (and merged) as in use."""
    system = (system_prompt(catalogue or default_catalogue()),) if with_system_prompt else ()
    frame = (*system, _CHAT_FRAME)
    return [text for row in rows for text in (*frame, row["prompt"], row["solution"])]
