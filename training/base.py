"""Pretrain a base of our own (issue #16, lever 3): the tiny model SFT would build, trained first
as a plain language model on `generator.base_corpus` (numeracy exercises, and the requests and
observations of fresh training-scenario draws), so SFT starts from a model that has read figures
and their comparisons, as the case study's started from a pretrained Qwen.

Runs as `python -m toolgrpo.training base --run-dir DIR`, like the other stages; its model is
an ordinary `save_pretrained` directory that `model.base_model` points SFT at.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedTokenizerBase
from trl import SFTConfig

from toolgrpo.generator.base_corpus import Passage, base_corpus
from toolgrpo.reporting.files import write_text_file
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.training.chat import chat_messages, chat_prompt
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.metrics import METRICS_FILENAME, MetricsFileCallback
from toolgrpo.training.samples import read_samples
from toolgrpo.training.sft import SFTTrainerSeeded, initial_model
from toolgrpo.training.stage import train_and_save

STAGE = "base"
CORPUS_RECORD = "corpus.json"


def corpus_passages(config: TrainConfig) -> list[Passage]:
    """The corpus of the config's `base` recipe, no prompt of its held-out files in it."""
    recipe = config.base
    held_out = [row["prompt"] for path in recipe.held_out for row in read_samples(path)]
    return base_corpus(
        config.seed,
        config.data.tool_catalogue(),
        exercise_rounds=recipe.exercise_rounds,
        request_rounds=recipe.request_rounds,
        excluded_prompts=held_out,
    )


def passage_text(tokenizer: PreTrainedTokenizerBase, passage: Passage, catalogue: Catalogue) -> str:
    """A passage as the model reads it in use: the system and user turns (a request ends at its
    end of turn, the eos), then an exercise's answer (TRL appends the eos to it)."""
    if passage.answer is None:
        messages = chat_messages(passage.prompt, catalogue)
        return tokenizer.apply_chat_template(messages, tokenize=False).rstrip("\n")
    return chat_prompt(tokenizer, passage.prompt, catalogue) + passage.answer


def write_corpus_record(path: Path, tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> None:
    """What the base read, for its card: passages, tokens, and a hash of the texts."""
    digest = hashlib.sha256("\n\0".join(texts).encode()).hexdigest()
    tokens = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    record = {"passages": len(texts), "tokens": tokens, "sha256": digest}
    write_text_file(path, json.dumps(record, indent=2) + "\n")


def run_base(run_dir: Path, config: TrainConfig) -> Path:
    """Pretrain in `<run_dir>/base` (resuming from its last checkpoint) and return the saved model
    directory `<run_dir>/base/model`: the SFT stage's tiny model (same tokenizer, same seed),
    trained on every token of the corpus with the SFT section's batches and schedule."""
    stage_dir = run_dir / STAGE
    recipe = config.base
    arguments = config.sft.trl_arguments() | {
        "num_train_epochs": recipe.num_train_epochs,
        "learning_rate": recipe.learning_rate,
        "completion_only_loss": False,
        "dataset_text_field": "text",
    }
    args = SFTConfig(**config.trainer_arguments(stage_dir), **arguments)
    tokenizer, model = initial_model(config, stage_dir, args)
    catalogue = config.data.tool_catalogue()
    texts = [passage_text(tokenizer, passage, catalogue) for passage in corpus_passages(config)]
    if args.process_index == 0:
        write_corpus_record(stage_dir / CORPUS_RECORD, tokenizer, texts)
    trainer = SFTTrainerSeeded(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"text": texts}),
        processing_class=tokenizer,
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
    )
    return train_and_save(trainer, tokenizer, stage_dir, config)
