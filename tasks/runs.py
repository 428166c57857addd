"""Run folders and run labels: one fresh folder per flow run, named so they sort by time, and the
names and tags that let a person find a flow run in the Prefect UI."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.context import FlowRunContext
from prefect.runtime import flow_run
from prefect.states import Cancelled, Failed, State
from prefect.transactions import get_transaction

# How a data hash is shown in tags and reports.
SHORT_HASH = 12
HASH_CHUNK_BYTES = 1 << 20
# The loggers through which Prefect's engines log a failed run's exception with its traceback.
ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def new_run_dir(root: Path, label: str) -> Path:
    """A new empty folder `root/<YYYYmmdd-HHMMSS>-<label>-<6 hex>/`, created now.

    The random suffix keeps two runs started in the same second apart; an existing folder is
    never reused, so a run can never overwrite another run's report.
    """
    while True:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(root) / f"{stamp}-{label}-{secrets.token_hex(3)}"
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        return run_dir


def run_name(*parts: object) -> str:
    """A flow run name that says what ran and when: `retrain-cpu-20261201-0529`. A retried run
    (the UI's Retry) keeps the name its first attempt was given."""
    if flow_run.run_count and flow_run.name:  # read before this attempt counts itself
        return flow_run.name
    return "-".join([*map(str, parts), datetime.now().strftime("%Y%m%d-%H%M")])


def clear_earlier_attempts() -> None:
    """On a retried flow run, delete the artifacts its earlier attempts published (and say so),
    so that the run's Artifacts tab shows this attempt's: a failed gate's verdict beside a
    passing one reads as a failure. Their reports stay in their own run folders."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None or context.flow_run.run_count <= 1:
        return
    with get_client(sync_client=True) as client:
        earlier = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[context.flow_run.id])
            )
        )
        for artifact in earlier:
            client.delete_artifact(artifact.id)
    if earlier:
        keys = sorted({artifact.key or artifact.type or "artifact" for artifact in earlier})
        get_run_logger().info(
            "attempt %d: the artifacts of the earlier attempts (%s) were removed",
            context.flow_run.run_count,
            ", ".join(keys),
        )


def files_hash(paths: Iterable[Path]) -> str:
    """A hash of the files' bytes, in order (what changed since the last run). A missing file
    adds nothing: the data gate reports it."""
    digest = hashlib.sha256()
    for path in map(Path, paths):
        if path.is_file():
            with path.open("rb") as file:  # in chunks: a 1 GB file is not held in memory twice
                while chunk := file.read(HASH_CHUNK_BYTES):
                    digest.update(chunk)
    return digest.hexdigest()


def tag_flow_run(*tags: str) -> None:
    """Add `tags` to the running flow run (a deployment's own tags stay), so that the UI's
    filters find runs by preset or data."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None:
        raise RuntimeError("tag_flow_run runs inside a flow run")
    # a `key:value` tag replaces the run's earlier one of that key: a retried run whose data
    # changed carries one `data:` tag, this attempt's
    keys = {tag.partition(":")[0] for tag in tags if ":" in tag}
    kept = [tag for tag in run.tags if not (":" in tag and tag.partition(":")[0] in keys)]
    merged = list(dict.fromkeys([*kept, *tags]))
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, tags=merged)
    run.tags = merged


class _ToldAlready(logging.Filter):
    """Drops the Prefect engines' records of an exception whose story the run has already told
    (in one line, or the gate's problem lines and verdict): the task engine logs a failed task's
    exception with its traceback, and under a deployment the flow engine logs a failed flow's
    exception again ("Engine execution exited with unexpected exception"), the last line of the
    run's log and so the first an on-call engineer reads."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.kind, self.message = type(failure), str(failure)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, self.kind) and str(error) == self.message)


def told_already(failure: Exception) -> None:
    """Keep the engines' tracebacks of `failure` out of the run's log: the run says it itself."""
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).addFilter(_ToldAlready(failure))


class _EndedAlready(logging.Filter):
    """Drops the task engine's "Finished in state Cancelled(…)" of a task a Cancel stopped: the
    engine logs any state but Completed at ERROR, and the flow logs the same line once, at
    WARNING (`cancelled_run`)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.line = f"Finished in state {state}"

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.line


def cancelled_task(stopped: Exception) -> State:
    """The Cancelled state a task returns when a Cancel stopped its work, so that its run shows
    Cancelled like the flow run around it; a raised exception would show Failed. Prefect hands
    a returned state to the caller as the task's value, and would cache it as the task's result
    for the next run: the task's cache write is dropped, and the engine's ERROR line for it too
    (`_EndedAlready`)."""
    if (transaction := get_transaction()) is not None:
        transaction.write_on_commit = False
    state: State = Cancelled(message=str(stopped))
    logging.getLogger("prefect.task_runs").addFilter(_EndedAlready(state))
    return state


def failed_run(failure: Exception) -> State:
    """The Failed state a flow returns to end red with `failure` as its one-line message, logged
    once at ERROR and without a traceback; calling the flow then raises `failure`."""
    told_already(failure)
    get_run_logger().error("%s", failure)
    return Failed(message=str(failure), data=failure)


def cancelled_run(stopped: Exception) -> State:
    """The Cancelled state a flow returns when a person cancelled it while it worked (from the
    Prefect UI): the run stays Cancelled, with `stopped` (where it stopped, how to go on) as its
    message, logged once without a traceback."""
    told_already(stopped)
    get_run_logger().warning("%s", stopped)
    return Cancelled(message=str(stopped), data=stopped)
