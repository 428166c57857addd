"""The SFT warm start: teach the output format and single-step tools before GRPO."""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import SFTConfig, SFTTrainer

from toolgrpo.training.chat import chat_prompt, system_prompt
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.metrics import METRICS_FILENAME, MetricsFileCallback
from toolgrpo.training.model import build_tiny, load_model, lora_config, save_model
from toolgrpo.training.samples import grpo_rows, sft_rows, tokenizer_corpus
from toolgrpo.training.stage import train_and_save

STAGE = "sft"


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
            tiny = config.model.tiny.model_dump()
            catalogue = config.data.tool_catalogue()
            whole = (system_prompt(catalogue),) if tiny.pop("system_prompt_token") else ()
            corpus = tokenizer_corpus(grpo_rows(config), catalogue, with_system_prompt=not whole)
            tokenizer, model = build_tiny(corpus, **tiny, whole_texts=whole, seed=config.seed)
            save_model(model, tokenizer, init_dir)
    return load_model(init_dir, config.model)


def run_sft(run_dir: Path, config: TrainConfig) -> Path:
    """Train the warm start in `<run_dir>/sft` (resuming from its last checkpoint) and return the
    saved model directory `<run_dir>/sft/model`."""
    stage_dir = run_dir / STAGE
    args = sft_config(config, stage_dir)
    tokenizer, model = initial_model(config, stage_dir, args)
    catalogue = config.data.tool_catalogue()
    dataset = Dataset.from_list(
        [
            {
                "prompt": chat_prompt(tokenizer, row["prompt"], catalogue),
                "completion": row["solution"],
            }
            for row in sft_rows(config)
        ]
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config.model.lora),
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
    )
    return train_and_save(trainer, tokenizer, stage_dir, config)
