"""Reads of offsets the log no longer holds (garbage-collected below its oldest offset): data loss
named with the missing range, or skipped when the reader says `fail_on_data_loss=False` (readers
racing GC: log/test_08_reader; Spark's startingOffsets: spark/test_09_stream_read)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from wal3_spark.errors import DataLost
from wal3_spark.log.committer import Committer
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter


def test_00_reading_below_the_oldest_offset_is_data_loss(store):
    LogWriter(store).append([b"a", b"b"])
    LogWriter(store).append([b"c"])
    committer = Committer(store)
    manifest = committer.manifest()
    dropped = manifest.fragments[0]
    committer.update(lambda m: replace(m, fragments=m.fragments[1:], collected=m.collected + dropped.setsum,
                                       initial_offset=3) if m.initial_offset is None else None)
    with pytest.raises(DataLost, match=r"offsets \[1, 3\)"):
        list(LogReader(store).read(1))
    table = pa.Table.from_batches(list(LogReader(store).read(1, fail_on_data_loss=False)))
    assert table.column("body").to_pylist() == [b"c"]
