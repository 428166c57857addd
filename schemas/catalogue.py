"""The tool catalogue (data/tools.json unless `--catalogue PATH`) and the one params validator
everything reuses.

A catalogue is data, never a fetcher: in a deployment it is a form parameter, so its schemas
resolve only local `#/…` references (fastjsonschema would otherwise fetch any other `$ref`, URLs
and `file:` paths alike), and their regex patterns run on RE2, whose time is linear in the text
(Python's backtracking `re` takes minutes on `^(a+)+$` against 30 characters), for the rows and
the model's output alike.

A catalogue is passed explicitly to whatever reads tool names, keywords or params schemas, with
the shipped one as the default; it hashes by content, so the per-catalogue caches
(`functools.cache` on a function of the catalogue) hold one entry per distinct catalogue.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import fastjsonschema
import re2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.errors import validation_problems
from toolgrpo.schemas.inputs import UnreadableInput, check_input

DEFAULT_CATALOGUE = DATA_DIR / "tools.json"


def _refuse_fetching(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(
        f"$ref {uri!r} would be fetched: a catalogue resolves only local #/… references"
    )


class _NoFetching(dict):
    """fastjsonschema's `handlers` for every URI scheme: each refuses, so that no reference the
    checks below missed (a base URI set by `$id`, say) is ever fetched."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_fetching


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would also print each invalid pattern to stderr
    return options


_RE2_OPTIONS = _re2_options()


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `value`, itself included."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _patterns(schema: dict[str, Any]) -> set[str]:
    """The regexes of `schema`: `pattern` values and `patternProperties` keys (a property named
    "pattern" has a schema, not a string, as its value)."""
    found = set()
    for node in _nodes(schema):
        if isinstance(node.get("pattern"), str):
            found.add(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            found.update(node["patternProperties"])
    return found


def _pointed(schema: dict[str, Any], ref: str) -> Any:
    """The part of `schema` the local reference `ref` (`#`, `#/definitions/a`) points at; raises
    ValueError when it points at nothing."""
    target: Any = schema
    for token in [t for t in ref.removeprefix("#").split("/") if t]:
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and token in target:
            target = target[token]
        elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
            target = target[int(token)]
        else:
            raise ValueError(f"$ref {ref!r} points at nothing in the schema")
    return target


def _refs(value: Any) -> set[str]:
    return {node["$ref"] for node in _nodes(value) if isinstance(node.get("$ref"), str)}


def _check_refs(schema: dict[str, Any]) -> None:
    """Raises ValueError unless every `$ref` is local, points at a part of `schema`, and no chain
    of them leads back to itself (a recursive schema: validating a deep value would recurse
    until Python's stack runs out)."""
    refs = _refs(schema)
    if remote := sorted(ref for ref in refs if not ref.startswith("#")):
        raise ValueError(
            f"$ref {remote[0]!r} is not a local #/… reference (a catalogue fetches nothing: "
            "copy the schema in under definitions)"
        )
    leads_to = {ref: _refs(_pointed(schema, ref)) for ref in refs}

    def loops(ref: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if ref in path:
            return (*path, ref)
        for next_ref in sorted(leads_to[ref]):
            if found := loops(next_ref, (*path, ref)):
                return found
        return None

    for ref in sorted(refs):
        if cycle := loops(ref, ()):
            raise ValueError(f"recursive schema: $ref {' -> '.join(cycle)}")


def linear_pattern(pattern: str) -> Any:
    """A catalogue's `pattern` compiled by RE2, which matches in linear time: no pattern can
    backtrack for minutes on a row, a request's words or model output. Raises ValueError when
    RE2 cannot read it."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as error:
        reason = error.args[0].decode() if isinstance(error.args[0], bytes) else error
        raise ValueError(
            f"pattern {pattern!r} is not a regular expression: {reason} (RE2 syntax: no "
            "backreferences or lookaround)"
        ) from None


def compile_params_schema(schema: dict[str, Any]) -> Callable[[Any], Any]:
    """The validator of a tool's params schema: local references only, patterns checked now and
    matched by RE2. Raises ValueError saying what is wrong with the schema."""
    _check_refs(schema)
    patterns = {pattern: linear_pattern(pattern) for pattern in sorted(_patterns(schema))}
    try:
        # a copy: fastjsonschema rewrites `$ref`s in place, and the catalogue hashes by content
        validate = fastjsonschema.compile(copy.deepcopy(schema), handlers=_NoFetching())
    except (fastjsonschema.JsonSchemaDefinitionException, re.error) as error:
        raise ValueError(f"invalid params schema: {error}") from None
    # The generated code looks each pattern up in this table; RE2's `$` already means the end of
    # the text, as fastjsonschema's `\Z` rewrite does for Python's `re`.
    validate.__globals__["REGEX_PATTERNS"].update(patterns)
    return validate


class Bilingual(BaseModel):
    """Texts in English and Chinese; a catalogue of one language leaves `zh` out."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    en: list[str] | str
    zh: list[str] | str = []

    def texts(self, lang: str) -> list[str]:
        """The texts in `lang` ("en" or "zh"), a single text as a list of one."""
        value = getattr(self, lang)
        return [value] if isinstance(value, str) else list(value)

    def all_texts(self) -> list[str]:
        """The English texts, then the Chinese ones."""
        return [*self.texts("en"), *self.texts("zh")]


# What a tool's observation can be to a conditional step: the figure an amount must fit in (a
# balance, a quota, free seats), or a figure compared with the request's limit or multiplied by
# its quantity (a price, a sensor reading).
FigureRole = Literal["budget", "reading"]


class Tool(BaseModel):
    """One callable tool: what it does, the words that ask for it, and its params' JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[a-z_]+$")
    description: Bilingual
    keywords: Bilingual
    params: dict[str, Any]
    reports: FigureRole | None = Field(
        None,
        description="what its observation is to a conditional step that follows it: a `budget` "
        "an amount must fit in, or a `reading` compared with a limit (or times a quantity, "
        "against a budget); left out, a condition reads the latest step's observation",
    )


class Catalogue(BaseModel):
    """The tools an agent may call; validates params against each tool's JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: int
    # who the agent is, in the system prompt's "You are …": a team's own domain, not ours
    assistant: str = Field("an assistant", min_length=1, max_length=200)
    tools: list[Tool] = Field(min_length=1)
    not_naming: Bilingual = Field(
        Bilingual(en=[]),
        description='phrases that hold a tool\'s keyword but ask for no tool ("in order to", '
        "an account called \"checking account\"): skipped wherever a request's or a thought's "
        "wording is read",
    )

    @model_validator(mode="after")
    def _names_unique_and_schemas_compile(self) -> Catalogue:
        names = [tool.name for tool in self.tools]
        if len(names) != len(set(names)):
            raise ValueError(f"tool names must be unique, got {names}")
        # a blank keyword or phrase would match at every word of every text
        for owner, texts in [
            *((f"tool {tool.name!r} keywords", tool.keywords) for tool in self.tools),
            ("not_naming", self.not_naming),
        ]:
            if any(not text.strip() for text in texts.all_texts()):
                raise ValueError(f"{owner}: a blank text")
        for tool in self.tools:
            try:
                compile_params_schema(tool.params)
            except ValueError as error:
                raise ValueError(f"tool {tool.name!r}: {error}") from None
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

    def reporting(self, role: FigureRole) -> tuple[str, ...]:
        """The tools whose observation is a `role` figure, in catalogue order."""
        return tuple(tool.name for tool in self.tools if tool.reports == role)

    @cached_property
    def _validators(self) -> dict[str, Any]:
        return {tool.name: compile_params_schema(tool.params) for tool in self.tools}

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


class _JsonObject(dict):
    """A parsed JSON object that remembers the keys it had more than once (JSON keeps only
    the last: a second `"tools"` would silently replace the first)."""

    repeated: tuple[str, ...] = ()


def _json_object(pairs: list[tuple[str, Any]]) -> _JsonObject:
    parsed = _JsonObject(pairs)
    if len(parsed) < len(pairs):
        seen: set[str] = set()
        repeated = []
        for key, _ in pairs:
            if key in seen:
                repeated.append(key)
            seen.add(key)
        parsed.repeated = tuple(repeated)
    return parsed


def _repeated_key(values: Any) -> str | None:
    """Where the parsed catalogue `values` had a key twice (naming the tool), or None."""
    tools = values.get("tools") if isinstance(values, dict) else None
    for position, tool in enumerate(tools if isinstance(tools, list) else []):
        if repeated := [key for node in _nodes(tool) for key in getattr(node, "repeated", ())]:
            name = tool.get("name") if isinstance(tool.get("name"), str) else f"#{position + 1}"
            return f"tool {name!r}: key {repeated[0]!r} appears twice"
    if repeated := [key for node in _nodes(values) for key in getattr(node, "repeated", ())]:
        return f"key {repeated[0]!r} appears twice"
    return None


def load_catalogue(path: Path | str = DEFAULT_CATALOGUE) -> Catalogue:
    """The catalogue at `path`, validated (unique names, compilable params schemas); raises
    `CatalogueError` when the file is missing, not JSON or not a catalogue."""
    path = Path(path)
    try:
        check_input(path)
        values = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_json_object)
    except UnreadableInput as error:
        raise CatalogueError(f"{path}: the tool catalogue {error.strerror}") from None
    except OSError as error:
        raise CatalogueError(f"{path}: cannot read the tool catalogue: {error.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CatalogueError(f"{path}: the tool catalogue is not JSON: {error}") from None
    except RecursionError:
        raise CatalogueError(f"{path}: the tool catalogue is nested too deeply") from None
    if repeated := _repeated_key(values):
        raise CatalogueError(
            f"{path}: not a tool catalogue: {repeated} (JSON keeps only the last; keep one)"
        )
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
