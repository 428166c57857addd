"""The CPUs this process may use, which the gate's workers, training and evaluation size to."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask — a container's or a scheduler's
    share — not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on macOS or Windows
        return os.cpu_count() or 1
