"""One Prefect test harness for the whole session; analytics off (silences sqlite lock noise).
Under pytest-xdist each worker is a session of its own, on its own share of the CPUs."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest
from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
from prefect.testing.utilities import prefect_test_harness


@pytest.hookimpl(optionalhook=True)  # xdist's hook: plain `pytest` runs without it
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per CPU this process may use (its affinity, as `usable_cpus`)."""
    from toolgrpo.common.cpus import usable_cpus

    return usable_cpus()


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs one worker per core), a worker runs on its own share
    of this process's CPUs: its trainers size their threads to that share (`usable_cpus`), so
    two workers' trainers never fight over one core."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or not hasattr(os, "sched_setaffinity"):
        return
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    cpus = sorted(os.sched_getaffinity(0))
    index = int(worker.removeprefix("gw"))
    os.sched_setaffinity(0, cpus[index::count] or [cpus[index % len(cpus)]])


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """A temporary Prefect server and database, shared by every test that runs a flow, and result
    storage of its own: a training stage cached by an earlier session is never reused."""
    storage = tmp_path_factory.mktemp("prefect-results")
    with (
        temporary_settings(updates={PREFECT_LOCAL_STORAGE_PATH: storage}),
        prefect_test_harness(server_startup_timeout=120),
    ):
        yield


@pytest.fixture(scope="session")
def gemma_base():
    """The registry's pretrained base (Gemma 3 270M), prepared once per machine as `toolgrpo base
    fetch` does (in $TOOLGRPO_CACHE, else ~/.cache/toolgrpo)."""
    from toolgrpo.training.pretrained import prepare_base

    return prepare_base("gemma-3-270m").path


@pytest.fixture(scope="session")
def truncated_gemma(gemma_base, tmp_path_factory):
    """Gemma 3 270M cut to its first two layers, with its whole vocabulary, tokenizer and turn
    template: the real architecture at a test's speed."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(gemma_base)
    config.num_hidden_layers = 2
    config.layer_types = config.layer_types[:2]
    model = AutoModelForCausalLM.from_pretrained(gemma_base, config=config)
    out = tmp_path_factory.mktemp("gemma-2-layers")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(gemma_base).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def small_gemma(truncated_gemma, tmp_path_factory):
    """`truncated_gemma` with its vocabulary cut to the shipped training rows' tokens: a base of
    the real architecture and turn template whose every stage runs in seconds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgrpo.training.chat import chat_prompt
    from toolgrpo.training.config_overrides import load_preset
    from toolgrpo.training.samples import grpo_rows
    from toolgrpo.training.vocabulary import cut_vocabulary

    tokenizer = AutoTokenizer.from_pretrained(truncated_gemma)
    model = AutoModelForCausalLM.from_pretrained(truncated_gemma)
    texts = [
        chat_prompt(tokenizer, row["prompt"]) + row["solution"]
        for row in grpo_rows(load_preset("smoke"))
    ]
    tokenizer, model, _ = cut_vocabulary(tokenizer, model, texts, common_tokens=1000)
    out = tmp_path_factory.mktemp("gemma-2-layers-cut")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
