"""The tool catalogue (data/tools.json unless `--catalogue PATH`) and the one params validator
everything reuses.

A catalogue is passed explicitly to whatever reads tool names, keywords or params schemas, with
the shipped one as the default; it hashes by content, so the per-catalogue caches
(`functools.cache` on a function of the catalogue) hold one entry per distinct catalogue.
"""

from __future__ import annotations

import json
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import fastjsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.errors import validation_problems

DEFAULT_CATALOGUE = DATA_DIR / "tools.json"


class Bilingual(BaseModel):
    """Texts in English and Chinese; a catalogue of one language leaves `zh` out."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    en: list[str] | str
    zh: list[str] | str = []

    def texts(self, lang: str) -> list[str]:
        """The texts in `lang` ("en" or "zh"), a single text as a list of one."""
        value = getattr(self, lang)
        return [value] if isinstance(value, str) else list(value)


class Tool(BaseModel):
    """One callable tool: what it does, the words that ask for it, and its params' JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[a-z_]+$")
    description: Bilingual
    keywords: Bilingual
    params: dict[str, Any]


class Catalogue(BaseModel):
    """The tools an agent may call; validates params against each tool's JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: int
    tools: list[Tool] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique_and_schemas_compile(self) -> Catalogue:
        names = [tool.name for tool in self.tools]
        if len(names) != len(set(names)):
            raise ValueError(f"tool names must be unique, got {names}")
        for tool in self.tools:
            try:
                fastjsonschema.compile(tool.params)
            except fastjsonschema.JsonSchemaDefinitionException as error:
                raise ValueError(f"tool {tool.name!r}: invalid params schema: {error}") from None
        return self

    def __hash__(self) -> int:
        return hash(self._content)

    @cached_property
    def _content(self) -> str:
        return self.model_dump_json()

    @property
    def names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    def tool(self, name: str) -> Tool:
        return {tool.name: tool for tool in self.tools}[name]

    @cached_property
    def _validators(self) -> dict[str, Any]:
        return {tool.name: fastjsonschema.compile(tool.params) for tool in self.tools}

    def params_error(self, tool: object, params: object) -> str | None:
        """Why `params` is not a valid argument object for `tool`, or None when it is."""
        if not isinstance(tool, str) or tool not in self._validators:
            return f"unknown tool {tool!r}"
        try:
            self._validators[tool](params)
        except fastjsonschema.JsonSchemaValueException as error:
            return error.message
        except (TypeError, ValueError, RecursionError) as error:  # e.g. unhashable or huge values
            return f"params not checkable: {type(error).__name__}"
        return None

    def params_valid(self, tool: object, params: object) -> bool:
        return self.params_error(tool, params) is None


class CatalogueError(ValueError):
    """A catalogue file that cannot be used: one line saying which file and why."""


def load_catalogue(path: Path | str = DEFAULT_CATALOGUE) -> Catalogue:
    """The catalogue at `path`, validated (unique names, compilable params schemas); raises
    `CatalogueError` when the file is missing, not JSON or not a catalogue."""
    path = Path(path)
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CatalogueError(f"{path}: cannot read the tool catalogue: {error.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CatalogueError(f"{path}: the tool catalogue is not JSON: {error}") from None
    try:
        return Catalogue.model_validate(values)
    except ValidationError as error:
        problems = validation_problems(error, whole="catalogue")
        raise CatalogueError(f"{path}: not a tool catalogue: {problems}") from None


def catalogue_at(path: Path | str | None) -> Catalogue:
    """The catalogue at `path`, or the shipped one when `path` is None."""
    return default_catalogue() if path is None else load_catalogue(path)


@cache
def default_catalogue() -> Catalogue:
    """The shipped catalogue (data/tools.json), loaded once per process."""
    return load_catalogue()
