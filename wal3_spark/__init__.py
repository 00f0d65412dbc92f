"""wal3-spark: Chroma's wal3 log on object storage, in plain Python, with a PySpark data source."""
