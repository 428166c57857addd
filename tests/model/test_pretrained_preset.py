"""The pretrained preset through the retrain flow on the real architecture (Gemma 3 270M cut to two
layers, its whole vocabulary): the vocabulary cut to the rows' tokens before SFT, LoRA merged
into a plain model of the cut vocabulary, GRPO sampling from it and evaluation decoding it."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolgrpo.flows.retrain import RetrainOverrides, retrain
from toolgrpo.training.config import CONFIG_FILENAME
from toolgrpo.training.config_overrides import read_config
from toolgrpo.training.device import cpu_has_bf16

pytestmark = pytest.mark.slow
SMALL = {
    "data.max_train_rows": 24,
    "grpo.max_steps": 2,
    "grpo.prompts_per_step": 2,
    "grpo.num_generations": 4,
    "grpo.max_completion_length": 32,
    "runtime.eval_max_rows": 6,
}


@pytest.fixture(scope="module")
def run(prefect_harness, truncated_gemma, tmp_path_factory):
    return retrain(
        preset="pretrained",
        out=tmp_path_factory.mktemp("runs"),
        config=RetrainOverrides.from_dotted({"model.base_model": str(truncated_gemma), **SMALL}),
        audit_training_rows=False,
    )


def test_sft_starts_from_the_base_with_its_vocabulary_cut(run, truncated_gemma):
    base = AutoTokenizer.from_pretrained(truncated_gemma)
    init = run.run_dir / "sft" / "init"
    cut = AutoTokenizer.from_pretrained(init)
    assert 1000 < len(cut) < len(base) // 4
    assert cut.chat_template == base.chat_template and cut.eos_token == "<end_of_turn>"


def test_both_stages_save_a_plain_merged_model_of_the_cut_vocabulary(run):
    init = AutoModelForCausalLM.from_pretrained(run.run_dir / "sft" / "init")
    for stage in ("sft", "grpo"):
        model = AutoModelForCausalLM.from_pretrained(run.models[stage], dtype=torch.float32)
        assert not any("lora" in name for name, _ in model.named_parameters())
        assert model.config.vocab_size == init.config.vocab_size
        trained = read_config(run.models[stage] / CONFIG_FILENAME)
        assert trained.model.bf16 is cpu_has_bf16() or torch.cuda.is_available()


def test_the_merged_models_are_decoded_on_every_eval_file(run):
    for stage in ("sft", "grpo"):
        assert set(run.accuracy[stage].by_source) == {
            "eval/single_step",
            "eval/multistep",
            "eval/unseen_phrasing",
        }
