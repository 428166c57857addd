"""The run's headline: what a person opening the flow run should read first — accuracy before and
after GRPO per evaluation file with `n`, the preset's goals met or not, the zero-std line, and
where the full report is."""

from __future__ import annotations

from toolgrpo.reporting.expectations import goal_lines, preset_note
from toolgrpo.reporting.markdown import code_span, markdown_table, markdown_text, percent
from toolgrpo.schemas.run import Headline, RunSummary


def _change(before: float | None, after: float | None) -> str:
    """The change in percentage points: `+2.2 pts`, or `–` without both numbers."""
    if before is None or after is None:
        return "–"
    return f"{100 * (after - before):+.1f} pts"


def file_rows(accuracy: dict[str, Headline]) -> list[dict[str, str]]:
    """One row per evaluation file, then `overall`: n, each stage's accuracy, the change from the
    first stage to the last."""
    stages = list(accuracy)
    last = accuracy[stages[-1]]
    names = [*last.by_source, "overall"]
    rows = []
    for name in names:
        values = [accuracy[stage].rows().get(name) for stage in stages]
        rows.append(
            {
                "rows": name,
                "n": str(last.n.get(name, "–")),
                **{stage: percent(value) for stage, value in zip(stages, values, strict=True)},
                "change": _change(values[0], values[-1]),
            }
        )
    return rows


def training_verdict(summary: RunSummary) -> str:
    """`trained`, `resumed` (a stage went on from an interrupted run's checkpoint) or `cached
    models reused`."""
    if not summary.retrained:
        return "cached models reused"
    resumed = any(stage.resumed_from_step for stage in summary.training.values())
    return "resumed an interrupted training" if resumed else "trained on this run's data"


def training_lines(summary: RunSummary) -> str:
    """One line per training stage: what it did in this run."""
    return "\n".join(
        f"- {markdown_text(name)}: {stage.line()}" for name, stage in summary.training.items()
    )


def preset_with_overrides(summary: RunSummary) -> str:
    """`cpu`, or `cpu` with `grpo.max_steps=5`, `seed=3`: what this run was configured as."""
    preset = code_span(summary.preset)
    if not summary.overrides:
        return preset
    fields = ", ".join(code_span(f"{name}={value}") for name, value in summary.overrides.items())
    return f"{preset} with {fields}"


def _linked(text: str, link: str | None) -> str:
    return f"[{text}]({link})" if link else text


def headline_markdown(summary: RunSummary, report_link: str | None) -> str:
    """The headline artifact: the per-file table, goals, zero-std line, and a link to the full
    report (`report_link`, a URL the UI opens; None when that artifact was not sent)."""
    after = summary.accuracy[list(summary.accuracy)[-1]]
    goals = goal_lines(summary.preset, after, sum(summary.wall_s.values()))
    met = sum(line.startswith("✅") for line in goals)
    verdict = f"{met} of {len(goals)} goals met, " if goals else ""
    parts = [f"## Retrain {preset_with_overrides(summary)}: {verdict}{training_verdict(summary)}"]
    note = preset_note(summary.preset)
    if note:
        parts.append(f"> {note}")
    if summary.retrained and summary.training:
        parts.append(training_lines(summary))
    parts.append(markdown_table(file_rows(summary.accuracy)))
    if goals:
        parts.append(f"Goals of the `{summary.preset}` preset, after GRPO:")
        parts.append("\n".join(f"- {line}" for line in goals))
    parts += [
        f"`{summary.zero_std.line()}`; the NGRPO calibration changed {summary.zero_std.changed} "
        "of those groups.",
        f"**{_linked('Full report: plots, slices, confusion matrix, review queue', report_link)}**"
        "  \n"
        f"report.html: {markdown_text(summary.run_dir / 'report.html')}",
    ]
    return "\n\n".join(parts)
