"""pytest plugin: the unit tests' store, a fresh in-memory store per test (`store`), and
`memory_store` for a test that needs more than one.

A module whose tests run on every backend (or on a local directory) defines its own `store`
fixture, which takes precedence over this one; everywhere else `store` is memory. Each store
gets a name of its own (`memory://commit-3`), so tests never see each other's objects."""

from __future__ import annotations

import itertools

import pytest

from wal3_spark.storage import ObjectStore, open_store

_names = itertools.count()


def memory_store(topic: str = "test") -> ObjectStore:
    """A fresh, empty in-memory store named after `topic`."""
    return open_store(f"memory://{topic}-{next(_names)}")


@pytest.fixture
def store(request: pytest.FixtureRequest) -> ObjectStore:
    """A fresh in-memory store, named after the test module (`log/test_03_commit.py`: commit-N)."""
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    return memory_store(module.split("_", 2)[-1].replace("_", "-"))
