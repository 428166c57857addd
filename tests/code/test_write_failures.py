"""A write that fails — a full disk, a path that cannot be a folder — is one line naming the path
and the cause, with a non-zero exit, from the command and from the training process."""

import errno

import pytest

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
