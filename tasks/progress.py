"""Progress artifacts that never fail the work they follow."""

from __future__ import annotations

from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import update_progress_artifact


def update_progress(artifact_id: UUID, progress: float, description: str) -> None:
    """Best effort: a slow or unreachable Prefect API must not fail a training stage or an
    evaluation (seen here: an API read timeout on a loaded 2-core box restarted a stage)."""
    try:
        update_progress_artifact(artifact_id, progress=progress, description=description)
    except Exception as error:  # httpx timeouts and API errors alike
        get_run_logger().warning("progress artifact not updated: %s", error)
