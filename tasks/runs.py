"""Run folders and run labels: one fresh folder per flow run, named so they sort by time, and the
names and tags that let a person find a flow run in the Prefect UI."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from prefect import get_client
from prefect.context import FlowRunContext

# How a data hash is shown in tags and reports.
SHORT_HASH = 12
HASH_CHUNK_BYTES = 1 << 20


def new_run_dir(root: Path, label: str) -> Path:
    """A new empty folder `root/<YYYYmmdd-HHMMSS>-<label>-<6 hex>/`, created now.

    The random suffix keeps two runs started in the same second apart; an existing folder is
    never reused, so a run can never overwrite another run's report.
    """
    while True:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(root) / f"{stamp}-{label}-{secrets.token_hex(3)}"
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        return run_dir


def run_name(*parts: object) -> str:
    """A flow run name that says what ran and when: `retrain-cpu-20261201-0529`."""
    return "-".join([*map(str, parts), datetime.now().strftime("%Y%m%d-%H%M")])


def files_hash(paths: Iterable[Path]) -> str:
    """A hash of the files' bytes, in order (what changed since the last run). A missing file
    adds nothing: the data gate reports it."""
    digest = hashlib.sha256()
    for path in map(Path, paths):
        if path.is_file():
            with path.open("rb") as file:  # in chunks: a 1 GB file is not held in memory twice
                while chunk := file.read(HASH_CHUNK_BYTES):
                    digest.update(chunk)
    return digest.hexdigest()


def tag_flow_run(*tags: str) -> None:
    """Add `tags` to the running flow run (a deployment's own tags stay), so that the UI's
    filters find runs by preset or data."""
    context = FlowRunContext.get()
    flow_run = context.flow_run if context is not None else None
    if flow_run is None:
        raise RuntimeError("tag_flow_run runs inside a flow run")
    merged = list(dict.fromkeys([*flow_run.tags, *tags]))
    with get_client(sync_client=True) as client:
        client.update_flow_run(flow_run.id, tags=merged)
    flow_run.tags = merged
