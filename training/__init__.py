"""What runs inside the training process: config, model, SFT, GRPO with NGRPO, rewards."""

from typing import Literal

# The shipped presets (presets/<name>.yaml), as typed parameters of the CLI and the flows: here,
# so that the CLI names them without importing the config's dependencies.
Preset = Literal["smoke", "cpu", "pretrained", "gpu"]
