"""What an input file must be before anything reads it: a regular file, and not compressed.

Every reader of user files (rows, overrides, a review CSV, a catalogue) asks here first. A path
is judged by `os.stat` before it is opened: opening a named pipe waits for a writer that may
never come, and a device such as /dev/zero never ends. A compressed file is refused rather than
read as it is by one reader and decompressed by another.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# What a path that is not a regular file is, as a problem line says it.
_SPECIAL_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# The first bytes of the compressed formats a data file is likely to arrive in; none starts a
# JSONL, CSV, JSON or parquet file ("PAR1").
_COMPRESSED_STARTS = {
    b"\x1f\x8b": ("gzip", "gunzip"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
    b"BZh": ("bzip2", "bunzip2"),
    b"\xfd7zXZ\x00": ("xz", "unxz"),
    b"PK\x03\x04": ("zip", "unzip"),
}


class UnreadableInput(OSError):
    """An input path that is not read: not a regular file, or compressed. Its text is one line
    saying what the path is and what to do."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.strerror = why


def special_kind(path: Path | str) -> str | None:
    """What `path` is when it exists and is not a regular file ("a folder", "a named pipe
    (FIFO)", "a character device" …), judged without opening it; None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # missing or unreadable: the reader says so in its own words
    if stat.S_ISREG(mode):
        return None
    return next((kind for is_kind, kind in _SPECIAL_KINDS if is_kind(mode)), "not a regular file")


def compression(path: Path | str) -> tuple[str, str] | None:
    """(format, the command that decompresses it) when the regular file `path` starts as a
    compressed file does, else None."""
    try:
        with open(path, "rb") as handle:
            start = handle.read(8)
    except OSError:
        return None
    return next(
        (found for magic, found in _COMPRESSED_STARTS.items() if start.startswith(magic)), None
    )


def input_problem(path: Path | str) -> str | None:
    """Why `path`, which exists, is not read (it is a folder, a pipe, a device, a socket, or a
    compressed file), or None."""
    if kind := special_kind(path):
        if kind == "a folder":
            return "is a folder, not a file: pass the files in it"
        return f"is {kind}, not a regular file: only regular files are read"
    if found := compression(path):
        name, command = found
        return f"is {name}-compressed: decompress it first ({command}) and pass that file"
    return None


def check_input(path: Path | str) -> None:
    """Raises `UnreadableInput` when `input_problem` finds `path` is not to be read."""
    if why := input_problem(path):
        raise UnreadableInput(path, why)
