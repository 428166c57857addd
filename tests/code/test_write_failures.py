"""A write that fails — a full disk, a read-only folder or PREFECT_HOME, a path that cannot be a
folder — is one line naming the path and the cause, with a non-zero exit, from the command and
from the training process."""

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgrpo.data import DATA_DIR
from toolgrpo.flows import cli
from toolgrpo.training import __main__ as training_main


def test_run_into_a_folder_that_cannot_be_made_is_one_line_and_exit_1(
    prefect_harness, tmp_path, capsys
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.run(preset="smoke", out=blocker / "runs") == 1
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after the flow run's own log
    assert said.startswith(f"toolgrpo run: cannot write {blocker / 'runs'}/")
    assert said.endswith(": Not a directory")


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 8960 vs 8854"),
        RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed"),
        Exception("Error while serializing: IoError(Os { code: 28, kind: StorageFull })"),
    ],
)
def test_torch_and_safetensors_words_for_a_full_disk_are_recognised(error):
    assert training_main.is_full_disk(error)


def test_a_full_disk_during_training_is_one_line_saying_so_and_how_to_go_on(
    tmp_path, monkeypatch, capsys
):
    def fill_the_disk(run_dir, config):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 8960")

    monkeypatch.setattr(training_main, "run_sft", fill_the_disk)
    assert training_main.main(["sft", "--run-dir", str(tmp_path), "--preset", "smoke"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: cannot write under {tmp_path}: No space left on device (")
    assert error.endswith("the stage resumes from its last checkpoint")
    assert len(error.splitlines()) == 1


def test_any_other_error_in_training_is_not_taken_for_a_full_disk(tmp_path, monkeypatch):
    def broken(run_dir, config):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(training_main, "run_sft", broken)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        training_main.main(["sft", "--run-dir", str(tmp_path), "--preset", "smoke"])


@contextlib.contextmanager
def mounted(target: Path, *options: str) -> Iterator[Path]:
    """`target` as a small tmpfs or a read-only bind mount, as a full or read-only disk is met;
    the test is skipped where this process may not mount (not root, no CAP_SYS_ADMIN)."""
    target.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a test disk needs root")
    for command in options:
        done = subprocess.run(command.format(target=target), shell=True, capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a test disk: {done.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def read_only(tmp_path: Path) -> contextlib.AbstractContextManager[Path]:
    (tmp_path / "source").mkdir()
    bind = f"mount --bind {tmp_path / 'source'} {{target}}"
    return mounted(tmp_path / "read-only", bind, "mount -o remount,bind,ro {target}")


def test_a_report_into_a_read_only_folder_is_one_line_naming_it(prefect_harness, tmp_path, capsys):
    with read_only(tmp_path) as folder:
        assert cli.validate(DATA_DIR / "eval" / "single_step.jsonl", out=folder / "runs") == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == f"toolgrpo validate: cannot write {folder / 'runs'}: Read-only file system"


def test_a_run_onto_a_full_disk_is_one_line_saying_so(prefect_harness, tmp_path, capsys):
    with mounted(tmp_path / "full", "mount -t tmpfs -o size=16k tmpfs {target}") as disk:
        assert cli.run(preset="smoke", out=disk) == 1
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(f"toolgrpo run: cannot write {disk}/")
    assert ": No space left on device" in said


def test_a_read_only_prefect_home_is_one_line_before_any_server_starts(tmp_path):
    without_api = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    with read_only(tmp_path) as folder:
        done = subprocess.run(
            [Path(sys.executable).with_name("toolgrpo"), "validate", DATA_DIR / "tools.json"],
            env={**without_api, "PREFECT_HOME": str(folder / "home")},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"toolgrpo: cannot write PREFECT_HOME {folder / 'home'}: Read-only file system (the "
        "temporary Prefect server keeps its database there: set PREFECT_HOME to a writable "
        "folder, or PREFECT_API_URL to a running server)"
    ]
