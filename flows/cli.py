"""The `toolgrpo` command line: thin wrappers that run the flows and tasks."""

from __future__ import annotations

import sys
from pathlib import Path

from cyclopts import App

from schemas.catalogue import DATA_DIR

app = App(name="toolgrpo", help="Train and monitor tool-selecting agents with GRPO + NGRPO.")
data_app = App(name="data", help="The shipped dataset.")
app.command(data_app)


@data_app.command
def generate(seed: int = 0, out: Path = DATA_DIR) -> int:
    """Regenerate the shipped dataset under OUT from SEED (byte-identical for the same seed)."""
    from data.generator import build_dataset, write_dataset

    dataset = build_dataset(seed)
    try:
        written = write_dataset(dataset, out)
    except OSError as error:
        print(f"cannot write the dataset under {out}: {error}", file=sys.stderr)
        return 2
    for path in written:
        rows = dataset.files.get(path.relative_to(out).as_posix())
        print(f"{path}: {len(rows)} rows" if rows is not None else f"{path}")
    return 0


def main() -> None:
    """Console-script entry point: the command's return value is the exit status."""
    sys.exit(app() or 0)
