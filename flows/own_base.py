"""The base-build flow (`toolgrpo base build`): pretrain a base of our own once, cached by content.

A base is the tiny model pretrained on `generator.base_corpus`; SFT then
starts from it (`model.base_model`). Its card holds the content key of everything the build read
(`training.own_base.build_key`): a folder whose card has this config's key is this config's base and
is not built again; a build that stopped resumes from its checkpoint when run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from pydantic import BaseModel

from toolgrpo.flows.prefect_api import record_process
from toolgrpo.tasks.own_base import CARD_JSON, publish_base, read_card
from toolgrpo.tasks.runs import new_run_dir
from toolgrpo.tasks.train import train_stage, unless_cancelled
from toolgrpo.training import Preset
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.own_base import STAGE, BaseCard, base_card, build_key


class NotABaseFolder(ValueError):
    """OUT exists and holds something other than a base: a build replaces OUT whole, so it
    refuses to rather than delete what is there."""


def check_out(out: Path) -> None:
    """Raise `NotABaseFolder` unless OUT is absent, an empty folder, or a base (has a card)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise NotABaseFolder(f"{out} is a file; --out names the folder the base is written to")
    if any(out.iterdir()) and not (out / CARD_JSON).is_file():
        raise NotABaseFolder(
            f"{out} holds files but no base ({CARD_JSON}); a build replaces the folder whole, "
            "so choose a new or empty folder"
        )


class BaseBuild(BaseModel):
    """Where the base is, and whether this run built it or found it built."""

    out: Path
    built: bool
    card: BaseCard


def build_command(preset: str, out: Path, overrides: dict[str, Any]) -> str:
    """The command line that builds this base again."""
    sets = "".join(f" --set {path}={value}" for path, value in overrides.items())
    return f"toolgrpo base build --preset {preset} --out {out}{sets}"


@flow(name="build-base", log_prints=True, on_running=[record_process])
def build_base(
    out: Path,
    preset: Preset = "cpu",
    overrides: dict[str, Any] | None = None,
    runs: Path = Path("runs"),
    timeout_s: float = 7200.0,
) -> BaseBuild:
    """Build the base of PRESET (with dotted OVERRIDES) into OUT, training in a new folder of
    RUNS; when OUT already holds the base of the same key, return it unchanged. Raises
    `NotABaseFolder` before anything runs when OUT holds something else."""
    check_out(out)
    logger = get_run_logger()
    overrides = overrides or {}
    config = with_overrides(load_preset(preset), overrides)
    key = build_key(config)
    existing = read_card(out)
    if existing is not None and existing.key == key:
        logger.info("%s already holds this base (key %s): not built again", out, key[:12])
        return BaseBuild(out=out, built=False, card=existing)
    run_dir = new_run_dir(runs, "base")
    result = unless_cancelled(
        train_stage(STAGE, run_dir, config, timeout_s=timeout_s, resume_key=key)
    )
    card = base_card(config, run_dir / STAGE, key, build_command(preset, out, overrides))
    publish_base(result.model_dir, card, out)
    logger.info("base in %s: %s steps, final loss %.4f", out, card.steps, card.final_loss)
    return BaseBuild(out=out, built=True, card=card)
