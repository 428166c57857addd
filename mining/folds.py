"""Folds of the training rows by scenario, and the fold model's recipe, for the cross-fitted audit.

Confident learning needs out-of-sample probabilities (cleanlab's documentation): a model that
memorised a wrong label agrees with it. The cross-fitted audit trains one model per fold on the
other folds' scenarios and scores the fold's rows with it, so every training row is scored by a
model that never saw it, nor any other step of its scenario (a step's history repeats its
scenario's request).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from toolgrpo.training.config import TrainConfig
from toolgrpo.training.config_overrides import with_overrides


def scenario_folds(scenarios: Iterable[tuple[str, str]], folds: int, seed: int) -> list[set[str]]:
    """`folds` disjoint sets of scenario ids covering every (scenario id, kind) pair given,
    seeded; each kind is dealt round-robin so that every fold holds its share of single- and
    multi-step scenarios."""
    if folds < 2:
        raise ValueError(f"a cross-fitted audit needs at least 2 folds, got {folds}")
    by_kind: dict[str, set[str]] = {}
    for scenario, kind in scenarios:
        by_kind.setdefault(kind, set()).add(scenario)
    held_out: list[set[str]] = [set() for _ in range(folds)]
    rng = random.Random(seed)
    dealt = 0
    for kind in sorted(by_kind):
        ids = sorted(by_kind[kind])
        rng.shuffle(ids)
        for scenario in ids:
            held_out[dealt % folds].add(scenario)
            dealt += 1
    return held_out


def fold_config(config: TrainConfig, single_step: Path, multistep: Path) -> TrainConfig:
    """The fold model's training config: the run's SFT recipe on the fold's training files.

    Not a cheaper recipe: with fewer SFT epochs a model trained from scratch is left too weak to
    judge rows, and its probabilities flag most of them (docs/experiments/label-checks.md).
    """
    return with_overrides(
        config, {"data.train_single_step": single_step, "data.train_multistep": multistep}
    )
