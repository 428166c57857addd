"""Artifacts sent so that a Prefect API gone away costs a run the UI's copy, not its work.

Every report, table and model an artifact shows is also a file in the run folder. A server
that stops answering makes each artifact call wait out the client's retries (about a minute)
and then raise, which would fail the task that wrote the files: the report task alone sends
six. So an artifact that cannot be sent is a warning naming the file that holds it, and while
the API is known to be away (a call failed, and none has succeeded since: a training stage's
state watch and its progress artifact tell too) the next artifacts are not tried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
from prefect import get_run_logger
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger

T = TypeVar("T")


class ApiOutage:
    """Whether this process's last call to the Prefect API failed. Class attributes: one
    process, one API."""

    away: ClassVar[bool] = False


def api_failed() -> None:
    ApiOutage.away = True


def api_answered() -> None:
    ApiOutage.away = False


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The run's logger; outside a run (a task's function called as a function) Prefect's."""
    try:
        return get_run_logger()
    except MissingContextError:
        return get_logger("toolgrpo.artifacts")


def send_artifact(create: Callable[..., T], kept_in: Path, **artifact: Any) -> T | None:
    """`create(**artifact)`'s result (a `prefect.artifacts` function's: the artifact's id), or
    None when the Prefect API is away: then the run goes on, and the log says which file,
    `kept_in`, holds what artifact `key` would have shown."""
    logger = _logger()
    key = artifact["key"]
    if ApiOutage.away:
        logger.info("artifact %s not sent: the Prefect API is away; see %s", key, kept_in)
        return None
    try:
        result = create(**artifact)
    except httpx.HTTPError as error:  # connection refused, timeouts, 5xx after the retries
        api_failed()
        logger.warning(
            "artifact %s not sent to the Prefect API (%s); the run goes on, it is in %s, and "
            "no artifact is sent while the API is away",
            key,
            str(error) or type(error).__name__,
            kept_in,
        )
        return None
    api_answered()
    return result
