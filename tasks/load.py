"""The loading task: every row of the given files, with what could not be read; and the same
rows read ahead of their flow run (`read_ahead`), while a command waits for Prefect."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import NamedTuple

from prefect import task
from prefect.cache_policies import NO_CACHE

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.validation import loader
from toolgrpo.validation.loader import LoadedSamples


class _Source(NamedTuple):
    """What a load reads: the paths as given and, per file, what tells a rewrite apart."""

    paths: tuple[str, ...]
    overrides: str | None
    files: tuple[tuple[int, int, int, int], ...]  # device, inode, size, mtime (ns)
    catalogue: Catalogue | None


def _source(
    paths: Sequence[Path], overrides: Path | None, catalogue: Catalogue | None
) -> _Source | None:
    """`_Source` of a load, or None when a file cannot be looked at (the load says why)."""
    named = [*map(str, paths), *([str(overrides)] if overrides is not None else [])]
    try:
        stats = [os.stat(path) for path in named]
    except (OSError, ValueError):
        return None
    files = tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)
    given = tuple(map(str, paths))
    return _Source(given, None if overrides is None else str(overrides), files, catalogue)


# The one load read ahead (`read_ahead`), done or under way, not yet taken by a flow run's
# `load_samples`.
_read: tuple[_Source, Future[LoadedSamples]] | None = None


def read_ahead(
    paths: Sequence[Path], overrides: Path | None = None, catalogue: Catalogue | None = None
) -> None:
    """Start loading `paths` now, on a thread of its own and outside any flow run, for the next
    `load_samples` task of this process with the same arguments to take (waiting for it if it is
    still reading), if the files are then as they were (same inode, size and modification
    time); otherwise, or if reading fails here, the task reads them itself.

    A command calls it as soon as its arguments are checked, so that reading a large file (polars,
    off the GIL) overlaps what comes before the flow's first task: importing the flow, starting
    the temporary Prefect server where there is none (`temporary_server_starting`), creating the
    flow run."""
    global _read
    source = _source(paths, overrides, catalogue)
    if source is None:
        return
    reading: Future[LoadedSamples] = Future()

    def read() -> None:
        try:
            reading.set_result(loader.load_samples(paths, overrides, catalogue))
        except BaseException as error:  # any: the task waits on it; it reads them again
            reading.set_exception(error)

    threading.Thread(target=read, name="read-ahead", daemon=True).start()
    _read = (source, reading)


def _taken(
    paths: Sequence[Path], overrides: Path | None, catalogue: Catalogue | None
) -> LoadedSamples | None:
    """The rows `read_ahead` read for these arguments, if the files are unchanged (once)."""
    global _read
    if _read is None:
        return None
    (source, reading), _read = _read, None
    failed = reading.exception() is not None  # done first: never two reads of the files at once
    if failed or _source(paths, overrides, catalogue) != source:
        return None
    return reading.result()


@task(name="load samples", task_run_name="load", cache_policy=NO_CACHE)
def load_samples(
    paths: Sequence[Path], overrides: Path | None = None, catalogue: Catalogue | None = None
) -> LoadedSamples:
    """`validation.loader.load_samples` as a Prefect task (the rows `read_ahead` read, when it
    read these files as they are)."""
    loaded = _taken(paths, overrides, catalogue)
    return loaded if loaded is not None else loader.load_samples(paths, overrides, catalogue)
