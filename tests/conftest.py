"""One Prefect test harness for the whole session; analytics off (silences sqlite lock noise)."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect server and database, shared by every test that runs a flow."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
