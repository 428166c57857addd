"""docs/configuration.md: rendered from the typed config and the presets, and kept up to date."""

import re
from pathlib import Path

from toolgrpo.reporting.config_reference import REGENERATE, render_configuration_reference
from toolgrpo.training.config import overridable_fields, preset_names

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


def preset_names_in(text: str) -> list[str]:
    header = next(line for line in text.splitlines() if line.startswith("| field |"))
    return [cell.strip() for cell in header.strip("|").split("|")][2:-1]
