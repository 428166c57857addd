"""What both stages do around `trainer.train()`: resume, then save the model and its config."""

from __future__ import annotations

from pathlib import Path

from peft import PeftModel
from transformers import PreTrainedTokenizerBase, Trainer
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from toolgrpo.training.config import CONFIG_FILENAME, TrainConfig
from toolgrpo.training.model import save_model


def saved_checkpoints(stage_dir: Path) -> dict[int, Path]:
    """Step → `checkpoint-N` folder of every complete checkpoint an earlier run left.

    The Trainer writes a checkpoint in place and its `trainer_state.json` last, so a process
    killed while saving leaves a folder without it: that one is left out.
    """
    folders = stage_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if stage_dir.is_dir() else []
    return {
        int(path.name.rpartition("-")[2]): path
        for path in folders
        if path.name.rpartition("-")[2].isdigit() and (path / TRAINER_STATE_NAME).is_file()
    }


def last_checkpoint(stage_dir: Path) -> Path | None:
    """The newest complete checkpoint of a stage, if an earlier run left one."""
    checkpoints = saved_checkpoints(stage_dir)
    return checkpoints[max(checkpoints)] if checkpoints else None


def train_and_save(
    trainer: Trainer, tokenizer: PreTrainedTokenizerBase, stage_dir: Path, config: TrainConfig
) -> Path:
    """Train (from the last checkpoint when there is one) and save `<stage_dir>/model` with the
    config beside the weights; returns that directory.

    With several processes the main one writes: LoRA is merged from its (replicated) weights;
    every weight is saved by the Trainer, which gathers what ZeRO-3 or FSDP sharded.
    """
    resume = last_checkpoint(stage_dir)
    if resume is not None:
        print(f"resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    model_dir = stage_dir / "model"
    if not isinstance(trainer.model, PeftModel):
        trainer.save_model(str(model_dir))  # every process: gathering shards is collective
    if trainer.is_world_process_zero():
        if isinstance(trainer.model, PeftModel):
            save_model(trainer.model, tokenizer, model_dir)
        config.write(model_dir / CONFIG_FILENAME)
    trainer.accelerator.wait_for_everyone()
    return model_dir
