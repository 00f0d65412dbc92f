"""Session-wide fixtures: one SeaweedFS server and one SparkSession per test run."""

pytest_plugins = ["tests.support.seaweed", "tests.support.spark"]
