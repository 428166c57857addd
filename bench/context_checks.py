"""Time the label context checks on 1,000,000 rows: screened (the gate's) vs row by row, and
the screened checks with 1, 2, … worker processes.

    python bench/context_checks.py [--rows 1000000] [--reference-rows 20000] [--workers 1,2]
        [--cpus 1,2]

Rows are the shipped rows repeated with fresh ids and scenario ids, in three variants:
`repeated` (every copy the same text), `unique slots` (each copy's request and thought name
their own account, ACC000001…, as templated data differ in slot values) and `unique words`
(each copy's request and thought carry their own made-up word, so no two texts read alike);
and `drawn`: the training scenarios drawn again by the generator with fresh slots, balances and
quotes (`bench/validate.py`'s distinct rows: real data's variety, labels valid).
The row-by-row reference (`screen=False`, ~0.5 ms a row) runs on the first `reference_rows`
rows of each variant, where both must find exactly the same; the screened checks also run on
all rows with each number of workers (`label_inconsistencies(workers=…)`, found the same), and
with each number of `cpus`: in a fresh process that may run on that many of this machine's
CPUs alone (its affinity, as a container's share sets it), polars' threads and the workers
sized to them as on a machine of that many cores.
Every frame carries the solutions' parts the data gate's row contract parsed (as the gate hands
them over). Prints seconds, µs per row and the speed-up, with the machine's load average.
"""

from __future__ import annotations

import os
import pickle
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cyclopts
import polars as pl
from validate import distinct_rows  # bench/validate.py, next to this script

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.samples import solution_parts
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.loader import load_samples
from toolgrpo.validation.screens import PARTS_READ

SHIPPED = ["train/single_step.jsonl", "train/multistep.jsonl", "eval/single_step.jsonl"]
SHIPPED += ["eval/multistep.jsonl", "eval/unseen_phrasing.jsonl"]
THOUGHT_KEY = '"thought": "'


def _word(copy: pl.Expr) -> pl.Expr:
    """A made-up word per copy number: its digits spelled as letters (1207 → "bcah")."""
    letters = copy.cast(pl.String)
    for digit, letter in zip(string.digits, "ahbcdefgij", strict=True):
        letters = letters.str.replace_all(digit, letter, literal=True)
    return pl.lit("x") + letters


def rows_of(variant: str, rows: int) -> pl.DataFrame:
    """`rows` rows: the shipped rows repeated, each copy with its own ids (and text: `variant`),
    or drawn again by the generator."""
    if variant == "drawn":
        return load_frame(distinct_rows(rows))
    shipped = load_samples([Path(DATA_DIR) / name for name in SHIPPED]).frame
    copies = -(-rows // shipped.height)
    frame = pl.concat([shipped.with_columns(copy=pl.lit(k)) for k in range(copies)]).head(rows)
    suffix = pl.lit("#") + pl.col("copy").cast(pl.String)
    frame = frame.with_columns(id=pl.col("id") + suffix, scenario_id=pl.col("scenario_id") + suffix)
    if variant == "repeated":
        return frame.drop("copy")
    tag = {
        "unique slots": pl.lit("for ACC") + pl.col("copy").cast(pl.String).str.zfill(6),
        "unique words": pl.lit("for ") + _word(pl.col("copy")),
    }[variant]
    return frame.with_columns(
        prompt=tag + pl.lit(" ") + pl.col("prompt"),
        solution=pl.col("solution").str.replace(
            THOUGHT_KEY, pl.lit(THOUGHT_KEY) + tag + pl.lit(" "), literal=True
        ),
    ).drop("copy")


def load_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame`'s rows as the data gate hands them to the context checks: the loader's (with `file`
    and `line`) and the solutions' parts the row contract parsed (its cost, not theirs)."""
    with tempfile.TemporaryDirectory(prefix="bench-context-") as folder:
        path = Path(folder, "rows.jsonl")
        frame.write_ndjson(path)
        loaded = load_samples([path]).frame
    return solution_parts(loaded).select(*loaded.columns, *PARTS_READ)


def _timed(frame: pl.DataFrame, screen: bool, workers: int | None = 1) -> tuple[float, list]:
    start = time.perf_counter()
    found = label_inconsistencies(frame, screen=screen, workers=workers)
    return time.perf_counter() - start, found


def _timed_on_cpus(frame: pl.DataFrame, cpus: int) -> tuple[float, list]:
    """`_timed` (screened, default workers) in a fresh process that may run on the first `cpus`
    of this process's CPUs only: polars sizes its threads when it starts."""
    with tempfile.TemporaryDirectory(prefix="bench-context-") as folder:
        rows, answer = Path(folder, "rows.parquet"), Path(folder, "answer.pickle")
        frame.write_parquet(rows)
        allowed = sorted(os.sched_getaffinity(0))[:cpus]
        subprocess.run(
            [sys.executable, __file__, "--timed-file", str(rows), "--answer-file", str(answer)],
            check=True,
            preexec_fn=lambda: os.sched_setaffinity(0, allowed),
        )
        return pickle.loads(answer.read_bytes())


def main(
    rows: int = 1_000_000,
    reference_rows: int = 20_000,
    workers: str = "1,2",
    cpus: str = "",
    variants: str = "repeated,unique slots,unique words,drawn",
    timed_file: Path | None = None,
    answer_file: Path | None = None,
) -> None:
    """Print per variant: row by row and screened on `reference_rows`, screened on all rows
    with each number of `workers`, then on each number of `cpus` (none by default). With
    `timed_file`: time the screened checks of its rows alone, into `answer_file`."""
    if timed_file is not None and answer_file is not None:  # `_timed_on_cpus`'s process
        answer_file.write_bytes(pickle.dumps(_timed(pl.read_parquet(timed_file), True, None)))
        return
    counts = [int(n) for n in workers.split(",")]
    cpu_counts = [int(n) for n in cpus.split(",")] if cpus else []
    print(
        f"load average {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} usable CPUs "
        "(other work shares them)"
    )
    arms = " | ".join(
        [f"screened, {rows:,} rows, {n} worker(s)" for n in counts]
        + [f"screened, {n} CPU(s)" for n in cpu_counts]
    )
    print(
        f"| variant | findings (sample / all) | row by row, {reference_rows:,} rows | "
        f"screened, same rows | speed-up | {arms} | µs/row ({counts[-1]} workers) |"
    )
    print("|---|---|---|---|---|" + "---|" * (len(counts) + len(cpu_counts) + 1))
    for variant in variants.split(","):
        frame = rows_of(variant, rows)
        sample = frame.head(reference_rows)
        reference_s, reference = _timed(sample, screen=False)
        screened_s, screened = _timed(sample, screen=True)
        if screened != reference:
            raise SystemExit(f"{variant}: the screened checks found otherwise than row by row")
        seconds, found = [], None
        for n in counts:
            arm_s, found_n = _timed(frame, screen=True, workers=n)
            if found is not None and found_n != found:
                raise SystemExit(f"{variant}: {n} workers found otherwise than {counts[0]}")
            seconds.append(arm_s)
            found = found_n
        assert found is not None
        on_cpus = []
        for n in cpu_counts:
            arm_s, found_n = _timed_on_cpus(frame, n)
            if found_n != found:
                raise SystemExit(f"{variant}: on {n} CPUs found otherwise than {counts[0]} workers")
            on_cpus.append(arm_s)
        arms = " | ".join(f"{arm_s:.2f} s" for arm_s in [*seconds, *on_cpus])
        print(
            f"| {variant} | {len(reference)} / {len(found)} | {reference_s:.2f} s | "
            f"{screened_s:.3f} s | {reference_s / screened_s:.0f}× | {arms} | "
            f"{seconds[-1] / frame.height * 1e6:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    cyclopts.run(main)
