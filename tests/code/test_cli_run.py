"""`toolgrpo run` refuses a bad preset, `--set` or file before any flow run or run folder exists."""

import pytest

from toolgrpo.flows import cli


@pytest.mark.parametrize(
    ("set_", "message"),
    [
        (["grpo_max_steps=20"], "did you mean 'grpo.max_steps'"),
        (["grpo.max_steps=abc"], "grpo.max_steps"),
        (["grpo.max_steps"], "--set takes FIELD=VALUE"),
        (["grpo.max_steps=[1"], "is not a value"),
    ],
)
def test_a_bad_override_exits_2_with_one_line_and_no_run(tmp_path, capsys, set_, message):
    out = tmp_path / "runs"
    assert cli.run(preset="smoke", out=out, set_=set_) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not out.exists()


def test_a_missing_data_file_exits_2_before_any_run(tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli.run(preset="smoke", out=out, train=[tmp_path / "nope.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not out.exists()
