"""GRPO with NGRPO calibration and the ground-truth reward, from the SFT model."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.training.arithmetic import arithmetic_reward
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.metrics import METRICS_FILENAME, MetricsFileCallback
from toolgrpo.training.model import load_model, lora_config
from toolgrpo.training.ngrpo import NGRPOConfig, NGRPOTrainer
from toolgrpo.training.rewards import COMPONENT_REWARDS
from toolgrpo.training.samples import grpo_rows
from toolgrpo.training.stage import train_and_save

STAGE = "grpo"


def grpo_config(config: TrainConfig, stage_dir: Path) -> NGRPOConfig:
    """TRL's GRPO settings plus NGRPO's: the shared trainer arguments, the `grpo` section's by
    name, and one generation batch of `prompts_per_step` × `num_generations` completions (split
    over the processes) per optimiser step."""
    grpo = config.grpo
    completions_per_step = grpo.prompts_per_step * grpo.num_generations
    return NGRPOConfig(
        **config.trainer_arguments(stage_dir),
        **grpo.trl_arguments(),
        per_device_train_batch_size=completions_per_step // config.runtime.num_processes,
        gradient_accumulation_steps=1,
        ngrpo_max_reward=grpo.ngrpo_max_reward or grpo.reward_points.max_reward,
    )


def reward_functions(config: TrainConfig, catalogue: Catalogue) -> list[Callable[..., list[float]]]:
    """The ground-truth reward as its three components (summed by TRL, each logged on its own),
    plus the arithmetic component when it has points, with the config's points and the tools of
    `catalogue`."""
    weights = config.grpo.reward_points
    rewards: list[Callable[..., list[float]]] = [*COMPONENT_REWARDS]
    if weights.arithmetic > 0:
        rewards.append(arithmetic_reward)
    return [partial(reward, weights=weights, catalogue=catalogue) for reward in rewards]


def grpo_dataset(
    config: TrainConfig, tokenizer: PreTrainedTokenizerBase, catalogue: Catalogue
) -> Dataset:
    """The GRPO prompts, chat-templated, with what the rewards read: the labelled `solution`,
    and the prompt as written (`request`) and its `condition` for the arithmetic component."""
    return Dataset.from_list(
        [
            {
                **row,
                "prompt": chat_prompt(tokenizer, row["prompt"], catalogue),
                "request": row["prompt"],
                "condition": row.get("condition"),
            }
            for row in grpo_rows(config)
        ]
    )


def run_grpo(run_dir: Path, config: TrainConfig, init_dir: Path | None = None) -> Path:
    """Train GRPO + NGRPO in `<run_dir>/grpo` from `init_dir` (default: the SFT model), resuming
    from the last checkpoint, and return the saved model directory `<run_dir>/grpo/model`."""
    stage_dir = run_dir / STAGE
    init_dir = init_dir or run_dir / "sft" / "model"
    if not (init_dir / "config.json").is_file():
        raise FileNotFoundError(f"{init_dir}: no model to start GRPO from; run the sft stage first")
    tokenizer, model = load_model(init_dir, config.model)
    catalogue = config.data.tool_catalogue()
    dataset = grpo_dataset(config, tokenizer, catalogue)
    trainer = NGRPOTrainer(
        model=model,
        reward_funcs=reward_functions(config, catalogue),
        args=grpo_config(config, stage_dir),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config.model.lora),
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
    )
    return train_and_save(trainer, tokenizer, stage_dir, config)
