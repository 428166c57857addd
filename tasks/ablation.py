"""The built-in ablation: SFT vs GRPO vs NGRPO (zero-std scope) vs NGRPO (all groups).

From each starting checkpoint (SFT on single-step rows only — the case study's regime — and the
preset's default warm start), GRPO arms that differ only in `ngrpo_scope` are trained with the
same seeds, steps and data, and every saved checkpoint is evaluated on the held-out rows. This
module holds the arm configs, the per-checkpoint evaluation, the aggregation across seeds, the
plot and a verdict written from the numbers; `flows/ablation.py` runs it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")  # no display on a server or in CI
import matplotlib.pyplot as plt
import polars as pl
from matplotlib.ticker import MaxNLocator
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from toolgrpo.tasks.evaluate import (
    EvalMetrics,
    EvalSettings,
    compute_metrics,
    evaluation_rows,
    markdown_table,
    predict,
    write_evaluation,
)
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.train import train_stage
from toolgrpo.training.config import TrainConfig, load_preset
from toolgrpo.training.metrics import read_metrics
from toolgrpo.training.ngrpo import Scope

Start = Literal["single_only", "default"]
STARTS: tuple[Start, ...] = ("single_only", "default")
ARMS: tuple[Scope, ...] = ("none", "zero_std", "all")
START_LABELS = {"single_only": "single-step-only SFT start", "default": "default warm start"}
ARM_LABELS = {
    "sft": "SFT (step 0)",
    "none": "GRPO",
    "zero_std": "NGRPO (zero-std)",
    "all": "NGRPO (all)",
}
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


# --- configs -------------------------------------------------------------------------------


def start_config(
    preset: str, start: Start, seed: int, torch_threads: int, overrides: dict[str, Any]
) -> TrainConfig:
    """The SFT config of one starting checkpoint: the preset (plus `overrides`) with this seed;
    `single_only` trains on no multi-step scenario (`sft.multistep_fraction=0`)."""
    fields: dict[str, Any] = {**overrides, "seed": seed, "runtime.torch_threads": torch_threads}
    if start == "single_only":
        fields["sft.multistep_fraction"] = 0.0
    return load_preset(preset, fields)


def arm_config(start: TrainConfig, arm: Scope, steps: int, eval_every: int) -> TrainConfig:
    """The GRPO config of one arm: the start's config with this advantage estimator, a
    checkpoint every `eval_every` steps, and room to keep all of them for evaluation."""
    return start.with_overrides(
        {
            "grpo.ngrpo_scope": arm,
            "grpo.max_steps": steps,
            "runtime.save_steps": eval_every,
            "runtime.save_total_limit": math.ceil(steps / eval_every) + 1,
        }
    )


# --- evaluation ----------------------------------------------------------------------------


def eval_samples(paths: list[Path], max_rows: int | None) -> pl.DataFrame:
    """The held-out rows of `paths` (at most `max_rows` per file), read by the data loader."""
    loaded = load_samples.fn(paths)  # a plain read: no task run of its own
    if loaded.problems:
        shown = "; ".join(str(problem) for problem in loaded.problems[:3])
        raise AblationError(f"{len(loaded.problems)} unreadable eval rows or files: {shown}")
    return evaluation_rows(loaded.frame, max_rows)


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


def evaluate_steps(
    models: dict[int, Path], samples: pl.DataFrame, out_dir: Path, settings: EvalSettings
) -> list[Scores]:
    """Evaluate each model (step → directory) on `samples`, writing `out_dir/step-N/`."""
    scores = []
    for step, model_dir in sorted(models.items()):
        predictions = predict(model_dir, samples, settings)
        metrics = compute_metrics(predictions)
        write_evaluation(predictions, metrics, model_dir, out_dir / f"step-{step}")
        scores.append(scores_of(metrics, step))
    return scores


def checkpoint_models(stage_dir: Path, max_steps: int) -> dict[int, Path]:
    """Step → model directory of a finished stage: every `checkpoint-N`, and the saved model at
    `max_steps` (the same weights as a last checkpoint there)."""
    models = {
        int(path.name.rpartition("-")[2]): path
        for path in stage_dir.glob("checkpoint-*")
        if path.is_dir() and path.name.rpartition("-")[2].isdigit()
    }
    models[max_steps] = stage_dir / "model"
    return {step: path for step, path in models.items() if step <= max_steps}


class GroupCounts(BaseModel):
    """GRPO groups over a whole run: zero reward std, and changed by the NGRPO calibration."""

    zero_std: int
    calibrated: int
    total: int


def group_counts(metrics_path: Path) -> GroupCounts:
    """The cumulative group counts of the last metrics line that carries them."""
    lines = [line for line in read_metrics(metrics_path) if "groups_total" in line]
    if not lines:
        return GroupCounts(zero_std=0, calibrated=0, total=0)
    last = lines[-1]
    return GroupCounts(
        zero_std=last["zero_std_groups_total"],
        calibrated=last["calibrated_groups_total"],
        total=last["groups_total"],
    )


# --- the tasks: one starting checkpoint, one arm ------------------------------------------


class StartRun(BaseModel):
    """A trained starting checkpoint and its held-out scores (step 0 of every arm)."""

    start: Start
    seed: int
    model_dir: Path
    scores: Scores


class ArmRun(BaseModel):
    """One GRPO arm from one start and seed: its held-out scores per step (step 0 is the SFT
    checkpoint), the group counts of its training, and its wall time."""

    start: Start
    arm: Scope
    seed: int
    curve: list[Scores]
    groups: GroupCounts
    wall_s: float


@task(name="train-start", cache_policy=NO_CACHE)
def train_start(
    start: Start,
    config: TrainConfig,
    run_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings,
    timeout_s: float,
) -> StartRun:
    """Train the SFT checkpoint of one start and seed in `run_dir` and evaluate it."""
    sft = train_stage("sft", run_dir, config, timeout_s=timeout_s)
    (scores,) = evaluate_steps({0: sft.model_dir}, samples, run_dir / "eval", settings)
    get_run_logger().info("%s seed %d: SFT multi-step %s", start, config.seed, scores.multi)
    return StartRun(start=start, seed=config.seed, model_dir=sft.model_dir, scores=scores)


@task(name="train-arm", cache_policy=NO_CACHE)
def train_arm(
    start: StartRun,
    config: TrainConfig,
    run_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings,
    timeout_s: float,
) -> ArmRun:
    """Train one GRPO arm from `start` in `run_dir` and evaluate every checkpoint it saved."""
    grpo = train_stage("grpo", run_dir, config, timeout_s=timeout_s, init_dir=start.model_dir)
    stage_dir = grpo.model_dir.parent
    curve = evaluate_steps(
        checkpoint_models(stage_dir, config.grpo.max_steps), samples, run_dir / "eval", settings
    )
    arm = ArmRun(
        start=start.start,
        arm=config.grpo.ngrpo_scope,
        seed=config.seed,
        curve=[start.scores, *curve],
        groups=group_counts(grpo.metrics_path),
        wall_s=grpo.wall_s,
    )
    # The arm's record on its own, so finished arms of an interrupted ablation can be read back.
    (run_dir / ARM_RECORD).write_text(arm.model_dump_json(indent=2), encoding="utf-8")
    return arm


# --- aggregation across seeds --------------------------------------------------------------


class Spread(BaseModel):
    """Mean and range of one number across seeds."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float | None]) -> Spread | None:
        """The spread of the known values; None when there is none."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return cls(mean=sum(known) / len(known), low=min(known), high=max(known), n=len(known))

    def percent(self) -> str:
        """`41.2% (38.0–44.4)`: the mean, then the range across seeds when there is one."""
        text = f"{100 * self.mean:.1f}%"
        return text if self.n < 2 else f"{text} ({100 * self.low:.1f}–{100 * self.high:.1f})"


def _percent(spread: Spread | None) -> str:
    return "–" if spread is None else spread.percent()


class CurvePoint(BaseModel):
    step: int
    metrics: dict[str, Spread | None]


class ArmSummary(BaseModel):
    """One start × arm across seeds: rates at the last evaluated step, the curve, group shares."""

    start: Start
    arm: Scope | Literal["sft"]
    seeds: int
    step: int
    metrics: dict[str, Spread | None]
    curve: list[CurvePoint] = Field(default_factory=list)
    zero_std_share: Spread | None = None
    calibrated_share: Spread | None = None
    wall_s: Spread | None = None

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

    def arm(self, start: Start, arm: str) -> ArmSummary | None:
        return next((a for a in self.arms if a.start == start and a.arm == arm), None)

    @property
    def starts(self) -> list[Start]:
        return list(dict.fromkeys(a.start for a in self.arms))


def _metrics_at(scores: list[Scores]) -> dict[str, Spread | None]:
    return {name: Spread.of([getattr(s, name) for s in scores]) for name in METRICS}


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
                    zero_std_share=Spread.of(
                        [_share(r.groups.zero_std, r.groups.total) for r in arm_runs]
                    ),
                    calibrated_share=Spread.of(
                        [_share(r.groups.calibrated, r.groups.total) for r in arm_runs]
                    ),
                    wall_s=Spread.of([r.wall_s for r in arm_runs]),
                )
            )
    return summaries


# --- verdict -------------------------------------------------------------------------------

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


def _start_verdict(summary: AblationSummary, start: Start) -> list[str]:
    arms = [a for a in summary.arms if a.start == start]
    sft = summary.arm(start, "sft")
    trained = [a for a in arms if a.arm != "sft"]
    where = f"From the {START_LABELS[start]}"
    if sft is None or not trained or sft.metrics["multi"] is None:
        return [f"{where} no multi-step accuracy was measured."]
    seeds = f"{sft.seeds} seed{'s' if sft.seeds > 1 else ''}"
    step = trained[0].step
    curve = ", ".join(f"{a.label} {_percent(a.metrics['multi'])}" for a in trained)
    sentences = [
        f"{where} ({seeds}), multi-step accuracy went from {_percent(sft.metrics['multi'])} "
        f"after SFT to {curve} after {step} GRPO steps."
    ]
    grpo = summary.arm(start, "none")
    for arm in (a for a in trained if a.arm != "none"):
        changed = arm.calibrated_share
        if changed is not None and changed.high == 0:
            sentences.append(
                f"{arm.label}'s calibration never changed a group's advantages (every zero-std "
                f"group sat at the maximum reward), so it trained as plain GRPO."
            )
        elif grpo is not None:
            share = f"; its calibration changed {_percent(changed)} of groups" if changed else ""
            sentences.append(f"{_versus(arm, grpo, summary.multi_rows)}{share}.")
    zero_std, everything = summary.arm(start, "zero_std"), summary.arm(start, "all")
    if zero_std is not None and everything is not None:
        sentences.append(
            f"Between the scopes, {_versus(everything, zero_std, summary.multi_rows)}."
        )
    if grpo is not None and grpo.zero_std_share is not None:
        sentences.append(f"Under GRPO {_percent(grpo.zero_std_share)} of groups had zero std.")
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


# --- report --------------------------------------------------------------------------------


def results_table(summary: AblationSummary) -> list[dict[str, str]]:
    """One row per start × arm at its last step: rates, zero-std and calibrated shares."""
    return [
        {
            "start": arm.start,
            "arm": arm.label,
            "step": str(arm.step),
            "seeds": str(arm.seeds),
            **{title: _percent(arm.metrics[name]) for name, title in METRICS.items()},
            "zero-std groups": _percent(arm.zero_std_share),
            "calibration changed": _percent(arm.calibrated_share),
            "train s": "–" if arm.wall_s is None else f"{arm.wall_s.mean:.0f}",
        }
        for arm in summary.arms
    ]


def plot_multi_step(summary: AblationSummary, path: Path) -> Path:
    """Multi-step accuracy against GRPO step, one panel per start: mean line, min–max band."""
    starts = summary.starts
    fig, axes = plt.subplots(
        1, len(starts), figsize=(6 * len(starts), 4), sharey=True, squeeze=False
    )
    colours = dict(zip(ARMS, plt.get_cmap("tab10").colors, strict=False))
    for ax, start in zip(axes[0], starts, strict=True):
        for arm in (a for a in summary.arms if a.start == start and a.arm != "sft"):
            points = [p for p in arm.curve if p.metrics["multi"] is not None]
            steps = [p.step for p in points]
            spreads = [p.metrics["multi"] for p in points]
            colour = colours[arm.arm]
            means = [100 * s.mean for s in spreads]
            ax.plot(steps, means, marker="o", color=colour, label=arm.label)
            ax.fill_between(
                steps,
                [100 * s.low for s in spreads],
                [100 * s.high for s in spreads],
                color=colour,
                alpha=0.15,
            )
        ax.set(xlabel="GRPO step (0 = SFT)", title=START_LABELS[start])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("multi-step accuracy (%)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ablation_markdown(summary: AblationSummary, verdict: str, plot: Path) -> str:
    """ablation.md: the verdict, the table and the plot."""
    seeds = ", ".join(str(s) for s in summary.seeds)
    failed = "\n".join(f"- {line}" for line in summary.failed)
    return "\n\n".join(
        part
        for part in [
            f"# Ablation: SFT vs GRPO vs NGRPO — preset `{summary.preset}`",
            f"Seeds {seeds}; {summary.steps} GRPO steps, evaluated every {summary.eval_every} "
            f"steps on {summary.eval_rows} held-out rows; wall time {summary.wall_s:.0f}s. "
            "Values are the mean across seeds with the min–max range in brackets.",
            "## Verdict",
            verdict,
            "## At the last step",
            markdown_table(results_table(summary)),
            f"![multi-step accuracy per step]({plot.name})",
            f"## Runs that did not finish\n\n{failed}" if failed else "",
        ]
        if part
    )


class AblationReport(BaseModel):
    """Where the ablation's report went, and its verdict."""

    markdown_path: Path
    json_path: Path
    plot_path: Path
    verdict: str
    failed: list[str]


@task(name="publish-ablation", cache_policy=NO_CACHE)
def publish_ablation(summary: AblationSummary, run_dir: Path) -> AblationReport:
    """Write ablation.md / .json / .png in `run_dir`; publish the verdict and table as artifacts."""
    verdict = write_verdict(summary)
    plot = plot_multi_step(summary, run_dir / "ablation.png")
    markdown = ablation_markdown(summary, verdict, plot)
    markdown_path = run_dir / "ablation.md"
    json_path = run_dir / "ablation.json"
    markdown_path.write_text(markdown + "\n", encoding="utf-8")
    json_path.write_text(summary.model_dump_json(indent=2), encoding="utf-8")
    create_markdown_artifact(
        markdown=markdown.replace(f"]({plot.name})", f"]({plot.resolve().as_uri()})"),
        key="ablation-report",
        description="SFT vs GRPO vs NGRPO: verdict and table",
    )
    create_table_artifact(
        table=results_table(summary), key="ablation-table", description="per start and arm"
    )
    return AblationReport(
        markdown_path=markdown_path,
        json_path=json_path,
        plot_path=plot,
        verdict=verdict,
        failed=summary.failed,
    )
