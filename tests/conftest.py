"""Session-wide fixtures: one SeaweedFS server and one SparkSession per test run; the markers."""

pytest_plugins = ["tests.support.markers", "tests.support.seaweed", "tests.support.spark"]
