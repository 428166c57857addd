"""Annotator mistakes planted in labelled rows, for any catalogue, and the context checks scored
on them (no model: what the data gate warns with and the miner calls `label inconsistency`).

A kind takes a multi-step scenario (its rows in step order) and a seeded `random.Random`, and
returns the rows it changed, or None when the scenario does not lend itself. The kinds of one
domain that need its words (a reply in its language, a pair of tools with the same params) are
built from that domain's words (`relabel_pair`, `reply_instead`); `wrong_params` reads only the
catalogue's params schemas. `score_context_checks` runs the checks on planted rows and reports
recall per kind, precision over every flagged row and the rate of clean rows flagged.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.label_rules import LabelInconsistency
from toolgrpo.validation.loader import load_samples

Row = dict[str, Any]
Kind = Callable[[list[Row], random.Random], list[Row] | None]
WRONG_PARAMS = "wrong params (tool right)"


def solution_of(row: Row) -> dict[str, Any]:
    return json.loads(row["solution"])


def relabelled(row: Row, tool: str, solution: dict[str, Any], condition: str | None) -> Row:
    text = json.dumps(solution, ensure_ascii=False)
    return {**row, "tool": tool, "solution": text, "condition": condition}


def copy_row_above(scenario: list[Row], rng: random.Random) -> list[Row] | None:
    """Step k labelled with step k-1's answer: the row above pasted again."""
    k = rng.randrange(1, len(scenario))
    above = scenario[k - 1]
    return [relabelled(scenario[k], above["tool"], solution_of(above), None)]


def label_the_goal_first(scenario: list[Row], rng: random.Random) -> list[Row] | None:
    """Step 1 of a conditional scenario labelled with its goal (the last step's action): the
    check the request asks for first skipped, as the case study's model did."""
    first, last = scenario[0], scenario[-1]
    if last.get("condition") != "holds":
        return None
    return [relabelled(first, last["tool"], solution_of(last), None)]


def swap_adjacent_steps(scenario: list[Row], rng: random.Random) -> list[Row] | None:
    """Two adjacent steps' answers swapped (pasted one row off), in a scenario without a
    condition (a condition on step 1 would fail the gate)."""
    if any(row.get("condition") for row in scenario):
        return None
    k = rng.randrange(len(scenario) - 1)
    first, second = scenario[k], scenario[k + 1]
    return [
        relabelled(first, second["tool"], solution_of(second), None),
        relabelled(second, first["tool"], solution_of(first), None),
    ]


def relabel_pair(pairs: dict[str, str], catalogue: Catalogue) -> Kind:
    """A tool relabelled as its pair (deposit ↔ withdraw), thought and plan left as they were;
    only where the params fit both tools, so the row passes the gate."""

    def change_tool_keep_reasoning(scenario: list[Row], rng: random.Random) -> list[Row] | None:
        candidates = [
            row
            for row in scenario
            if row["tool"] in pairs
            and catalogue.params_valid(pairs[row["tool"]], solution_of(row)["action"]["params"])
        ]
        if not candidates:
            return None
        row = rng.choice(candidates)
        solution, tool = solution_of(row), pairs[row["tool"]]
        solution["action"]["tool"] = tool
        return [relabelled(row, tool, solution, row.get("condition"))]

    return change_tool_keep_reasoning


def reply_instead(replies: dict[str, tuple[str, str, str]], reply_tool: str = "respond") -> Kind:
    """A condition that holds labelled as failing (the figures misread): a reply, in the row's
    language (`replies`: per language, the thought, the message and the plan step)."""

    def misread_figures(scenario: list[Row], rng: random.Random) -> list[Row] | None:
        last = scenario[-1]
        if last.get("condition") != "holds" or last["lang"] not in replies:
            return None
        thought, message, step = replies[last["lang"]]
        action = {"tool": reply_tool, "params": {"message": message}}
        solution = {"thought": thought, "action": action, "plan": [step]}
        return [relabelled(last, reply_tool, solution, "fails")]

    return misread_figures


def _bounds_ok(schema: dict[str, Any], value: float) -> bool:
    if schema.get("type") == "integer" and value != int(value):
        return False
    checks = [
        ("minimum", lambda b: value >= b),
        ("maximum", lambda b: value <= b),
        ("exclusiveMinimum", lambda b: value > b),
        ("exclusiveMaximum", lambda b: value < b),
    ]
    return all(key not in schema or ok(schema[key]) for key, ok in checks)


def _mistaken_params(
    params: dict[str, Any], schema: dict[str, Any], rng: random.Random
) -> list[dict[str, Any]]:
    """The ways an annotator gets `params` wrong that the params schema still accepts: a from
    and a to swapped, another enum member, a number ×10 (or ÷10, or a few off)."""
    properties = schema.get("properties", {})
    mistakes = []
    ends = [n for n in params if n.startswith("from_")]
    for source in ends:
        target = "to_" + source.removeprefix("from_")
        if target in params and params[source] != params[target]:
            mistakes.append(params | {source: params[target], target: params[source]})
    for name, value in params.items():
        spec = properties.get(name, {})
        if isinstance(value, str) and isinstance(spec.get("enum"), list):
            others = [m for m in spec["enum"] if m != value]
            if others:
                mistakes.append(params | {name: rng.choice(others)})
        elif isinstance(value, int | float) and not isinstance(value, bool):
            tries = [value * 10, value / 10, value + 3, value - 3, value + 1]
            wrong = next((t for t in tries if t != value and _bounds_ok(spec, t)), None)
            if wrong is not None:
                wrong = int(wrong) if wrong == int(wrong) else wrong
                mistakes.append(params | {name: wrong})
    return mistakes


def wrong_params(catalogue: Catalogue) -> Kind:
    """The right tool with params an annotator got wrong (`_mistaken_params`), read from the
    catalogue's params schemas alone; the row still passes the gate."""

    def plant(scenario: list[Row], rng: random.Random) -> list[Row] | None:
        rows = [row for row in scenario if row["tool"] in catalogue.names]
        rng.shuffle(rows)
        for row in rows:
            solution = solution_of(row)
            params = solution["action"].get("params")
            if not isinstance(params, dict):
                continue
            schema = catalogue.tool(row["tool"]).params
            mistakes = [
                m
                for m in _mistaken_params(params, schema, rng)
                if catalogue.params_valid(row["tool"], m)
            ]
            if mistakes:
                solution["action"]["params"] = rng.choice(mistakes)
                return [relabelled(row, row["tool"], solution, row.get("condition"))]
        return None

    return plant


def plant_mistakes(
    rows: list[Row],
    kinds: dict[str, Kind],
    per_kind: int,
    seed: int = 0,
    leave_alone: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[Row], dict[str, str]]:
    """`rows` with `per_kind` rows of every kind replaced, and the answer key (id → kind). Each
    kind takes whole multi-step scenarios of its own, its rows spread evenly over the rows'
    languages; scenarios holding a row of `leave_alone` are left alone."""
    rng = random.Random(seed)
    scenarios: dict[str, list[Row]] = {}
    for row in rows:
        if row["kind"] == "multi":
            scenarios.setdefault(row["scenario_id"], []).append(row)
    languages = sorted({row["lang"] for row in rows})
    order = sorted(scenarios)
    rng.shuffle(order)
    used = {s for s in order if any(r["id"] in leave_alone for r in scenarios[s])}
    replaced: dict[str, Row] = {}
    key: dict[str, str] = {}
    for kind, plant in kinds.items():
        planted_rows = 0
        for scenario_id in order:
            scenario = sorted(scenarios[scenario_id], key=lambda row: row["step"])
            lang = languages[min(planted_rows * len(languages) // per_kind, len(languages) - 1)]
            if scenario_id in used or scenario[0]["lang"] != lang:
                continue
            changed = plant(scenario, rng)
            if changed is None:
                continue
            used.add(scenario_id)
            for row in changed:
                replaced[row["id"]], key[row["id"]] = row, kind
            planted_rows += len(changed)
            if planted_rows >= per_kind:
                break
    return [replaced.get(row["id"], row) for row in rows], key


def context_findings(rows: list[Row], catalogue: Catalogue) -> list[LabelInconsistency]:
    """What the context checks find in `rows`, read as the gate reads a file of them."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        lines = [{k: v for k, v in row.items() if v is not None} for row in rows]
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
        return label_inconsistencies(load_samples([path]).frame, catalogue)


def score_context_checks(
    clean: list[Row], planted: list[Row], key: dict[str, str], catalogue: Catalogue
) -> dict[str, Any]:
    """Recall per kind, precision over the flagged planted rows, and the clean rows flagged."""
    on_clean = {found.id for found in context_findings(clean, catalogue)}
    findings = context_findings(planted, catalogue)
    flagged = {found.id for found in findings}
    kinds: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(key.values()):
        ids = {i for i, k in key.items() if k == kind}
        found = ids & flagged
        kinds[kind] = {"planted": len(ids), "flagged": len(found), "recall": len(found) / len(ids)}
    true = flagged & set(key)
    return {
        "kinds": kinds,
        "flagged": len(flagged),
        "precision": len(true) / len(flagged) if flagged else None,
        "false_alarms": sorted({(f.id, f.check, f.evidence) for f in findings if f.id not in key}),
        "clean_rows": len(clean),
        "clean_flagged": len(on_clean),
        "clean_rate": len(on_clean) / len(clean),
        "missed": sorted(set(key) - flagged),
    }
