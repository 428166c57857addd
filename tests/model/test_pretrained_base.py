"""The registry's pretrained base as `toolgrpo base fetch` prepares it: a plain checkpoint that
reads language, in Gemma's turn format, and whose vocabulary cut keeps what it computes."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolgrpo.flows.cli import fetch_base
from toolgrpo.training.chat import chat_messages, chat_prompt
from toolgrpo.training.model import end_of_turn_token
from toolgrpo.training.pretrained import CARD_FILENAME, GEMMA_3_270M
from toolgrpo.training.vocabulary import cut_vocabulary

pytestmark = pytest.mark.slow
ENGLISH = "The bank transferred the money to my savings account yesterday afternoon."


@pytest.fixture(scope="module")
def base(gemma_base):
    return AutoTokenizer.from_pretrained(gemma_base), AutoModelForCausalLM.from_pretrained(
        gemma_base, dtype=torch.float32
    )


def _mean_loss(tokenizer, model, text):
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids, labels=ids["input_ids"]).loss.item()


def test_a_second_fetch_finds_it_prepared_and_prints_where_and_the_terms(gemma_base, capsys):
    assert fetch_base() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"gemma-3-270m already prepared: {gemma_base}"
    assert lines[1].startswith("terms: Gemma Terms of Use (https://ai.google.dev/gemma/terms)")
    assert (gemma_base / "GEMMA_TERMS.html").is_file()


def test_the_checkpoint_is_plain_and_records_the_pinned_file(gemma_base):
    config = json.loads((gemma_base / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    card = json.loads((gemma_base / CARD_FILENAME).read_text())
    assert card["gguf_sha256"] == GEMMA_3_270M.sha256


def test_it_writes_gemma_turns_and_ends_an_answer_at_the_end_of_turn(base):
    tokenizer, model = base
    prompt = chat_prompt(tokenizer, "Check ACC001")
    assert prompt.startswith("<bos><start_of_turn>user\nYou are a financial assistant.")
    assert prompt.endswith("Check ACC001<end_of_turn>\n<start_of_turn>model\n")
    assert end_of_turn_token(tokenizer) == tokenizer.eos_token == "<end_of_turn>"
    assert tokenizer.pad_token == "<pad>"
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert len(chat_messages("x")) == 2  # the system turn goes to the top of the user turn


def test_it_reads_english_far_better_than_an_untrained_model(base):
    tokenizer, model = base
    untrained = AutoModelForCausalLM.from_config(model.config).float().eval()
    assert _mean_loss(tokenizer, model, ENGLISH) < 4.0 < _mean_loss(tokenizer, untrained, ENGLISH)


def test_its_cut_vocabulary_computes_the_same_logits_for_the_kept_tokens(gemma_base):
    tokenizer = AutoTokenizer.from_pretrained(gemma_base)
    model = AutoModelForCausalLM.from_pretrained(gemma_base, dtype=torch.float32).eval()
    text = chat_prompt(tokenizer, ENGLISH)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        full = model(**ids).logits
    cut_tokenizer, cut_model, cut = cut_vocabulary(tokenizer, model, [text], common_tokens=1000)
    assert len(cut.kept_ids) < 40_000 < len(tokenizer)
    cut_ids = cut_tokenizer(text, add_special_tokens=False, return_tensors="pt")
    assert [cut.kept_ids[i] for i in cut_ids["input_ids"][0]] == ids["input_ids"][0].tolist()
    with torch.no_grad():
        kept = cut_model(**cut_ids).logits
    torch.testing.assert_close(kept, full[..., list(cut.kept_ids)], rtol=1e-4, atol=1e-4)
