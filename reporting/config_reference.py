"""The configuration reference (docs/configuration.md), rendered from the typed training config
and the shipped presets, so that it cannot drift from them (a test compares the file).

    python -m toolgrpo.reporting.config_reference > docs/configuration.md
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from toolgrpo.data import DATA_DIR
from toolgrpo.reporting.markdown import Markdown, code_span, markdown_table
from toolgrpo.training import Preset
from toolgrpo.training.config import TrainConfig
from toolgrpo.training.config_overrides import (
    load_preset,
    overridable_fields,
    preset_names,
    section_summary,
)

REGENERATE = "python -m toolgrpo.reporting.config_reference > docs/configuration.md"

_INTRODUCTION = """\
One typed config (`training/config.py`, pydantic) in sections, and four presets as YAML recipes
over it (`training/presets/`): `smoke` (a pipeline check in minutes), `cpu` (the main job: a tiny
model built locally, trained on rows that write each comparison out place by place),
`pretrained` (Gemma 3 270M from the package registry on the CPU: its vocabulary cut to the
data's, LoRA, bf16 where the CPU has it) and `gpu` (a pretrained base model of yours with LoRA).
A preset's relative data paths are under the data folder; a preset may `extends: <another>` and
state only what differs.

Any field below can be overridden by its dotted path: `toolgrpo run --set grpo.max_steps=20`
(values are read as YAML: `true`, `null`, `5e-5`), or in the `config` parameter of the retrain
flow and its deployment form, whose descriptions are the ones below. A misspelt field is an error
that names the closest one, and a renamed one its new name (`runtime.use_cpu` →
`runtime.device`). `toolgrpo run` sets `data.train_single_step`, `data.train_multistep` from
`--train` and `data.catalogue` from `--catalogue`; the `base` section is read by `toolgrpo base
build` only. The `sft`, `grpo` and `runtime` fields carry TRL's own names and go to `SFTConfig` /
`NGRPOConfig` as they are; TRL's defaults hold for every other argument.

Only `seed`, `data` (but not its paths), `model`, `sft` and `grpo` (but not where vLLM runs:
`grpo.vllm_mode`, `vllm_server_base_url`, `vllm_gpu_memory_utilization`,
`vllm_tensor_parallel_size`) change the trained weights, so only they are in the training cache
key (`TrainConfig.weights_key`); changing a `runtime` field (threads, processes, device,
accelerate config, checkpoints, logging, eval subset) reuses the trained models. The key is
taken before the config is placed on the machine: a `gpu` run that fell back to the CPU (float32)
has the key of the same run in bf16 on a GPU. The cache lives in this machine's Prefect storage
and run folders, so this only matters where both are shared between a CPU and a GPU machine;
there, retrain with `PREFECT_TASKS_REFRESH_CACHE=true`. The `base` section is in no run's key: a
run reads a built base through `model.base_model` (its path, not its bytes, is in the key —
rebuilding a base in place needs `PREFECT_TASKS_REFRESH_CACHE=true` too), and the build keys
itself by its card."""


def _presets() -> list[str]:
    """The shipped presets, in the order the CLI lists them, then any other preset file."""
    names = preset_names()
    listed = [name for name in typing.get_args(Preset) if name in names]
    return listed + [name for name in names if name not in listed]


def _type_name(annotation: Any) -> str:
    """A field's type as a user writes it: `int | None`, `"cpu" | "cuda"`, `list[path]`."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:  # a type with the validators that read it
        return _type_name(typing.get_args(annotation)[0])
    if origin is Literal:
        return " | ".join(f'"{value}"' for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(part) for part in typing.get_args(annotation))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(map(_type_name, typing.get_args(annotation)))}]"
    if annotation is type(None):
        return "None"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _value_text(value: Any) -> str:
    """A default as `--set` takes it (YAML): `null`, `true`, `5e-05`, a path under the data
    folder's parent as it is written in the repository."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Path):
        return value.relative_to(DATA_DIR.parent).as_posix() if value.is_absolute() else str(value)
    if isinstance(value, list | tuple):
        return ", ".join(map(_value_text, value))
    return str(value)


def _value_at(config: TrainConfig, path: str) -> Any:
    value: Any = config
    for name in path.split("."):
        value = getattr(value, name)
    return value


def _section_doc(path: str) -> str:
    """The first paragraph of the docstring of the section at dotted `path`."""
    section: Any = TrainConfig
    for name in path.split("."):
        section = section.model_fields[name].annotation
    return section_summary(section)


def render_configuration_reference() -> str:
    """docs/configuration.md: every field `--set` accepts, with its type, each preset's value and
    its description, one table per section."""
    presets = _presets()
    configs = {name: load_preset(name) for name in presets}
    sections: dict[str, list[dict[str, Any]]] = {}
    for path, field in overridable_fields().items():
        parent = path.rpartition(".")[0]
        row = {
            "field": Markdown(code_span(path)),
            "type": Markdown(code_span(_type_name(field.annotation))),
        }
        for name, config in configs.items():
            row[name] = Markdown(code_span(_value_text(_value_at(config, path))))
        row["what it does"] = Markdown(field.description)
        sections.setdefault(parent, []).append(row)
    parts = [
        f"<!-- Generated from training/config.py and training/presets/ by `{REGENERATE}`;"
        " do not edit by hand. -->",
        "# Configuration reference",
        _INTRODUCTION,
    ]
    for parent, rows in sections.items():
        if parent:
            parts += [f"## `{parent}`", _section_doc(parent)]
        else:
            parts.append("## Top level")
        parts.append(markdown_table(rows))
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render_configuration_reference(), end="")
