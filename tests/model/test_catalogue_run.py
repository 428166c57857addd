"""A smoke retrain with your own tool catalogue: the training process and evaluation use it, the
run folder keeps it, and the training cache tells it from the shipped one."""

import json

import polars as pl
import pytest

from toolgrpo.flows.retrain import CATALOGUE_FILE, RetrainOverrides, retrain
from toolgrpo.schemas.catalogue import DEFAULT_CATALOGUE
from toolgrpo.training.config import CONFIG_FILENAME
from toolgrpo.training.config_overrides import read_config

pytestmark = pytest.mark.slow

QUICK = RetrainOverrides.from_dotted({"grpo.max_steps": 1, "runtime.eval_max_rows": 4})
EXTRA_TOOL = {
    "name": "freeze_card",
    "description": {"en": "Freeze one of the user's cards.", "zh": "冻结用户的一张卡。"},
    "keywords": {"en": ["freeze"], "zh": ["冻结"]},
    "params": {"type": "object", "properties": {"card": {"type": "string"}}, "required": ["card"]},
}


def test_a_run_trains_and_evaluates_with_its_own_catalogue(prefect_harness, tmp_path):
    spec = json.loads(DEFAULT_CATALOGUE.read_text(encoding="utf-8"))
    catalogue = tmp_path / "my_tools.json"
    catalogue.write_text(json.dumps({**spec, "tools": [*spec["tools"], EXTRA_TOOL]}), "utf-8")
    out = tmp_path / "runs"
    kwargs = {"preset": "smoke", "out": out, "config": QUICK, "audit_training_rows": False}

    summary = retrain(catalogue=catalogue, **kwargs)
    kept = summary.run_dir / CATALOGUE_FILE
    assert kept.read_bytes() == catalogue.read_bytes()
    for stage in ("sft", "grpo"):
        assert read_config(summary.models[stage] / CONFIG_FILENAME).data.catalogue == kept
    predictions = pl.read_parquet(summary.run_dir / "eval_grpo" / "predictions.parquet")
    assert "p_freeze_card" in predictions.columns

    shipped = retrain(**kwargs)
    assert shipped.retrained and shipped.config_hash != summary.config_hash
    assert (shipped.run_dir / CATALOGUE_FILE).read_bytes() == DEFAULT_CATALOGUE.read_bytes()
