"""The run report: summary.json, report.md, a self-contained report.html with plots, artifacts.

The same content goes to the Prefect UI (artifacts) and to the run folder, so a run can be read
without a server and compared with later runs by automation (summary.json).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import numpy as np
from markdown_it import MarkdownIt
from matplotlib.figure import Figure
from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from toolgrpo.tasks.evaluate import EvalMetrics, Headline, markdown_table, metrics_tables
from toolgrpo.tasks.mine import MiningReport, findings_markdown

PLOTS_DIR = "plots"


class ZeroStdGroups(BaseModel):
    """GRPO groups whose completions all got one reward (no signal for plain GRPO)."""

    zero: int
    total: int
    changed: int = Field(description="groups whose advantages the NGRPO calibration changed")

    def line(self) -> str:
        """The case study's log line: `Zero std: 3243/5108 (63.5%)`."""
        share = 100 * self.zero / self.total if self.total else 0.0
        return f"Zero std: {self.zero}/{self.total} ({share:.1f}%)"


class RunSummary(BaseModel):
    """summary.json: what automation reads after a run."""

    preset: str
    run_dir: Path
    data_hash: str
    config_hash: str
    rows: dict[str, int] = Field(description="validated rows per data file")
    retrained: bool = Field(description="False when data and config were unchanged (cache hit)")
    models: dict[str, Path] = Field(description="stage → model directory")
    accuracy: dict[str, Headline] = Field(description="stage → tool accuracy after that stage")
    zero_std: ZeroStdGroups
    flagged_label_ambiguity: list[str]
    flagged_label_conflict: list[str]
    wall_s: dict[str, float] = Field(description="stage → wall time in seconds")


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _stage_rows(
    accuracy: dict[str, Headline],
) -> tuple[list[str], dict[str, dict[str, float | None]]]:
    """Every row name any stage has, in table order, and each stage's numbers by row name."""
    values = {stage: headline.rows() for stage, headline in accuracy.items()}
    return list(dict.fromkeys(name for rows in values.values() for name in rows)), values


def before_after_rows(accuracy: dict[str, Headline]) -> list[dict[str, str]]:
    """One row per headline number (pooled, per step, per data file), one column per stage."""
    names, values = _stage_rows(accuracy)
    return [
        {"accuracy": name, **{stage: _percent(rows.get(name)) for stage, rows in values.items()}}
        for name in names
    ]


# --- plots ---------------------------------------------------------------------------------


def plot_rewards(grpo_metrics: list[dict[str, Any]], path: Path) -> Path:
    """GRPO reward and its components (mean per step)."""
    lines = [m for m in grpo_metrics if "reward" in m]
    steps = [m["step"] for m in lines]
    components = sorted({k for m in lines for k in m if re.fullmatch(r"rewards/.+/mean", k)})
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.plot(steps, [m["reward"] for m in lines], label="total reward", linewidth=2.5)
    for key in components:
        ax.plot(steps, [m.get(key) for m in lines], label=key.split("/")[1], linewidth=1.2)
    ax.set(xlabel="GRPO step", ylabel="mean reward", title="Reward and its components per step")
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
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_accuracy(accuracy: dict[str, Headline], path: Path) -> Path:
    """Accuracy by slice, one bar per stage, side by side."""
    names, values = _stage_rows(accuracy)
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


def _save(fig: Figure, path: Path) -> Path:
    """Figures are built without pyplot: no global state, no display backend on a server."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


# --- the report ----------------------------------------------------------------------------


def report_markdown(
    summary: RunSummary, after: EvalMetrics, mining: MiningReport, plots: dict[str, Path]
) -> str:
    """report.md: the summary, before/after table, plots, slices, confusion, review queue."""
    reuse = (
        "Data and config unchanged since a previous run: the cached models were reused, "
        "nothing was retrained."
        if not summary.retrained
        else "Trained on this run's data."
    )
    rows = ", ".join(f"{Path(name).name} {n}" for name, n in summary.rows.items())
    wall = ", ".join(f"{stage} {seconds:.0f}s" for stage, seconds in summary.wall_s.items())
    images = [
        f"![{name}]({path.relative_to(summary.run_dir).as_posix()})" for name, path in plots.items()
    ]
    tables = metrics_tables(after)
    return "\n\n".join(
        [
            f"# toolgrpo retrain — preset `{summary.preset}`",
            f"Run folder: `{summary.run_dir}`  \nData hash `{summary.data_hash[:12]}`, config hash "
            f"`{summary.config_hash[:12]}`. {reuse}  \nRows: {rows}.  \nWall time: {wall}.",
            "## Tool accuracy before and after GRPO",
            markdown_table(before_after_rows(summary.accuracy)),
            f"NGRPO: `{summary.zero_std.line()}`; the calibration changed "
            f"{summary.zero_std.changed} of those groups.",
            "## Plots",
            "\n\n".join(images),
            "## After GRPO, by slice",
            markdown_table(tables["slices"]),
            "## Confusion matrix after GRPO (rows: label, columns: prediction)",
            markdown_table(tables["confusion"]),
            findings_markdown(mining, top=15),
        ]
    )


def report_html(markdown: str, run_dir: Path) -> str:
    """A self-contained HTML page of `markdown`, its images inlined as data URIs."""
    body = MarkdownIt("commonmark").enable("table").render(markdown)

    def inline(match: re.Match[str]) -> str:
        data = base64.b64encode((run_dir / match.group(1)).read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    body = re.sub(r'src="([^"]+\.png)"', inline, body)
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%;margin:0.5em 0}code{background:#f6f6f6}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>toolgrpo report</title>'
        f"<style>{style}</style></head><body>{body}</body></html>"
    )


@task(name="publish report", cache_policy=NO_CACHE)
def publish_report(
    summary: RunSummary,
    after: EvalMetrics,
    mining: MiningReport,
    grpo_metrics: list[dict[str, Any]],
) -> Path:
    """Write summary.json, report.md, report.html and plots; publish the same as artifacts."""
    run_dir = summary.run_dir
    plots_dir = run_dir / PLOTS_DIR
    plots = {
        "reward per step": plot_rewards(grpo_metrics, plots_dir / "reward.png"),
        "zero-std groups per step": plot_zero_std(grpo_metrics, plots_dir / "zero_std.png"),
        "accuracy by slice": plot_accuracy(summary.accuracy, plots_dir / "accuracy.png"),
        "confusion matrix": plot_confusion(after, plots_dir / "confusion.png"),
    }
    markdown = report_markdown(summary, after, mining, plots)
    (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2), encoding="utf-8")
    (run_dir / "report.md").write_text(markdown + "\n", encoding="utf-8")
    (run_dir / "report.html").write_text(report_html(markdown, run_dir), encoding="utf-8")

    tables = metrics_tables(after)
    create_markdown_artifact(
        markdown=markdown, key="retrain-report", description="before/after, NGRPO, review queue"
    )
    create_table_artifact(
        table=before_after_rows(summary.accuracy),
        key="retrain-accuracy",
        description="tool accuracy by stage",
    )
    create_table_artifact(table=tables["slices"], key="retrain-slices", description="by slice")
    create_table_artifact(
        table=tables["confusion"], key="retrain-confusion", description="confusion after GRPO"
    )
    create_table_artifact(
        table=[pair.model_dump() for pair in mining.overlapping_pairs] or [{"pairs": "none"}],
        key="retrain-overlapping-tools",
        description="overlapping tool pairs (confident learning)",
    )
    create_link_artifact(
        link=(run_dir / "report.html").resolve().as_uri(),
        link_text=f"report.html in {run_dir}",
        key="retrain-run-folder",
    )
    return run_dir / "report.html"
