"""Reading a log without Spark: `LogReader.scan` gives a `pyarrow.RecordBatchReader` over an
offset or time range, or from a cursor, that fetches, verifies and decodes one fragment at a
time; DuckDB and Polars query it directly."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import tracemalloc

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.fakes import HookedStore
from wal3_spark.errors import CorruptLog, DataLost, InvalidOption
from wal3_spark.format.layout import FRAGMENT_PREFIX
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.storage import open_store

_names = itertools.count()

#: Arrow pools set as the default while measuring, kept for the life of the process: a buffer
#: allocated through one (a cached schema, a thread-local scratch buffer) may be freed later,
#: and freeing it through a destroyed pool crashes the interpreter.
_MEASURING_POOLS: list[pa.MemoryPool] = []


def orders(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table({"order_id": ids, "amount": [float(i % 17) for i in ids],
                     "region": [("north", "south", "east")[i % 3] for i in ids]})


def log_of(url: str, fragments: int, per_fragment: int = 10, options: dict | None = None):
    """A structured log of `fragments` appends of `per_fragment` orders (ids from 0)."""
    store = open_store(url, options or {})
    with LogWriter(store) as writer:
        for i in range(fragments):
            writer.append(orders(i * per_fragment, per_fragment))
    return store


def fragment_gets(store: HookedStore) -> int:
    return sum(n for key, n in store.gets.items() if key.startswith(FRAGMENT_PREFIX))


def counting(store) -> HookedStore:
    return HookedStore(store, when=lambda key: False, hook=lambda: None)


def test_00_a_scan_is_a_record_batch_reader_that_fetches_one_fragment_per_batch():
    store = counting(log_of(f"memory://scan-{next(_names)}", fragments=6))
    scan = LogReader(store).scan(5, 33)
    assert isinstance(scan.reader, pa.RecordBatchReader)
    assert (scan.start, scan.limit, scan.records, scan.position) == (5, 33, 28, 5)
    assert scan.reader.schema.names == ["order_id", "amount", "region", "_offset", "_timestamp"]
    assert fragment_gets(store) == 0, "planning fetched fragments"

    first = scan.reader.read_next_batch()
    assert first.column("_offset").to_pylist() == list(range(5, 11))
    assert first.column("order_id").to_pylist() == list(range(4, 10))
    assert fragment_gets(store) == 1 and scan.position == 11

    rest = pa.Table.from_batches(list(scan.reader))
    assert rest.column("_offset").to_pylist() == list(range(11, 33))
    assert fragment_gets(store) == 4 and scan.position == 33


def test_01_time_ranges_start_at_the_first_fragment_written_at_or_after_them():
    store = log_of(f"memory://scan-{next(_names)}", fragments=5)
    refs = LogReader(store).manifest().fragments
    times = [uuid7_timestamp_us(ref.seq_no) for ref in refs]
    assert times == sorted(times) and len(set(times)) == 5

    def at(us: int) -> dt.datetime:
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=us)

    scan = LogReader(store).scan(start_time=at(times[1]), end_time=at(times[3]))
    assert (scan.start, scan.limit) == (refs[1].start, refs[3].start)
    table = scan.reader.read_all()
    assert table.column("_offset").to_pylist() == list(range(refs[1].start, refs[3].start))

    naive = LogReader(store).scan(start_time=at(times[1] + 1).replace(tzinfo=None))
    assert naive.start == refs[2].start, "a naive datetime is UTC"
    assert LogReader(store).scan(start_time=at(times[4] + 1)).records == 0


def test_02_bad_ranges_are_refused_with_the_valid_values():
    store = log_of(f"memory://scan-{next(_names)}", fragments=2)
    reader = LogReader(store)
    now = dt.datetime.now(dt.timezone.utc)
    cases = [
        (dict(start=0), "start=0: give an integer >= 1"),
        (dict(start="3"), "start='3': give an integer >= 1"),
        (dict(start=22), r"start 22 is past the tail .* give a start within \[1, 21\]"),
        (dict(start=5, limit=4), "limit 4 is below start 5"),
        (dict(start=1, start_time=now), "give start or start_time, not both"),
        (dict(limit=3, end_time=now), "give limit or end_time, not both"),
        (dict(start_time="yesterday"), "'yesterday' is not a time: give a datetime.datetime"),
        (dict(max_records=-1), "max_records=-1: give an integer >= 0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidOption, match=message):
            reader.scan(**kwargs)
    assert reader.scan(start=21).records == 0, "the tail itself is a valid (empty) start"
    assert reader.scan(max_records=0).records == 0


def test_03_offsets_garbage_collection_removed_are_data_loss_or_skipped():
    store = log_of(f"memory://scan-{next(_names)}", fragments=4)
    CursorStore(store).advance("c", 21)
    GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    reader = LogReader(store)
    with pytest.raises(DataLost, match=r"offsets \[1, 21\) .* were garbage-collected"):
        reader.scan(start=1)
    skipped = reader.scan(start=1, fail_on_data_loss=False)
    assert skipped.reader.read_all().column("order_id").to_pylist() == list(range(20, 40))


def test_04_a_consumer_reads_from_its_cursor_and_moves_it_each_record_exactly_once():
    store = log_of(f"memory://scan-{next(_names)}", fragments=3)
    cursors = CursorStore(store)
    seen: list[int] = []
    with LogWriter(store) as writer:
        for round_ in range(6):
            scan = cursors.scan_from("billing", max_records=12)
            assert scan.start == (1 if round_ == 0 else cursors.get("billing").cursor.offset)
            seen += scan.reader.read_all().column("order_id").to_pylist()
            cursors.advance("billing", scan.position)
            if round_ < 2:
                writer.append(orders(30 + 10 * round_, 10))
    assert seen == list(range(50)), "a record was lost or read twice"
    assert cursors.get("billing").cursor.offset == 51
    assert cursors.scan_from("billing").records == 0
    assert cursors.scan_from("fresh", start=41).reader.read_all().num_rows == 10


def test_05_a_consumer_that_stops_early_knows_where_it_stopped():
    store = log_of(f"memory://scan-{next(_names)}", fragments=4)
    cursors = CursorStore(store)
    scan = cursors.scan_from("c")
    batch = scan.reader.read_next_batch()
    cursors.advance("c", scan.position)
    assert scan.position == 11 and batch.column("_offset").to_pylist()[-1] == 10
    assert cursors.scan_from("c").reader.read_all().column("_offset").to_pylist()[0] == 11


def test_06_every_fragment_is_verified_by_default_also_inside_duckdb_and_polars():
    store = log_of(f"memory://scan-{next(_names)}", fragments=3)
    refs = LogReader(store).manifest().fragments
    # Same record count and offsets, other content: only the content check (its digest) tells.
    corrupt = store.get(refs[1].path)
    store.put_if_match(refs[1].path, store.get(refs[0].path).data, corrupt.etag)
    with pytest.raises(CorruptLog, match="bytes do not match their blake3"):
        LogReader(store).scan().reader.read_all()
    with pytest.raises(duckdb.Error, match=f"{refs[1].path}: its bytes do not match their blake3"):
        duckdb.from_arrow(LogReader(store).scan().reader).aggregate("count(*)").fetchall()
    with pytest.raises(Exception, match=f"{refs[1].path}: its bytes do not match their blake3"):
        pl.scan_arrow_c_stream(LogReader(store).scan().reader).select(pl.len()).collect()
    unchecked = LogReader(store).scan(verify=False).reader.read_all()
    assert unchecked.column("order_id").to_pylist()[10:20] == list(range(10))


def test_07_duckdb_queries_a_log(store_url, store_options):
    store = log_of(store_url, fragments=5, options=store_options)
    reader = LogReader(store)
    expected = reader.read_table().filter(pc.field("amount") > 8)

    relation = duckdb.from_arrow(reader.scan().reader)
    [(count, total)] = relation.filter("amount > 8").aggregate("count(*), sum(amount)").fetchall()
    assert (count, total) == (expected.num_rows, pc.sum(expected.column("amount")).as_py())

    batches = reader.scan(start=11, limit=41).reader   # a Python variable DuckDB's SQL sees
    rows = duckdb.sql(
        "SELECT region, count(*) AS n, min(_offset) AS first FROM batches GROUP BY region ORDER BY region"
    ).fetchall()
    assert rows == [("east", 10, 12), ("north", 10, 13), ("south", 10, 11)]


def test_08_polars_reads_a_log_eagerly_and_lazily(store_url, store_options):
    store = log_of(store_url, fragments=5, options=store_options)
    reader = LogReader(store)
    frame = pl.from_arrow(reader.scan().reader)
    assert frame.shape == (50, 5) and frame["order_id"].to_list() == list(range(50))
    assert frame.schema["_timestamp"] == pl.Datetime("us", "UTC")

    lazy = (pl.scan_arrow_c_stream(reader.scan().reader)
            .filter(pl.col("amount") > 8).group_by("region").agg(pl.len().alias("n")).sort("region"))
    expected = frame.filter(pl.col("amount") > 8).group_by("region").agg(pl.len().alias("n")).sort("region")
    assert lazy.collect().equals(expected)

    hooked = counting(store)
    scan = LogReader(hooked).scan()
    assert pl.scan_arrow_c_stream(scan.reader).head(3).collect()["order_id"].to_list() == [0, 1, 2]
    assert fragment_gets(hooked) < 5 and scan.position < scan.limit, "a lazy head read the whole log"


def test_09_memory_stays_about_one_fragment_however_long_the_range(tmp_path):
    """24 fragments of ~1 MB each: a scan's peak (Arrow's pool plus Python allocations, the
    fetched bytes among them) stays a few fragments; reading the same range whole does not."""
    store = open_store(str(tmp_path / "big"))
    with LogWriter(store) as writer:
        for i in range(24):
            writer.append(pa.table({"id": range(i * 250, (i + 1) * 250),
                                    "payload": [os.urandom(4000) for _ in range(250)]}))
    refs = LogReader(store).manifest().fragments
    fragment = max(ref.num_bytes for ref in refs)
    total = sum(ref.num_bytes for ref in refs)
    assert fragment > 900_000 and total > 20 * fragment

    def peak(read) -> int:
        previous = pa.default_memory_pool()
        pool = pa.proxy_memory_pool(previous)
        _MEASURING_POOLS.append(pool)
        pa.set_memory_pool(pool)
        tracemalloc.start()
        try:
            read()
            return pool.max_memory() + tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            pa.set_memory_pool(previous)

    rows = []
    streamed = peak(lambda: rows.extend(batch.num_rows for batch in LogReader(store).scan().reader))
    assert sum(rows) == 6000 and len(rows) == 24
    assert streamed < 6 * fragment, f"peak {streamed} bytes for fragments of {fragment} bytes"
    whole = peak(lambda: LogReader(store).read_table())
    assert whole > total, "the measure misses what a whole read holds"
