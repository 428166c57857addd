"""The report task: summary.json, report.md, report.html and plots in the run folder, and the
same as Prefect artifacts, so a run can be read without a server and compared by automation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE

from toolgrpo.evaluation.metrics import EvalMetrics
from toolgrpo.mining.report import MiningReport
from toolgrpo.reporting.evaluation import metrics_tables
from toolgrpo.reporting.files import write_text_file
from toolgrpo.reporting.plots import plot_accuracy, plot_confusion, plot_rewards, plot_zero_std
from toolgrpo.reporting.run_report import before_after_rows, report_html, report_markdown
from toolgrpo.schemas.run import RunSummary

PLOTS_DIR = "plots"


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
    write_text_file(run_dir / "summary.json", summary.model_dump_json(indent=2))
    write_text_file(run_dir / "report.md", markdown + "\n")
    write_text_file(run_dir / "report.html", report_html(markdown, run_dir, plots.values()))

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
