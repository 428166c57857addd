"""Reviewed decisions → label overrides: what annotators decided in the review queue, checked the
way the next data gate checks them, so that a decision the next run would reject is refused now.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from toolgrpo.mining.miner import REVIEW_COLUMNS
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue
from toolgrpo.schemas.completion import first_json_object, written_action
from toolgrpo.schemas.files import cell_text
from toolgrpo.schemas.inputs import check_input
from toolgrpo.schemas.label_overrides import LabelOverride
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.validation.gate import schema_failures
from toolgrpo.validation.loader import apply_overrides

KEEP = "keep"
NEEDED_COLUMNS = ["id", "label", "proposed_solution", *REVIEW_COLUMNS]
# The review's checks, as problem lines name them (the row contract's checks keep their names).
REVIEW_UTF8 = "review_utf8"
REVIEW_CSV = "review_csv"
REVIEW_COLUMNS_PRESENT = "review_columns_present"
REVIEW_ROW_COMPLETE = "review_row_complete"
DECISION_HAS_REVIEWER = "decision_has_reviewer"
DECISION_KNOWN = "decision_known"
PROPOSED_SOLUTION_VALID = "proposed_solution_valid"
DECISION_UNIQUE = "decision_unique"
DECISION_ROW_KNOWN = "decision_row_known"


class ReviewError(ValueError):
    """Decisions that cannot become overrides; `problems` locates each (file:line, check)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems

    def __reduce__(self):  # Prefect pickles exceptions into states
        return type(self), (self.problems,)


@dataclass(frozen=True)
class Decision:
    """A decided row of the review: the CSV line it starts on and the override it makes."""

    line: int
    override: LabelOverride


def _utf8_problem(path: Path) -> Problem | None:
    """The first line of `path` that is not UTF-8, as a problem; read line by line, so a review
    of a million rows is never held whole."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                message = (
                    f"not UTF-8 (byte {raw[error.start]:#04x}); re-save the file as UTF-8 "
                    '(Excel: "CSV UTF-8") and run again'
                )
                return Problem(file=str(path), line=number, check=REVIEW_UTF8, message=message)
    return None


def _decided_rows(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict[str, str]]]:
    """(first line, cells) of each row of the review CSV that carries a decision, cells as they
    were before `write_csv_file` made them spreadsheet-safe; the problems of the file itself go
    to `problems`. Streamed: memory follows the decisions, not the queue's length. Raises
    `UnreadableInput` (an OSError) for a path that is not a regular, uncompressed file."""
    check_input(path)
    if (problem := _utf8_problem(path)) is not None:
        problems.append(problem)
        return
    file = str(path)
    # with or without the byte-order mark Excel writes
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [column for column in NEEDED_COLUMNS if column not in header]
        if missing:
            message = f"header lacks the review column(s) {', '.join(missing)}"
            problems.append(
                Problem(file=file, line=1, check=REVIEW_COLUMNS_PRESENT, message=message)
            )
            return
        start = reader.line_num + 1
        try:
            for cells in reader:
                line, start = start, reader.line_num + 1
                if None in cells or None in cells.values():  # a short or long row (DictReader)
                    given = (
                        len(header) + len(cells.get(None, [])) - list(cells.values()).count(None)
                    )
                    message = f"{given} cell(s) where the header has {len(header)}"
                    problems.append(
                        Problem(file=file, line=line, check=REVIEW_ROW_COMPLETE, message=message)
                    )
                elif cell_text(cells["decision"]).strip():  # else not reviewed yet
                    yield line, {name: cell_text(cell).strip() for name, cell in cells.items()}
        except csv.Error as error:
            message = f"not readable as CSV: {error}"
            problems.append(Problem(file=file, line=start, check=REVIEW_CSV, message=message))


def _override(cells: dict[str, str], catalogue: Catalogue) -> LabelOverride | tuple[str, str]:
    """The override a decided row makes, or (check, why it cannot make one).

    `decision` is `keep` (the label stands) or the right tool. A relabel carries
    `proposed_solution` (the model's answer, editable) when it calls the decided tool;
    otherwise the loader keeps the row's params, if they fit the new tool.
    """
    decision, label = cells["decision"], cells["label"]
    if not cells["reviewer"]:
        return DECISION_HAS_REVIEWER, "a decision needs a reviewer"
    tool = label if decision in (KEEP, label) else decision
    if tool not in catalogue.names:
        named = f"label {shown(repr(label))}" if tool == label else f"decision {shown(repr(tool))}"
        return DECISION_KNOWN, f"{named} is not a tool of data/tools.json (or {KEEP!r})"
    solution = (cells["proposed_solution"] or None) if tool != label else None
    parsed = first_json_object(solution) if solution else None
    proposed = written_action(parsed)
    if proposed.tool != tool:
        solution = None  # an answer for another tool: not the reviewer's decision
    elif (error := catalogue.params_error(tool, proposed.params)) is not None:
        return PROPOSED_SOLUTION_VALID, f"proposed_solution params: {error}"
    return LabelOverride(
        id=cells["id"],
        tool=tool,
        solution=solution,
        reason=cells["reason"],
        reviewer=cells["reviewer"],
    )


def _decisions(path: Path, catalogue: Catalogue) -> tuple[list[Decision], list[Problem]]:
    """Each decided row of the review as a `Decision`, and why the others cannot be one."""
    problems: list[Problem] = []
    decisions: dict[str, Decision] = {}
    for line, cells in _decided_rows(path, problems):
        row_id = shown(cells["id"])
        override = _override(cells, catalogue)
        first = decisions.get(cells["id"])
        if isinstance(override, tuple):
            check, why = override
        elif first is not None:
            check, why = DECISION_UNIQUE, f"already decided on line {first.line}; keep one"
        else:
            decisions[cells["id"]] = Decision(line, override)
            continue
        problems.append(
            Problem(
                file=str(path), line=line, check=check, message=f"id {row_id}: {why}", id=row_id
            )
        )
    return list(decisions.values()), problems


def _row_problems(
    decisions: list[Decision], rows: pl.DataFrame, path: Path, allow_unknown: bool
) -> list[Problem]:
    """What the next data gate would reject, located at the review's lines: an id of no row of
    `rows` (the loader's frame of the data files) unless `allow_unknown`, an override the loader
    cannot apply, and a row check that the relabelled row fails and the row as it is passes."""
    file = str(path)
    by_id = {decision.override.id: decision for decision in decisions}
    before = rows.filter(pl.col("id").is_in(list(by_id)))
    known = set(before["id"])
    problems = [
        Problem(
            file=file,
            line=decision.line,
            check=DECISION_ROW_KNOWN,
            message=f"id {shown(row_id)} is in none of the data files; pass the files the queue "
            "was mined from with --data, or --allow-unknown to write it anyway",
            id=shown(row_id),
        )
        for row_id, decision in by_id.items()
        if not allow_unknown and row_id not in known
    ]
    overrides = {row_id: (d.line, d.override) for row_id, d in by_id.items()}
    after, _, unappliable, _ = apply_overrides(before, overrides, file)
    problems += [p.model_copy(update={"message": f"id {p.id}: {p.message}"}) for p in unappliable]
    ids_at = {(row["file"], row["line"]): row["id"] for row in before.iter_rows(named=True)}
    already = {(p.file, p.line, p.check) for p in schema_failures(before)}
    for failure in schema_failures(after):
        if (failure.file, failure.line, failure.check) in already:
            continue  # not the decision's doing: the gate reports it on the data file
        decision = by_id[ids_at[(failure.file, failure.line)]]
        message = (
            f"id {shown(decision.override.id)}: relabelled to {decision.override.tool}, its row "
            f"({failure.location}) would fail: {failure.message}"
        )
        problems.append(
            Problem(
                file=file, line=decision.line, check=failure.check, message=message, id=failure.id
            )
        )
    return problems


def overrides_from_review(
    path: Path,
    rows: pl.DataFrame,
    catalogue: Catalogue | None = None,
    allow_unknown: bool = False,
) -> list[LabelOverride]:
    """The label overrides (`LabelOverride`) of a review queue CSV annotators filled
    in, each checked against its row of `rows` (the loader's frame of the data files) as the next
    data gate will check it.

    Rows without a decision are not reviewed yet and are skipped. Raises `ReviewError` with
    every problem (CSV line, check) when any decision cannot be used: nothing is half-applied.
    """
    decisions, problems = _decisions(path, catalogue or default_catalogue())
    problems += _row_problems(decisions, rows, path, allow_unknown)
    if problems:
        raise ReviewError(sorted(problems, key=lambda problem: problem.line or 0))
    return [decision.override for decision in decisions]


def merged_overrides(existing: Iterable[LabelOverride], overrides: Iterable[LabelOverride]) -> str:
    """The overrides file's text: `existing` (its overrides now) with `overrides` merged in, one
    line per id, a new decision replacing an old one."""
    merged = {override.id: override for override in existing}
    merged.update((override.id, override) for override in overrides)
    return "".join(o.model_dump_json(exclude_none=True) + "\n" for o in merged.values())
