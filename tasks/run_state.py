"""What the Prefect UI asks of a running flow run, seen from the task that supervises training.

A run started by `toolgrpo run` has no runner to stop it when someone clicks Cancel, and a run
that was Suspended is Cancelled by the server without anyone told (it assumes a suspended run
holds no process): either way the trainer would run on under a run shown Cancelled. The
training task therefore reads its flow run's state itself, from a thread of its own so that a
slow or unreachable API never holds up the stage's log lines or its deadline. Under `serve` or a
worker the runner stops the process with SIGTERM on Cancel; the task then asks the API whether
that was a Cancel, so the stage ends Cancelled with where it stopped, not as a crash.

A Suspend of a deployment's run reaches the flow's process twice: as the run's state, which the
watch sets back to Running, and as Prefect's in-process request to stop at the next task's
start or end. Refused on the server alone, the run would stop at the next stage, its process
gone and the server still showing it Running; so the watch withdraws the request as well.
"""

from __future__ import annotations

import contextvars
import threading
import time
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.objects import State, StateType
from prefect.context import FlowRunContext
from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings
from prefect.states import Running

from toolgrpo.tasks.artifacts import api_answered, api_failed

WATCH_INTERVAL_S = 2.0
# How long to wait for a refused Suspend's in-process request to arrive (Prefect confirms the
# Suspend's event against the server before it requests the stop), so that it is withdrawn,
# not left to stop the next stage.
SUSPEND_REQUEST_WAIT_S = 10.0
# The states in which the person at the UI wants the run stopped.
STOPPING = {StateType.CANCELLING, StateType.CANCELLED}


def _stop_reason(state: State | None) -> str | None:
    """Why a run in `state` should stop (`cancelled from the Prefect UI`), or None."""
    if state is not None and state.type in STOPPING:
        return f"cancelled from the Prefect UI (the run is {state.name})"
    return None


class FlowRunWatch:
    """Reads the flow run's state every `WATCH_INTERVAL_S` seconds while training runs.

    `stop_requested()` says why to stop once the run is Cancelling or Cancelled (from Running or
    from Suspended alike). A Pause or Suspend is refused: training cannot be paused in place,
    so the run is set Running again with a line that says so; Cancel stops it, and a later run
    resumes from its last checkpoint. Outside a flow run (a task called as a function) it
    watches nothing."""

    def __init__(self, stage: str) -> None:
        context = FlowRunContext.get()
        self._run_id: UUID | None = context.flow_run.id if context and context.flow_run else None
        # a deployment's run: a runner (`serve`, a worker) executes it and answers Cancel
        self._deployed = bool(context and context.flow_run and context.flow_run.deployment_id)
        self._suspension = context.flow_run_suspension_request if context else None
        self._refused_suspend = False
        self._stage = stage
        self._stop: str | None = None
        self._unreachable_said = False
        self._done = threading.Event()
        self._logger = get_run_logger()
        if self._run_id is not None:
            run_in_context = contextvars.copy_context().run
            threading.Thread(target=run_in_context, args=(self._watch,), daemon=True).start()

    def stop_requested(self) -> str | None:
        """Why the stage should stop now (`cancelled from the Prefect UI`), or None."""
        return self._stop

    def close(self) -> None:
        """Stop watching; withdraw the in-process stop request of a Suspend refused meanwhile."""
        self._done.set()
        if self._refused_suspend and self._suspension is not None:
            deadline = time.monotonic() + SUSPEND_REQUEST_WAIT_S
            while not self._suspension.is_requested() and time.monotonic() < deadline:
                time.sleep(0.2)
            # Prefect 3.9's request has no withdraw; its setter takes the state to stop with
            self._suspension.mark_requested(None)  # type: ignore[arg-type]

    def stopped_by_cancel(self) -> str | None:
        """Why the process was told to stop, read from the API now, when that was a Cancel:
        under `serve` or a worker the runner answers a Cancel with SIGTERM before the watch
        sees it. None: another stop (a worker shut down, a pod evicted), which stays a crash."""
        if self._stop or self._run_id is None or not self._deployed:
            return self._stop
        try:
            with get_client(sync_client=True, httpx_settings={"timeout": 5.0}) as client:
                state = client.read_flow_run(self._run_id).state
        except Exception:  # unreachable: not known to be a Cancel
            return None
        return _stop_reason(state)

    def _watch(self) -> None:
        # One try a read, not the client's retries (about a minute when the server is gone):
        # the next read is 2 s away, and an outage is then known at once (`ApiOutage`), so the
        # report's artifacts do not each wait it out.
        with (
            temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 0}),
            get_client(sync_client=True) as client,
        ):
            while not self._done.wait(WATCH_INTERVAL_S):
                try:
                    state = client.read_flow_run(self._run_id).state  # type: ignore[arg-type]
                except Exception as error:  # the API away: training goes on regardless
                    api_failed()
                    if not self._unreachable_said:
                        self._unreachable_said = True
                        self._logger.warning(
                            "%s: cannot read the flow run's state from the Prefect API (%s); "
                            "training goes on, a Cancel is seen once the API answers",
                            self._stage,
                            error,
                        )
                    continue
                api_answered()
                if state is None:
                    continue
                self._stop = _stop_reason(state)
                if self._stop:
                    return
                if state.type == StateType.PAUSED:
                    self._refuse_pause(client, state.name or "Pause")

    def _refuse_pause(self, client: object, name: str) -> None:
        # Prefect requests the in-process stop for a Suspend of a deployment's run only
        self._refused_suspend = self._refused_suspend or (self._deployed and name == "Suspended")
        self._logger.warning(
            "%s: %s refused: a training stage cannot be paused in place, so the run goes on "
            "(Cancel stops it; a later run resumes from its last checkpoint)",
            self._stage,
            name,
        )
        client.set_flow_run_state(  # type: ignore[attr-defined]
            self._run_id, Running(message=f"{name} refused while {self._stage} trains"), force=True
        )
