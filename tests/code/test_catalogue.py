"""Your own tool catalogue (`--catalogue PATH`): it, not the shipped data/tools.json, decides which
tools the rows, rewards, prompts, evaluation and the training cache know, and a run keeps a copy."""

import json
from pathlib import Path

import pytest

from toolgrpo.common.wording import thought_action_consistent
from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.predict import EvalSettings, predict
from toolgrpo.flows import cli
from toolgrpo.flows.retrain import CATALOGUE_FILE, keep_catalogue, retrain
from toolgrpo.schemas.catalogue import (
    DEFAULT_CATALOGUE,
    CatalogueError,
    default_catalogue,
    load_catalogue,
)
from toolgrpo.tasks.train import fingerprint
from toolgrpo.training.chat import system_prompt
from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.model import build_tiny
from toolgrpo.training.rewards import score_completion
from toolgrpo.validation.gate import DataGateFailed, validate_samples
from toolgrpo.validation.loader import load_samples

FREEZE_CARD = {
    "name": "freeze_card",
    "description": {"en": "Freeze one of the user's cards.", "zh": "冻结用户的一张卡。"},
    "keywords": {"en": ["freeze", "block my card"], "zh": ["冻结"]},
    "params": {
        "type": "object",
        "properties": {"card": {"type": "string", "pattern": "^CARD[0-9]{2}$"}},
        "required": ["card"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def custom(tmp_path_factory) -> Path:
    """The shipped catalogue with check_balance renamed show_balance, plus freeze_card."""
    spec = json.loads(DEFAULT_CATALOGUE.read_text(encoding="utf-8"))
    for tool in spec["tools"]:
        if tool["name"] == "check_balance":
            tool["name"] = "show_balance"
    spec["tools"].append(FREEZE_CARD)
    path = tmp_path_factory.mktemp("catalogue") / "my_tools.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return path


def answer(tool: str, params: dict, thought: str = "The user asks for it.") -> str:
    return json.dumps({"thought": thought, "action": {"tool": tool, "params": params}, "plan": []})


def row(row_id: str, tool: str, params: dict, prompt: str = "Freeze CARD07 please") -> dict:
    return {
        "id": row_id,
        "scenario_id": row_id,
        "kind": "single",
        "lang": "en",
        "step": 1,
        "n_steps": 1,
        "prompt": prompt,
        "solution": answer(tool, params),
        "tool": tool,
    }


def write_rows(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def failed_checks(path: Path, catalogue) -> list[tuple[int, str]]:
    report = validate_samples(load_samples([path], catalogue=catalogue), catalogue=catalogue)
    return [(p.line, p.check) for p in report.failures]


def test_a_custom_catalogue_validates_rows_of_its_tools_and_rejects_the_defaults_names(
    tmp_path, custom
):
    data = write_rows(
        tmp_path / "rows.jsonl",
        row("f-1", "freeze_card", {"card": "CARD07"}),
        row("b-1", "show_balance", {"account": "ACC001"}, prompt="Show the balance of ACC001"),
        row("b-2", "check_balance", {"account": "ACC001"}, prompt="Balance of ACC001?"),
        row("f-2", "freeze_card", {"card": "ACC001"}),
    )
    mine = load_catalogue(custom)
    assert failed_checks(data, mine) == [(3, "tool_in_catalogue"), (4, "params_match_schema")]
    shipped = failed_checks(data, default_catalogue())
    assert (1, "tool_in_catalogue") in shipped and (2, "tool_in_catalogue") in shipped
    assert (3, "tool_in_catalogue") not in shipped


def test_validate_command_checks_against_the_given_catalogue(
    prefect_harness, tmp_path, custom, capsys
):
    data = write_rows(tmp_path / "rows.jsonl", row("f-1", "freeze_card", {"card": "CARD07"}))
    assert cli.validate(data, out=tmp_path / "runs", catalogue=custom) == 0
    assert cli.validate(data, out=tmp_path / "runs") == 1
    assert 'tool "freeze_card" is not in the tool catalogue' in capsys.readouterr().out


def test_rewards_and_consistency_read_the_given_catalogue(custom):
    mine = load_catalogue(custom)
    completion = answer("freeze_card", {"card": "CARD07"}, thought="First freeze the card.")
    solution = answer("freeze_card", {"card": "CARD07"})
    scored = score_completion(completion, solution, catalogue=mine)
    assert (scored.tool, scored.params) == (0.5, 0.2)
    assert score_completion(completion, solution).tool == 0.0  # not a shipped tool
    assert thought_action_consistent(completion, mine)
    wrong = answer("show_balance", {"account": "ACC001"}, thought="First freeze the card.")
    assert not thought_action_consistent(wrong, mine)


def test_the_prompt_names_the_catalogues_tools(custom):
    mine = load_catalogue(custom)
    assert "freeze_card" in system_prompt(mine) and "check_balance" not in system_prompt(mine)
    assert "check_balance" in system_prompt(default_catalogue())


def test_evaluation_prompts_and_scores_with_the_given_catalogue(tmp_path, custom):
    mine = load_catalogue(custom)
    data = write_rows(tmp_path / "rows.jsonl", row("f-1", "freeze_card", {"card": "CARD07"}))
    rows = load_samples([data], catalogue=mine).frame
    tokenizer, model = build_tiny(
        [system_prompt(mine), *rows["prompt"], *rows["solution"]],
        hidden_size=32,
        num_layers=1,
        vocab_size=400,
    )
    model_dir = tmp_path / "model"
    tokenizer.save_pretrained(model_dir)
    model.save_pretrained(model_dir)
    settings = EvalSettings(max_new_tokens=4, batch_size=1, torch_threads=1)
    predictions = predict(model_dir, rows, settings, catalogue=mine)
    assert "p_freeze_card" in predictions.columns and "p_check_balance" not in predictions.columns


def test_the_training_config_carries_the_catalogue_and_the_cache_key_its_bytes(tmp_path, custom):
    rows = write_rows(tmp_path / "rows.jsonl", row("f-1", "freeze_card", {"card": "CARD07"}))
    shipped = load_preset("smoke")
    own = load_preset("smoke", {"data.catalogue": custom})
    assert "freeze_card" in own.data.tool_catalogue().names
    assert own.weights_key() == shipped.weights_key()  # a path is not news; its bytes are
    assert fingerprint([rows], own, code=[]) != fingerprint([rows], shipped, code=[])
    moved = tmp_path / "moved.json"
    moved.write_bytes(custom.read_bytes())
    assert fingerprint([rows], load_preset("smoke", {"data.catalogue": moved}), code=[]) == (
        fingerprint([rows], own, code=[])
    )


def test_a_run_folder_keeps_the_catalogue_it_used(tmp_path, custom):
    assert keep_catalogue(custom, tmp_path).read_bytes() == custom.read_bytes()
    assert keep_catalogue(None, tmp_path / "x").read_bytes() == DEFAULT_CATALOGUE.read_bytes()


def test_the_retrain_flow_gates_with_the_given_catalogue_and_keeps_a_copy(
    prefect_harness, tmp_path, custom
):
    # The shipped rows call check_balance, which this catalogue renamed: the gate stops the
    # run before training, and the run folder has the catalogue it checked against.
    out = tmp_path / "runs"
    single = DATA_DIR / "eval" / "single_step.jsonl"
    with pytest.raises(DataGateFailed) as failed:
        retrain(preset="smoke", train_files=[single], eval_files=[], catalogue=custom, out=out)
    checks = {p.check for p in failed.value.report.failures}
    assert checks == {"tool_in_catalogue"}
    (run_dir,) = out.iterdir()
    assert (run_dir / CATALOGUE_FILE).read_bytes() == custom.read_bytes()
    assert not (run_dir / "sft").exists()


def test_a_bad_catalogue_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "tools.json"
    bad.write_text(json.dumps({"version": 1, "tools": []}), encoding="utf-8")
    with pytest.raises(CatalogueError, match=r"tools.json: not a tool catalogue: tools: "):
        load_catalogue(bad)


@pytest.mark.parametrize("where", ["keywords", "not_naming"])
def test_a_blank_keyword_or_phrase_is_refused(tmp_path, where):
    """It would match at every word: every request would name its tool, or mask every word."""
    catalogue = json.loads((DATA_DIR / "tools.json").read_text(encoding="utf-8"))
    if where == "keywords":
        catalogue["tools"][0]["keywords"]["en"].append(" ")
    else:
        catalogue["not_naming"] = {"en": [""]}
    bad = tmp_path / "tools.json"
    bad.write_text(json.dumps(catalogue), encoding="utf-8")
    with pytest.raises(CatalogueError, match=r"tools.json: not a tool catalogue: .*a blank text"):
        load_catalogue(bad)
