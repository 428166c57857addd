"""The report task: summary.json, report.md, report.html and plots in the run folder, and the
same as Prefect artifacts, so a run can be read without a server and compared by automation.

In the UI the markdown report carries its plots inline (data URIs: the UI cannot read the run
folder), and the flow itself publishes the headline, so that it is listed above the task runs'
artifacts on the flow run's page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from toolgrpo.evaluation.metrics import EvalMetrics
from toolgrpo.mining.miner import MiningReport
from toolgrpo.reporting.evaluation import metrics_tables
from toolgrpo.reporting.headline import headline_markdown
from toolgrpo.reporting.plots import (
    plot_accuracy,
    plot_confusion,
    plot_rewards,
    plot_zero_std,
    png_data_uri,
)
from toolgrpo.reporting.run_report import (
    before_after_rows,
    image_source,
    report_html,
    report_markdown,
)
from toolgrpo.schemas.files import write_text_file
from toolgrpo.schemas.run import RunSummary
from toolgrpo.tasks.artifacts import send_artifact

PLOTS_DIR = "plots"
HEADLINE_KEY = "retrain-headline"


class PublishedReport(BaseModel):
    """Where the report went: report.html in the run folder, and its artifact in the UI."""

    html: Path
    artifact_id: UUID | None  # None: not sent, the Prefect API was away


@task(name="publish report", task_run_name="report", cache_policy=NO_CACHE)
def publish_report(
    summary: RunSummary,
    after: EvalMetrics,
    mining: MiningReport,
    grpo_metrics: list[dict[str, Any]],
) -> PublishedReport:
    """Write summary.json, report.md, report.html and plots; publish the same as artifacts."""
    run_dir = summary.run_dir
    plots_dir = run_dir / PLOTS_DIR
    plots = {
        "reward per step": plot_rewards(grpo_metrics, plots_dir / "reward.png"),
        "zero-std groups per step": plot_zero_std(grpo_metrics, plots_dir / "zero_std.png"),
        "accuracy by slice": plot_accuracy(summary.accuracy, plots_dir / "accuracy.png"),
        "confusion matrix": plot_confusion(after, plots_dir / "confusion.png"),
    }
    relative = {name: image_source(path, run_dir) for name, path in plots.items()}
    markdown = report_markdown(summary, after, mining, relative)
    write_text_file(run_dir / "summary.json", summary.model_dump_json(indent=2))
    write_text_file(run_dir / "report.md", markdown + "\n")
    write_text_file(run_dir / "report.html", report_html(markdown, run_dir, plots.values()))

    inline = {name: png_data_uri(path) for name, path in plots.items()}
    report_id = send_artifact(
        create_markdown_artifact,
        run_dir / "report.md",
        markdown=report_markdown(summary, after, mining, inline),
        key="retrain-report",
        description="the full report (report.md): before/after, plots, slices, confusion, "
        "review queue",
    )
    tables = metrics_tables(after)
    send_artifact(
        create_table_artifact,
        run_dir / "summary.json",
        table=before_after_rows(summary.accuracy),
        key="retrain-accuracy",
        description="tool accuracy after SFT and after GRPO; n: rows evaluated",
    )
    send_artifact(
        create_table_artifact,
        run_dir / "report.md",
        table=tables["slices"],
        key="retrain-slices",
        description="after GRPO, by slice",
    )
    send_artifact(
        create_table_artifact,
        run_dir / "report.md",
        table=tables["confusion"],
        key="retrain-confusion",
        description="after GRPO: labelled tool (rows) × predicted tool",
    )
    send_artifact(
        create_table_artifact,
        run_dir / "report.md",
        table=[pair.model_dump() for pair in mining.overlapping_pairs] or [{"pairs": "none"}],
        key="retrain-overlapping-tools",
        description="overlapping tool pairs (confident learning)",
    )
    send_artifact(
        create_link_artifact,
        run_dir / "report.html",
        link=(run_dir / "report.html").resolve().as_uri(),
        link_text=f"report.html in {run_dir}",
        key="retrain-run-folder",
        description="the run folder's self-contained report.html (a file:// link opens from a "
        "browser on the machine that ran the flow; the retrain-report artifact is the same)",
    )
    return PublishedReport(html=run_dir / "report.html", artifact_id=report_id)


def publish_headline(summary: RunSummary, report: PublishedReport) -> UUID | None:
    """The headline artifact, linking to the report's. Call it from the flow, not from a task:
    the UI lists a flow run's own artifacts above its task runs', so this one comes first."""
    report_link = f"/artifacts/artifact/{report.artifact_id}" if report.artifact_id else None
    return send_artifact(  # type: ignore[return-value]  # a sync call returns the id
        create_markdown_artifact,
        summary.run_dir / "report.md",
        markdown=headline_markdown(summary, report_link),
        key=HEADLINE_KEY,
        description="read first: accuracy per file with n, the preset's goals, zero-std groups",
    )
