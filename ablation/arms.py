"""The ablation's arms: SFT vs GRPO vs NGRPO (zero-std scope) vs NGRPO (all groups).

From each starting checkpoint (SFT on single-step rows only — the case study's regime —, on
single-step rows plus 10% of the multi-step scenarios, and the preset's default warm start),
GRPO arms that differ only in `ngrpo_scope` are trained with the same seeds, steps and data, and
every saved checkpoint is evaluated on the held-out rows. This module holds the arm configs and
what one run of an arm records; `ablation.summary` aggregates across seeds, `ablation.verdict`
words the result, `flows/ablation.py` runs it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from toolgrpo.evaluation.metrics import EvalMetrics
from toolgrpo.schemas.run import ZeroStdGroups
from toolgrpo.training.config import GRPO_LAYOUT_UNSET, Scope, TrainConfig, ZeroStdOn
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.stage import saved_checkpoints

Start = Literal["single_only", "partial", "default"]
STARTS: tuple[Start, ...] = get_args(Start)
# The share of multi-step scenarios each start's SFT sees (absent: the preset's).
START_MULTISTEP_FRACTION: dict[Start, float] = {"single_only": 0.0, "partial": 0.1}
Arm = Literal["none", "zero_std", "zero_std_tool", "all"]
ARMS: tuple[Arm, ...] = get_args(Arm)
# Each arm's advantage estimator: NGRPO's scope and what its zero-std groups have equal.
ARM_ESTIMATORS: dict[Arm, tuple[Scope, ZeroStdOn]] = {
    "none": ("none", "total"),
    "zero_std": ("zero_std", "total"),
    "zero_std_tool": ("zero_std", "tool"),
    "all": ("all", "total"),
}
START_LABELS = {
    "single_only": "single-step-only SFT start",
    "partial": "partial SFT start (single-step + 10% of multi-step scenarios)",
    "default": "default warm start",
}
ARM_LABELS = {
    "sft": "SFT (step 0)",
    "none": "GRPO",
    "zero_std": "NGRPO (zero-std)",
    "zero_std_tool": "NGRPO (zero-std on the tool score)",
    "all": "NGRPO (all)",
}
# What a finished start and arm leave in their folders, for a resumed ablation to read back.
START_RECORD = "start.json"
ARM_RECORD = "arm.json"
# What the table reports per arm, in order: Scores field → column title.
METRICS = {
    "multi": "multi-step",
    "single": "single-step",
    "overall": "overall",
    "condition_fails": "condition fails",
    "condition_holds": "condition holds",
    "json_valid": "JSON valid",
}


class AblationError(ValueError):
    """The ablation cannot start (bad arm, preset or eval file); the message says what to fix."""


def start_config(
    preset: str, start: Start, seed: int, torch_threads: int, overrides: dict[str, Any]
) -> TrainConfig:
    """The SFT config of one starting checkpoint: the preset (plus `overrides`) with this seed;
    `single_only` trains on no multi-step scenario (`sft.multistep_fraction=0`), `partial` on
    10% of them (where GRPO lifted multi-step in an earlier probe), `default` on the preset's."""
    # Arms run side by side, both stages of each on `torch_threads`, one process.
    fields: dict[str, Any] = {
        **overrides,
        "seed": seed,
        "runtime.torch_threads": torch_threads,
        **GRPO_LAYOUT_UNSET,
    }
    if start in START_MULTISTEP_FRACTION:
        fields["sft.multistep_fraction"] = START_MULTISTEP_FRACTION[start]
    return load_preset(preset, fields)


def arm_config(start: TrainConfig, arm: Arm, steps: int, eval_every: int) -> TrainConfig:
    """The GRPO config of one arm: the start's config with this advantage estimator, a
    checkpoint every `eval_every` steps, and room to keep all of them for evaluation."""
    scope, zero_std_on = ARM_ESTIMATORS[arm]
    return with_overrides(
        start,
        {
            "grpo.ngrpo_scope": scope,
            "grpo.ngrpo_zero_std_on": zero_std_on,
            "grpo.max_steps": steps,
            "runtime.save_steps": eval_every,
            "runtime.save_total_limit": math.ceil(steps / eval_every) + 1,
        },
    )


class Scores(BaseModel):
    """One checkpoint's held-out rates (None where no row falls in the slice)."""

    step: int
    multi: float | None
    single: float | None
    overall: float | None
    condition_fails: float | None
    condition_holds: float | None
    json_valid: float | None


def scores_of(metrics: EvalMetrics, step: int) -> Scores:
    """The ablation's rates out of a full evaluation."""
    headline = metrics.accuracy
    overall = next(s for s in metrics.slices if s.slice == "overall")
    return Scores(
        step=step,
        multi=headline.multi,
        single=headline.single,
        overall=headline.overall,
        condition_fails=headline.condition_fails,
        condition_holds=headline.condition_holds,
        json_valid=overall.json_valid,
    )


def checkpoint_models(stage_dir: Path, max_steps: int) -> dict[int, Path]:
    """Step → model directory of a finished stage: every `checkpoint-N`, and the saved model at
    `max_steps` (the same weights as a last checkpoint there)."""
    models = {**saved_checkpoints(stage_dir), max_steps: stage_dir / "model"}
    return {step: path for step, path in models.items() if step <= max_steps}


class StartRun(BaseModel):
    """A trained starting checkpoint and its held-out scores (step 0 of every arm)."""

    start: Start
    seed: int
    model_dir: Path
    scores: Scores


class ArmRun(BaseModel):
    """One GRPO arm from one start and seed: its held-out scores per step (step 0 is the SFT
    checkpoint), the group counts of its training, and its training time."""

    start: Start
    arm: Arm
    seed: int
    curve: list[Scores]
    groups: ZeroStdGroups
    wall_s: float = Field(
        description="seconds its GRPO steps took (the metrics file's step times), every attempt "
        "of a resumed arm included (older summaries: the last attempt's wall time)"
    )
