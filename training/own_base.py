"""Pretrain a base of our own: the tiny model SFT would build, trained first
as a plain language model on `generator.base_corpus` (numeracy exercises, and the requests and
observations of fresh training-scenario draws), so SFT starts from a model that has read figures
and their comparisons, as the case study's started from a pretrained Qwen.

Runs as `python -m toolgrpo.training base --run-dir DIR`, like the other stages; its model is
an ordinary `save_pretrained` directory that `model.base_model` points SFT at.
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

from datasets import Dataset
from pydantic import BaseModel
from transformers import PreTrainedTokenizerBase
from trl import SFTConfig

from toolgrpo.data import DATA_DIR
from toolgrpo.generator.base_corpus import Passage, base_corpus
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.files import write_text_file
from toolgrpo.training.chat import chat_messages, chat_prompt, templated_text
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.device import stage_threads
from toolgrpo.training.metrics import METRICS_FILENAME, MetricsFileCallback, read_metrics
from toolgrpo.training.samples import read_samples
from toolgrpo.training.sft import SFTTrainerSeeded, initial_model
from toolgrpo.training.stage import train_and_save

STAGE: Final = "base"
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
        copy_rounds=recipe.copy_rounds,
        excluded_prompts=held_out,
    )


def passage_example(
    tokenizer: PreTrainedTokenizerBase, passage: Passage, catalogue: Catalogue
) -> dict[str, str]:
    """A passage as TRL's prompt-completion pair, as the model reads it in use. A request is read
    whole (an empty prompt; the system and user turns are the completion, ending at the end of
    turn, the eos); an exercise or a copy drill is learned on its answer only (TRL appends the
    eos): learned on every token, a prompt's figures are most of the loss, and a base built so
    copies far fewer fresh drills (docs/experiments/numeracy.md, "What the model copies")."""
    if passage.answer is None:
        messages = chat_messages(passage.prompt, catalogue)
        text = templated_text(tokenizer, messages).rstrip("\n")
        return {"prompt": "", "completion": text}
    return {
        "prompt": chat_prompt(tokenizer, passage.prompt, catalogue),
        "completion": passage.answer,
    }


# The modules a base build runs (the config's settings enter the key as values, not as code).
BUILD_CODE = ("own_base", "chat", "metrics", "model", "samples", "sft", "stage")
# SFT's fields a build does not read: it trains its own epochs at its own peak, on every token.
_SFT_NOT_READ = {"multistep_fraction", "num_train_epochs", "learning_rate", "completion_only_loss"}


def build_inputs(config: TrainConfig) -> dict[str, list[Path]]:
    """Every file a base build reads, as `data` (the training rows and catalogue its tokenizer
    is trained on, the held-out files the corpus leaves out) and `code` (the corpus's wording,
    and the code that builds the corpus and trains on it)."""
    package = Path(__file__).resolve().parents[1]
    code = [package / "training" / f"{name}.py" for name in BUILD_CODE]
    code += sorted((package / "generator").glob("*.py"))
    code += sorted((DATA_DIR / "phrases").glob("*.yaml"))
    data = [config.data.train_single_step, config.data.train_multistep, config.data.catalogue]
    return {"data": [*data, *config.base.held_out], "code": code}


def input_hashes(config: TrainConfig) -> dict[str, str]:
    """A sha256 of each group of `build_inputs`' bytes: what the card shows as data and code."""
    hashes = {}
    for group, paths in build_inputs(config).items():
        digest = hashlib.sha256()
        for path in paths:
            digest.update(path.read_bytes())
        hashes[group] = digest.hexdigest()
    return hashes


def build_settings(config: TrainConfig) -> dict[str, Any]:
    """The settings that change a built base: the seed, the tiny model, the recipe, and the SFT
    section's batches and schedule it trains with."""
    return {
        "seed": config.seed,
        "tiny": config.model.tiny.model_dump(mode="json"),
        "bf16": config.model.bf16,
        "sft": config.sft.model_dump(mode="json", exclude=_SFT_NOT_READ),
        "base": config.base.model_dump(mode="json", exclude={"held_out"}),
    }


def build_key(config: TrainConfig) -> str:
    """The content key of a base build: a sha256 of `input_hashes` and `build_settings`; a base
    whose card holds the same key is this config's base, so it is not built again."""
    identity = {"inputs": input_hashes(config), "settings": build_settings(config)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def write_corpus_record(path: Path, tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> None:
    """What the base read, for its card: passages, tokens, and a hash of the texts."""
    digest = hashlib.sha256("\n\0".join(texts).encode()).hexdigest()
    tokens = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    record = {"passages": len(texts), "tokens": tokens, "sha256": digest}
    write_text_file(path, json.dumps(record, indent=2) + "\n")


def run_base(run_dir: Path, config: TrainConfig) -> Path:
    """Pretrain in `<run_dir>/base` (resuming from its last checkpoint) and return the saved model
    directory `<run_dir>/base/model`: the SFT stage's tiny model (same tokenizer, same seed),
    trained on the corpus (`passage_example`) with the SFT section's batches and schedule."""
    stage_dir = run_dir / STAGE
    # A base is built from scratch, whatever base the config's later stages start from.
    config = config.model_copy(
        update={"model": config.model.model_copy(update={"base_model": None})}
    )
    recipe = config.base
    arguments = config.sft.trl_arguments() | {
        "num_train_epochs": recipe.num_train_epochs,
        "learning_rate": recipe.learning_rate,
        "completion_only_loss": True,
    }
    args = SFTConfig(**config.trainer_arguments(stage_dir), **arguments)
    tokenizer, model = initial_model(config, stage_dir, args)
    catalogue = config.data.tool_catalogue()
    examples = [passage_example(tokenizer, p, catalogue) for p in corpus_passages(config)]
    if args.process_index == 0:
        texts = [example["prompt"] + example["completion"] for example in examples]
        write_corpus_record(stage_dir / CORPUS_RECORD, tokenizer, texts)
    trainer = SFTTrainerSeeded(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
    )
    return train_and_save(trainer, tokenizer, stage_dir, config)


class BaseCard(BaseModel):
    """What a built base is and how to build it again: the content key its cache is checked by,
    what it read and how it trained, the hash of its weights, and the command."""

    key: str
    command: str
    inputs: dict[str, str]
    settings: dict[str, Any]
    corpus: dict[str, Any]
    steps: int
    final_loss: float
    weights_sha256: str
    versions: dict[str, str]
    torch_threads: int | None

    def markdown(self) -> str:
        """The card as a Hugging Face model card (README.md: YAML metadata, then prose)."""
        corpus, recipe = self.corpus, self.settings["base"]
        tiny = self.settings["tiny"]
        return "\n".join(
            [
                "---",
                "library_name: transformers",
                "pipeline_tag: text-generation",
                f"tags: [toolgrpo, base, seed-{self.settings['seed']}]",
                "---",
                "",
                "# toolgrpo base",
                "",
                f"A Qwen2 of hidden size {tiny['hidden_size']} and {tiny['num_layers']} layers, "
                f"pretrained from scratch as a language model on {corpus['passages']:,} passages "
                f"({corpus['tokens']:,} tokens): numeracy exercises "
                f"(data/aux's counts × {recipe['exercise_rounds']}), the requests and "
                "observations of fresh draws of the training scenarios (× "
                f"{recipe['request_rounds']}) and copy drills on more draws (× "
                f"{recipe['copy_rounds']}: a prompt answered with the figures it states), never "
                "an eval prompt, never a thought, tool or plan "
                "(`toolgrpo.generator.base_corpus`). SFT starts from it with "
                "`--set model.base_model=<this folder>`.",
                "",
                f"- build key: `{self.key}`, of the seed ({self.settings['seed']}), the "
                "settings below and these hashes:",
                f"- data (training rows, catalogue, held-out files) sha256: "
                f"`{self.inputs['data']}`",
                f"- code (corpus generator, its wording, the build's training modules) sha256: "
                f"`{self.inputs['code']}`",
                f"- corpus sha256: `{corpus['sha256']}`",
                f"- weights (model.safetensors) sha256: `{self.weights_sha256}`",
                f"- {self.steps} steps, final loss {self.final_loss:.4f}, "
                f"{recipe['num_train_epochs']:g} epochs at a peak of {recipe['learning_rate']:g}",
                "- versions: " + ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items())),
                f"- torch threads: {self.torch_threads}",
                "",
                "Settings:",
                "",
                "```json",
                json.dumps(self.settings, indent=2, sort_keys=True),
                "```",
                "",
                "Rebuild (the same weights byte for byte with the same versions and threads):",
                "",
                "```bash",
                self.command,
                "```",
                "",
            ]
        )


def base_card(config: TrainConfig, stage_dir: Path, key: str, command: str) -> BaseCard:
    """The card of the base trained in `stage_dir` for `config` (key from `build_key`)."""
    metrics = read_metrics(stage_dir / METRICS_FILENAME)
    losses = [line for line in metrics if "loss" in line]
    weights = stage_dir / "model" / "model.safetensors"
    return BaseCard(
        key=key,
        command=command,
        inputs=input_hashes(config),
        settings=build_settings(config),
        corpus=json.loads((stage_dir / CORPUS_RECORD).read_text(encoding="utf-8")),
        steps=losses[-1]["step"] if losses else 0,
        final_loss=losses[-1]["loss"] if losses else float("nan"),
        weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest(),
        versions={name: version(name) for name in ("torch", "transformers", "trl")},
        torch_threads=stage_threads(config.runtime),
    )
