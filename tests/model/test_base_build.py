"""`toolgrpo base build`: a base pretrained for real (smoke size), cached by content, rebuilt
byte for byte, and a start SFT can load like any pretrained model."""

import hashlib

import pytest

from toolgrpo.flows import cli
from toolgrpo.flows.own_base import build_base
from toolgrpo.tasks.own_base import CARD_JSON, CARD_MARKDOWN, read_card
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.model import load_model
from toolgrpo.training.own_base import build_key, passage_example

pytestmark = pytest.mark.slow
TINY_RECIPE = {
    "base.exercise_rounds": 1,
    "base.request_rounds": 1,
    "base.copy_rounds": 1,
    "base.num_train_epochs": 0.05,
    "runtime.torch_threads": 1,
}


def _weights_hash(folder):
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(prefect_harness, tmp_path_factory):
    root = tmp_path_factory.mktemp("base")
    first = build_base(out=root / "base", preset="smoke", overrides=TINY_RECIPE, runs=root)
    again = build_base(out=root / "base", preset="smoke", overrides=TINY_RECIPE, runs=root)
    elsewhere = build_base(out=root / "rebuilt", preset="smoke", overrides=TINY_RECIPE, runs=root)
    return root, first, again, elsewhere


def test_a_build_writes_a_loadable_model_with_its_card(built):
    root, first, _, _ = built
    out = root / "base"
    assert first.built and first.card.steps > 0
    assert read_card(out) == first.card
    assert first.card.key == build_key(with_overrides(load_preset("smoke"), TINY_RECIPE))
    assert first.card.weights_sha256 == _weights_hash(out)
    card_text = (out / CARD_MARKDOWN).read_text()
    assert "toolgrpo base build --preset smoke" in card_text
    for group in ("data", "code"):
        assert f"`{first.card.inputs[group]}`" in card_text
    assert (out / CARD_JSON).is_file() and not (out / "training_args.bin").exists()
    tokenizer, model = load_model(out, load_preset("smoke").model)
    assert tokenizer.eos_token == "<|im_end|>" and model.config.num_hidden_layers == 2


def test_the_same_key_is_not_built_again_and_a_rebuild_is_byte_identical(built):
    root, first, again, elsewhere = built
    assert not again.built and again.card == first.card
    assert elsewhere.built and _weights_hash(root / "rebuilt") == first.card.weights_sha256


def test_requests_are_learned_whole_and_exercises_and_drills_on_their_answer(built):
    from toolgrpo.generator.base_corpus import Passage

    root, *_ = built
    tokenizer, _ = load_model(root / "base", load_preset("smoke").model)
    catalogue = load_preset("smoke").data.tool_catalogue()
    request = passage_example(tokenizer, Passage("What's the balance on ACC1?", None), catalogue)
    assert request["prompt"] == ""
    assert request["completion"].endswith("What's the balance on ACC1?<|im_end|>")
    drill = passage_example(tokenizer, Passage("Send 10 to ACC1", "10 · ACC1"), catalogue)
    assert drill["prompt"].endswith("Send 10 to ACC1<|im_end|>\n<|im_start|>assistant\n")
    assert drill["completion"] == "10 · ACC1"


def test_the_key_follows_what_the_build_reads_not_the_later_stages():
    config = load_preset("cpu")
    key = build_key(config)
    assert build_key(with_overrides(config, {"base.exercise_rounds": 3})) != key
    assert build_key(with_overrides(config, {"sft.per_device_train_batch_size": 8})) != key
    for later in ("sft.num_train_epochs", "grpo.max_steps", "runtime.torch_threads"):
        assert build_key(with_overrides(config, {later: 1})) == key, later
    assert build_key(with_overrides(config, {"model.base_model": "/elsewhere"})) == key


def test_a_folder_that_holds_no_base_is_refused_before_anything_runs(tmp_path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    assert cli.build_base(out=project, preset="smoke", runs=tmp_path / "runs") == 2
    assert "holds files but no base" in capsys.readouterr().err
    assert [p.name for p in project.iterdir()] == ["notes.txt"] and not (tmp_path / "runs").exists()
