"""What a run of each preset should reach, so that its report says whether it did: the preset's
goals, and for the smoke preset the note that near-zero accuracy is expected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from toolgrpo.reporting.markdown import percent
from toolgrpo.schemas.run import Headline


class Goal(BaseModel):
    """A number of the after-GRPO headline (by its row name) that should reach `at_least`."""

    model_config = ConfigDict(frozen=True)
    row: str
    at_least: float


class Expectations(BaseModel):
    """A preset's goals (accuracy after GRPO, wall time) and the note its reports open with."""

    model_config = ConfigDict(frozen=True)
    goals: tuple[Goal, ...] = ()
    max_wall_s: float | None = None
    note: str | None = None


SMOKE_NOTE = (
    "**Smoke run: a plumbing check, not a measurement.** The smoke preset trains a tiny model "
    "for seconds on a few dozen rows and evaluates a few rows per file (the `n` columns), so "
    "accuracy near 0%, flat plots, format errors and noisy tool pairs are expected. Run the `cpu` "
    "preset for numbers that mean something."
)
PRESET_EXPECTATIONS: dict[str, Expectations] = {
    "smoke": Expectations(note=SMOKE_NOTE),
    # The main job's goals (README): multi-step and the condition-fails branch at 80%, single-step
    # at 95%, in 10 minutes on 2 cores.
    "cpu": Expectations(
        goals=(
            Goal(row="eval/multistep", at_least=0.80),
            Goal(row="condition_fails", at_least=0.80),
            Goal(row="eval/single_step", at_least=0.95),
        ),
        max_wall_s=600,
    ),
    # A base that reads language should carry the task to wording nobody templated, and decide
    # both branches of a conditional step.
    "pretrained": Expectations(
        goals=(
            Goal(row="eval/multistep", at_least=0.95),
            Goal(row="eval/single_step", at_least=0.97),
            Goal(row="eval/unseen_phrasing", at_least=0.85),
            Goal(row="condition_fails", at_least=0.85),
            Goal(row="condition_holds", at_least=0.85),
        ),
    ),
    # case study: multi-step 63% → 97%, overall 97%, single-step without regression.
    "gpu": Expectations(
        goals=(
            Goal(row="eval/multistep", at_least=0.97),
            Goal(row="eval/single_step", at_least=0.97),
        ),
    ),
}


def goal_lines(preset: str, after: Headline, wall_s: float) -> list[str]:
    """One line per goal of `preset`: met or not, with the measured value (`✅ eval/multistep ≥
    80%: 86.7%`); a goal whose row this run did not measure says so."""
    expectations = PRESET_EXPECTATIONS.get(preset, Expectations())
    measured = after.rows()
    lines = []
    for goal in expectations.goals:
        value = measured.get(goal.row)
        mark = "–" if value is None else "✅" if value >= goal.at_least else "❌"
        shown = "not measured" if value is None else percent(value)
        lines.append(f"{mark} {goal.row} ≥ {percent(goal.at_least)}: {shown}")
    if expectations.max_wall_s is not None:
        mark = "✅" if wall_s <= expectations.max_wall_s else "❌"
        lines.append(
            f"{mark} wall time ≤ {expectations.max_wall_s / 60:.0f} min: {wall_s / 60:.1f} min"
        )
    return lines


def preset_note(preset: str) -> str | None:
    """The note a report of `preset` opens with, if it has one."""
    return PRESET_EXPECTATIONS.get(preset, Expectations()).note
