"""The gate's checks: every loaded row against the row contract, label conflicts, leakage between
training and evaluation files, row counts.

Failures (rows or files that break a rule) fail the gate. Label conflicts (identical normalised
prompts with different tools) and labels their context contradicts (`validation.context`) are
warnings, not failures: deciding which label is right is an annotator's call, and the rows are
each valid on their own. Leakage (an evaluation row whose
scenario or prompt is also in a training file) fails the gate when the files' roles are known;
without them, rows shared by two files are only a warning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import pandera.errors
import polars as pl

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.data_quality import ConflictRow, DataReport, LabelConflict
from toolgrpo.schemas.problems import Problem, shown
from toolgrpo.schemas.samples import (
    FAILURE_DETAILS,
    MAX_PROMPT_CHARS,
    ParsedSample,
    check_names,
    check_rule,
    normalised_prompt,
    parse_solution,
    shown_column,
)
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.gc_pause import cycle_collector_paused
from toolgrpo.validation.loader import LoadedSamples
from toolgrpo.validation.screens import PARTS_READ

COUNT_DIMENSIONS = ("kind", "lang", "tool", "step")  # of readable rows; files count every row
# Not a row rule of `Sample`: the whole table failed a structural check (should not happen for
# frames built by the loader, but a report beats a traceback).
TABLE = "(table)"
NO_LEAKAGE = "eval_not_in_training"
CROSS_FILE_RULES = {
    NO_LEAKAGE: "An evaluation row shares no scenario_id and no normalised prompt with a "
    "training row (split by scenario).",
}
# What two files can share that leaks an answer from training into evaluation.
LEAKAGE_KEYS = {"scenario_id": pl.col("scenario_id"), "normalised prompt": normalised_prompt()}
MAX_SHARED_EXAMPLES = 3


class DataGateFailed(RuntimeError):
    """Raised to stop a pipeline before training when the data gate fails; carries the report."""

    def __init__(self, report: DataReport) -> None:
        where = f"; report: {report.run_dir}" if report.run_dir else ""
        super().__init__(
            f"data gate failed: {report.invalid_rows} of {report.rows} rows invalid, "
            f"{len(report.failures)} problem(s){where}"
        )
        self.report = report

    def __reduce__(self):  # Prefect pickles exceptions into task states
        return type(self), (self.report,)


def schema_failures(frame: pl.DataFrame, catalogue: Catalogue | None = None) -> list[Problem]:
    """Every (row, check) that breaks the row contract (tools and params of `catalogue`, default
    the shipped one), located by the frame's file and line."""
    return contract_failures(parse_solution(frame, catalogue))


def contract_failures(parsed: pl.DataFrame) -> list[Problem]:
    """`schema_failures` of rows whose solutions `parse_solution` has parsed."""
    try:
        ParsedSample.validate(parsed, lazy=True)
    except pandera.errors.SchemaErrors as errors:
        cases = errors.failure_cases
    else:
        return []
    problems = [
        Problem(
            file=TABLE, line=None, check=str(case["check"]), message=shown(case["failure_case"])
        )
        for case in cases.filter(pl.col("index").is_null()).iter_rows(named=True)
    ]
    located = cases.filter(pl.col("index").is_not_null()).select("check", "index")
    indexed = parsed.with_row_index("index")
    for (check,), failing in located.group_by("check", maintain_order=True):
        rows = indexed.join(failing.select(pl.col("index").cast(pl.UInt32)), on="index")
        detail = FAILURE_DETAILS.get(check, pl.lit(check_rule(check)))
        details = rows.select("file", "line", shown_column("id"), detail.alias("detail"))
        for row in details.iter_rows(named=True):
            message = row["detail"] or check_rule(check)
            problems.append(
                Problem(
                    file=row["file"], line=row["line"], check=check, message=message, id=row["id"]
                )
            )
    return problems


def find_label_conflicts(frame: pl.DataFrame) -> list[LabelConflict]:
    """Groups of rows with the same normalised prompt but different tools.

    Each row is first keyed by a hash of its normalised prompt, streamed, so the normalised
    texts never all exist at once; only the rows whose key holds two tools have their prompts
    compared (a collision adds rows to compare, never hides a conflict). On distinct prompts
    that takes less memory and time than making the (prompt, tool) pairs unique first
    (docs/experiments/code-measurements.md#label-conflicts).
    """
    keyed = frame.lazy().select(key=normalised_prompt().hash(), tool="tool")
    keys = keyed.collect(engine="streaming")
    candidates = frame.filter(keys.select(pl.col("tool").n_unique().over("key") > 1).to_series())
    conflicting = (
        candidates.with_columns(prompt_key=normalised_prompt())
        .filter(pl.col("tool").n_unique().over("prompt_key") > 1)
        .sort("prompt_key", "file", "line")
    )
    return [
        LabelConflict(
            prompt=shown(prompt, limit=MAX_PROMPT_CHARS),
            rows=[
                ConflictRow(
                    id=shown(row["id"]),
                    location=f"{row['file']}:{row['line']}",
                    tool=shown(row["tool"]),
                )
                for row in rows.iter_rows(named=True)
            ],
        )
        for (prompt,), rows in conflicting.group_by("prompt_key", maintain_order=True)
    ]


def leaked_eval_rows(
    frame: pl.DataFrame, train_files: Collection[str], eval_files: Collection[str]
) -> list[Problem]:
    """One problem per row of `eval_files` whose scenario_id (else normalised prompt) is also in a
    row of `train_files`, naming the first such training row."""
    if not train_files or not eval_files:
        return []  # nothing to compare: skip keying every row
    is_train = pl.col("file").is_in(list(train_files))
    is_eval = pl.col("file").is_in(list(eval_files))
    problems: dict[tuple[str, int], Problem] = {}
    for name, key in LEAKAGE_KEYS.items():
        keyed = frame.with_columns(key=key)
        first_train = (
            keyed.filter(is_train)
            .sort("file", "line")
            .group_by("key", maintain_order=True)
            .first()
            .select("key", train_row=pl.format("{}:{}", "file", "line"))
        )
        leaked = keyed.filter(is_eval).join(first_train, on="key").sort("file", "line")
        for row in leaked.iter_rows(named=True):
            shared = f'scenario_id "{row["key"]}"' if name == "scenario_id" else "its prompt"
            problems.setdefault(
                (row["file"], row["line"]),
                Problem(
                    file=row["file"],
                    line=row["line"],
                    check=NO_LEAKAGE,
                    message=f"{shared} is also in training row {row['train_row']}",
                    id=row["id"],
                ),
            )
    return list(problems.values())


def shared_between_files(frame: pl.DataFrame, pairs: list[tuple[str, str]]) -> list[str]:
    """A warning for each pair of files sharing scenario_ids or normalised prompts: leakage if one
    file trains and the other evaluates, which the gate can only tell when given the roles."""
    if not pairs:
        return []  # nothing to compare: skip keying every row
    warnings = []
    for name, key in LEAKAGE_KEYS.items():
        keys = frame.select("file", key.alias("key")).group_by("file").agg(pl.col("key").unique())
        by_file = {file: set(values) for file, values in keys.iter_rows()}
        for first, second in pairs:
            shared = sorted(by_file.get(first, set()) & by_file.get(second, set()))
            if shared:
                examples = ", ".join(repr(k[:60]) for k in shared[:MAX_SHARED_EXAMPLES])
                warnings.append(
                    f"{first} and {second} share {len(shared)} {name}(s) ({examples}): "
                    "leakage if one trains and the other evaluates; give the files as "
                    "--train/--eval to check"
                )
    return warnings


def invalid_rows_by_file(failures: list[Problem], files: Collection[str]) -> Counter[str]:
    """How many distinct lines of each of `files` failed some check (file-wide problems and the
    overrides file's own lines are not rows of `files`)."""
    lines = {(p.file, p.line) for p in failures if p.file in files and p.line is not None}
    return Counter(file for file, _ in lines)


@cache
def _check_positions() -> dict[str, int]:
    return {name: position for position, name in enumerate([*check_names(), *CROSS_FILE_RULES])}


@cycle_collector_paused()
def validate_samples(
    loaded: LoadedSamples,
    train_files: Collection[str] | None = None,
    eval_files: Collection[str] | None = None,
    catalogue: Catalogue | None = None,
) -> DataReport:
    """Check every loaded row against the contract (all failures collected), find label
    conflicts, and look for leakage: a failure on the `eval_files` rows found in `train_files`,
    a warning for rows shared by files whose roles are not given. Tool names, params and
    keywords are `catalogue`'s (default: the shipped one)."""
    file_positions = {file: position for position, file in enumerate(loaded.files)}

    def report_order(problem: Problem) -> tuple[int, str, int, int]:
        """Files as given (overrides after), lines, then checks in the order they run."""
        file = file_positions.get(problem.file, len(file_positions))
        check = _check_positions().get(problem.check, -1)  # loader checks first
        return file, problem.file, problem.line or 0, check

    frame = loaded.frame
    train, evaluation = set(train_files or ()), set(eval_files or ())
    # the conflicts are polars alone: found on another core while this thread reads the
    # solutions in Python
    with ThreadPoolExecutor(1) as beside:
        conflicts = beside.submit(find_label_conflicts, frame)
        leaks = leaked_eval_rows(frame, train, evaluation)
        # the solutions parsed once: the contract checks their parts, the context checks read
        parsed = parse_solution(frame, catalogue)
        failures = sorted([*loaded.problems, *contract_failures(parsed), *leaks], key=report_order)
    conflicts_found = conflicts.result()
    parsed = parsed.select(*frame.columns, *PARTS_READ)
    files = list(dict.fromkeys(loaded.files))
    known = train | evaluation
    pairs = [
        (first, second)
        for i, first in enumerate(files)
        for second in files[i + 1 :]
        if first not in known or second not in known
    ]
    invalid = sum(invalid_rows_by_file(failures, file_positions).values())
    return DataReport(
        files=loaded.files,
        rows=loaded.rows_read,
        valid_rows=loaded.rows_read - invalid,
        invalid_rows=invalid,
        failures=failures,
        conflicts=conflicts_found,
        overrides=loaded.overrides,
        warnings=[
            *loaded.warnings,
            *shared_between_files(frame, pairs),
            *context_warnings(parsed, catalogue),
        ],
    )


def context_warnings(frame: pl.DataFrame, catalogue: Catalogue | None = None) -> list[str]:
    """One `file:line: id: evidence [check: rule]` line per label its context contradicts
    (`frame`: the loader's, with the solutions' parts where they are parsed already)."""
    return [str(found.problem()) for found in label_inconsistencies(frame, catalogue)]


def count_rows(loaded: LoadedSamples) -> dict[str, dict[str, int]]:
    """Rows by file (every row read, readable or not, so the files add up to the report's total),
    then by kind, lang, tool and step (of the rows that could be read); each value as `shown`
    (a 10 MB tool name is counted, not repeated)."""
    counts: dict[str, dict[str, int]] = {"file": {shown(f): n for f, n in loaded.file_rows.items()}}
    for dimension in COUNT_DIMENSIONS:
        by_value = counts.setdefault(dimension, {})
        for value, count in loaded.frame.group_by(dimension).len().sort(dimension).iter_rows():
            by_value[shown(value)] = by_value.get(shown(value), 0) + count
    return counts
