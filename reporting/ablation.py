"""The ablation report: ablation.md (verdict, table, plot) and the table artifact."""

from __future__ import annotations

from pathlib import Path

from toolgrpo.ablation.arms import METRICS
from toolgrpo.ablation.summary import AblationSummary, spread_percent
from toolgrpo.reporting.markdown import code_span, markdown_table, markdown_text


def results_table(summary: AblationSummary) -> list[dict[str, str]]:
    """One row per start × arm at its last step: rates, zero-std and calibrated shares."""
    return [
        {
            "start": arm.start,
            "arm": arm.label,
            "step": str(arm.step),
            "seeds": str(arm.seeds),
            **{title: spread_percent(arm.metrics[name]) for name, title in METRICS.items()},
            "zero-std groups": spread_percent(arm.zero_std_share),
            "calibration changed": spread_percent(arm.calibrated_share),
            "train s": "–" if arm.wall_s is None else f"{arm.wall_s.mean:.0f}",
        }
        for arm in summary.arms
    ]


def _settings_line(summary: AblationSummary) -> str:
    """The training settings every stage shared, and what a merge could not check."""
    if summary.overrides is None:
        line = "Training settings: not recorded."
    elif summary.overrides:
        settings = ", ".join(code_span(f"{k}={v}") for k, v in sorted(summary.overrides.items()))
        line = f"Training settings of every stage: {settings}."
    else:
        line = "Training settings: the preset's."
    if summary.merged_from:
        sources = ", ".join(map(code_span, summary.merged_from))
        count = len(summary.merged_from)
        line += f" Merged from {count} ablation{'s' * (count > 1)} (wall time summed): {sources}."
    if summary.unchecked:
        unchecked = ", ".join(map(code_span, summary.unchecked))
        line += f" Settings not recorded, so not compared, in {unchecked}."
    return line


def ablation_markdown(summary: AblationSummary, verdict: str, plot: Path) -> str:
    """ablation.md: the verdict, the table and the learning curves."""
    seeds = ", ".join(str(s) for s in summary.seeds)
    failed = "\n".join(f"- {markdown_text(line)}" for line in summary.failed)
    return "\n\n".join(
        part
        for part in [
            f"# Ablation: SFT vs GRPO vs NGRPO — preset {code_span(summary.preset)}",
            f"Seeds {seeds}; {summary.steps} GRPO steps, evaluated every {summary.eval_every} "
            f"steps on {summary.eval_rows} held-out rows; wall time {summary.wall_s:.0f}s. "
            "Values are the mean across seeds with the min–max range in brackets.",
            _settings_line(summary),
            "## Verdict",
            verdict,
            "## At the last step",
            markdown_table(results_table(summary)),
            f"![held-out accuracy per GRPO step]({plot.name})",
            f"## Runs that did not finish\n\n{failed}" if failed else "",
        ]
        if part
    )
