"""Files people and automation read: written whole or not at all, CSV cells safe in spreadsheets.

A file is written to a temporary file in its own folder and renamed over the old one, so a write
that fails part-way (a full disk, a killed process) leaves the old file as it was, never a cut
one. CSV cells that a spreadsheet would run as a formula get a leading `'`; `cell_text` reads
them back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl

# A spreadsheet runs a cell starting with one of these as a formula (OWASP "CSV injection"); a
# leading quote is escaped too, so that `cell_text` can undo exactly what `spreadsheet_safe` did.
FORMULA_START = r"^([=+\-@\t\r'])"


class WriteFailed(OSError):
    """A file could not be written (a full disk, no permission); the old one is unchanged."""


def replace_file(path: Path, write: Callable[[Path], object]) -> Path:
    """`path`, written by `write(temporary path)` beside it and then renamed over it.

    The new file keeps the old file's permissions (a new one gets the umask's). On any error the
    temporary file is removed and the old file is untouched; an OSError becomes `WriteFailed`
    naming `path` (not the temporary file).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        write(temporary)
        with temporary.open("rb+") as written:
            os.fsync(written.fileno())
        if path.exists():
            shutil.copymode(path, temporary)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            reason = error.strerror or str(error)
            raise WriteFailed(f"cannot write {path}: {reason}; the file is unchanged") from error
        raise
    return path


@contextlib.contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[], object] | None = None) -> Iterator[None]:
    """Hold an exclusive lock for `path` while the block runs: a read-merge-replace of `path` by
    another process (or thread) waits until this one has replaced the file, so neither
    overwrites the other's change. `on_wait` is called once if the lock is held elsewhere.

    The lock is `fcntl.flock` on `<name>.lock` beside `path`, released when the process ends
    however it ends. The lock file stays: removing it would let a waiting run lock the removed
    file while a new run locks a new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(f"{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # releases the lock


def replace_dir(path: Path, write: Callable[[Path], object]) -> Path:
    """The folder `path`, filled by `write(temporary folder)` beside it and then renamed into
    place (the old folder, if any, renamed away first and removed last), so a reader sees the
    old folder or the new one whole, never a half-written one; on an error the old one stays."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    old = path.with_name(f".{path.name}.{secrets.token_hex(4)}.old")
    try:
        temporary.mkdir(parents=True)
        write(temporary)
        if path.exists():
            os.replace(path, old)
        os.replace(temporary, path)
    except BaseException as error:
        shutil.rmtree(temporary, ignore_errors=True)
        if old.exists() and not path.exists():
            os.replace(old, path)
        if isinstance(error, OSError):
            reason = error.strerror or str(error)
            raise WriteFailed(f"cannot write {path}: {reason}; the folder is unchanged") from error
        raise
    shutil.rmtree(old, ignore_errors=True)
    return path


def write_text_file(path: Path, text: str) -> Path:
    """`text` as the UTF-8 file `path`, replaced whole."""
    return replace_file(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def spreadsheet_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with a `'` before every text cell a spreadsheet would read as a formula."""
    return frame.with_columns(pl.col(pl.String).str.replace(FORMULA_START, "'$1"))


def write_csv_file(frame: pl.DataFrame, path: Path) -> Path:
    """`frame` as the CSV file `path` (cells made `spreadsheet_safe`), replaced whole."""
    return replace_file(path, spreadsheet_safe(frame).write_csv)


def cell_text(cell: str) -> str:
    """A cell of a CSV written by `write_csv_file` as the value it was written from."""
    escaped = cell.startswith("'") and re.match(FORMULA_START, cell[1:]) is not None
    return cell[1:] if escaped else cell
