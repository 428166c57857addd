"""Publish a built base: its model folder and card, replaced whole, and the card as an artifact.

The work is `toolgrpo.training.own_base` (no Prefect); this module writes the folder people and
SFT read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from toolgrpo.schemas.files import replace_dir
from toolgrpo.tasks.artifacts import send_artifact
from toolgrpo.training.own_base import BaseCard

CARD_JSON = "base_card.json"
CARD_MARKDOWN = "README.md"
# What a training run saves beside the weights that a base does not need (a pickle of TRL's
# arguments); the run folder keeps it.
NOT_PUBLISHED = {"training_args.bin"}


def read_card(folder: Path) -> BaseCard | None:
    """The card of the base in `folder`, or None when there is none (or it cannot be read)."""
    path = Path(folder) / CARD_JSON
    try:
        return BaseCard.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@task(name="publish base", cache_policy=NO_CACHE)
def publish_base(model_dir: Path, card: BaseCard, out: Path) -> Path:
    """`out`: the model of `model_dir` with its card (README.md, base_card.json), replacing any
    base there whole; the card also becomes the run's markdown artifact."""

    def fill(folder: Path) -> None:
        for source in Path(model_dir).iterdir():
            if source.is_file() and source.name not in NOT_PUBLISHED:
                shutil.copy2(source, folder / source.name)
        (folder / CARD_JSON).write_text(card.model_dump_json(indent=2) + "\n", encoding="utf-8")
        (folder / CARD_MARKDOWN).write_text(card.markdown(), encoding="utf-8")

    replace_dir(out, fill)
    send_artifact(
        create_markdown_artifact,
        out / CARD_MARKDOWN,
        markdown=card.markdown(),
        key="base-card",
        description="the built base",
    )
    return out
