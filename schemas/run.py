"""The run summary (summary.json): what automation reads after a retrain run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

# The pooled rates of `Headline`, in table order.
POOLED = ("overall", "single", "multi", "condition_fails", "condition_holds", "scenario")


def step_row(step: int) -> str:
    """The row name of a step's accuracy: `step 2`."""
    return f"step {step}"


class Headline(BaseModel):
    """The numbers a before/after table shows (tool accuracy)."""

    overall: float | None
    single: float | None
    multi: float | None
    condition_fails: float | None = Field(
        description="conditional steps whose condition fails (reply instead of acting)"
    )
    condition_holds: float | None = Field(
        description="conditional steps whose condition holds (act); needs `condition` labels"
    )
    scenario: float | None = Field(description="multi-step scenarios with every step right")
    by_step: dict[int, float | None]
    by_source: dict[str, float | None] = Field(
        default_factory=dict, description="per data file, e.g. `eval/unseen_phrasing`"
    )
    by_condition: dict[str, float | None] = Field(
        default_factory=dict,
        description="conditional steps per data file, the tools whose figures the condition "
        "reads, and branch, by `condition_row` (`eval/multistep · after check_balance · fails`)",
    )
    n: dict[str, int] = Field(
        default_factory=dict,
        description="rows evaluated behind each number, by its name in `rows()` (scenarios for "
        "`scenario`)",
    )

    def rows(self) -> dict[str, float | None]:
        """Every number by its row name, in table order: the pooled rates, `step N`, conditional
        steps by file, kind and branch, data files."""
        return {
            **{name: getattr(self, name) for name in POOLED},
            **{step_row(step): value for step, value in sorted(self.by_step.items())},
            **self.by_condition,
            **self.by_source,
        }


class ZeroStdGroups(BaseModel):
    """GRPO groups whose completions all got one reward (no signal for plain GRPO)."""

    zero: int
    total: int
    changed: int = Field(description="groups whose advantages the NGRPO calibration changed")
    zero_on_tool: int = Field(0, description="groups whose completions all got one tool score")

    @classmethod
    def from_metrics(cls, metrics: list[dict[str, Any]]) -> ZeroStdGroups:
        """The run's totals: the last line of a GRPO stage's train_metrics.jsonl that has them."""
        last: dict[str, Any] = next(
            (line for line in reversed(metrics) if "groups_total" in line), {}
        )
        return cls(
            zero=last.get("zero_std_groups_total", 0),
            total=last.get("groups_total", 0),
            changed=last.get("calibrated_groups_total", 0),
            zero_on_tool=last.get("zero_std_tool_groups_total", 0),
        )

    def line(self) -> str:
        """The case study's log line: `Zero std: 3243/5108 (63.5%)`."""
        share = 100 * self.zero / self.total if self.total else 0.0
        return f"Zero std: {self.zero}/{self.total} ({share:.1f}%)"


class StageTraining(BaseModel):
    """What a training stage did in this run: trained (from the start, or resumed from a
    checkpoint an interrupted run left) or reused the model of an earlier run."""

    trained_here: bool = Field(
        description="False when an earlier run's model for the same data and config was reused"
    )
    steps: int = Field(description="the stage's last step")
    resumed_from_step: int = Field(
        0, description="the checkpoint this run went on from; 0: it trained from the start"
    )
    wall_s: float = Field(description="seconds this run spent training the stage; 0 if reused")

    def line(self) -> str:
        """`resumed from checkpoint 20: trained steps 21-150 in 342 s`."""
        if not self.trained_here:
            return "reused an earlier run's model (data and config unchanged)"
        if self.resumed_from_step:
            first = self.resumed_from_step + 1
            return (
                f"resumed from checkpoint {self.resumed_from_step}: trained steps "
                f"{first}-{self.steps} in {self.wall_s:.0f} s"
            )
        return f"trained {self.steps} steps in {self.wall_s:.0f} s"


class RunSummary(BaseModel):
    """summary.json: what automation reads after a run."""

    preset: str
    run_dir: Path
    data_hash: str
    config_hash: str
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="config fields set for this run on top of the preset (dotted name → value)",
    )
    rows: dict[str, int] = Field(description="validated rows per data file")
    retrained: bool = Field(
        description="True when a stage trained in this run (from the start or resumed); False "
        "when every model was an earlier run's, reused for unchanged data and config"
    )
    training: dict[str, StageTraining] = Field(
        default_factory=dict, description="stage → what it did in this run"
    )
    models: dict[str, Path] = Field(description="stage → model directory")
    accuracy: dict[str, Headline] = Field(description="stage → tool accuracy after that stage")
    zero_std: ZeroStdGroups
    flagged_label_ambiguity: list[str]
    flagged_label_conflict: list[str]
    wall_s: dict[str, float] = Field(description="stage → wall time in seconds")
