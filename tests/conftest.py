"""One Prefect test harness for the whole session; analytics off (silences sqlite lock noise)."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest
from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
from prefect.testing.utilities import prefect_test_harness


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
