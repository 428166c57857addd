"""The tool catalogue (data/tools.json) and the one params validator everything reuses."""

from __future__ import annotations

import json
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import fastjsonschema
from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolgrpo.data import DATA_DIR

DEFAULT_CATALOGUE = DATA_DIR / "tools.json"


class Bilingual(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    en: list[str] | str
    zh: list[str] | str

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
    tools: list[Tool]

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


def load_catalogue(path: Path | str = DEFAULT_CATALOGUE) -> Catalogue:
    """The catalogue at `path`, validated (unique names, compilable params schemas)."""
    return Catalogue.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))


@cache
def default_catalogue() -> Catalogue:
    """The shipped catalogue (data/tools.json), loaded once per process."""
    return load_catalogue()
