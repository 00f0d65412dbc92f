"""The batched LogWriter: `submit` batches appends into fragments, `flush` waits for them."""

from __future__ import annotations

import itertools
import threading

import pyarrow as pa
import pytest

from wal3_spark.errors import SchemaMismatch
from wal3_spark.format import MANIFEST_KEY
from wal3_spark.reader import LogReader
from wal3_spark.storage import open_store
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.writer import LogWriter

_names = itertools.count()


@pytest.fixture
def store():
    return open_store(f"memory://writer-{next(_names)}")


class GatedUploads(ForwardingStore):
    """Fragment uploads (`put_if_absent` outside the manifest) block until the test opens the
    gate; `entered` is set as soon as one is waiting."""

    def __init__(self, inner):
        super().__init__(inner)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def put_if_absent(self, key, data):
        if key != MANIFEST_KEY:
            self.entered.set()
            self.gate.wait()
        return self.inner.put_if_absent(key, data)


def test_00_batched_submits_share_fragments_and_report_their_offsets(store):
    with LogWriter(store, batch_interval_s=60, batch_bytes=1 << 30) as writer:
        futures = [writer.submit([f"m{i}".encode()] * 2) for i in range(10)]
        writer.flush()
        got = [f.result() for f in futures]
    assert [(a.start, a.limit) for a in got] == [(1 + 2 * i, 3 + 2 * i) for i in range(10)]
    assert len(LogReader(store).manifest().fragments) == 1


def test_01_batched_submits_flush_by_size_without_being_asked(store):
    with LogWriter(store, batch_interval_s=3600, batch_bytes=1000) as writer:
        small = [writer.submit(b"x" * 100) for _ in range(3)]
        big = writer.submit(b"y" * 2000)  # pushes the waiting bytes past batch_bytes
        assert big.result(timeout=60).limit == 5
        assert [f.result(timeout=60).start for f in small] == [1, 2, 3]


def test_02_batched_submits_flush_by_interval_without_being_asked(store):
    with LogWriter(store, batch_interval_s=0.05, batch_bytes=1 << 30) as writer:
        assert writer.submit(b"alone").result(timeout=60).start == 1
        assert writer.submit(b"later").result(timeout=60).start == 2


def test_03_a_failed_batch_fails_its_futures_and_the_writer_keeps_serving(store):
    LogWriter(store).append(b"raw")
    with LogWriter(store, batch_interval_s=0.01) as writer:
        bad = writer.submit(pa.table({"x": [1]}))
        with pytest.raises(SchemaMismatch):
            bad.result(timeout=60)
        assert writer.submit(b"fine").result(timeout=60).start == 2


def test_04_flush_waits_for_a_batch_whose_upload_is_in_flight(store):
    """flush() must cover what the background thread already took, not only what still waits."""
    LogWriter(store).append(b"r0")
    gated = GatedUploads(store)
    flush_called = threading.Event()

    def open_gate_once_flush_is_called():
        flush_called.wait()
        gated.gate.set()

    releaser = threading.Thread(target=open_gate_once_flush_is_called, daemon=True)
    releaser.start()
    with LogWriter(gated, batch_interval_s=0.0) as writer:
        first = writer.submit(b"r1")
        assert gated.entered.wait(timeout=60)  # its batch is taken and uploading
        flush_called.set()
        writer.flush()
        assert first.done(), "flush() returned before an append submitted earlier was committed"
        assert first.result().start == 2
        assert LogReader(store).read_table().column("body").to_pylist() == [b"r0", b"r1"]
    releaser.join()
