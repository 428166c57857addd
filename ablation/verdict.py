"""The ablation's verdict, written from the numbers: an arm "beat" another only where, seed by
seed from the same SFT checkpoint, its lead is beyond two standard errors of the mean and beyond
the evaluation's sampling error."""

from __future__ import annotations

import math
import statistics
from typing import Literal

from toolgrpo.ablation.arms import START_LABELS, ArmRun, Start
from toolgrpo.ablation.summary import AblationSummary, ArmSummary, spread_percent

Outcome = Literal["better", "worse", "within seed noise", "within eval noise", "unreplicated"]


def eval_noise(accuracy: float, rows: int) -> float:
    """Two standard errors of the difference between two accuracies near `accuracy`, each
    measured on the same `rows` held-out rows (binomial): smaller gaps are not evidence."""
    return 2 * math.sqrt(2 * accuracy * (1 - accuracy) / rows)


def _standard_error(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


def compare(gaps: list[float], accuracy: float, rows: int | None = None) -> Outcome:
    """`better` / `worse` from per-seed gaps (candidate minus baseline, same seed and start):
    only with two seeds or more, a mean beyond two standard errors and, given the number of
    evaluated `rows` and the `accuracy` they sit near, beyond the evaluation's sampling error."""
    if len(gaps) < 2:
        return "unreplicated"
    mean = statistics.fmean(gaps)
    if abs(mean) <= 2 * _standard_error(gaps):
        return "within seed noise"
    if rows and abs(mean) < eval_noise(accuracy, rows):
        return "within eval noise"
    return "better" if mean > 0 else "worse"


def _at_step(runs: list[ArmRun], arm: ArmSummary, step: int, metric: str) -> dict[int, float]:
    """Per seed, `arm`'s `metric` at `step` (step 0: the seed's SFT checkpoint), where measured."""
    values = {}
    for run in runs:
        if (run.start, run.arm) != (arm.start, arm.arm):
            continue
        scores = next((s for s in run.curve if s.step == step), None)
        value = None if scores is None else getattr(scores, metric)
        if value is not None:
            values[run.seed] = value
    return values


def paired_changes(summary: AblationSummary, arm: ArmSummary, metric: str) -> list[float]:
    """Per seed, how far `arm` moved `metric` from that seed's own SFT checkpoint to the arm's
    last step: the comparison whose noise is the seeds' disagreement, not the starts' spread."""
    before = _at_step(summary.runs, arm, 0, metric)
    after = _at_step(summary.runs, arm, arm.step, metric)
    return [after[seed] - before[seed] for seed in after if seed in before]


def paired_gaps(
    summary: AblationSummary, candidate: ArmSummary, baseline: ArmSummary, metric: str = "multi"
) -> list[float]:
    """Per seed that ran both arms (from one SFT checkpoint), candidate minus baseline at the
    last step both report."""
    step = min(candidate.step, baseline.step)
    ours = _at_step(summary.runs, candidate, step, metric)
    theirs = _at_step(summary.runs, baseline, step, metric)
    return [ours[seed] - theirs[seed] for seed in ours if seed in theirs]


def _points(fraction: float) -> float:
    """A fraction as points to one decimal, with no "-0.0" from rounding error."""
    return round(100 * fraction, 1) + 0.0


def _points_list(gaps: list[float]) -> str:
    return ", ".join(f"{_points(gap):+.1f}" for gap in gaps)


def _versus(summary: AblationSummary, candidate: ArmSummary, baseline: ArmSummary) -> str:
    """One clause: how `candidate` fared against `baseline` on multi-step accuracy, seed by seed."""
    gaps = paired_gaps(summary, candidate, baseline)
    if not gaps:
        return f"{candidate.label} and {baseline.label} share no seed, so they were not compared"
    measured = baseline.metrics["multi"]
    if measured is None:
        raise ValueError(f"{baseline.label} has paired gaps but no multi-step accuracy")
    accuracy = measured.mean
    rows = summary.multi_rows
    outcome = compare(gaps, accuracy, rows)
    if outcome == "unreplicated":
        points = _points(gaps[0])
        direction = "above" if points > 0 else "below" if points < 0 else "level with"
        amount = f"{abs(points):.1f} points " if points else ""
        return (
            f"{candidate.label} was {amount}{direction} {baseline.label} with one seed (no spread)"
        )
    mean = _points(statistics.fmean(gaps))
    error = _points(_standard_error(gaps))
    seeds = f"seed by seed {_points_list(gaps)}"
    if outcome == "better":
        return (
            f"{candidate.label} beat {baseline.label} by {mean:.1f} ± {error:.1f} points "
            f"({seeds}; beyond 2 s.e.)"
        )
    if outcome == "worse":
        return (
            f"{candidate.label} lost to {baseline.label} by {-mean:.1f} ± {error:.1f} points "
            f"({seeds}; beyond 2 s.e.)"
        )
    if outcome == "within seed noise":
        return (
            f"{candidate.label} and {baseline.label} were within the seeds' noise of each other "
            f"({mean:+.1f} ± {error:.1f} points, {seeds})"
        )
    noise = 100 * eval_noise(accuracy, rows or 1)
    return (
        f"{candidate.label} and {baseline.label} were within the evaluation's sampling error "
        f"of each other ({mean:+.1f} ± {error:.1f} points, {seeds}; beyond 2 s.e., but a gap "
        f"under {noise:.1f} points is within two standard errors on {rows} multi-step rows)"
    )


def mean_change(changes: list[float], accuracy: float = 0.5, rows: int | None = None) -> str:
    """`+9.9 ± 2.9` points (mean ± standard error), flagged by `compare`'s rule: beyond two
    standard errors, and where that is still within the sampling error of `rows` held-out rows
    near `accuracy`, said so (a 2-row change on 91 rows is not evidence however steady)."""
    mean = _points(statistics.fmean(changes))
    outcome = compare(changes, accuracy, rows)
    if outcome == "unreplicated":
        return f"{mean:+.1f}"
    said = f"{mean:+.1f} ± {100 * _standard_error(changes):.1f}"
    if outcome == "within seed noise":
        return said
    if outcome == "within eval noise":
        noise = 100 * eval_noise(accuracy, rows or 1)
        return f"{said} (beyond 2 s.e., within the {noise:.1f}-point sampling error of {rows} rows)"
    return f"{said} (beyond 2 s.e.)"


def _rows(summary: AblationSummary, metric: str) -> int | None:
    """How many held-out rows `metric` was measured on, where the summary recorded it."""
    if summary.multi_rows is None:
        return None
    return {"multi": summary.multi_rows, "single": summary.eval_rows - summary.multi_rows}[metric]


def _changes_sentence(summary: AblationSummary, trained: list[ArmSummary]) -> str | None:
    """How each arm moved multi- and single-step from each seed's own SFT checkpoint."""
    parts = []
    for metric, name in (("multi", "multi-step"), ("single", "single-step")):
        said = []
        for arm in trained:
            changes = paired_changes(summary, arm, metric)
            start = summary.arm(arm.start, "sft")
            spread = start.metrics[metric] if start is not None else None
            if not changes or spread is None:
                continue
            accuracy = spread.mean
            said.append(f"{arm.label} {mean_change(changes, accuracy, _rows(summary, metric))}")
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
            sentences.append(f"{_versus(summary, arm, grpo)}{share}.")
    zero_std, everything = summary.arm(start, "zero_std"), summary.arm(start, "all")
    if zero_std is not None and everything is not None:
        sentences.append(f"Between the scopes, {_versus(summary, everything, zero_std)}.")
    if grpo is not None and grpo.zero_std_share is not None:
        zero = spread_percent(grpo.zero_std_share)
        sentences.append(f"Under GRPO {zero} of groups had zero std.")
    return sentences


def write_verdict(summary: AblationSummary) -> str:
    """One paragraph that states what the numbers support: multi-step accuracy at equal steps,
    "beat" only where the per-seed gaps from one SFT checkpoint are beyond two standard errors
    and the evaluation's sampling error, and the calibration's reach."""
    sentences = [s for start in summary.starts for s in _start_verdict(summary, start)]
    if summary.failed:
        sentences.append(
            f"{len(summary.failed)} training run(s) did not finish and are left out (see below)."
        )
    return " ".join(sentences)
