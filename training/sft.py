"""The SFT warm start: teach the output format and single-step tools before GRPO."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from torch.utils.data import Sampler
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2ForCausalLM,
)
from transformers.trainer_pt_utils import BatchRebalanceSampler
from trl import SFTConfig, SFTTrainer

from toolgrpo.training.chat import chat_prompt, system_prompt
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.metrics import METRICS_FILENAME, MetricsFileCallback
from toolgrpo.training.model import (
    FRAME_PIECES,
    build_tiny,
    load_model,
    lora_config,
    save_model,
)
from toolgrpo.training.samples import aux_rows, grpo_rows, sft_task_rows, tokenizer_corpus
from toolgrpo.training.stage import train_and_save

STAGE = "sft"


class AuxFirstSampler(BatchRebalanceSampler):
    """`batch_rebalance` whose first epoch reads the dataset's last `aux_rows` rows (the
    auxiliary ones) before the others, each part shuffled: a curriculum. Later epochs are
    `BatchRebalanceSampler`'s own."""

    def __init__(self, sampler: BatchRebalanceSampler, aux_rows: int) -> None:
        self.__dict__.update(vars(sampler))
        self.aux_rows = aux_rows

    def __iter__(self) -> Iterator[list[int]]:
        if self.epoch > 0:
            yield from super().__iter__()
            return
        generator = torch.Generator()
        generator.manual_seed(self.seed)  # as the base sampler seeds epoch 0
        first_aux = len(self.lengths) - self.aux_rows
        aux = [first_aux + i for i in torch.randperm(self.aux_rows, generator=generator).tolist()]
        order = aux + torch.randperm(first_aux, generator=generator).tolist()
        size, groups = self.effective_batch_size, self.dp_size * self.grad_accum
        for start in range(0, self.num_global_batches * size, size):
            batch = order[start : start + size]  # the last one short when the sampler keeps it
            if len(batch) < groups:  # as the base sampler: every group gets a row
                batch += (order * groups)[: groups - len(batch)]
            yield from self._yield_global_batch(batch)


class SFTTrainerSeeded(SFTTrainer):
    """TRL's SFT trainer whose `batch_rebalance` sampler shuffles with the run's data seed:
    transformers builds that sampler with a fixed seed (42), so every seed would see the rows in
    one order. With `aux_first_rows`, the first epoch reads that many last rows first
    (`AuxFirstSampler`)."""

    def __init__(self, *args: Any, aux_first_rows: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aux_first_rows = aux_first_rows

    def _get_train_sampler(self, train_dataset: Dataset | None = None) -> Sampler | None:
        sampler = super()._get_train_sampler(train_dataset)
        if isinstance(sampler, BatchRebalanceSampler):
            data_seed = self.args.data_seed
            sampler.seed = self.args.seed if data_seed is None else data_seed
            if self.aux_first_rows:
                sampler = AuxFirstSampler(sampler, self.aux_first_rows)
        return sampler


def sft_config(config: TrainConfig, stage_dir: Path) -> SFTConfig:
    """TRL's SFT settings: the shared trainer arguments and the `sft` section's, by name."""
    return SFTConfig(**config.trainer_arguments(stage_dir), **config.sft.trl_arguments())


def initial_model(
    config: TrainConfig, stage_dir: Path, args: SFTConfig
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The model SFT starts from: the configured base model, or a tiny one built on the training
    text and kept in `<stage_dir>/init` so that a resumed run uses the very same tokenizer (built
    by the main process; the others wait, then load it)."""
    if config.model.base_model is not None:
        return load_model(config.model.base_model, config.model)
    init_dir = stage_dir / "init"
    with args.main_process_first(desc="build the tiny model"):
        if not (init_dir / "config.json").is_file():
            tokenizer, model = tiny_model(config)
            save_model(model, tokenizer, init_dir)
    return load_model(init_dir, config.model)


def tiny_model(config: TrainConfig) -> tuple[PreTrainedTokenizerFast, Qwen2ForCausalLM]:
    """The tokenizer and random model `model.tiny` describes, built on the training text."""
    tiny = config.model.tiny.model_dump()
    catalogue = config.data.tool_catalogue()
    system = (system_prompt(catalogue),) if tiny.pop("system_prompt_token") else ()
    frame = FRAME_PIECES[tiny.pop("frame_tokens")]
    corpus = tokenizer_corpus(grpo_rows(config), catalogue, with_system_prompt=not system)
    return build_tiny(corpus, **tiny, whole_texts=system + frame, seed=config.seed)


def sft_trainer(
    config: TrainConfig, stage_dir: Path, args: SFTConfig | None = None
) -> SFTTrainerSeeded:
    """The SFT trainer of `config` in `stage_dir`: its initial model, the SFT rows as TRL's
    prompt-completion pairs, metrics written to `<stage_dir>/metrics.jsonl`; `args` (default:
    `sft_config`'s) for a caller that changes TRL's settings first (a benchmark)."""
    args = args or sft_config(config, stage_dir)
    tokenizer, model = initial_model(config, stage_dir, args)
    catalogue = config.data.tool_catalogue()
    task = sft_task_rows(config)
    aux = aux_rows(config, len(task))
    dataset = Dataset.from_list(
        [
            {
                "prompt": chat_prompt(tokenizer, row["prompt"], catalogue),
                "completion": row["solution"],
            }
            for row in task + aux
        ]
    )
    return SFTTrainerSeeded(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config.model.lora),
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
        aux_first_rows=len(aux) if config.sft.aux_first else 0,
    )


def run_sft(run_dir: Path, config: TrainConfig) -> Path:
    """Train the warm start in `<run_dir>/sft` (resuming from its last checkpoint) and return the
    saved model directory `<run_dir>/sft/model`."""
    stage_dir = run_dir / STAGE
    trainer = sft_trainer(config, stage_dir)
    tokenizer = trainer.processing_class
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"SFT trains with a tokenizer, not {type(tokenizer).__name__}")
    return train_and_save(trainer, tokenizer, stage_dir, config)
