"""A stage that did not finish resumes from its last checkpoint when the same run is repeated in
a new run folder, as the failure message says (smoke preset, seconds)."""

import shutil

import pytest
from prefect.logging import disable_run_logger

from toolgrpo.tasks.train import train_stage
from toolgrpo.training.config import ConfigError
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.metrics import METRICS_FILENAME
from toolgrpo.training.stage import saved_checkpoints

pytestmark = pytest.mark.slow


def test_repeated_run_resumes_the_unfinished_stage_of_an_earlier_run(prefect_harness, tmp_path):
    config = load_preset("smoke")
    first, second = tmp_path / "runs" / "1-failed", tmp_path / "runs" / "2-repeated"
    with disable_run_logger():
        trained = train_stage.fn("sft", first, config, timeout_s=600, resume_key="inputs")
        shutil.rmtree(trained.model_dir)  # as if the process died after its last checkpoint
        metrics = (first / "sft" / METRICS_FILENAME).read_bytes()
        checkpoint = max(saved_checkpoints(first / "sft"))

        resumed = train_stage.fn("sft", second, config, timeout_s=600, resume_key="inputs")

    assert checkpoint > 0 and resumed.resumed_from_step == checkpoint
    assert (resumed.model_dir / "config.json").is_file()
    assert (first / "sft" / METRICS_FILENAME).read_bytes() == metrics  # the earlier run as it was
    assert not (first / "sft" / "model").exists()


def test_checkpoints_of_other_inputs_are_refused_and_left_as_they_were(prefect_harness, tmp_path):
    config = load_preset("smoke")
    run_dir = tmp_path / "runs" / "1"
    with disable_run_logger():
        train_stage.fn("sft", run_dir, config, timeout_s=600, resume_key="inputs")
        before = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
        other = with_overrides(config, {"seed": 1})
        with pytest.raises(ConfigError, match="holds checkpoints of other inputs"):
            train_stage.fn("sft", run_dir, other, timeout_s=600, resume_key="other inputs")

    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == before
