"""The mining report as markdown: counts, accuracy with and without flagged rows, pairs, queue."""

from __future__ import annotations

from toolgrpo.mining.categorise import Category
from toolgrpo.mining.miner import MiningReport
from toolgrpo.reporting.markdown import markdown_table, percent


def findings_markdown(report: MiningReport, top: int = 20) -> str:
    """The mining report as markdown: counts, accuracy with/without flagged rows, pairs, queue."""
    counts = [
        {"split": split, **{c.value: by_category.get(c.value, 0) for c in Category}}
        for split, by_category in sorted(report.counts.items())
    ]
    accuracy = report.accuracy
    pairs = [pair.model_dump() for pair in report.overlapping_pairs]
    queue = [
        {
            "id": f.id,
            "category": f.category.value,
            "label": f.label,
            "prediction": f.prediction or "(none)",
            "score": f"{f.score:.2f}",
            "evidence": f.evidence,
        }
        for f in report.findings[:top]
    ]
    return "\n\n".join(
        [
            "## Errors by category",
            markdown_table(counts),
            f"Eval accuracy {percent(accuracy.accuracy)} on {accuracy.n_rows} rows; "
            f"{percent(accuracy.accuracy_without_flagged)} without the {accuracy.n_flagged} rows "
            "flagged as label ambiguity or conflict.",
            "## Overlapping tool pairs (confident learning)",
            markdown_table(pairs),
            f"## Review queue (top {min(top, len(report.findings))} of {len(report.findings)})",
            markdown_table(queue),
        ]
    )
