"""pytest plugin: one fake-gcs-server and one Azurite per test run, started on first use and
stopped at the end (both in memory), as `tests/support/seaweed.py` does SeaweedFS.

Fixtures:

- `gcs` (session): a `GcsEmulator`: `endpoint`, `bucket`, `options` (`{"endpoint": ...}`),
  `env` (`STORAGE_EMULATOR_HOST`), `new_url(name)` (a fresh `gs://<bucket>/<name>-<random>`);
- `azure` (session): an `AzureEmulator`: `endpoint` (the `BlobEndpoint`), `account`, `key`,
  `connection_string`, `options` (`{"connectionString": ...}`), `env`
  (`AZURE_STORAGE_CONNECTION_STRING`), `new_url(name)` (a fresh `az://<container>/...`).
  Azurite checks the account key (random per run), so code that forgets it fails.

Tests that need an emulator never skip when it is missing: ./dev setup installs both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wal3_spark.testing.emulators import AzureEmulator, GcsEmulator, running_azurite, running_fake_gcs


@pytest.fixture(scope="session")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    with running_fake_gcs(tmp_path_factory.mktemp("fake-gcs")) as server:
        yield server


@pytest.fixture(scope="session")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureEmulator]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as server:
        yield server


#: the session fixture that serves each cloud backend of a parametrized store fixture
CLOUD_FIXTURES = {"s3": "seaweed", "gcs": "gcs", "azure": "azure"}


def cloud_url(request: pytest.FixtureRequest, backend: str) -> tuple[str, dict[str, str]]:
    """A fresh URL on `backend` ("s3", "gcs" or "azure") for the requesting test, and the store
    options that reach it."""
    server = request.getfixturevalue(CLOUD_FIXTURES[backend])
    return server.new_url(request.node.name), server.options
