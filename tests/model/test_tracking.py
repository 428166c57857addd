"""Training curves where ML teams look: a stage run with `runtime.report_to: tensorboard` writes
TRL's per-step metrics as TensorBoard event files named after the Prefect flow run."""

from pathlib import Path

import pytest
from prefect import flow

from toolgrpo.tasks.train import train_stage
from toolgrpo.training.config_overrides import load_preset

pytestmark = pytest.mark.slow


@flow(name="tracked-stage", flow_run_name="tracked-smoke")
def _tracked_stage(run_dir: Path, config):
    return train_stage("sft", run_dir, config, timeout_s=600)


def test_a_stage_sends_its_per_step_metrics_to_tensorboard_named_like_the_flow_run(
    prefect_harness, tmp_path
):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = load_preset(
        "smoke",
        {"sft.num_train_epochs": 0.5, "runtime.report_to": "tensorboard", "runtime.save_steps": 50},
    )
    result = _tracked_stage(tmp_path / "run", config)

    (logdir,) = (tmp_path / "run" / "tensorboard").iterdir()
    assert logdir.name == "tracked-smoke-sft"
    curves = EventAccumulator(str(logdir))
    curves.Reload()
    loss = curves.Scalars("train/loss")
    assert [point.step for point in loss] == list(range(1, len(loss) + 1))
    assert len(loss) == result.steps >= 2  # one point per optimiser step (logging_steps 1)
    assert all(point.value > 0 for point in loss)
