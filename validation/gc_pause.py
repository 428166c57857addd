"""Python's cycle collector paused while the data gate and the label checks read rows.

Reading a million rows makes millions of short-lived Python objects (rows pydantic reads, the
distinct texts the screens judge and their answers) and no reference cycles: reference counting
frees them. Python's cycle collector, started by allocation counts alone, would still scan every
live object of the process each time, holding the GIL (several times in a million-row
`toolgrpo validate`: docs/experiments/code-measurements.md#cycle-collector), so it waits until
the rows are read; what it would have found, it finds then.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Within: no automatic cycle collection; after: as before. Where another thread paused it
    first, its own end resumes it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
