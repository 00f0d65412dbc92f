"""A `wal3` data source for tests whose driver deletes logs and creates them again right before
it commits: between the tasks' fragment uploads and the commit, deterministically, with real
Spark (the hook runs in the driver's Python worker that commits).

Options, removed before the rest reach `wal3`:
- `recreateBeforeCommit`: comma-separated log URLs to delete (every object under them, the
  tasks' fragments included, as `rm -r` does) and create again, empty;
- `createBeforeCommit`: comma-separated log URLs to create, as another writer would meanwhile;
- `hookBatch`: for a stream, the batch id whose commit runs the hooks (default 0).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from wal3_spark.log.committer import Committer
from wal3_spark.spark.source import Wal3DataSource
from wal3_spark.storage import open_store

NAME = "wal3_recreating"
_HOOKS = ("recreatebeforecommit", "createbeforecommit", "hookbatch")


def recreate(url: str) -> None:
    """Delete the log at `url` (every object under it) and create it again, empty."""
    store = open_store(url)
    for meta in list(store.list("")):
        store.delete(meta.key)
    Committer(store, writer="another writer").create(None)


def create(url: str) -> None:
    Committer(open_store(url), writer="another writer").create(None)


class _Hooks:
    def __init__(self, options: dict[str, str]) -> None:
        self.recreate = [u for u in options.get("recreatebeforecommit", "").split(",") if u]
        self.create = [u for u in options.get("createbeforecommit", "").split(",") if u]
        self.batch = int(options.get("hookbatch", "0"))

    def run(self) -> None:
        for url in self.recreate:
            recreate(url)
        for url in self.create:
            create(url)


class RecreatingDataSource(Wal3DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def _split(self) -> tuple[Wal3DataSource, _Hooks]:
        options = {k.lower(): v for k, v in self.options.items()}
        inner = Wal3DataSource({k: v for k, v in options.items() if k not in _HOOKS})
        return inner, _Hooks(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        inner, hooks = self._split()
        return _BatchWriter(inner.writer(schema, overwrite), hooks)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        inner, hooks = self._split()
        return _StreamWriter(inner.streamWriter(schema, overwrite), hooks)


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, inner, hooks: _Hooks) -> None:
        self.inner, self.hooks = inner, hooks

    def write(self, iterator: Iterator[pa.RecordBatch]):
        return self.inner.write(iterator)

    def commit(self, messages: Sequence) -> None:
        self.hooks.run()
        self.inner.commit(messages)

    def abort(self, messages: Sequence) -> None:
        self.inner.abort(messages)


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner, hooks: _Hooks) -> None:
        self.inner, self.hooks = inner, hooks

    def write(self, iterator: Iterator[pa.RecordBatch]):
        return self.inner.write(iterator)

    def commit(self, messages: Sequence, batchId: int) -> None:
        if batchId == self.hooks.batch:
            self.hooks.run()
        self.inner.commit(messages, batchId)

    def abort(self, messages: Sequence, batchId: int) -> None:
        self.inner.abort(messages, batchId)
