"""The retrain flow's training-config parameters, importable without torch: `toolgrpo run`
checks its arguments against them before it imports the flow (and starts a Prefect server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolgrpo.training.config_overrides import Overrides, overrides_model

# Training config fields the flow sets itself, and the parameter that sets each.
FLOW_FIELDS = {
    "data.train_single_step": "train_files",
    "data.train_multistep": "train_files",
    "data.catalogue": "catalogue",
}
# A section no run reads: the recipe of `toolgrpo base build` (a run reads a built base through
# `model.base_model`).
BASE_RECIPE = "base"
# The training config fields a run can override, typed and described for the deployment form: a
# model built from the config at import, which static checkers know by its base class.
if TYPE_CHECKING:
    RetrainOverrides = Overrides
else:
    RetrainOverrides = overrides_model(skip={*FLOW_FIELDS, BASE_RECIPE})
