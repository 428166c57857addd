"""How a training config is made: a preset's YAML, dotted overrides, and their typed form.

Overrides are dotted paths (`{"sft.num_train_epochs": 3}`), from `toolgrpo run --set`, a flow
parameter or a test; `overridable_fields()` lists them, and `overrides_model()` is their typed
form (nested sections of unset fields, with their descriptions): the retrain flow's `config`
parameter, which a deployment form lists field by field. The config is written next to each model
so a run can be reproduced.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)

from toolgrpo.data import DATA_DIR
from toolgrpo.training.config import ConfigError, DataSection, TrainConfig

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class OverridableField(NamedTuple):
    """One field an override can set: its type annotation, what it does, and its bounds and the
    validators that read a value into it (pydantic's field metadata)."""

    annotation: Any
    description: str
    metadata: tuple[Any, ...] = ()

    def as_read(self) -> Any:
        """The type with its bounds and readers (one file for a list of files): an override is
        read as the config reads it, and a form built from it refuses what the config would
        (`grpo.max_steps` -1) before a run starts."""
        return Annotated[self.annotation, *self.metadata] if self.metadata else self.annotation


def overridable_fields() -> dict[str, OverridableField]:
    """Every field an override can set, by dotted path (`"grpo.max_steps"`), with its type and
    description: what the CLI and the deployment form list."""
    return {path: field for path, field in _leaves(TrainConfig, "") if path != "preset"}


def _fields(cls: type) -> list[tuple[str, OverridableField]]:
    """Each field of a section by name: a pydantic model or a dataclass such as the reward's
    points."""
    if issubclass(cls, BaseModel):
        return [
            (name, OverridableField(f.annotation, f.description or "", tuple(f.metadata)))
            for name, f in cls.model_fields.items()
        ]
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a config section")
    hints = typing.get_type_hints(cls)
    return [
        (f.name, OverridableField(hints[f.name], f.metadata.get("description", "")))
        for f in dataclasses.fields(cls)
    ]


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and (
        issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)
    )


def _leaves(cls: type, prefix: str) -> Iterator[tuple[str, OverridableField]]:
    """The dotted leaf fields of a section, nested sections expanded."""
    for name, field in _fields(cls):
        if _is_section(field.annotation):
            yield from _leaves(field.annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


# Validation context of `Overrides.from_dotted`: a null there is a value (`--set
# data.max_train_rows=null`: every row), not an empty field.
NULL_IS_A_VALUE = "null_is_a_value"


class Overrides(BaseModel):
    """Set fields of a training config, in its sections; what is not set keeps the preset's.

    In a payload (a flow parameter, the deployment form, prefect.yaml) a null field is an empty
    one: it keeps the preset's value, like a field left out (a form may send every field it
    lists, those left empty as null)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_fields_keep_the_preset(cls, values: Any, info: ValidationInfo) -> Any:
        if not isinstance(values, Mapping) or (info.context or {}).get(NULL_IS_A_VALUE):
            return values
        return {name: value for name, value in values.items() if value is not None}

    def dotted(self) -> dict[str, Any]:
        """The fields set, as dotted overrides (`{"grpo.max_steps": 5}`)."""
        return dict(_dotted(self.model_dump(mode="json", exclude_unset=True), ""))

    @classmethod
    def from_dotted(cls, overrides: Mapping[str, Any]) -> Overrides:
        """The model with each dotted override set, null included as a value (`--set
        runtime.eval_max_rows=null`); `load_preset` checks them more kindly."""
        return cls.model_validate(_set_dotted({}, overrides), context={NULL_IS_A_VALUE: True})


def _dotted(values: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def section_summary(cls: type) -> str:
    """The first paragraph of a section's docstring, on one line: its description in forms and
    in the configuration reference."""
    return " ".join((cls.__doc__ or "").split("\n\n")[0].split())


def form_field_schema(schema: dict[str, Any]) -> None:
    """A field's JSON schema as the deployment form should show it: empty at first (the Prefect
    UI fills a field with its schema's default and sends it), a toggle as a choice of true,
    false or none (a toggle has no "keep the preset's"), and no "None" type to pick, since a null
    is an empty field (`Overrides`). Null stays valid for the server's parameter check, which
    lets a field with a type and no default be null."""
    schema.pop("default", None)
    branches = [branch for branch in schema.pop("anyOf", []) if branch != {"type": "null"}]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = [*branches, {"type": "null"}]
    if schema.get("type") == "boolean":
        del schema["type"]
        schema["enum"] = [True, False, None]
        schema["description"] = f"{schema.get('description', '')} (None: the preset's)".strip()
    elif "enum" in schema:
        schema["enum"] = [*schema["enum"], None]


def _overrides_model(cls: type, skip: Collection[str], prefix: str = "") -> type[Overrides]:
    """An `Overrides` model with the fields of section `cls` but the dotted paths `skip`, each
    unset by default (null: unset), nested sections as nested models, descriptions kept."""
    definitions: dict[str, Any] = {}
    for name, field in _fields(cls):
        path = f"{prefix}{name}"
        if path in skip:
            continue
        if _is_section(field.annotation):
            section = _overrides_model(field.annotation, skip, f"{path}.")
            summary = section_summary(field.annotation)
            definitions[name] = (
                section | None,
                Field(None, description=summary, json_schema_extra=form_field_schema),
            )
        else:
            definitions[name] = (
                field.as_read() | None,
                Field(None, description=field.description, json_schema_extra=form_field_schema),
            )
    return create_model(
        f"{cls.__name__.removesuffix('Section')}Overrides",
        __base__=Overrides,
        __module__=__name__,
        __doc__=section_summary(cls),
        **definitions,
    )


def overrides_model(skip: Collection[str] = ()) -> type[Overrides]:
    """The typed form of the dotted overrides, every overridable field but `skip` (dotted paths
    a caller sets itself), by section with its description: what a deployment form lists."""
    return _overrides_model(TrainConfig, {"preset", *skip})


# Fields renamed since they were first released, by their old name (a section's prefix or not):
# no spelling of the old name resembles the new one.
RENAMED_FIELDS = {
    "use_cpu": "runtime.device",
    "lora_r": "model.lora.r",
    "sft_epochs": "sft.num_train_epochs",
    "sft_batch_size": "sft.per_device_train_batch_size",
}


def _unknown_field(path: str) -> str:
    """`path: unknown field`, with the field it was renamed to (`runtime.use_cpu` →
    `runtime.device`), else the known fields of the same name (`bf16` → `model.bf16`), else the
    closest one: a typo, or an old flat name such as `grpo_max_steps` (dots and underscores
    compare alike)."""
    name = path.rpartition(".")[2]
    known = {field.replace(".", "_"): field for field in overridable_fields()}
    suggestions = (
        [RENAMED_FIELDS[name]]
        if name in RENAMED_FIELDS
        else [field for field in known.values() if field.rpartition(".")[2] == name]
        or [known[c] for c in difflib.get_close_matches(path.replace(".", "_"), known, n=1)]
    )
    hint = f" (did you mean {' or '.join(map(repr, suggestions))}?)" if suggestions else ""
    return f"{path}: unknown field{hint}"


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as `dotted.field: what is wrong`."""
    path = ".".join(str(part) for part in error["loc"])
    if error["type"] in {"extra_forbidden", "unexpected_keyword_argument"}:
        return _unknown_field(path)
    # Our own checks raise ValueError: their message without pydantic's "Value error, ".
    message = error["ctx"]["error"] if error["type"] == "value_error" else error["msg"]
    return f"{path}: {message}" if path else str(message)


def _validated(values: dict[str, Any], source: str) -> TrainConfig:
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(_problem(item) for item in error.errors())
        raise ConfigError(f"{source}: invalid training config: {problems}") from None


def with_overrides(config: TrainConfig, overrides: Mapping[str, Any]) -> TrainConfig:
    """`config` with dotted-path `overrides` applied and validated again."""
    return overridden(config.model_dump(), overrides, f"preset {config.preset!r}")


def overridden(values: dict[str, Any], overrides: Mapping[str, Any], source: str) -> TrainConfig:
    """`values` (nested, as in a preset) with each dotted override set, validated."""
    known = overridable_fields()
    unknown = [path for path in overrides if path not in known]
    if unknown:
        raise ConfigError(f"{source}: " + "; ".join(map(_unknown_field, unknown)))
    return _validated(_set_dotted(copy.deepcopy(values), overrides), source)


def _set_dotted(values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (nested sections) with each dotted override set in place."""
    for path, value in overrides.items():
        *sections, name = path.split(".")
        target = values
        for section in sections:
            target = target.setdefault(section, {})
        target[name] = value
    return values


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` set section by section (a section's other fields kept)."""
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


def _preset_values(name: str, extending: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's sections as its YAML sets them, over those of the preset it `extends` (a
    variant states only what differs); its relative data paths are under the data folder, where
    the files it names ship."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; choose one of {preset_names()}")
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data = values.get("data", {})
    for field_name, value in data.items():
        field = DataSection.model_fields.get(field_name)  # an unknown one fails validation
        if field is not None and field.annotation is Path and isinstance(value, str):
            data[field_name] = DATA_DIR / value
        elif field is not None and field.annotation == list[Path]:
            files = [value] if isinstance(value, str) else value
            data[field_name] = [DATA_DIR / f if isinstance(f, str) else f for f in files]
    base = values.pop("extends", None)
    if base is None:
        return values
    if base in (name, *extending):
        raise ConfigError(
            f"presets extend each other in a circle: {' → '.join((*extending, name, base))}"
        )
    return _merged(_preset_values(base, (*extending, name)), values)


def load_preset(name: str, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The named preset with dotted-path `overrides` applied (`{"grpo.max_steps": 5}`); values
    may be strings (`"5"`), as from a command line, and are validated like the preset's."""
    values = _preset_values(name)
    config = overridden({**values, "preset": name}, overrides or {}, f"preset {name!r}")
    if "data.train_aux" in (overrides or {}) and not config.data.aux_share:
        raise ConfigError(
            f"preset {name!r}: data.train_aux is set but data.aux_share is 0, so none of its rows "
            "would be mixed in: set data.aux_share too (e.g. 0.3)"
        )
    return config


def read_config(path: Path | str) -> TrainConfig:
    """The config in a JSON file written by `TrainConfig.write`."""
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read training config: {error}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a training config is a JSON object of section: fields")
    return _validated(values, str(path))
