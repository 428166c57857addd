"""The base-build flow (`toolgrpo base build`): pretrain a base of our own once, cached by content.

A base is the tiny model pretrained on `generator.base_corpus` (issue #16's lever 3); SFT then
starts from it (`model.base_model`). Its card holds the content key of everything the build read
(`training.base.build_key`): a folder whose card has this config's key is this config's base and
is not built again; a build that stopped resumes from its checkpoint when run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel

from toolgrpo.tasks.base import publish_base, read_card
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.train import train_stage
from toolgrpo.training.base import STAGE, BaseCard, base_card, build_key
from toolgrpo.training.config import load_preset


class BaseBuild(BaseModel):
    """Where the base is, and whether this run built it or found it built."""

    out: Path
    built: bool
    card: BaseCard


def build_command(preset: str, out: Path, overrides: dict[str, Any]) -> str:
    """The command line that builds this base again."""
    sets = "".join(f" --set {path}={value}" for path, value in overrides.items())
    return f"toolgrpo base build --preset {preset} --out {out}{sets}"


@flow(name="build-base", log_prints=True)
def build_base(
    out: Path,
    preset: Literal["smoke", "cpu", "gpu"] = "cpu",
    overrides: dict[str, Any] | None = None,
    runs: Path = Path("runs"),
    timeout_s: float = 7200.0,
) -> BaseBuild:
    """Build the base of PRESET (with dotted OVERRIDES) into OUT, training in a new folder of
    RUNS; when OUT already holds the base of the same key, return it unchanged."""
    logger = get_run_logger()
    overrides = overrides or {}
    config = load_preset(preset).with_overrides(overrides)
    key = build_key(config)
    existing = read_card(out)
    if existing is not None and existing.key == key:
        logger.info("%s already holds this base (key %s): not built again", out, key[:12])
        return BaseBuild(out=out, built=False, card=existing)
    run_dir = new_run_dir(runs, "base")
    result = train_stage(STAGE, run_dir, config, timeout_s=timeout_s, resume_key=key)
    card = base_card(config, run_dir / STAGE, key, build_command(preset, out, overrides))
    publish_base(result.model_dir, card, out)
    logger.info("base in %s: %s steps, final loss %.4f", out, card.steps, card.final_loss)
    return BaseBuild(out=out, built=True, card=card)
