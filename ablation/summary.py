"""The ablation across seeds: mean and range of every number, per start × arm, with curves."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from toolgrpo.ablation.arms import ARM_LABELS, METRICS, Arm, ArmRun, Scores, Start


class AcrossSeeds(BaseModel):
    """Mean and range of one number across seeds."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float | None]) -> AcrossSeeds | None:
        """The spread of the known values; None when there is none."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return cls(mean=sum(known) / len(known), low=min(known), high=max(known), n=len(known))

    def percent(self) -> str:
        """`41.2% (38.0–44.4)`: the mean, then the range across seeds when there is one."""
        text = f"{100 * self.mean:.1f}%"
        return text if self.n < 2 else f"{text} ({100 * self.low:.1f}–{100 * self.high:.1f})"


def spread_percent(spread: AcrossSeeds | None) -> str:
    """`AcrossSeeds.percent`, or `–` where nothing was measured."""
    return "–" if spread is None else spread.percent()


class CurvePoint(BaseModel):
    step: int
    metrics: dict[str, AcrossSeeds | None]


class ArmSummary(BaseModel):
    """One start × arm across seeds: rates at the last evaluated step, the curve, group shares."""

    start: Start
    arm: Arm | Literal["sft"]
    seeds: int
    step: int
    metrics: dict[str, AcrossSeeds | None]
    curve: list[CurvePoint] = Field(default_factory=list)
    zero_std_share: AcrossSeeds | None = None
    calibrated_share: AcrossSeeds | None = None
    wall_s: AcrossSeeds | None = None

    @property
    def label(self) -> str:
        return ARM_LABELS[self.arm]


class AblationSummary(BaseModel):
    """Everything the ablation reports; written as ablation.json."""

    preset: str
    steps: int
    eval_every: int
    seeds: list[int]
    eval_rows: int
    multi_rows: int | None = Field(None, description="multi-step rows among the eval rows")
    arms: list[ArmSummary]
    runs: list[ArmRun]
    failed: list[str] = Field(default_factory=list, description="arms that did not finish")
    wall_s: float = 0.0
    overrides: dict[str, Any] | None = Field(
        None,
        description="training config fields set on every stage (--set, the catalogue); None: "
        "not recorded (summaries written before they were)",
    )
    merged_from: list[str] = Field(
        default_factory=list, description="the summaries `toolgrpo ablate-report` merged"
    )
    unchecked: list[str] = Field(
        default_factory=list,
        description="merged summaries that recorded no overrides, so none were compared",
    )

    def arm(self, start: Start, arm: str) -> ArmSummary | None:
        return next((a for a in self.arms if a.start == start and a.arm == arm), None)

    @property
    def starts(self) -> list[Start]:
        return list(dict.fromkeys(a.start for a in self.arms))


def _metrics_at(scores: list[Scores]) -> dict[str, AcrossSeeds | None]:
    return {name: AcrossSeeds.of([getattr(s, name) for s in scores]) for name in METRICS}


def _share(part: int, total: int) -> float | None:
    return part / total if total else None


def aggregate_arms(runs: list[ArmRun]) -> list[ArmSummary]:
    """Per start: the SFT checkpoints (step 0), then each arm, mean and range across seeds."""
    summaries = []
    for start in dict.fromkeys(run.start for run in runs):
        from_start = [run for run in runs if run.start == start]
        sft_scores = {run.seed: run.curve[0] for run in from_start}  # shared by the arms
        summaries.append(
            ArmSummary(
                start=start,
                arm="sft",
                seeds=len(sft_scores),
                step=0,
                metrics=_metrics_at(list(sft_scores.values())),
            )
        )
        for arm in dict.fromkeys(run.arm for run in from_start):
            arm_runs = [run for run in from_start if run.arm == arm]
            # Equal steps only: a step enters the curve when every seed evaluated it.
            steps = sorted(set.intersection(*({s.step for s in r.curve} for r in arm_runs)))
            curve = [
                CurvePoint(
                    step=step,
                    metrics=_metrics_at([s for r in arm_runs for s in r.curve if s.step == step]),
                )
                for step in steps
            ]
            summaries.append(
                ArmSummary(
                    start=start,
                    arm=arm,
                    seeds=len(arm_runs),
                    step=steps[-1],
                    metrics=curve[-1].metrics,
                    curve=curve,
                    zero_std_share=AcrossSeeds.of(
                        [_share(r.groups.zero, r.groups.total) for r in arm_runs]
                    ),
                    calibrated_share=AcrossSeeds.of(
                        [_share(r.groups.changed, r.groups.total) for r in arm_runs]
                    ),
                    wall_s=AcrossSeeds.of([r.wall_s for r in arm_runs]),
                )
            )
    return summaries
