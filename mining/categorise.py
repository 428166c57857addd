"""Error mining: every error (and every label issue) gets one category with its evidence.

Categories, in order of severity for annotators:
- `label conflict`: the same request (normalised as the data gate does) carries different labels,
  or near-identical requests (same template; for later steps, the same history) carry different
  labels and the wording favours neither;
- `label inconsistency`: the label contradicts its own context — its thought or plan, the
  scenario's other steps, the figures its condition depends on (`validation.label_rules`, the rules
  the data gate warns with). Decided first, and such a label is no evidence against its
  near-identical neighbours: one mislabelled row does not make the rows around it conflicts;
- `label ambiguity`: the request's wording supports another tool and not the label (per-tool
  keywords of the catalogue, en and zh), backed by near-identical requests labelled with that tool
  or by the model's confidence in it (the case study's "Withdraw 50 rupees from ACC002",
  labelled check_balance);
- `format error`: no parseable output of the format, or params the chosen tool rejects;
- `model error`: the label is sound and the model missed it.
Rows the model got right are listed only when they carry a label issue (the training audit).

Confident learning (cleanlab) ranks label issues and finds overlapping tool pairs from per-tool
probabilities, which must be out of sample to mean anything: a model that memorised a wrong label
agrees with it. Eval rows are; training rows are when they come from the cross-fitted audit
(`scored`). Benchmarks score this module against an answer key of seeded label errors; nothing
here reads it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from enum import StrEnum
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from toolgrpo.common.wording import request_names
from toolgrpo.mining.confident import label_quality
from toolgrpo.mining.evidence import request_template
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import first_json_object
from toolgrpo.schemas.predictions import probability_columns
from toolgrpo.schemas.samples import normalised_prompt, request_text
from toolgrpo.validation.label_rules import LabelInconsistency

# The model is "confident" in a tool it was not taught when it gives it at least this probability.
CONFIDENT = 0.9
NEIGHBOURS_SHOWN = 5


class Category(StrEnum):
    LABEL_CONFLICT = "label conflict"
    LABEL_INCONSISTENCY = "label inconsistency"
    LABEL_AMBIGUITY = "label ambiguity"
    FORMAT_ERROR = "format error"
    MODEL_ERROR = "model error"


SEVERITY = {category: rank for rank, category in enumerate(Category)}
LABEL_ISSUES = (Category.LABEL_CONFLICT, Category.LABEL_INCONSISTENCY, Category.LABEL_AMBIGUITY)


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
    context: list[LabelInconsistency],
    held_out: dict[str, Any] | None,
) -> str:
    """The evidence for a row's category as one sentence an annotator can check.

    `held_out`: the row's probabilities from a model that never saw it (cross-fitted audit).
    """
    label = row["label_tool"]
    parts = [f"{found.check}: {found.evidence}" for found in context]
    if held_out is not None:
        top = max(held_out, key=held_out.__getitem__)
        parts.append(
            f"model that never saw it: p({top})={held_out[top]:.2f}, p({label})="
            f"{held_out[label]:.2f}"
        )
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
    if row["parsed_ok"] is False:
        parts.append("output is not one JSON object of the format")
    elif row["params_valid"] is False:
        parts.append(f"params rejected by {row['predicted_tool']}'s schema")
    return "; ".join(parts)


def _format_broken(row: dict[str, Any]) -> bool:
    """The decoded answer breaks the format or its params; never for a row scored without
    decoding (null checks: not measured)."""
    return row["parsed_ok"] is False or row["params_valid"] is False


def _favours(hits: dict[str, list[str]], tool: str, other: str) -> bool:
    """The request's wording names `tool` and not `other`."""
    return tool in hits and other not in hits


def _categorise(
    row: dict[str, Any],
    hits: dict[str, list[str]],
    duplicates: list[tuple[str, str]],
    neighbours: list[tuple[str, str]],
    context: list[LabelInconsistency],
    catalogue: Catalogue,
) -> tuple[Category | None, str | None]:
    """The row's category (None for a right answer with a sound label) and the alternative tool.

    Wording is evidence only for single-step requests: a multi-step request names every step's
    tool by design, and its order and history (not its words) decide which one is next.
    """
    label, predicted = row["label_tool"], row["predicted_tool"]
    valid_prediction = predicted if predicted in catalogue.names else None
    if context:  # the row's own context decides before any other row's label
        pointed = [found.alternative for found in context if found.alternative not in (None, label)]
        return Category.LABEL_INCONSISTENCY, pointed[0] if pointed else None
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
    if _format_broken(row):
        return Category.FORMAT_ERROR, valid_prediction if valid_prediction != label else None
    if predicted != label:
        return Category.MODEL_ERROR, valid_prediction
    return None, None


def _proposed_solution(row: dict[str, Any]) -> str:
    """The model's own answer, when it is a valid call of another tool (a reviewer may adopt it)."""
    if not (row["parsed_ok"] and row["params_valid"]) or row["predicted_tool"] == row["label_tool"]:
        return ""
    return json.dumps(first_json_object(row["completion"]), ensure_ascii=False)


def _probabilities(frame: pl.DataFrame, catalogue: Catalogue) -> dict[str, dict[str, float]]:
    """Per row id, the per-tool probabilities of a predictions frame."""
    return {
        row[0]: dict(zip(catalogue.names, row[1:], strict=True))
        for row in frame.select("id", *probability_columns(catalogue)).iter_rows()
    }


def categorise(
    frames: dict[str, pl.DataFrame],
    catalogue: Catalogue | None = None,
    cleanlab_flagged: Collection[str] = (),
    inconsistencies: Iterable[LabelInconsistency] = (),
    scored: dict[str, pl.DataFrame] | None = None,
) -> list[Finding]:
    """Findings for every error and every label issue in the predictions frames, by severity.

    `frames` maps a split (`eval`, `train`) to its predictions frame. Near-identical requests
    are looked up across all of them, so an eval row's label is checked against the training
    data too. `cleanlab_flagged`: ids confident learning flags (see `ranked_label_issues`).
    `inconsistencies`: what the context checks found (`validation.context`), by row id.
    `scored`: per split, the predictions whose probabilities score label quality, when they are
    not the split's own: the cross-fitted audit's, out of sample, for the training rows.
    """
    catalogue = catalogue or default_catalogue()
    frames = {split: frame for split, frame in frames.items() if frame.height}
    if not frames:
        return []
    scored = {split: frame for split, frame in (scored or {}).items() if frame.height}
    rows = pl.concat(
        [
            frame.with_columns(normalised_prompt().alias("_same"), pl.lit(split).alias("_split"))
            for split, frame in frames.items()
        ],
        how="diagonal_relaxed",
    )
    by_text: dict[str, list[tuple[str, str]]] = defaultdict(list)
    by_template: dict[str, list[tuple[str, str]]] = defaultdict(list)
    templates = [request_template(p, catalogue) for p in rows["prompt"]]
    for row_id, same, template, label in zip(
        rows["id"], rows["_same"], templates, rows["label_tool"], strict=True
    ):
        by_text[same].append((row_id, label))
        by_template[template].append((row_id, label))
    context: dict[str, list[LabelInconsistency]] = defaultdict(list)
    for found in inconsistencies:
        context[found.id].append(found)

    # Label quality from out-of-sample probabilities where there are any: the eval rows' own
    # (never trained on), the training rows' from the cross-fitted audit.
    quality = {
        row_id: float(score)
        for frame in [*frames.values(), *scored.values()]
        for row_id, score in zip(frame["id"], label_quality(frame, catalogue), strict=True)
    }
    held_out = {
        row_id: probabilities
        for frame in scored.values()
        for row_id, probabilities in _probabilities(frame, catalogue).items()
    }
    findings = []
    for index, row in enumerate(rows.iter_rows(named=True)):
        hits = request_names(request_text(row["prompt"]), catalogue)
        # A label its context contradicts is no evidence about the labels of its neighbours.
        duplicates = [
            (i, t) for i, t in by_text[row["_same"]] if i != row["id"] and i not in context
        ]
        neighbours = [
            (i, t) for i, t in by_template[templates[index]] if i != row["id"] and i not in context
        ]
        row_context = context.get(row["id"], [])
        category, alternative = _categorise(
            row, hits, duplicates, neighbours, row_context, catalogue
        )
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
                evidence=_row_evidence(
                    row, alternative, hits, neighbours, row_context, held_out.get(row["id"])
                ),
                score=round(1.0 - quality[row["id"]], 6),
                cleanlab_issue=row["id"] in cleanlab_flagged,
                proposed_solution=_proposed_solution(row),
            )
        )
    return sorted(findings, key=lambda f: (SEVERITY[f.category], -f.score, f.id))
