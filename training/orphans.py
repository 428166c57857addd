"""No orphans: a process toolgrpo starts ends when the command that started it is gone.

The training process (and every worker `accelerate launch` starts) and the temporary Prefect
server run in sessions of their own, so that a terminal's Ctrl-C reaches only the command, which
then stops them in order. If the command dies without doing so (`kill -9`, an out-of-memory
kill), each of them notices within a second that its command's pid is gone and terminates
itself: the command passes its pid in `TOOLGRPO_PARENT_PID`, which `accelerate launch` hands on
to its workers with the rest of the environment.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

PARENT_PID_VARIABLE = "TOOLGRPO_PARENT_PID"
POLL_S = 1.0


def child_environment() -> dict[str, str]:
    """The environment variable a child needs to end with this process."""
    return {PARENT_PID_VARIABLE: str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process took the pid: ours is gone
        return False
    return True


def this_process() -> str:
    """`host:pid`, as Prefect's runners write a flow run's `infrastructure_pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_gone(host_pid: str | None) -> bool:
    """Whether `host:pid` (`this_process()` of some process) names a process of this host that
    no longer runs; False for another host's, which cannot be told from here."""
    host, _, pid = (host_pid or "").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


def end_with_parent() -> None:
    """When this process was started with `child_environment()`, watch that pid from a daemon
    thread and send this process SIGTERM once it is gone; otherwise do nothing."""
    pid = os.environ.get(PARENT_PID_VARIABLE, "")
    if not pid.isdigit() or int(pid) == os.getpid():
        return

    def watch() -> None:
        while _alive(int(pid)):
            time.sleep(POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
