"""The plots of the reports, built without pyplot: no global state, no display backend."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from toolgrpo.ablation.arms import ARMS, METRICS, START_LABELS
from toolgrpo.ablation.summary import AblationSummary
from toolgrpo.evaluation.metrics import EvalMetrics
from toolgrpo.reporting.run_report import stage_rows
from toolgrpo.schemas.files import replace_file
from toolgrpo.schemas.run import Headline


def plot_rewards(grpo_metrics: list[dict[str, Any]], path: Path) -> Path:
    """GRPO reward and its components (mean per step)."""
    lines = [m for m in grpo_metrics if "reward" in m]
    steps = [m["step"] for m in lines]
    components = sorted({k for m in lines for k in m if re.fullmatch(r"rewards/.+/mean", k)})
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.plot(steps, [m["reward"] for m in lines], label="total reward", linewidth=2.5)
    for key in components:
        values = [m.get(key, math.nan) for m in lines]
        ax.plot(steps, values, label=key.split("/")[1], linewidth=1.2)
    ax.set(xlabel="GRPO step", ylabel="mean reward", title="Reward and its components per step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 2.5 ticks
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_zero_std(grpo_metrics: list[dict[str, Any]], path: Path) -> Path:
    """Share of groups with zero reward std per step, and the share the calibration changed."""
    lines = [m for m in grpo_metrics if m.get("groups")]
    steps = [m["step"] for m in lines]
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.plot(steps, [m["zero_std_groups"] / m["groups"] for m in lines], label="zero-std groups")
    ax.plot(
        steps,
        [m["calibrated_groups"] / m["groups"] for m in lines],
        label="changed by NGRPO calibration",
        linestyle="--",
    )
    ax.set(xlabel="GRPO step", ylabel="share of groups", title="Zero-std groups per step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 2.5 ticks
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_accuracy(accuracy: dict[str, Headline], path: Path) -> Path:
    """Accuracy by slice, one bar per stage, side by side."""
    names, values = stage_rows(accuracy)
    x = np.arange(len(names))
    width = 0.8 / max(len(accuracy), 1)
    fig = Figure(figsize=(10, 4.5))
    ax = fig.subplots()
    for i, (stage, rows) in enumerate(values.items()):
        heights = [100 * (rows.get(name) or 0) for name in names]
        bars = ax.bar(x + i * width, heights, width, label=stage)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(x + width * (len(accuracy) - 1) / 2, names, rotation=30, ha="right")
    ax.set(ylabel="tool accuracy (%)", title="Accuracy by slice, before vs after GRPO")
    ax.set_ylim(0, 110)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_confusion(metrics: EvalMetrics, path: Path) -> Path:
    """Confusion matrix heatmap (rows: label, columns: prediction)."""
    confusion = metrics.confusion
    counts = np.array(confusion.counts)
    fig = Figure(figsize=(7.5, 6))
    ax = fig.subplots()
    ax.imshow(counts, cmap="Blues")
    ax.set_xticks(range(len(confusion.predicted)), confusion.predicted, rotation=45, ha="right")
    ax.set_yticks(range(len(confusion.labels)), confusion.labels)
    for (row, col), count in np.ndenumerate(counts):
        if count:
            dark = count > counts.max() / 2
            ax.text(col, row, count, ha="center", va="center", color="white" if dark else "black")
    ax.set(xlabel="predicted", ylabel="label", title="Confusion matrix after GRPO")
    return _save(fig, path)


def png_data_uri(path: Path) -> str:
    """A PNG file as a `data:` URI: an image that renders wherever its markdown goes (the Prefect
    UI cannot read the run folder)."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    return replace_file(path, lambda temporary: fig.savefig(temporary, format="png", dpi=110))


# The learning curves' rows: Scores field → axis label (the table's column title).
CURVES = {name: METRICS[name] for name in ("multi", "single", "condition_fails", "condition_holds")}


def learning_curves(summary: AblationSummary) -> Figure:
    """Held-out accuracy against GRPO step: a row per slice (`CURVES`), a column per start; per
    arm the mean across seeds as a line, the min–max range as a band."""
    starts = summary.starts
    fig = Figure(figsize=(5 * len(starts), 2.6 * len(CURVES)))
    axes = fig.subplots(len(CURVES), len(starts), sharex=True, sharey=True, squeeze=False)
    colours: dict[str, Any] = dict(zip(ARMS, colormaps["tab10"](range(len(ARMS))), strict=False))
    for column, start in enumerate(starts):
        axes[0][column].set_title(START_LABELS[start], fontsize=10)
        axes[-1][column].set_xlabel("GRPO step (0 = SFT)")
        for ax, metric in zip(axes[:, column], CURVES, strict=True):
            for arm in (a for a in summary.arms if a.start == start and a.arm != "sft"):
                points = [p for p in arm.curve if p.metrics[metric] is not None]
                if not points:
                    continue
                steps = [p.step for p in points]
                spreads = [s for p in points if (s := p.metrics[metric]) is not None]
                colour = colours[arm.arm]
                means = [100 * s.mean for s in spreads]
                ax.plot(steps, means, marker="o", markersize=3, color=colour, label=arm.label)
                ax.fill_between(
                    steps,
                    [100 * s.low for s in spreads],
                    [100 * s.high for s in spreads],
                    color=colour,
                    alpha=0.15,
                )
            if not ax.get_lines():
                ax.text(0.5, 0.5, "no such rows", ha="center", transform=ax.transAxes)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(-2, 102)
            ax.grid(alpha=0.3)
    for ax, title in zip(axes[:, 0], CURVES.values(), strict=True):
        ax.set_ylabel(f"{title} (%)", fontsize=9)
    for ax in axes[0]:
        if ax.get_lines():
            ax.legend(fontsize=7)
    return fig


def plot_learning_curves(summary: AblationSummary, path: Path) -> Path:
    """`learning_curves` as a PNG at `path`."""
    return _save(learning_curves(summary), path)
