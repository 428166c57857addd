"""A Prefect API gone for good costs a run the UI's copy of its reports, not the reports or the
run, and ends the command with one line."""

import logging
from uuid import UUID

import httpx
import pytest
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from toolgrpo.flows import cli
from toolgrpo.tasks.artifacts import ApiOutage, api_answered, send_artifact

REFUSED = "[Errno 111] Connection refused"


@pytest.fixture
def api_answering(monkeypatch):
    monkeypatch.setattr(ApiOutage, "away", False)


def test_an_api_gone_away_costs_the_artifacts_not_the_task(
    prefect_harness, api_answering, tmp_path, caplog
):
    tried: list[str] = []

    def refused(**artifact: str) -> UUID:
        tried.append(artifact["key"])
        raise httpx.ConnectError(REFUSED)

    @task
    def report() -> list[UUID | None]:
        kept_in = tmp_path / "report.md"
        return [send_artifact(refused, kept_in, key=key, markdown="# a") for key in ("a", "b")]

    @flow
    def retrain() -> list[UUID | None]:
        return report()

    assert retrain() == [None, None]
    assert tried == ["a"]  # while the API is away the next artifact is not tried
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert REFUSED in warned[0] and str(tmp_path / "report.md") in warned[0]


def test_artifacts_are_sent_again_once_the_api_answers(prefect_harness, api_answering, tmp_path):
    ApiOutage.away = True

    @flow
    def retrain() -> tuple[UUID | None, UUID | None]:
        skipped = send_artifact(create_markdown_artifact, tmp_path, key="a", markdown="# a")
        api_answered()  # as a training stage's state watch reports the API back
        return skipped, send_artifact(create_markdown_artifact, tmp_path, key="b", markdown="# b")

    skipped, sent = retrain()
    assert skipped is None and isinstance(sent, UUID)


def test_an_api_lost_during_a_command_is_one_line_and_exit_1(capsys):
    @cli.stops_in_one_line("toolgrpo run")
    def run() -> int:
        raise httpx.ConnectError(REFUSED)

    assert run() == 1
    assert capsys.readouterr().err.splitlines() == [
        f"toolgrpo run: the Prefect API stopped answering ({REFUSED}); what the run finished is "
        "kept in its run folder, a run again resumes from its last checkpoint, and the UI shows "
        "the run as the server last heard of it"
    ]


def test_an_error_of_the_commands_own_still_shows_its_traceback():
    @cli.stops_in_one_line("toolgrpo run")
    def run() -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run()
