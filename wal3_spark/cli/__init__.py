"""The `wal3` command line."""
