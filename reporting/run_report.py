"""The run report: report.md (before/after, NGRPO, plots, slices, review queue) and report.html."""

from __future__ import annotations

import base64
from collections.abc import Collection
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from toolgrpo.evaluation.metrics import EvalMetrics
from toolgrpo.mining.miner import MiningReport
from toolgrpo.reporting.evaluation import metrics_tables
from toolgrpo.reporting.expectations import preset_note
from toolgrpo.reporting.headline import preset_with_overrides
from toolgrpo.reporting.markdown import code_span, markdown_table, markdown_text, percent
from toolgrpo.reporting.mining import findings_markdown
from toolgrpo.schemas.run import Headline, RunSummary
from toolgrpo.schemas.samples import sample_source


def stage_rows(
    accuracy: dict[str, Headline],
) -> tuple[list[str], dict[str, dict[str, float | None]]]:
    """Every row name any stage has, in table order, and each stage's numbers by row name."""
    values = {stage: headline.rows() for stage, headline in accuracy.items()}
    return list(dict.fromkeys(name for rows in values.values() for name in rows)), values


def before_after_rows(accuracy: dict[str, Headline]) -> list[dict[str, str]]:
    """One row per headline number (pooled, per step, per data file): `n`, the rows evaluated
    behind it (the last stage's), then one column per stage."""
    names, values = stage_rows(accuracy)
    sizes = {name: n for headline in accuracy.values() for name, n in headline.n.items()}
    return [
        {
            "accuracy": name,
            "n": str(sizes.get(name, "–")),
            **{stage: percent(rows.get(name)) for stage, rows in values.items()},
        }
        for name in names
    ]


def evaluated_rows(after: EvalMetrics) -> str:
    """`eval/single_step 16, eval/multistep 16` (the rows really evaluated per data file)."""
    return ", ".join(
        f"{markdown_text(source)} {after.accuracy.n.get(source, '–')}"
        for source in after.accuracy.by_source
    )


def report_markdown(
    summary: RunSummary, after: EvalMetrics, mining: MiningReport, images: dict[str, str]
) -> str:
    """report.md: the summary, before/after table, plots, slices, confusion, review queue.

    `images` maps each plot's title to its `src`: a path relative to the run folder for
    report.md, a data URI for the Prefect artifact (the UI cannot read the run folder).
    """
    reuse = (
        "Data and config unchanged since a previous run: the cached models were reused, "
        "nothing was retrained."
        if not summary.retrained
        else "; ".join(f"{name} {stage.line()}" for name, stage in summary.training.items()) + "."
    )
    rows = ", ".join(
        f"{markdown_text(sample_source(Path(name)))} {n}" for name, n in summary.rows.items()
    )
    wall = ", ".join(f"{stage} {seconds:.0f}s" for stage, seconds in summary.wall_s.items())
    plots = [f"![{name}]({src})" for name, src in images.items()]
    tables = metrics_tables(after)
    note = preset_note(summary.preset)
    return "\n\n".join(
        [
            f"# toolgrpo retrain — preset {preset_with_overrides(summary)}",
            *([f"> {note}"] if note else []),
            f"Run folder: {code_span(summary.run_dir)}  \nData hash `{summary.data_hash[:12]}`, "
            f"config hash `{summary.config_hash[:12]}`. {reuse}  \nRows in the data files: "
            f"{rows}.  \nRows evaluated: {evaluated_rows(after)}.  \nWall time: {wall}.",
            "## Tool accuracy before and after GRPO",
            markdown_table(before_after_rows(summary.accuracy)),
            f"NGRPO: `{summary.zero_std.line()}` ({summary.zero_std.zero_on_tool} on the tool "
            f"score alone); the calibration changed "
            f"{summary.zero_std.changed} of those groups.",
            "## Plots",
            "\n\n".join(plots),
            "## After GRPO, by slice",
            markdown_table(tables["slices"]),
            "## Confusion matrix after GRPO (rows: label, columns: prediction)",
            markdown_table(tables["confusion"]),
            findings_markdown(mining, top=15),
        ]
    )


def image_source(plot: Path, run_dir: Path) -> str:
    """How report.md links a plot of the run: its path relative to the run folder."""
    return plot.relative_to(run_dir).as_posix()


def report_html(markdown: str, run_dir: Path, plots: Collection[Path]) -> str:
    """A self-contained HTML page of `markdown`, the run's `plots` inlined as data URIs.

    Raw HTML in the markdown is shown as text, and only the images whose source is one of
    `plots` are read: an image named anywhere else (text from the data) is shown as its alt
    text, so a report cannot run script or embed a file from outside the run.
    """
    inlined = {image_source(plot, run_dir): plot for plot in plots}
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")

    def image(self, tokens, idx, options, env) -> str:
        token = tokens[idx]
        alt = escapeHtml(self.renderInlineAsText(token.children, options, env))
        plot = inlined.get(str(token.attrGet("src")))
        if plot is None:
            return alt
        data = base64.b64encode(plot.read_bytes()).decode("ascii")
        return f'<img src="data:image/png;base64,{data}" alt="{alt}">'

    renderer.add_render_rule("image", image)
    body = renderer.render(markdown)
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
