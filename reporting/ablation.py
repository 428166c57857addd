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


def ablation_markdown(summary: AblationSummary, verdict: str, plot: Path) -> str:
    """ablation.md: the verdict, the table and the plot."""
    seeds = ", ".join(str(s) for s in summary.seeds)
    failed = "\n".join(f"- {markdown_text(line)}" for line in summary.failed)
    return "\n\n".join(
        part
        for part in [
            f"# Ablation: SFT vs GRPO vs NGRPO — preset {code_span(summary.preset)}",
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
