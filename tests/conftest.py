"""Session-wide fixtures: a fresh in-memory store per unit test, one SeaweedFS server, one fake-gcs-server, one Azurite and one SparkSession per test run; the markers.
Property-based tests run under one hypothesis profile: a bounded number of examples and no
deadline (a loaded machine makes any per-example deadline flaky); HYPOTHESIS_PROFILE picks another."""

import os

from hypothesis import settings

pytest_plugins = ["tests.support.markers", "tests.support.memory", "tests.support.emulators", "tests.support.seaweed", "tests.support.spark"]

settings.register_profile("wal3", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "wal3"))
