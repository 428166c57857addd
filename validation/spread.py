"""The context checks' Python judgements spread over the machine's usable CPUs.

The label rules and the screens' judges (`consistent_thought`, `request_names`,
`figures_verdict`) read text in Python, one distinct text at a time, on one core. `Spread`
hands them to worker processes, as many as the CPUs this process may use
(`os.sched_getaffinity`), in chunks, and gives the answers back in order: the same answers, from
the same functions.

Workers are forked for each call (no import: a fresh interpreter, spawn or a fork server,
imports the command's main module in each worker again, and the CLI's or a benchmark's is slow
to import) from the thread that calls, and gone when it returns. Another thread may be inside
polars at the fork (the screens run side by side): a worker runs only the rules' pure Python
(`re`, `json`) on the texts it is sent, never polars, so the locks a fork copies mid-use are
never taken in a worker.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import pairwise
from typing import Any

from toolgrpo.common.cpus import usable_cpus

# Chunks per worker: small enough to even out unequal texts, large enough that sending a chunk
# costs little beside judging it.
CHUNKS_PER_WORKER = 4
# Below this many items a worker a call judges in this process: forking the gate's process (it
# holds the loaded rows) and running the pool cost more than a second core saves on fewer texts,
# each quick to judge (docs/experiments/code-measurements.md#spread).
MIN_ITEMS_PER_WORKER = 20_000


def _judged_chunk(
    function: Callable[..., Any], items: Sequence[tuple[Any, ...]], shared: tuple[Any, ...]
) -> list[Any]:
    return [function(*item, *shared) for item in items]


# The call being spread: set before the workers fork, so they inherit it (a catalogue holds
# compiled validators that do not pickle) and are sent only where their chunks start and end.
# One call at a time.
_job: tuple[Callable[..., Any], Sequence[tuple[Any, ...]], tuple[Any, ...]] | None = None
_one_job = threading.Lock()


def _judged_range(start: int, end: int) -> list[Any]:
    """In a worker: `_judged_chunk` of the items `start`..`end` of the inherited `_job`."""
    assert _job is not None
    function, items, shared = _job
    return _judged_chunk(function, items[start:end], shared)


class Spread:
    """`map` over up to `workers` processes (default: the usable CPUs; 1: this process only)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers if workers is not None else usable_cpus())

    def map(
        self,
        function: Callable[..., Any],
        items: Sequence[tuple[Any, ...]],
        *shared: Any,
        per_worker: int | None = None,
    ) -> list[Any]:
        """`[function(*item, *shared) for item in items]`: in the workers when there are
        `per_worker` items (default `MIN_ITEMS_PER_WORKER`) or more for two, else here.
        The workers are forked for the call, inheriting `function`, `items` and `shared`
        (nothing of them needs to pickle but the answers), are sent where their chunks start
        and end, and are gone when it returns: while they live, this process waits, so their
        copy-on-write memory costs no copying."""
        per_worker = per_worker or MIN_ITEMS_PER_WORKER
        if self.workers == 1 or len(items) < per_worker * 2:
            return _judged_chunk(function, items, shared)
        chunks = min(self.workers * CHUNKS_PER_WORKER, len(items) // per_worker)
        bounds = [len(items) * k // chunks for k in range(chunks + 1)]
        global _job
        with _one_job:
            _job = (function, items, shared)
            try:
                context = multiprocessing.get_context("fork")
                with ProcessPoolExecutor(min(self.workers, chunks), mp_context=context) as pool:
                    futures = [pool.submit(_judged_range, *chunk) for chunk in pairwise(bounds)]
                    return [answer for future in futures for answer in future.result()]
            finally:
                _job = None
