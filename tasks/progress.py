"""Progress artifacts that never hold up or fail the work they follow."""

from __future__ import annotations

import contextvars
import threading
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from toolgrpo.tasks.artifacts import api_answered, api_failed


class ProgressArtifact:
    """A Prefect progress artifact sent from a thread of its own.

    A slow or unreachable Prefect API must neither fail a training stage or an evaluation (seen:
    an API read timeout on a loaded 2-core box restarted a stage) nor stall the loop that
    follows it (seen: a server gone for a minute froze the stage's log lines and its deadline
    check, each update waiting out the client's retries). `update` returns at once: while one
    update is on its way, a newer one replaces the one waiting; the first failure is logged once,
    and the updates after it are still tried.
    """

    def __init__(self, key: str, description: str) -> None:
        self._key = key
        self._artifact_id: UUID | None = None
        self._waiting: tuple[float, str] | None = (0.0, description)
        self._sending = False
        self._failed = False
        self._lock = threading.Lock()
        self._logger = get_run_logger()
        self._send_soon()

    def update(self, progress: float, description: str) -> None:
        with self._lock:
            self._waiting = (progress, description)
        self._send_soon()

    def _send_soon(self) -> None:
        with self._lock:
            if self._sending:
                return
            self._sending = True
        context = contextvars.copy_context()  # the run's, for Prefect's client and logger
        threading.Thread(target=context.run, args=(self._send_waiting,), daemon=True).start()

    def _send_waiting(self) -> None:
        while True:
            with self._lock:
                waiting, self._waiting = self._waiting, None
                if waiting is None:
                    self._sending = False
                    return
            progress, description = waiting
            try:
                if self._artifact_id is None:
                    self._artifact_id = create_progress_artifact(  # type: ignore[assignment]
                        progress=progress, key=self._key, description=description
                    )
                else:
                    update_progress_artifact(
                        self._artifact_id, progress=progress, description=description
                    )
                api_answered()
            except Exception as error:  # httpx timeouts and API errors alike
                api_failed()
                if not self._failed:
                    self._failed = True
                    self._logger.warning(
                        "progress artifact %s not sent to the Prefect API (%s); the run goes "
                        "on and its log says where it stands",
                        self._key,
                        error,
                    )
