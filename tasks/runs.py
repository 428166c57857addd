"""Run folders: one fresh, never-reused directory per flow run, named so they sort by time."""

from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import Path


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
