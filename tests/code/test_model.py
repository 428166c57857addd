"""The locally built tokenizer and model, and the prompt text shared by training and evaluation."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.catalogue import Catalogue, default_catalogue, load_catalogue
from toolgrpo.training.chat import chat_prompt, system_prompt
from toolgrpo.training.model import (
    ANSWER_FRAME,
    CHAT_FRAME,
    IM_END,
    IM_START,
    build_tiny,
    pretrained_model,
)

TEXTS = [
    "If ACC399 has at least 13850, send it to my savings account.",
    "ACC108 余额足够的话，转账 14530元 给 ACC634",
    '{"thought": "first check", "action": {"tool": "check_balance", "params": {}}, "plan": []}',
] * 20


@pytest.fixture(scope="module")
def tiny():
    return build_tiny(TEXTS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=400)


def test_digits_are_split_one_per_token(tiny):
    tokenizer, _ = tiny
    tokens = tokenizer.tokenize("balance 13850")
    assert tokens[-5:] == ["1", "3", "8", "5", "0"]


def test_digits_stay_whole_when_splitting_is_off():
    tokenizer, _ = build_tiny(
        TEXTS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=400, split_digits=False
    )
    assert not {"1", "3", "8", "5", "0"} >= set(tokenizer.tokenize(" 13850 13850"))


def test_tokenizer_round_trips_bilingual_text(tiny):
    tokenizer, _ = tiny
    for text in TEXTS[:3]:
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_im_end_is_eos_in_tokenizer_and_generation_config(tiny):
    tokenizer, model = tiny
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    assert tokenizer.eos_token == IM_END
    assert model.generation_config.eos_token_id == im_end
    assert model.config.vocab_size == len(tokenizer)


def test_same_seed_builds_the_same_weights():
    _, first = build_tiny(TEXTS, hidden_size=32, num_layers=1, num_heads=2, seed=3)
    _, second = build_tiny(TEXTS, hidden_size=32, num_layers=1, num_heads=2, seed=3)
    assert all((a == b).all() for a, b in zip(first.parameters(), second.parameters(), strict=True))


def test_the_system_prompt_can_be_one_token_and_survives_a_save(tmp_path):
    """The constant system prompt as a single token: the chat text is the same, its tokens far
    fewer, and a saved tokenizer reads it the same way."""
    pieces, _ = build_tiny(TEXTS, hidden_size=32, num_layers=1, num_heads=2, vocab_size=400)
    whole, _ = build_tiny(
        TEXTS,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        vocab_size=400,
        whole_texts=(system_prompt(default_catalogue()),),
    )
    prompt = chat_prompt(whole, TEXTS[0])
    assert prompt == chat_prompt(pieces, TEXTS[0])
    assert system_prompt(default_catalogue()) in whole.convert_ids_to_tokens(
        whole(prompt)["input_ids"]
    )
    assert len(whole(prompt)["input_ids"]) < len(pieces(prompt)["input_ids"]) - 20
    whole.save_pretrained(tmp_path)
    assert (
        AutoTokenizer.from_pretrained(tmp_path)(prompt)["input_ids"] == whole(prompt)["input_ids"]
    )


def test_the_chat_and_answer_frames_can_be_one_token_each(tmp_path):
    """With `CHAT_FRAME` and `ANSWER_FRAME` as tokens the text is the same and reads back the
    same, each piece is one token where it occurs, `<|im_start|>` alone stays special, and a
    saved tokenizer splits the text the same way."""
    frame = (*CHAT_FRAME, *ANSWER_FRAME)
    framed, _ = build_tiny(TEXTS, hidden_size=32, num_layers=1, num_heads=2, whole_texts=frame)
    answer = '{"thought": "a", "action": {"tool": "withdraw", "params": {"amount": 5}}, "plan": []}'
    text = chat_prompt(framed, TEXTS[0]) + answer + IM_END
    tokens = framed.convert_ids_to_tokens(framed(text)["input_ids"])
    assert [token for token in tokens if token in frame] == list(frame)
    assert framed.decode(framed(text)["input_ids"]) == text
    assert framed.convert_ids_to_tokens(framed(IM_START + "x")["input_ids"])[0] == IM_START
    framed.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(text)["input_ids"] == framed(text)["input_ids"]


def test_every_shipped_answer_is_written_with_the_answer_frame():
    """`ANSWER_FRAME` is the shipped solutions' own text: were the data written otherwise, its
    tokens would never occur and rows would be as long as without them."""
    for path in sorted(DATA_DIR.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            solution = json.loads(line)["solution"]
            assert all(piece in solution for piece in ANSWER_FRAME), (path, solution)


def test_models_loaded_from_threads_at_once_keep_their_tied_head(tiny, tmp_path):
    """`from_pretrained` swaps process-wide state while it loads; `pretrained_model` takes turns, so
    threads loading at once (the ablation's arms) all get a tied head on a real device, and the
    process keeps the real `tie_weights` for every later load."""
    tokenizer, model = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tie_weights = PreTrainedModel.tie_weights
    with ThreadPoolExecutor(8) as pool:
        loaded = list(pool.map(lambda _: pretrained_model(tmp_path, torch.float32), range(24)))
    for copy in loaded:
        assert copy.lm_head.weight.device.type == "cpu"
        assert copy.lm_head.weight.data_ptr() == copy.model.embed_tokens.weight.data_ptr()
    assert PreTrainedModel.tie_weights is tie_weights


def test_saved_tiny_model_loads_with_auto_classes_and_keeps_the_chat_format(tiny, tmp_path):
    tokenizer, model = tiny
    tokenizer.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    loaded_model = AutoModelForCausalLM.from_pretrained(tmp_path)
    prompt = chat_prompt(tokenizer, TEXTS[1])
    assert chat_prompt(loaded_tokenizer, TEXTS[1]) == prompt
    assert loaded_tokenizer(prompt)["input_ids"] == tokenizer(prompt)["input_ids"]
    assert loaded_model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_chat_prompt_has_system_user_and_open_assistant_turn(tiny):
    tokenizer, _ = tiny
    text = chat_prompt(tokenizer, "Show the balance of ACC001")
    assert text == (
        f"<|im_start|>system\n{system_prompt(default_catalogue())}<|im_end|>\n"
        "<|im_start|>user\nShow the balance of ACC001<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_system_prompt_names_every_catalogue_tool():
    assert all(name in system_prompt(default_catalogue()) for name in load_catalogue().names)


def test_the_system_prompt_names_the_catalogues_assistant_and_tools():
    """The shipped catalogue's prompt is the finance one; a team's catalogue brings its own
    assistant, and one that says none is "an assistant", not a financial one."""
    from bench.domains import smart_home

    shipped = system_prompt(default_catalogue())
    assert shipped.startswith(
        "You are a financial assistant. Call one tool per step: check_balance"
    )
    home = system_prompt(smart_home.catalogue())
    assert home.startswith("You are a smart-home assistant.") and "lights_on" in home
    values = {k: v for k, v in smart_home.catalogue_values().items() if k != "assistant"}
    unnamed = Catalogue.model_validate(values)
    assert system_prompt(unnamed).startswith("You are an assistant.")


def test_a_resume_says_nothing_of_the_tied_head_and_still_reports_other_missing_keys(
    tiny, monkeypatch
):
    from transformers import Trainer
    from transformers import trainer as trainer_module

    from toolgrpo.training.model import TiedWeightsResume

    class Resuming(TiedWeightsResume, Trainer):
        def __init__(self, model: PreTrainedModel) -> None:  # only what the check reads
            self.model = model

    warned: list[str] = []
    monkeypatch.setattr(trainer_module.logger, "warning", warned.append)
    model = tiny[1]
    saved = model.state_dict()  # as safetensors stores a tied head: once, as the embedding
    del saved["lm_head.weight"]
    Resuming(model)._issue_warnings_after_load(model.load_state_dict(saved, strict=False))
    assert warned == []
    assert model.lm_head.weight is model.model.embed_tokens.weight

    del saved["model.norm.weight"]
    Resuming(model)._issue_warnings_after_load(model.load_state_dict(saved, strict=False))
    assert len(warned) == 1 and "model.norm.weight" in warned[0] and "lm_head" not in warned[0]
