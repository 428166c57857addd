"""The `toolgrpo` command line: thin wrappers that run the flows and tasks."""

from __future__ import annotations

import sys

from cyclopts import App

app = App(name="toolgrpo", help="Train and monitor tool-selecting agents with GRPO + NGRPO.")
data_app = App(name="data", help="The shipped dataset.")
app.command(data_app)


def main() -> None:
    """Console-script entry point: the command's return value is the exit status."""
    sys.exit(app() or 0)
