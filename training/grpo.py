"""GRPO with NGRPO calibration and the ground-truth reward, from the SFT model."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from datasets import Dataset

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
    """TRL's GRPO settings plus NGRPO's: one generation batch of `grpo_prompts_per_step` prompts
    × `num_generations` completions per optimiser step."""
    completions_per_step = config.grpo_prompts_per_step * config.num_generations
    if completions_per_step % config.num_processes:
        raise ValueError(
            f"{completions_per_step} completions per step do not split over "
            f"{config.num_processes} processes"
        )
    return NGRPOConfig(
        **config.trainer_arguments(stage_dir),
        max_steps=config.grpo_max_steps,
        learning_rate=config.grpo_learning_rate,
        per_device_train_batch_size=completions_per_step // config.num_processes,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        beta=config.beta,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        ngrpo_scope=config.ngrpo_scope,
        ngrpo_max_reward=config.ngrpo_max_reward or config.weights.max_reward,
        use_vllm=config.use_vllm,
    )


def reward_functions(config: TrainConfig) -> list:
    """The ground-truth reward as its three components (summed by TRL, each logged on its own)."""
    if not config.reward_weights:
        return list(COMPONENT_REWARDS)
    return [partial(reward, weights=config.weights) for reward in COMPONENT_REWARDS]


def run_grpo(run_dir: Path, config: TrainConfig, init_dir: Path | None = None) -> Path:
    """Train GRPO + NGRPO in `<run_dir>/grpo` from `init_dir` (default: the SFT model), resuming
    from the last checkpoint, and return the saved model directory `<run_dir>/grpo/model`."""
    stage_dir = run_dir / STAGE
    init_dir = init_dir or run_dir / "sft" / "model"
    if not (init_dir / "config.json").is_file():
        raise FileNotFoundError(f"{init_dir}: no model to start GRPO from; run the sft stage first")
    tokenizer, model = load_model(init_dir, config)
    dataset = Dataset.from_list(
        [{**row, "prompt": chat_prompt(tokenizer, row["prompt"])} for row in grpo_rows(config)]
    )
    trainer = NGRPOTrainer(
        model=model,
        reward_funcs=reward_functions(config),
        args=grpo_config(config, stage_dir),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=[MetricsFileCallback(stage_dir / METRICS_FILENAME)],
    )
    return train_and_save(trainer, tokenizer, stage_dir, config)
