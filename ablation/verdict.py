"""The ablation's verdict, written from the numbers: an arm "beat" another only where the seed
ranges part and the gap exceeds the evaluation's sampling error."""

from __future__ import annotations

import math
import statistics
from typing import Literal

from toolgrpo.ablation.arms import START_LABELS, Start
from toolgrpo.ablation.summary import AblationSummary, ArmSummary, Spread, spread_percent

Outcome = Literal["better", "worse", "within spread", "within eval noise", "unreplicated"]


def eval_noise(accuracy: float, rows: int) -> float:
    """Two standard errors of the difference between two accuracies near `accuracy`, each
    measured on the same `rows` held-out rows (binomial): smaller gaps are not evidence."""
    return 2 * math.sqrt(2 * accuracy * (1 - accuracy) / rows)


def _gap_noise(candidate: Spread, baseline: Spread, rows: int) -> float:
    return eval_noise((candidate.mean + baseline.mean) / 2, rows)


def compare(candidate: Spread, baseline: Spread, rows: int | None = None) -> Outcome:
    """`better` / `worse` only when the seed ranges do not overlap and, given the number of
    evaluated `rows`, the gap exceeds the evaluation's sampling error; one seed cannot tell."""
    if candidate.n < 2 or baseline.n < 2:
        return "unreplicated"
    if candidate.low <= baseline.high and candidate.high >= baseline.low:
        return "within spread"
    if rows and abs(candidate.mean - baseline.mean) < _gap_noise(candidate, baseline, rows):
        return "within eval noise"
    return "better" if candidate.low > baseline.high else "worse"


def _points(candidate: Spread, baseline: Spread) -> float:
    return 100 * (candidate.mean - baseline.mean)


def _versus(candidate: ArmSummary, baseline: ArmSummary, rows: int | None) -> str:
    """One clause: how `candidate` fared against `baseline` on multi-step accuracy."""
    ours, theirs = candidate.metrics["multi"], baseline.metrics["multi"]
    points = _points(ours, theirs)
    outcome = compare(ours, theirs, rows)
    if outcome == "better":
        return f"{candidate.label} beat {baseline.label} by {points:.1f} points (seed ranges apart)"
    if outcome == "worse":
        return (
            f"{candidate.label} lost to {baseline.label} by {-points:.1f} points "
            "(seed ranges apart)"
        )
    if outcome == "within spread":
        return (
            f"{candidate.label} and {baseline.label} were within the seed spread of each other "
            f"({points:+.1f} points, ranges overlap)"
        )
    if outcome == "within eval noise":
        noise = 100 * _gap_noise(ours, theirs, rows or 1)
        return (
            f"{candidate.label} and {baseline.label} were within the evaluation's sampling error "
            f"of each other ({points:+.1f} points; seed ranges apart, but a gap under "
            f"{noise:.1f} points is within two standard errors on {rows} multi-step rows)"
        )
    direction = "above" if points > 0 else "below" if points < 0 else "level with"
    amount = f"{abs(points):.1f} points " if points else ""
    return f"{candidate.label} was {amount}{direction} {baseline.label} with one seed (no spread)"


def paired_changes(summary: AblationSummary, arm: ArmSummary, metric: str) -> list[float]:
    """Per seed, how far `arm` moved `metric` from that seed's own SFT checkpoint to the arm's
    last step: the comparison whose noise is the seeds' disagreement, not the starts' spread."""
    changes = []
    for run in summary.runs:
        if (run.start, run.arm) != (arm.start, arm.arm):
            continue
        last = next((s for s in run.curve if s.step == arm.step), None)
        before = getattr(run.curve[0], metric)
        after = None if last is None else getattr(last, metric)
        if before is not None and after is not None:
            changes.append(after - before)
    return changes


def mean_change(changes: list[float]) -> str:
    """`+9.9 ± 2.9` points (mean ± standard error), flagged where the mean is beyond two."""
    mean = round(100 * statistics.fmean(changes), 1) + 0.0  # no "-0.0" from rounding error
    if len(changes) < 2:
        return f"{mean:+.1f}"
    error = 100 * statistics.stdev(changes) / math.sqrt(len(changes))
    return f"{mean:+.1f} ± {error:.1f}" + (" (beyond 2 s.e.)" if abs(mean) > 2 * error else "")


def _changes_sentence(summary: AblationSummary, trained: list[ArmSummary]) -> str | None:
    """How each arm moved multi- and single-step from each seed's own SFT checkpoint."""
    parts = []
    for metric, name in (("multi", "multi-step"), ("single", "single-step")):
        said = [
            f"{arm.label} {mean_change(changes)}"
            for arm in trained
            if (changes := paired_changes(summary, arm, metric))
        ]
        if said:
            parts.append(f"{name} {', '.join(said)}")
    if not parts:
        return None
    return (
        "Against each seed's own SFT checkpoint (points; mean ± standard error over seeds): "
        f"{'; '.join(parts)}."
    )


def _start_verdict(summary: AblationSummary, start: Start) -> list[str]:
    arms = [a for a in summary.arms if a.start == start]
    sft = summary.arm(start, "sft")
    trained = [a for a in arms if a.arm != "sft"]
    where = f"From the {START_LABELS[start]}"
    if sft is None or not trained or sft.metrics["multi"] is None:
        return [f"{where} no multi-step accuracy was measured."]
    seeds = f"{sft.seeds} seed{'s' if sft.seeds > 1 else ''}"
    step = trained[0].step
    curve = ", ".join(f"{a.label} {spread_percent(a.metrics['multi'])}" for a in trained)
    sentences = [
        f"{where} ({seeds}), multi-step accuracy went from {spread_percent(sft.metrics['multi'])} "
        f"after SFT to {curve} after {step} GRPO steps."
    ]
    if changes := _changes_sentence(summary, trained):
        sentences.append(changes)
    grpo = summary.arm(start, "none")
    for arm in (a for a in trained if a.arm != "none"):
        changed = arm.calibrated_share
        if changed is not None and changed.high == 0:
            sentences.append(
                f"{arm.label}'s calibration never changed a group's advantages (every zero-std "
                f"group sat at the maximum reward), so it trained as plain GRPO."
            )
        elif grpo is not None:
            share = (
                f"; its calibration changed {spread_percent(changed)} of groups" if changed else ""
            )
            sentences.append(f"{_versus(arm, grpo, summary.multi_rows)}{share}.")
    zero_std, everything = summary.arm(start, "zero_std"), summary.arm(start, "all")
    if zero_std is not None and everything is not None:
        sentences.append(
            f"Between the scopes, {_versus(everything, zero_std, summary.multi_rows)}."
        )
    if grpo is not None and grpo.zero_std_share is not None:
        zero = spread_percent(grpo.zero_std_share)
        sentences.append(f"Under GRPO {zero} of groups had zero std.")
    return sentences


def write_verdict(summary: AblationSummary) -> str:
    """One paragraph that states what the numbers support: multi-step accuracy at equal steps,
    "beat" only where the seed ranges (min–max) do not overlap and the gap exceeds the
    evaluation's sampling error, and the calibration's reach."""
    sentences = [s for start in summary.starts for s in _start_verdict(summary, start)]
    if summary.failed:
        sentences.append(
            f"{len(summary.failed)} training run(s) did not finish and are left out (see below)."
        )
    return " ".join(sentences)
