"""What a sink's task does on an executor: write its rows as fragments (the Spark classes stay
thin; the driver's commit is `wal3_spark.spark.commit`).

`write_partition` streams a task's Arrow batches into fragments of about `fragment_bytes`, each
written straight to the store as soon as it is full, so that a task holds at most one fragment
(about twice `fragment_bytes` while encoding) whatever its partition size. It imports fragment
I/O only, never the committer or the driver's reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import pyarrow as pa

from wal3_spark.format.schema import RAW_SCHEMA, conform
from wal3_spark.log.fragment_io import FragmentFile, iter_write_fragments
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


def write_partition(
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    target: pa.Schema | None,
    fragment_bytes: int,
    item_hash: str | None = None,
    *,
    filter_column: str | None = None,
) -> list[FragmentFile]:
    """Write a task's batches as fragments, their setsum items hashed as the log's `item_hash`
    (read by the driver), each with a stream filter of `filter_column` when given; on failure
    delete what this attempt wrote."""
    schema = RAW_SCHEMA if target is None else target
    conformed = (conform(batch, schema) for batch in batches if batch.num_rows)
    files: list[FragmentFile] = []
    try:
        for written in iter_write_fragments(
            store, conformed, target, fragment_bytes=fragment_bytes, item_hash=item_hash,
            filter_column=filter_column,
        ):
            files.append(written)
    except BaseException:
        delete_quietly(store, [f.path for f in files])
        raise
    return files


def delete_quietly(store: ObjectStore, paths: Sequence[str]) -> None:
    """Delete unreferenced fragments, leaving what fails to garbage collection."""
    for path in paths:
        try:
            store.delete(path)
        except Exception as exc:  # noqa: BLE001 - garbage collection removes what is left
            logger.warning("could not delete unreferenced fragment %s: %s", path, exc)
