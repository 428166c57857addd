"""docs/configuration.md: rendered from the typed config and the presets, and kept up to date."""

import re
from pathlib import Path

from toolgrpo.reporting.config_reference import REGENERATE, render_configuration_reference
from toolgrpo.training.config_overrides import overridable_fields, preset_names

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_reference_is_up_to_date():
    assert REFERENCE.read_text(encoding="utf-8") == render_configuration_reference(), (
        f"docs/configuration.md is out of date with the training config or a preset; run: "
        f"{REGENERATE}"
    )


def test_configuration_reference_lists_every_overridable_field_under_each_preset():
    text = render_configuration_reference()
    headers = {line for line in text.splitlines() if line.startswith("| field |")}
    assert headers == {f"| field | type | {' | '.join(preset_names_in(text))} | what it does |"}
    assert sorted(preset_names_in(text)) == preset_names()
    for path in overridable_fields():
        assert f"| `{path}` |" in text


def test_configuration_reference_rows_keep_their_columns_when_a_cell_holds_a_pipe():
    rows = [line for line in render_configuration_reference().splitlines() if line.startswith("|")]
    assert any("\\|" in row for row in rows)  # `int | None` and the Literal choices
    cells = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
    assert len(cells) == 1


def test_field_descriptions_say_what_a_field_does_without_development_history():
    history = re.compile(r"#\d+|\bissue\b|\b[0-9a-f]{7,40}\b|\d(\.\d+)?×|README")
    noted = {
        path: field.description
        for path, field in overridable_fields().items()
        if not field.description or history.search(field.description)
    }
    assert noted == {}


def preset_names_in(text: str) -> list[str]:
    header = next(line for line in text.splitlines() if line.startswith("| field |"))
    return [cell.strip() for cell in header.strip("|").split("|")][2:-1]
