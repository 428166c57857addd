"""Rows read, and checked, ahead of their flow run (`read_ahead`), while a command imports Prefect
and waits for it: the flow's load and check tasks take them (`rows_read_ahead`,
`checked_ahead`) when they load and check the same files the same way.

Nothing here imports Prefect or the checks' libraries before the rows are read: a command starts
the read first thing, and the check's modules are imported on the reading thread, after it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import NamedTuple

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.data_quality import DataReport
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


class Roles(NamedTuple):
    """The files' roles a check reads (`gate.validate_samples`): training and evaluation files."""

    train: tuple[str, ...]
    eval: tuple[str, ...]


class CheckedAhead(NamedTuple):
    """The report of rows checked ahead of their flow run, and the seconds the check took."""

    report: DataReport
    seconds: float


class _Check(NamedTuple):
    """A check `read_ahead` runs: of the rows it reads, with these roles and catalogue."""

    rows: Future[LoadedSamples]
    roles: Roles
    catalogue: Catalogue | None
    report: Future[CheckedAhead]  # a failed read fails it too


# The one load read ahead (`read_ahead`), done or under way, not yet taken by a flow run's
# `load_samples`; and its rows' check, not yet taken by a flow run's check (`checked_ahead`).
_read: tuple[_Source, Future[LoadedSamples]] | None = None
_checked: _Check | None = None


def read_ahead(
    paths: Sequence[Path],
    overrides: Path | None = None,
    catalogue: Catalogue | None = None,
    roles: Roles | None = None,
) -> None:
    """Start loading `paths` now, on a thread of its own and outside any flow run, for the next
    `load_samples` task of this process with the same arguments to take (waiting for it if it is
    still reading), if the files are then as they were (same inode, size and modification
    time); otherwise, or if reading fails here, the task reads them itself. Given the files'
    `roles`, the same thread then checks the rows (`gate.validate_samples`), for the next check
    of those rows with those roles and catalogue to take (`checked_ahead`).

    A command calls it as soon as its arguments are checked, so that reading a large file (polars,
    off the GIL) and checking its rows overlap what comes before the flow's tasks: importing
    Prefect and the flow, asking the Prefect API, starting the temporary Prefect server where
    there is none (`temporary_server_starting`), creating the flow run."""
    global _read, _checked
    source = _source(paths, overrides, catalogue)
    if source is None:
        return
    reading: Future[LoadedSamples] = Future()
    checking: Future[CheckedAhead] = Future()

    def read() -> None:
        try:
            loaded = loader.load_samples(paths, overrides, catalogue)
        except BaseException as error:  # any: the task waits on it; it reads them again
            reading.set_exception(error)
            checking.set_exception(error)
            return
        reading.set_result(loaded)
        if roles is None:
            return
        try:
            from toolgrpo.validation import gate  # pandera & co, imported beside the command's

            start = time.perf_counter()
            report = gate.validate_samples(loaded, roles.train, roles.eval, catalogue)
        except BaseException as error:  # the check task checks them itself
            checking.set_exception(error)
        else:
            checking.set_result(CheckedAhead(report, time.perf_counter() - start))

    threading.Thread(target=read, name="read-ahead", daemon=True).start()
    _read = (source, reading)
    _checked = _Check(reading, roles, catalogue, checking) if roles is not None else None


def rows_read_ahead(
    paths: Sequence[Path], overrides: Path | None, catalogue: Catalogue | None
) -> LoadedSamples | None:
    """The rows `read_ahead` read for these arguments, if the files are unchanged (once)."""
    global _read, _checked
    if _read is None:
        return None
    (source, reading), _read = _read, None
    failed = reading.exception() is not None  # done first: never two reads of the files at once
    if failed or _source(paths, overrides, catalogue) != source:
        if _checked is not None:  # rows no task takes: their check ends before others are read
            _checked.report.exception()
            _checked = None
        return None
    return reading.result()


def checked_ahead(
    loaded: LoadedSamples,
    train_files: Collection[str] | None,
    eval_files: Collection[str] | None,
    catalogue: Catalogue | None,
) -> CheckedAhead | None:
    """The check `read_ahead` ran, if it checked these very rows (the ones the flow's load took
    from it) with these roles and catalogue (once). Waits for it to end first, whatever it
    checked: never two checks of a file's rows at once."""
    global _checked
    if _checked is None:
        return None
    check, _checked = _checked, None
    if check.report.exception() is not None:
        return None
    given = Roles(tuple(train_files or ()), tuple(eval_files or ()))
    if check.rows.result() is not loaded or given != check.roles or check.catalogue != catalogue:
        return None
    return check.report.result()
