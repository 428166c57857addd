"""A flow of two stages that watch their run as the training task does (`FlowRunWatch`), served
as a deployment: `test_prefect_server` suspends it during the first stage."""

import time

from prefect import flow, get_run_logger, task

from toolgrpo.tasks.run_state import FlowRunWatch


@task(task_run_name="{name}")
def stage(name: str, seconds: float) -> str:
    watch = FlowRunWatch(name)
    try:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            if stopped := watch.stop_requested():
                return f"{name}: {stopped}"
            time.sleep(0.5)
    finally:
        watch.close()
    return f"{name}: done"


@flow(name="two-stages")
def two_stages() -> list[str]:
    # the first long enough to be suspended while it watches; the second only has to run
    done = [stage("first", 20.0), stage("second", 1.0)]
    get_run_logger().info("%s", done)
    return done


if __name__ == "__main__":
    two_stages.serve(name="served")
