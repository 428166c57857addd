"""The loading task: every row of the given files, with what could not be read (the rows a
command read ahead of the flow run, `validation.read_ahead`, when it read these files as they
are)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.validation import loader
from toolgrpo.validation.loader import LoadedSamples
from toolgrpo.validation.read_ahead import rows_read_ahead


@task(name="load samples", task_run_name="load", cache_policy=NO_CACHE)
def load_samples(
    paths: Sequence[Path], overrides: Path | None = None, catalogue: Catalogue | None = None
) -> LoadedSamples:
    """`validation.loader.load_samples` as a Prefect task (the rows
    `validation.read_ahead.read_ahead` read, when it read these files as they are)."""
    loaded = rows_read_ahead(paths, overrides, catalogue)
    return loaded if loaded is not None else loader.load_samples(paths, overrides, catalogue)
