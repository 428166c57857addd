"""Where a stage runs: `runtime.device` resolved against this machine before anything trains.

`auto` takes CUDA when the machine has it and the CPU otherwise; `cuda` without a device stops
with one line. On the CPU the settings it cannot run are turned off, in one logged line: vLLM (TRL
samples with `generate`), and bf16 unless the CPU computes bfloat16 natively (AVX-512 BF16 or AMX:
the weights then train, save and evaluate in float32). Engines
that cannot start here (vLLM or DeepSpeed not installed, DeepSpeed without CUDA) stop with one
line saying what to install or set. A resolved config resolves to itself, so the Prefect task
and the training process it starts agree, and the config saved beside a model says where it
trained (what evaluation follows).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, NamedTuple

from toolgrpo.common.cpus import usable_cpus
from toolgrpo.training.config import ConfigError, RuntimeSection, TrainConfig, accelerate_engine
from toolgrpo.training.config_overrides import with_overrides


class Placement(NamedTuple):
    """A config whose `runtime.device` is `cpu` or `cuda`, and what was changed to get there."""

    config: TrainConfig
    note: str | None


def stage_threads(runtime: RuntimeSection) -> int:
    """Torch threads for each process of a stage: `runtime.torch_threads`, or the usable CPUs
    shared among the stage's processes (2 cores: one process of 2 threads, or 2 of 1)."""
    return runtime.torch_threads or max(1, usable_cpus() // runtime.num_processes)


def is_installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def cpu_has_bf16() -> bool:
    """Whether this machine's CPU computes bfloat16 natively (AVX-512 BF16, AMX, Arm's BF16):
    elsewhere torch emulates it, slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            flags = {
                flag
                for line in cpuinfo
                if line.startswith(("flags", "Features"))
                for flag in line.partition(":")[2].split()
            }
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def place(
    config: TrainConfig,
    *,
    cuda: bool,
    cpu_bf16: bool = False,
    installed: Callable[[str], bool] = is_installed,
) -> Placement:
    """`config` on a machine with (`cuda=True`) or without a CUDA device, whose CPU computes
    bfloat16 natively or not (`cpu_bf16`); raises `ConfigError` with what to set when it cannot
    run there."""
    requested = config.runtime.device
    if requested == "cuda" and not cuda:
        raise ConfigError(
            "runtime.device is 'cuda' but this machine has no CUDA device: set "
            "runtime.device=auto (or cpu) to train on the CPU"
        )
    device = "cuda" if requested == "cuda" or (requested == "auto" and cuda) else "cpu"
    changes: dict[str, Any] = {"runtime.device": device}
    turned_off = []
    if device == "cpu":
        bf16 = () if cpu_bf16 else (("model.bf16", "bf16"),)
        cpu_cannot = (*bf16, ("grpo.use_vllm", "vLLM"))
        for path, name in cpu_cannot:
            section, field = path.split(".")
            if getattr(getattr(config, section), field):
                changes[path] = False
                turned_off.append(f"{name} off ({path}=false)")
    placed = with_overrides(config, changes)
    _check_engines(placed, installed)
    if device == "cpu" and (requested == "auto" or turned_off):
        reason = "no CUDA device" if requested == "auto" else "runtime.device=cpu"
        precision = "bfloat16 (this CPU computes it natively)" if placed.model.bf16 else "float32"
        what = f"; {', '.join(turned_off)}" if turned_off else ""
        fix = "; set runtime.device=cuda to stop instead" if requested == "auto" else ""
        return Placement(placed, f"{reason}: training on the CPU in {precision}{what}{fix}")
    return Placement(placed, None)


def _check_engines(config: TrainConfig, installed: Callable[[str], bool]) -> None:
    """Stop before launching an engine the machine cannot start."""
    if config.grpo.use_vllm and not installed("vllm"):
        raise ConfigError(
            "grpo.use_vllm is true but vLLM is not installed: `pip install vllm` on the CUDA "
            "machine, or set grpo.use_vllm=false"
        )
    runtime = config.runtime
    if (
        runtime.most_processes() > 1
        and accelerate_engine(runtime.accelerate_config)[0] == "DEEPSPEED"
    ):
        if runtime.device == "cpu":
            raise ConfigError(
                f"runtime.accelerate_config {runtime.accelerate_config!r} is DeepSpeed, which "
                "needs CUDA devices: use runtime.accelerate_config=multi_gpu on the CPU"
            )
        if not installed("deepspeed"):
            raise ConfigError(
                f"runtime.accelerate_config {runtime.accelerate_config!r} is DeepSpeed, which "
                "is not installed: pip install 'toolgrpo[deepspeed]'"
            )


def place_here(config: TrainConfig) -> Placement:
    """`place` on this machine."""
    return place(config, cuda=cuda_available(), cpu_bf16=cpu_has_bf16())


def end_process_group() -> None:
    """Close the processes' group (several processes: `accelerate launch`) before the interpreter
    exits, once the trainer is gone.

    Left to the exit, gloo's threads can abort a process whose model is saved ("terminate called
    without an active exception", SIGABRT; seen once in a 2-process test). Closed while a
    DDP-wrapped model still lives, the group's last reference is the model's gradient reducer:
    freeing the model then joins gloo's threads while holding the GIL, which a thread still
    dropping its last collective's tensors waits for, and the process hangs (3 of 5 runs of a
    2-process test that closed the group with its trainer alive). Collecting first frees a
    trainer that only a reference cycle keeps while the group is still registered;
    `destroy_process_group` then drops the last reference without the GIL."""
    import gc

    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        gc.collect()
        torch.distributed.destroy_process_group()
