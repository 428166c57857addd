"""`python -m toolgrpo.training {sft,grpo,base} --run-dir DIR [--preset NAME | --config FILE]`.

The process a Prefect task (or `accelerate launch -m toolgrpo.training`) starts (GRPO also takes
`--init DIR`): it reads the run folder's config (or writes the one given), places it on this
machine's device (`training.device`), trains one stage there and resumes from its last
checkpoint. Problems with the input exit with status 2 and one line on stderr, not a traceback.
"""

from __future__ import annotations

import argparse
import errno
import logging
import shutil
import sys
import warnings
from pathlib import Path

import datasets
import torch
import transformers

from toolgrpo.training.config import CONFIG_FILENAME, ConfigError, TrainConfig
from toolgrpo.training.config_overrides import load_preset, read_config
from toolgrpo.training.device import end_process_group, place_here, stage_threads
from toolgrpo.training.grpo import run_grpo
from toolgrpo.training.model import BaseModelError
from toolgrpo.training.orphans import end_with_parent
from toolgrpo.training.own_base import run_base
from toolgrpo.training.pretrained import BaseFetchError
from toolgrpo.training.samples import SamplesError
from toolgrpo.training.sft import run_sft
from toolgrpo.training.vocabulary import VocabularyError


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m toolgrpo.training", description=__doc__.split("\n")[0]
    )
    parser.add_argument("stage", choices=["sft", "grpo", "base"])
    parser.add_argument("--run-dir", type=Path, required=True, help="the run folder")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", help="start the run folder's config from this preset")
    source.add_argument("--config", type=Path, help="start the run folder's config from this file")
    parser.add_argument("--init", type=Path, help="grpo only: model to start from (default sft)")
    return parser.parse_args(argv)


def run_config(run_dir: Path, preset: str | None, config_file: Path | None) -> TrainConfig:
    """The config given (then written to the run folder), else the one already there."""
    stored = run_dir / CONFIG_FILENAME
    if preset is not None:
        config = load_preset(preset)
    elif config_file is not None:
        config = read_config(config_file)
    elif stored.is_file():
        return read_config(stored)
    else:
        raise ConfigError(f"{stored}: no training config; pass --preset or --config")
    config.write(stored)
    return config


def configure_output() -> None:
    """The parent streams this process's output line by line into the run's log: INFO records,
    no progress bars, no deprecation notes that TRL's own calls into transformers raise, and not
    accelerate's INFO note that the length-sorted batches have no length (once per metric
    gathered at every epoch's end: 16 identical lines an epoch)."""
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
    logging.getLogger("accelerate.accelerator").setLevel(logging.WARNING)
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)


def is_full_disk(error: BaseException) -> bool:
    """Whether `error` is a write that found the disk full: an OSError saying so, or torch's and
    safetensors' own words for it (`PytorchStreamWriter failed writing file`, `unexpected pos`,
    `StorageFull`)."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    return any(
        words in text
        for words in ("No space left on device", "StorageFull", "unexpected pos", "failed writing")
    )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    end_with_parent()
    configure_output()
    try:
        config, note = place_here(run_config(args.run_dir, args.preset, args.config))
        config = config.for_stage(args.stage)
        if note is not None:
            print(f"device: {note}", flush=True)
        torch.set_num_threads(stage_threads(config.runtime))
        if args.stage == "sft":
            model_dir = run_sft(args.run_dir, config)
        elif args.stage == "base":
            model_dir = run_base(args.run_dir, config)
        else:
            model_dir = run_grpo(args.run_dir, config, args.init)
    except (
        ConfigError,
        BaseModelError,
        BaseFetchError,
        VocabularyError,
        SamplesError,
        FileNotFoundError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as error:
        if not is_full_disk(error):
            raise
        free_mb = shutil.disk_usage(args.run_dir).free // 2**20
        print(
            f"error: cannot write under {args.run_dir}: No space left on device ({free_mb} MB "
            "free); free some space and run again: the stage resumes from its last checkpoint",
            file=sys.stderr,
        )
        return 1
    finally:
        end_process_group()
    print(f"saved {args.stage} model to {model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
