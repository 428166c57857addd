"""How the CLI meets Prefect: the API probe, the temporary server started early, heartbeats, and
what the console handler prints. The commands in `cli.py` call these; nothing here parses
arguments."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from fastapi import FastAPI
    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import Settings

# The temporary Prefect server can take longer than the 20 s default on a busy 2-core box.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Said once, as one line, by `prefect_home_problem` (Prefect warns at import, with its source).
warnings.filterwarnings("ignore", "Failed to create the Prefect home directory", UserWarning)

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


# Seconds the temporary server waits, once told to stop, for requests and connections to end.
SERVER_STOP_GRACE_S = 1


class TemporaryServerFailed(RuntimeError):
    """The temporary Prefect server exited or did not answer in time."""


def temporary_api() -> FastAPI:
    """The app a temporary server serves (uvicorn's factory): Prefect's API as Prefect's own
    temporary server serves it (no UI, only the services a temporary server runs)."""
    from prefect.server.api.server import create_app

    from toolgrpo.training.orphans import end_with_parent

    end_with_parent()
    return create_app(ephemeral=True, final=True)


def prefect_home_problem() -> str | None:
    """Why a temporary server could not keep its database in PREFECT_HOME (a read-only or full
    disk, no permission), or None: also when an API is configured, which needs no local one."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        return None
    home = settings.home
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home) as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        return (
            f"cannot write PREFECT_HOME {home}: {error.strerror or error} (the temporary Prefect "
            "server keeps its database there: set PREFECT_HOME to a writable folder, or "
            "PREFECT_API_URL to a running server)"
        )
    return None


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception): ")


class _Server(NamedTuple):
    process: subprocess.Popen[bytes]
    url: str  # its API's
    output: IO[bytes]  # what it prints: read if it fails (a pipe nobody reads would stop it)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(settings: Settings, output: IO[bytes]) -> _Server:
    """A temporary server's process on a free local port, printing to `output`."""
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", f"{__name__}:temporary_api"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "error"]
    # at exit, after Prefect's own exit handlers sent what the runs logged: what the server
    # still waits on (seen: 5 s, until `_stop` killed it, after a 1M-row `validate`) is dropped
    command += ["--timeout-graceful-shutdown", str(SERVER_STOP_GRACE_S)]
    from toolgrpo.training.orphans import child_environment

    environment = {
        **os.environ,
        **settings.to_environment_variables(exclude_unset=True),
        **child_environment(),
    }
    # A session of its own: a terminal's Ctrl-C reaches the command, which still needs the
    # server to record how its runs ended; the server ends with the command however it ends.
    process = subprocess.Popen(
        [*command, "--lifespan", "on"],
        env=environment,
        stdout=output,
        stderr=output,
        start_new_session=True,
    )
    return _Server(process, f"http://127.0.0.1:{port}/api", output)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _serving(server: _Server, timeout_s: float) -> bool:
    """Whether `server` answers `/health` within `timeout_s`; False where another process took
    its port first (between the probe and its start); `TemporaryServerFailed` if it exits
    otherwise or does not answer."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while server.process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=1.0).is_success:
                return True
        time.sleep(0.05)
    if server.process.poll() is None:
        _stop(server.process)
        raise TemporaryServerFailed(
            f"the temporary Prefect server did not answer within {timeout_s:.0f} s; set "
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS higher, or run `prefect server "
            "start` and set PREFECT_API_URL"
        )
    server.output.seek(0)
    printed = server.output.read().decode(errors="replace")
    if "address already in use" in printed:
        return False
    lines = printed.strip().splitlines()
    # the exception that stopped it, not the log line that it stopped
    errors = [line for line in lines if _EXCEPTION_LINE.match(line)] or lines
    said = f": {errors[-1]}" if errors else ""
    raise TemporaryServerFailed(
        f"the temporary Prefect server exited with status {server.process.returncode}{said}"
    )


@contextlib.contextmanager
def temporary_server_starting() -> Iterator[None]:
    """Start the temporary Prefect server a first flow run would otherwise start and wait for
    (~3 s of its own, on 2 cores) while the block runs (importing a flow: torch, transformers;
    reading the files), so the two overlap; the block's end waits until it answers, and from
    then on this process's flow runs use it (PREFECT_API_URL) until the process exits, as
    Prefect's own. Prefect's launcher imports the whole server in this process before the
    server's own process starts (~1.5 s more, competing with the block): this one starts it
    at once. Enter it once the arguments are checked, so a usage error never waits for a
    server. Only where no API is configured and a temporary server is allowed."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield
        return
    timeout_s = settings.server.ephemeral.startup_timeout_seconds
    with tempfile.TemporaryFile() as output:
        server = _launch(settings, output)
        # stopped after the flow runs' own exit handlers (registered later: last in, first out)
        atexit.register(_stop, server.process)
        yield
        if not _serving(server, timeout_s):  # its port taken: once more, on another
            output.seek(0)
            output.truncate()
            server = _launch(settings, output)
            atexit.register(_stop, server.process)
            if not _serving(server, timeout_s):
                raise TemporaryServerFailed(
                    "the temporary Prefect server found no free local port twice"
                )
    # the settings every thread reads that has no context of its own (Prefect's workers)
    os.environ["PREFECT_API_URL"] = server.url
    refresh_global_settings_context()
    crash_leftovers()


def crash_leftovers() -> None:
    """`crash_runs_of_dead_processes`, one line each; housekeeping that never stops the command
    it runs before (one line if it cannot be done)."""
    import httpx
    from prefect.exceptions import PrefectException

    try:
        names = crash_runs_of_dead_processes()
    except (httpx.HTTPError, PrefectException, ValueError) as error:
        print(f"toolgrpo: could not look for runs left Running: {error}", file=sys.stderr)
        return
    for name in names:
        print(
            f"toolgrpo: flow run {name!r} was left Running by a process that died: now Crashed",
            file=sys.stderr,
        )


def record_process(flow: object, flow_run: FlowRun, state: object) -> None:
    """`on_running` hook: the flow run's `infrastructure_pid` becomes this process
    (`host:pid`, as Prefect's runners write it), so that a later command can tell a run whose
    process died from one still running (`crash_runs_of_dead_processes`)."""
    from prefect import get_client

    from toolgrpo.training.orphans import this_process

    with get_client(sync_client=True) as client:
        client.update_flow_run(flow_run.id, infrastructure_pid=this_process())


def crash_runs_of_dead_processes() -> list[str]:
    """Mark Crashed every flow run left Running by a process of this host that died without
    ending it (`kill -9`, an out-of-memory kill, a machine that went down); returns their names.
    What Prefect's heartbeats and an automation do on a real server, for the database of a
    temporary one, which nothing watches between commands."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    from toolgrpo.training.orphans import process_gone

    running = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
    )
    crashed = []
    with get_client(sync_client=True) as client:
        for run in client.read_flow_runs(flow_run_filter=running):
            if process_gone(run.infrastructure_pid):
                message = (
                    f"its process ({run.infrastructure_pid}) died without ending it; marked by "
                    "the next toolgrpo command"
                )
                client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                crashed.append(run.name)
    return crashed


@contextlib.contextmanager
def without_heartbeats() -> Iterator[None]:
    """Flow runs started in the block send Prefect no heartbeats. Prefect's synchronous engine
    joins its heartbeat thread at each run's end, and the thread sleeps in 1 s steps: up to a
    second of every run (`validate` of a 454-row file 3.2 → 2.2 s). Heartbeats let an
    automation mark a run whose process died as crashed: what a deployment's long, unattended
    runs need (they keep them), not a short command watched from its terminal."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


class _NoTracebacks(logging.Filter):
    """Drops, on the terminal only, Prefect's log of an exception a flow or task raised: the
    command prints one line for each error it expects, and Python shows the traceback of any
    other. The Prefect API still gets the whole log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is None


class _EventsLostOnce(logging.Filter):
    """Shows, on the terminal, Prefect's 'EventsWorker failed to process item' once and without
    the event's 3 kB dump: with the API away it comes every few seconds for each state change.
    The flow run's own lines keep coming."""

    def __init__(self) -> None:
        super().__init__()
        self._said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Service %r failed to process item"):
            return True
        if self._said:
            return False
        self._said = True
        record.msg = "Service %r could not send the run's events to the Prefect API (shown once)"
        record.args = record.args[:1] if isinstance(record.args, tuple) else record.args
        return True


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
    (`_NoTracebacks`), and its lost events after the first (`_EventsLostOnce`)."""
    for handler in _console_handlers():
        handler.addFilter(_NoTracebacks())
    for handler in logging.getLogger("prefect._internal").handlers:  # its own, to stderr
        handler.addFilter(_EventsLostOnce())
