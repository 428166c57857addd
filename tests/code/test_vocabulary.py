"""A base model's vocabulary cut to a task's tokens: the task's texts encode as before, any text
still encodes, and the cut model computes the full model's logits for the tokens it kept."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from toolgrpo.training.model import build_tiny
from toolgrpo.training.vocabulary import VocabularyError, cut_vocabulary, kept_tokens

CORPUS = [
    "Transfer 200 from ACC001 to savings, then check what is left.",
    "先查一下 ACC002 的余额，够的话转 5万 到 活期账户",
    '{"thought": "so I check the balance", "action": {"tool": "check_balance"}}',
    "Buy 10 shares of AAPL if my balance covers it; otherwise tell me.",
    "Привет, мир: a word of another script, seen by the base only",
] * 30
TASK = CORPUS[:3]


@pytest.fixture(scope="module")
def base():
    """A byte-level BPE tokenizer with a vocabulary the task uses a small part of, and a model."""
    tokenizer, model = build_tiny(CORPUS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=900)
    return tokenizer, model.float().eval()


@pytest.fixture(scope="module")
def cut(base):
    tokenizer, model = base
    copy = AutoModelForCausalLM.from_config(model.config)
    copy.load_state_dict(model.state_dict())
    return cut_vocabulary(tokenizer, copy.eval(), TASK, common_tokens=20)


def test_the_cut_keeps_fewer_tokens_and_says_why(base, cut):
    tokenizer, _ = base
    cut_tokenizer, model, record = cut
    assert len(cut_tokenizer) == len(record.kept_ids) == model.config.vocab_size < len(tokenizer)
    assert record.reasons["texts"] > 0
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= cut_tokenizer.get_vocab().keys()
    assert record.line().startswith(f"vocabulary cut {len(tokenizer):,} → {len(cut_tokenizer):,}")


def test_the_tasks_texts_encode_to_the_same_tokens(base, cut):
    tokenizer, _ = base
    cut_tokenizer, _, record = cut
    for text in TASK:
        full = tokenizer(text, add_special_tokens=False)["input_ids"]
        kept = cut_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert [record.kept_ids[i] for i in kept] == full


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_text_still_encodes_and_decodes_to_itself(cut, text):
    cut_tokenizer, _, _ = cut
    ids = cut_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert cut_tokenizer.unk_token_id not in ids
    assert cut_tokenizer.decode(ids) == text


def test_the_cut_model_gives_the_full_models_logits_for_the_kept_tokens(base, cut):
    tokenizer, model = base
    cut_tokenizer, cut_model, record = cut
    text = TASK[0]
    with torch.no_grad():
        full = model(**tokenizer(text, return_tensors="pt")).logits
        kept = cut_model(**cut_tokenizer(text, return_tensors="pt")).logits
    torch.testing.assert_close(kept, full[..., list(record.kept_ids)])


def test_a_word_of_a_script_the_task_never_writes_costs_more_tokens(base, cut):
    tokenizer, _ = base
    cut_tokenizer, _, _ = cut
    word = "Привет"  # the base merged it; the task's texts have no Cyrillic
    assert len(cut_tokenizer.tokenize(word)) > len(tokenizer.tokenize(word))


def test_the_cut_saves_and_loads_as_an_ordinary_model(cut, tmp_path):
    cut_tokenizer, model, _ = cut
    model.save_pretrained(tmp_path)
    cut_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.chat_template == cut_tokenizer.chat_template
    assert (loaded.eos_token, loaded.pad_token) == (
        cut_tokenizer.eos_token,
        cut_tokenizer.pad_token,
    )
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.config.eos_token_id == cut_tokenizer.eos_token_id
    assert reloaded.get_input_embeddings().weight.shape[0] == len(cut_tokenizer)
    assert loaded(TASK)["input_ids"] == cut_tokenizer(TASK)["input_ids"]


def test_common_tokens_keep_more_of_the_base():
    tokenizer, _ = build_tiny(CORPUS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=900)
    fewer, _ = kept_tokens(tokenizer, TASK, common_tokens=0)
    more, reasons = kept_tokens(tokenizer, TASK, common_tokens=50)
    assert fewer < more and reasons["common"] == 50


def test_a_tokenizer_that_is_not_bpe_is_one_line_saying_what_to_set():
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    wordpiece = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    with pytest.raises(
        VocabularyError, match=r"is WordPiece, not BPE.*model\.cut_vocabulary=false"
    ):
        kept_tokens(wordpiece, ["hello world"], common_tokens=0)


def test_added_tokens_outside_the_bpe_vocabulary_are_kept_and_renumbered():
    frame = '{"thought": "'  # a whole token added after the BPE vocabulary, as the cpu preset's
    tokenizer, model = build_tiny(
        CORPUS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=900, whole_texts=(frame,)
    )
    model = model.float().eval()
    text = TASK[2]
    with torch.no_grad():
        full = model(**tokenizer(text, return_tensors="pt")).logits
    cut_tokenizer, cut_model, record = cut_vocabulary(tokenizer, model, TASK, common_tokens=0)
    assert cut_tokenizer.tokenize(text)[0] == frame
    with torch.no_grad():
        kept = cut_model(**cut_tokenizer(text, return_tensors="pt")).logits
    torch.testing.assert_close(kept, full[..., list(record.kept_ids)])
