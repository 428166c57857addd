"""A flow of two stages that watch their run as the training task does (`FlowRunWatch`), served
as a deployment: `test_prefect_server` suspends it during the first stage."""

import time

from prefect import flow, get_run_logger, task

from toolgrpo.tasks.run_state import FlowRunWatch

STAGE_S = 20.0


@task(task_run_name="{name}")
def stage(name: str) -> str:
    watch = FlowRunWatch(name)
    try:
        ends = time.monotonic() + STAGE_S
        while time.monotonic() < ends:
            if stopped := watch.stop_requested():
                return f"{name}: {stopped}"
            time.sleep(0.5)
    finally:
        watch.close()
    return f"{name}: done"


@flow(name="two-stages")
def two_stages() -> list[str]:
    done = [stage("first"), stage("second")]
    get_run_logger().info("%s", done)
    return done


if __name__ == "__main__":
    two_stages.serve(name="served")
