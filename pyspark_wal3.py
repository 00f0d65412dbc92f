"""Auto-registration hook: Spark scans top-level `pyspark_*` modules for a `DefaultSource` and
registers it under its name, so `format("wal3")` works without `spark.dataSource.register`.

Design: docs/design/50-installs.md."""

from wal3_spark.spark.source import Wal3DataSource as DefaultSource

__all__ = ["DefaultSource"]
