"""The SFT warm start: teach the output format and single-step tools before GRPO."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
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
    TiedWeightsResume,
    build_tiny,
    load_model,
    lora_config,
    save_model,
)
from toolgrpo.training.samples import aux_rows, grpo_rows, sft_task_rows, tokenizer_corpus
from toolgrpo.training.stage import train_and_save
from toolgrpo.training.vocabulary import cut_vocabulary

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


class SFTTrainerSeeded(TiedWeightsResume, SFTTrainer):
    """TRL's SFT trainer whose `batch_rebalance` sampler shuffles with the run's data seed:
    transformers builds that sampler with a fixed seed (42), so every seed would see the rows in
    one order. With `aux_first_rows`, the first epoch reads that many last rows first
    (`AuxFirstSampler`). On the CPU its loss is the model's own (`compute_loss`)."""

    def __init__(self, *args: Any, aux_first_rows: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aux_first_rows = aux_first_rows

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> Any:
        """The mean cross-entropy of the labelled tokens, with TRL's entropy and token-accuracy
        metrics. On a GPU, TRL's fused LM head computes it; on the CPU, where that head has no
        Triton kernel and folds every position's logits in float32 passes (half of a pretrained
        model's SFT step), it is computed from the model's logits at the labelled positions."""
        if return_outputs or self.accelerator.device.type != "cpu":
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs["labels"][:, 1:]
        logits = model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False).logits
        mask = labels != -100
        scored = logits[:, :-1][mask].float()
        targets = labels[mask]
        count = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = F.cross_entropy(scored, targets, reduction="sum")
        loss = loss / torch.as_tensor(count).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        with torch.no_grad():
            log_probs = scored.log_softmax(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            gather = self.accelerator.gather_for_metrics
            valid = gather(mask.sum()).sum().clamp(min=1)
            metrics = self._metrics["train" if model.training else "eval"]
            metrics["entropy"].append((gather(entropy.sum()).sum() / valid).item())
            correct = gather((scored.argmax(-1) == targets).sum()).sum()
            metrics["mean_token_accuracy"].append((correct / valid).item())
            if model.training:
                self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
            metrics["num_tokens"] = [self._total_train_tokens]
        return loss

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
    """The model SFT starts from: the configured base model as it is, or one made for the
    training text and kept in `<stage_dir>/init` so that a resumed run uses the very same
    tokenizer (made by the main process; the others wait, then load it): the base with its
    vocabulary cut (`model.cut_vocabulary`), or the tiny model."""
    base = config.model.base_model
    if base is not None and not config.model.cut_vocabulary:
        return load_model(base, config.model)
    init_dir = stage_dir / "init"
    with args.main_process_first(desc="make the initial model"):
        if not (init_dir / "config.json").is_file():
            tokenizer, model = tiny_model(config) if base is None else cut_base(config, base)
            save_model(model, tokenizer, init_dir)
    return load_model(init_dir, config.model)


def cut_base(config: TrainConfig, base: str) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The base model with its vocabulary cut to what the training rows of both stages, the
    auxiliary rows and the catalogue write, in the chat frame (`training.vocabulary`)."""
    tokenizer, model = load_model(base, config.model)
    catalogue = config.data.tool_catalogue()
    rows = grpo_rows(config) + aux_rows(config, len(sft_task_rows(config)))
    texts = [
        chat_prompt(tokenizer, row["prompt"], catalogue) + row["solution"] + tokenizer.eos_token
        for row in rows
    ]
    texts.append(catalogue.model_dump_json())  # tool names, descriptions, keywords, enums
    tokenizer, model, cut = cut_vocabulary(tokenizer, model, texts, config.model.common_tokens)
    print(cut.line(), flush=True)
    return tokenizer, model


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
