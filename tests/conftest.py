"""Session-wide fixtures: one SeaweedFS server, one fake-gcs-server, one Azurite and one SparkSession per test run; the markers."""

pytest_plugins = ["tests.support.markers", "tests.support.emulators", "tests.support.seaweed", "tests.support.spark"]
