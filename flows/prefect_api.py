"""How the CLI meets Prefect: the API probe, the temporary server started early, and what the
console handler prints. The commands in `cli.py` call these; nothing here parses arguments."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

# The temporary Prefect server can take longer than the 20 s default on a busy 2-core box.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# A Prefect API that answers does so in milliseconds; one that does not costs every flow call
# Prefect's retries (~15 s) and three chained tracebacks, so each command asks it first.
PREFECT_API_PROBE_S = 3.0


def prefect_api_problem() -> str | None:
    """Why the Prefect API that PREFECT_API_URL (or the active profile) names cannot be used, or
    None: also when none is named, since a flow then starts a temporary local server."""
    import ssl

    import httpx
    from prefect.settings import get_current_settings

    api = get_current_settings().api
    if not api.url:
        return None
    verify = (
        False
        if api.tls_insecure_skip_verify
        else ssl.create_default_context(cafile=api.ssl_cert_file)
    )
    try:
        answer = httpx.get(
            f"{api.url.rstrip('/')}/health", timeout=PREFECT_API_PROBE_S, verify=verify
        )
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        reason = str(error).rstrip(".") or type(error).__name__
    else:
        # Without credentials Prefect Cloud answers 401/403: it is there.
        if answer.is_success or answer.status_code in (401, 403):
            return None
        reason = f"GET /health answered HTTP {answer.status_code}"
    return (
        f"cannot reach the Prefect API at {api.url}: {reason}; unset PREFECT_API_URL to use a "
        "temporary local server"
    )


@contextlib.contextmanager
def temporary_server_starting() -> Iterator[None]:
    """Start the temporary Prefect server a first flow run would start and wait for (3–10 s on
    2 cores) in the background while the block runs (importing a flow: torch, transformers;
    reading the files), so the two overlap; the block's end waits for it. Enter it once the
    arguments are checked, so a usage error never waits for a server. Only where no API is
    configured and a temporary server is allowed; a start that fails here is retried, and its
    error reported, by the flow run."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield
        return

    def start() -> None:
        from prefect.server.api.server import SubprocessASGIServer

        with contextlib.suppress(Exception):
            SubprocessASGIServer().start()  # the instance Prefect's client starts and reuses

    starting = threading.Thread(target=start, daemon=True)
    starting.start()
    try:
        yield
    finally:
        starting.join()


class _NoTracebacks(logging.Filter):
    """Drops, on the terminal only, Prefect's log of an exception a flow or task raised: the
    command prints one line for each error it expects, and Python shows the traceback of any
    other. The Prefect API still gets the whole log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is None


def _console_handlers() -> list[logging.Handler]:
    """The handlers that print Prefect's log on the terminal (the API keeps its own copy)."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import PrefectConsoleHandler

    ensure_logging_setup()
    return [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]


class _NoProblemLines(logging.Filter):
    """Drops, on the terminal only, the data gate's problem lines (`tasks.validate`), which the
    command prints itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        from toolgrpo.tasks.validate import PROBLEM_LINE

        return not getattr(record, PROBLEM_LINE, False)


def quiet_console() -> None:
    """Keep Prefect's console to errors, the problem lines aside: the command prints those
    itself. Only the console handler is turned down, so the flow run's log in the UI keeps
    every line."""
    for handler in _console_handlers():
        handler.setLevel(logging.ERROR)
        handler.addFilter(_NoProblemLines())


def hide_tracebacks_on_console() -> None:
    """Drop, on the terminal only, Prefect's log of an exception a flow or task raised
    (`_NoTracebacks`)."""
    for handler in _console_handlers():
        handler.addFilter(_NoTracebacks())
