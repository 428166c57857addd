"""Error mining: every error (and every label issue) gets one category with its evidence.

Categories, in order of severity for annotators:
- `label conflict`: the same request (normalised as the data gate does) carries different labels,
  or near-identical requests (same template; for later steps, the same history) carry different
  labels and the wording favours neither;
- `label ambiguity`: the request's wording supports another tool and not the label (per-tool
  keywords of the catalogue, en and zh), backed by near-identical requests labelled with that tool
  or by the model's confidence in it (the case study's "Withdraw 50 rupees from ACC002",
  labelled check_balance);
- `format error`: no parseable output of the format, or params the chosen tool rejects;
- `model error`: the label is sound and the model missed it.
Rows the model got right are listed only when they carry a label issue (the training audit).

Confident learning (cleanlab) ranks label issues and finds overlapping tool pairs from the
per-tool probabilities of the predictions frame. Benchmarks score this module against an
answer key of seeded label errors; nothing here reads it.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from cleanlab.dataset import find_overlapping_classes
from cleanlab.filter import find_label_issues
from cleanlab.rank import get_label_quality_scores
from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field

from toolgrpo.schemas.catalogue import Catalogue, load_catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.schemas.predictions import probability_columns
from toolgrpo.schemas.samples import PREVIOUS_STEPS_HEADER, normalised_prompt
from toolgrpo.tasks.load import LabelOverride

# The model is "confident" in a tool it was not taught when it gives it at least this probability.
CONFIDENT = 0.9
# An English keyword of several words also matches with up to this many words between them
# (separable phrasal verbs: "take 100 rupees out", "put 9,000 in").
PHRASAL_GAP_WORDS = 3
NEIGHBOURS_SHOWN = 5


class Category(StrEnum):
    LABEL_CONFLICT = "label conflict"
    LABEL_AMBIGUITY = "label ambiguity"
    FORMAT_ERROR = "format error"
    MODEL_ERROR = "model error"


SEVERITY = {category: rank for rank, category in enumerate(Category)}
LABEL_ISSUES = (Category.LABEL_CONFLICT, Category.LABEL_AMBIGUITY)


# --- evidence: wording, near-identical requests --------------------------------------------


def request_text(prompt: str) -> str:
    """The user's request: the prompt without its `Previous steps:` history."""
    return prompt.split(PREVIOUS_STEPS_HEADER, 1)[0]


def _keyword_pattern(keyword: str) -> str:
    if not keyword.isascii():  # Chinese: anywhere
        return re.escape(keyword)
    gap = rf"(?:\W+\w+){{0,{PHRASAL_GAP_WORDS}}}?\W+"
    # English at a word start, any ending ("withdraw" finds "withdrawal"), as the reward does.
    return r"\b" + gap.join(re.escape(part) for part in keyword.split())


def keyword_patterns(catalogue: Catalogue) -> dict[str, re.Pattern[str]]:
    """Per tool, one pattern matching any of its catalogue keywords (en and zh)."""
    patterns = {}
    for tool in catalogue.tools:
        words = [
            word
            for words in (tool.keywords.en, tool.keywords.zh)
            for word in ([words] if isinstance(words, str) else words)
        ]
        alternatives = "|".join(f"(?:{_keyword_pattern(w)})" for w in words)
        patterns[tool.name] = re.compile(alternatives, re.IGNORECASE)
    return patterns


def keyword_hits(request: str, patterns: dict[str, re.Pattern[str]]) -> dict[str, list[str]]:
    """Per tool, the words of `request` matching its keywords (`keyword_patterns`); tools with
    no match are left out."""
    hits = {}
    for name, pattern in patterns.items():
        found = [match.group(0) for match in pattern.finditer(request)]
        if found:
            hits[name] = found
    return hits


_ACCOUNT = re.compile(r"ACC\d{3}")
# Stock symbols and named accounts (AAPL, CHECKING) are upper-case slot values, not wording.
_IDENTIFIER = re.compile(r"(?<![A-Za-z])[A-Z]+(?![A-Za-z])")
# An amount is one slot whatever its form: 100,000 / 100k / 10万 / 5000元 / 50 rupees / $50.
_AMOUNT = re.compile(
    r"[$¥₹]?\d[\d,]*(?:\.\d+)?(?:\s*(?:万|千|百|k\b|元|块|rupees?\b|yuan\b|dollars?\b|rmb\b))?",
    re.IGNORECASE,
)


def mask_identifiers(text: str) -> str:
    """`text` with accounts and upper-case identifiers replaced by placeholders."""
    return _IDENTIFIER.sub("<id>", _ACCOUNT.sub("<acc>", text))


def request_template(prompt: str) -> str:
    """The prompt with slot values masked: rows with equal templates are near-identical.

    Identifiers are masked everywhere; amounts only in a request without executed steps,
    because after a `check_balance` step the request's amount is compared with the observed
    balance, and that comparison decides the label.
    """
    request, header, history = prompt.partition(PREVIOUS_STEPS_HEADER)
    request = mask_identifiers(request)
    if not header:
        request = _AMOUNT.sub("<n>", request)
    return re.sub(r"\s+", " ", request).strip().lower() + header + history


# --- categorisation ------------------------------------------------------------------------


class Finding(BaseModel):
    """One row of the review queue."""

    model_config = ConfigDict(frozen=True)
    id: str
    split: str = Field(description="eval, or train for the data audit")
    source: str
    prompt: str
    label: str
    prediction: str | None
    category: Category
    alternative: str | None = Field(description="the tool the evidence points at instead")
    evidence: str
    score: float = Field(description="1 - cleanlab label quality (self-confidence): higher worse")
    cleanlab_issue: bool
    proposed_solution: str = Field("", description="the model's answer when valid, for review")


def _row_evidence(
    row: dict[str, Any],
    alternative: str | None,
    hits: dict[str, list[str]],
    neighbour_labels: list[tuple[str, str]],
) -> str:
    """The evidence for a row's category as one sentence an annotator can check."""
    label, parts = row["label_tool"], []
    if alternative is not None:
        for tool in (alternative, label):
            words = ", ".join(f"'{w}'" for w in hits.get(tool, [])) or "none"
            parts.append(f"words for {tool}: {words}")
        probability = row["p_" + alternative]
        parts.append(
            f"model p({alternative})={probability:.2f}, p({label})={row['p_' + label]:.2f}"
        )
    others = [(i, t) for i, t in neighbour_labels if t != label]
    if others:
        shown = ", ".join(f"{i} ({t})" for i, t in others[:NEIGHBOURS_SHOWN])
        more = f" +{len(others) - NEIGHBOURS_SHOWN} more" if len(others) > NEIGHBOURS_SHOWN else ""
        parts.append(f"near-identical requests labelled otherwise: {shown}{more}")
    if not row["parsed_ok"]:
        parts.append("output is not one JSON object of the format")
    elif not row["params_valid"]:
        parts.append(f"params rejected by {row['predicted_tool']}'s schema")
    return "; ".join(parts)


def _favours(hits: dict[str, list[str]], tool: str, other: str) -> bool:
    """The request's wording names `tool` and not `other`."""
    return tool in hits and other not in hits


def _categorise(
    row: dict[str, Any],
    hits: dict[str, list[str]],
    duplicates: list[tuple[str, str]],
    neighbours: list[tuple[str, str]],
    catalogue: Catalogue,
) -> tuple[Category | None, str | None]:
    """The row's category (None for a right answer with a sound label) and the alternative tool.

    Wording is evidence only for single-step requests: a multi-step request names every step's
    tool by design, and its order and history (not its words) decide which one is next.
    """
    label, predicted = row["label_tool"], row["predicted_tool"]
    valid_prediction = predicted if predicted in catalogue.names else None
    conflicting = [t for _, t in duplicates if t != label]
    if conflicting:
        return Category.LABEL_CONFLICT, Counter(conflicting).most_common(1)[0][0]
    neighbour_tools = Counter(t for _, t in neighbours if t != label)
    # Near-identical requests that all carry this label are the data's consistent policy for
    # this wording: then the model's confidence alone does not make the label ambiguous.
    label_is_policy = bool(neighbours) and not neighbour_tools
    if row["kind"] == "single":
        candidates = [valid_prediction] if valid_prediction not in (None, label) else []
        candidates += [t for t in neighbour_tools if t not in candidates]
        for alternative in candidates:
            confident = (
                alternative == valid_prediction
                and row["p_" + alternative] >= CONFIDENT
                and not label_is_policy
            )
            if _favours(hits, alternative, label) and (confident or alternative in neighbour_tools):
                return Category.LABEL_AMBIGUITY, alternative
    for alternative, _ in neighbour_tools.most_common():
        if row["kind"] != "single" or not _favours(hits, label, alternative):
            return Category.LABEL_CONFLICT, alternative
    if not (row["parsed_ok"] and row["params_valid"]):
        return Category.FORMAT_ERROR, valid_prediction if valid_prediction != label else None
    if predicted != label:
        return Category.MODEL_ERROR, valid_prediction
    return None, None


def _proposed_solution(row: dict[str, Any]) -> str:
    """The model's own answer, when it is a valid call of another tool (a reviewer may adopt it)."""
    if not (row["parsed_ok"] and row["params_valid"]) or row["predicted_tool"] == row["label_tool"]:
        return ""
    return json.dumps(first_json_object(row["completion"]), ensure_ascii=False)


def categorise(
    frames: dict[str, pl.DataFrame],
    catalogue: Catalogue | None = None,
    cleanlab_flagged: Collection[str] = (),
) -> list[Finding]:
    """Findings for every error and every label issue in the predictions frames, by severity.

    `frames` maps a split (`eval`, `train`) to its predictions frame. Near-identical requests
    are looked up across all of them, so an eval row's label is checked against the training
    data too. `cleanlab_flagged`: ids confident learning flags (see `ranked_label_issues`).
    """
    catalogue = catalogue or load_catalogue()
    frames = {split: frame for split, frame in frames.items() if frame.height}
    if not frames:
        return []
    rows = pl.concat(
        [
            frame.with_columns(normalised_prompt().alias("_same"), pl.lit(split).alias("_split"))
            for split, frame in frames.items()
        ],
        how="diagonal_relaxed",
    )
    by_text: dict[str, list[tuple[str, str]]] = defaultdict(list)
    by_template: dict[str, list[tuple[str, str]]] = defaultdict(list)
    templates = [request_template(p) for p in rows["prompt"]]
    for row_id, same, template, label in zip(
        rows["id"], rows["_same"], templates, rows["label_tool"], strict=True
    ):
        by_text[same].append((row_id, label))
        by_template[template].append((row_id, label))

    # Label quality per split: the training rows were learned, the eval rows were not.
    quality = np.concatenate([_label_quality(frame, catalogue) for frame in frames.values()])
    patterns = keyword_patterns(catalogue)
    findings = []
    for index, row in enumerate(rows.iter_rows(named=True)):
        hits = keyword_hits(mask_identifiers(request_text(row["prompt"])), patterns)
        duplicates = [(i, t) for i, t in by_text[row["_same"]] if i != row["id"]]
        neighbours = [(i, t) for i, t in by_template[templates[index]] if i != row["id"]]
        category, alternative = _categorise(row, hits, duplicates, neighbours, catalogue)
        if category is None:
            continue
        findings.append(
            Finding(
                id=row["id"],
                split=row["_split"],
                source=row["source"],
                prompt=row["prompt"],
                label=row["label_tool"],
                prediction=row["predicted_tool"],
                category=category,
                alternative=alternative,
                evidence=_row_evidence(row, alternative, hits, neighbours),
                score=round(float(1.0 - quality[index]), 6),
                cleanlab_issue=row["id"] in cleanlab_flagged,
                proposed_solution=_proposed_solution(row),
            )
        )
    return sorted(findings, key=lambda f: (SEVERITY[f.category], -f.score, f.id))


# --- confident learning --------------------------------------------------------------------


def _labels_and_probabilities(
    frame: pl.DataFrame, catalogue: Catalogue
) -> tuple[np.ndarray, np.ndarray]:
    labels = np.array([catalogue.names.index(t) for t in frame["label_tool"]], dtype=int)
    return labels, frame.select(probability_columns(catalogue)).to_numpy()


def ranked_label_issues(frame: pl.DataFrame, catalogue: Catalogue) -> list[str]:
    """Ids cleanlab's `find_label_issues` flags, most likely mislabelled first."""
    labels, probabilities = _labels_and_probabilities(frame, catalogue)
    if len(set(labels.tolist())) < 2:  # cleanlab needs two classes to estimate noise
        return []
    with warnings.catch_warnings():  # every small eval slice has "too few examples" of a tool
        warnings.filterwarnings("ignore", message="May not flag all label issues")
        order = find_label_issues(
            labels, probabilities, return_indices_ranked_by="self_confidence", n_jobs=1
        )
    return [frame["id"][int(i)] for i in order]


class OverlappingPair(BaseModel):
    """Two tools the model's probabilities confuse (cleanlab `find_overlapping_classes`)."""

    tool_a: str
    tool_b: str
    n_overlapping: int
    joint_probability: float


def overlapping_tool_pairs(
    frame: pl.DataFrame, catalogue: Catalogue, top: int = 10
) -> list[OverlappingPair]:
    """The tool pairs with overlapping examples, most overlapping first."""
    labels, probabilities = _labels_and_probabilities(frame, catalogue)
    if len(set(labels.tolist())) < 2:
        return []
    table = find_overlapping_classes(labels, probabilities, class_names=catalogue.names)
    pairs = [
        OverlappingPair(
            tool_a=row["Class Name A"],
            tool_b=row["Class Name B"],
            n_overlapping=int(row["Num Overlapping Examples"]),
            joint_probability=round(float(row["Joint Probability"]), 6),
        )
        for row in table.to_dict("records")
        if row["Num Overlapping Examples"] > 0
    ]
    return pairs[:top]


def _label_quality(frame: pl.DataFrame, catalogue: Catalogue) -> np.ndarray:
    """Per row: cleanlab's label quality score (self-confidence), low for a doubtful label."""
    return get_label_quality_scores(*_labels_and_probabilities(frame, catalogue))


# --- the mining report ---------------------------------------------------------------------


class FlaggedAccuracy(BaseModel):
    """Eval accuracy with and without the rows flagged as label ambiguity or conflict."""

    n_rows: int
    accuracy: float | None
    n_flagged: int
    accuracy_without_flagged: float | None


class MiningReport(BaseModel):
    """What mining found; written as findings.json, the queue as review_queue.csv/.jsonl."""

    counts: dict[str, dict[str, int]] = Field(description="split → category → rows")
    accuracy: FlaggedAccuracy
    overlapping_pairs: list[OverlappingPair]
    label_issues: dict[str, list[str]] = Field(description="split → ids cleanlab flags, ranked")
    ambiguity_ids: list[str]
    conflict_ids: list[str]
    findings: list[Finding]


def _flagged_accuracy(predictions: pl.DataFrame, flagged: set[str]) -> FlaggedAccuracy:
    correct = (pl.col("predicted_tool") == pl.col("label_tool")).fill_null(False)
    kept = predictions.filter(~pl.col("id").is_in(sorted(flagged)))

    def rate(frame: pl.DataFrame) -> float | None:
        return float(frame.select(correct.mean()).item()) if frame.height else None

    return FlaggedAccuracy(
        n_rows=predictions.height,
        accuracy=rate(predictions),
        n_flagged=predictions.height - kept.height,
        accuracy_without_flagged=rate(kept),
    )


def mine_errors(
    predictions: pl.DataFrame,
    audit: pl.DataFrame | None = None,
    catalogue: Catalogue | None = None,
) -> MiningReport:
    """Categorise eval errors and label issues; `audit` is the predictions frame of the
    training rows (the data audit), mined with the eval rows and used as their neighbours."""
    catalogue = catalogue or load_catalogue()
    frames = {"eval": predictions} | ({"train": audit} if audit is not None else {})
    label_issues = {split: ranked_label_issues(f, catalogue) for split, f in frames.items()}
    findings = categorise(frames, catalogue, {i for ids in label_issues.values() for i in ids})
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for (split, category), n in Counter((f.split, f.category) for f in findings).items():
        counts[split][category.value] = n
    flagged = {f.id for f in findings if f.category in LABEL_ISSUES and f.split == "eval"}
    return MiningReport(
        counts=dict(counts),
        accuracy=_flagged_accuracy(predictions, flagged),
        overlapping_pairs=overlapping_tool_pairs(
            pl.concat(frames.values(), how="diagonal_relaxed"), catalogue
        ),
        label_issues=label_issues,
        ambiguity_ids=[f.id for f in findings if f.category == Category.LABEL_AMBIGUITY],
        conflict_ids=[f.id for f in findings if f.category == Category.LABEL_CONFLICT],
        findings=findings,
    )


QUEUE_COLUMNS = [
    "id",
    "split",
    "source",
    "prompt",
    "label",
    "prediction",
    "category",
    "alternative",
    "evidence",
    "score",
    "cleanlab_issue",
    "proposed_solution",
]
# Filled in by annotators; `overrides_from_review` turns them into label overrides.
REVIEW_COLUMNS = ["decision", "reviewer", "reason"]


def review_queue(report: MiningReport) -> pl.DataFrame:
    """The findings as a table for annotators, most severe first, with empty review columns."""
    rows = [finding.model_dump(mode="json") for finding in report.findings]
    schema = {c: pl.String for c in QUEUE_COLUMNS} | {
        "score": pl.Float64,
        "cleanlab_issue": pl.Boolean,
    }
    queue = pl.DataFrame(rows, schema=schema)
    return queue.with_columns(pl.lit("").alias(column) for column in REVIEW_COLUMNS)


def findings_markdown(report: MiningReport, top: int = 20) -> str:
    """The mining report as markdown: counts, accuracy with/without flagged rows, pairs, queue."""
    from toolgrpo.tasks.evaluate import markdown_table

    def percent(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.1f}%"

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
            "evidence": f.evidence.replace("|", "/"),
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


def write_mining(report: MiningReport, out_dir: Path) -> dict[str, Path]:
    """review_queue.csv / .jsonl, findings.json and findings.md in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "queue_csv": out_dir / "review_queue.csv",
        "queue_jsonl": out_dir / "review_queue.jsonl",
        "findings_json": out_dir / "findings.json",
        "findings_md": out_dir / "findings.md",
    }
    queue = review_queue(report)
    queue.write_csv(paths["queue_csv"])
    queue.write_ndjson(paths["queue_jsonl"])
    paths["findings_json"].write_text(report.model_dump_json(indent=2), encoding="utf-8")
    paths["findings_md"].write_text(findings_markdown(report) + "\n", encoding="utf-8")
    return paths


@task(name="mine errors", cache_policy=NO_CACHE)
def mine(predictions: pl.DataFrame, audit: pl.DataFrame | None, out_dir: Path) -> MiningReport:
    """Mine eval predictions (and the training audit) and write the review queue to `out_dir`."""
    report = mine_errors(predictions, audit)
    write_mining(report, out_dir)
    return report


# --- reviewed decisions → label overrides --------------------------------------------------


class ReviewError(ValueError):
    """A reviewed queue that cannot become overrides; the message names file, line and field."""


KEEP = "keep"


def overrides_from_review(path: Path, catalogue: Catalogue | None = None) -> list[LabelOverride]:
    """Overrides (`tasks.load.LabelOverride`) from a review queue CSV annotators filled in.

    `decision` is `keep` (the label stands) or the right tool, `reviewer` says who decided.
    A relabel carries `proposed_solution` (the model's answer, editable) when it calls the
    decided tool; otherwise the loader keeps the row's params if they fit the new tool.
    Rows without a decision are not reviewed yet and are skipped.
    """
    catalogue = catalogue or load_catalogue()
    with Path(path).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        needed = {"id", "label", "proposed_solution", *REVIEW_COLUMNS}
        missing = needed - set(reader.fieldnames or [])
        if missing:
            raise ReviewError(f"{path}: review columns missing: {sorted(missing)}")
        return [
            _override(row, f"{path}:{line}", catalogue)
            for line, row in enumerate(reader, start=2)
            if (row["decision"] or "").strip()
        ]


def _override(row: dict[str, str], where: str, catalogue: Catalogue) -> LabelOverride:
    decision, reviewer = row["decision"].strip(), (row["reviewer"] or "").strip()
    if not reviewer:
        raise ReviewError(f"{where}: id {row['id']}: a decision needs a reviewer")
    if decision in (KEEP, row["label"]):
        tool, solution = row["label"], None
    elif decision not in catalogue.names:
        raise ReviewError(f"{where}: id {row['id']}: decision {decision!r} is not a tool or 'keep'")
    else:
        tool, solution = decision, (row["proposed_solution"] or "").strip() or None
        parsed = first_json_object(solution)
        action = parsed.get("action") if parsed else None
        if not isinstance(action, dict) or action.get("tool") != decision:
            solution = None  # an answer for another tool: not the reviewer's decision
        elif (error := catalogue.params_error(decision, action.get("params"))) is not None:
            raise ReviewError(f"{where}: id {row['id']}: proposed_solution params: {error}")
    return LabelOverride(
        id=row["id"],
        tool=tool,
        solution=solution,
        reason=(row["reason"] or "").strip(),
        reviewer=reviewer,
    )


def write_label_overrides(overrides: Iterable[LabelOverride], path: Path) -> Path:
    """Merge `overrides` into the JSONL file at `path`: one line per id, the latest one wins."""
    merged: dict[str, LabelOverride] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                existing = LabelOverride.model_validate_json(line)
                merged[existing.id] = existing
    for override in overrides:
        merged[override.id] = override
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [o.model_dump_json(exclude_none=True) for o in merged.values()]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
