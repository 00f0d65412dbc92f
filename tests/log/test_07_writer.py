"""The batched LogWriter: `submit` batches appends into fragments, uploads the next fragments
while a manifest write is in flight, commits every landed batch in one CAS, in submit order; a
failure fails exactly the appends it carried; `flush` waits for everything submitted before it.

Interleavings are forced with store wrappers that block chosen requests until the test releases
them (no sleeps)."""

from __future__ import annotations

import itertools
import threading
import time

import pyarrow as pa
import pytest

from tests.support.fakes import FailingStore
from wal3_spark.errors import (
    AccessDenied,
    AmbiguousWrite,
    CommitFailed,
    CommitOutcomeUnknown,
    PreconditionFailed,
    SchemaMismatch,
    TransientError,
)
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.cas import CasPolicy
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage.base import Blob
from wal3_spark.storage.common import md5_etag
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing import FaultyStore, LateLandingStore


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


class Gates(ForwardingStore):
    """Every fragment upload (numbered from 0 in call order) and, while `cas_gate` is closed,
    every manifest CAS wait for the test. `entered[i]` / `landed[i]` say where upload i is;
    `fail[i]` makes upload i raise instead of writing."""

    def __init__(self, inner, uploads=8):
        super().__init__(inner)
        self.entered = [threading.Event() for _ in range(uploads)]
        self.gate = [threading.Event() for _ in range(uploads)]
        self.landed = [threading.Event() for _ in range(uploads)]
        self.fail: dict[int, BaseException] = {}
        self.cas_gate = threading.Event()
        self.cas_gate.set()
        self.cas_entered = threading.Event()
        self.manifest_writes = 0
        self._uploads = itertools.count()

    def put_if_absent(self, key, data):
        if key == MANIFEST_KEY:
            return self.inner.put_if_absent(key, data)
        i = next(self._uploads)
        self.entered[i].set()
        self.gate[i].wait()
        if i in self.fail:
            raise self.fail[i]
        etag = self.inner.put_if_absent(key, data)
        self.landed[i].set()
        return etag

    def put_if_match(self, key, data, etag):
        if key == MANIFEST_KEY:
            self.cas_entered.set()
            self.cas_gate.wait()
            self.manifest_writes += 1
        return self.inner.put_if_match(key, data, etag)

    def open_all(self):
        for gate in self.gate:
            gate.set()
        self.cas_gate.set()


def submit_in_own_batch(writer, gates, i, data):
    """Submit `data` and wait until its batch was cut and its upload (number `i`) began."""
    future = writer.submit(data)
    assert gates.entered[i].wait(timeout=60)
    return future


def bodies(store):
    return LogReader(store).read_table().column("body").to_pylist()


def test_00_batched_submits_share_fragments_and_report_their_offsets(store):
    with LogWriter(store, LogWriterOptions(batch_interval_s=60, batch_bytes=1 << 30)) as writer:
        futures = [writer.submit([f"m{i}".encode()] * 2) for i in range(10)]
        writer.flush()
        got = [f.result() for f in futures]
    assert [(a.start, a.limit) for a in got] == [(1 + 2 * i, 3 + 2 * i) for i in range(10)]
    assert len(LogReader(store).manifest().fragments) == 1


def test_01_batched_submits_flush_by_size_without_being_asked(store):
    with LogWriter(store, LogWriterOptions(batch_interval_s=3600, batch_bytes=1000)) as writer:
        small = [writer.submit(b"x" * 100) for _ in range(3)]
        big = writer.submit(b"y" * 2000)  # pushes the waiting bytes past batch_bytes
        assert big.result(timeout=60).limit == 5
        assert [f.result(timeout=60).start for f in small] == [1, 2, 3]


def test_02_batched_submits_flush_by_interval_without_being_asked(store):
    with LogWriter(store, LogWriterOptions(batch_interval_s=0.05, batch_bytes=1 << 30)) as writer:
        assert writer.submit(b"alone").result(timeout=60).start == 1
        assert writer.submit(b"later").result(timeout=60).start == 2


def test_03_a_failed_batch_fails_its_futures_and_the_writer_keeps_serving(store):
    LogWriter(store).append(b"raw")
    with LogWriter(store, LogWriterOptions(batch_interval_s=0.01)) as writer:
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
    with LogWriter(gated, LogWriterOptions(batch_interval_s=0.0)) as writer:
        first = writer.submit(b"r1")
        assert gated.entered.wait(timeout=60)  # its batch is taken and uploading
        flush_called.set()
        writer.flush()
        assert first.done(), "flush() returned before an append submitted earlier was committed"
        assert first.result().start == 2
        assert LogReader(store).read_table().column("body").to_pylist() == [b"r0", b"r1"]
    releaser.join()


def test_05_fragments_upload_while_a_commit_is_in_flight_and_land_in_one_cas(store):
    """One manifest write at a time (the default): what lands while it is in flight is
    committed together after it."""
    LogWriter(store).append(b"r0")
    gates = Gates(store)
    with LogWriter(gates, LogWriterOptions(batch_bytes=1)) as writer:
        gates.cas_gate.clear()
        a = submit_in_own_batch(writer, gates, 0, b"a")
        gates.gate[0].set()
        assert gates.cas_entered.wait(timeout=60)  # a's commit is in flight and held
        b = submit_in_own_batch(writer, gates, 1, b"b")
        c = submit_in_own_batch(writer, gates, 2, b"c")
        gates.gate[1].set()
        gates.gate[2].set()
        assert gates.landed[1].wait(timeout=60) and gates.landed[2].wait(timeout=60)
        assert not a.done()  # both uploads landed while a's manifest write was in flight
        gates.open_all()
        writer.flush()
        assert [(f.result().start, f.result().limit) for f in (a, b, c)] == [(2, 3), (3, 4), (4, 5)]
    assert gates.manifest_writes == 2  # a's, then one for b and c together
    assert bodies(store) == [b"r0", b"a", b"b", b"c"]


def test_06_a_batch_that_lands_first_still_commits_after_the_batches_cut_before_it(store):
    LogWriter(store).append(b"r0")
    gates = Gates(store)
    with LogWriter(gates, LogWriterOptions(batch_bytes=1)) as writer:
        a = submit_in_own_batch(writer, gates, 0, b"a")
        b = submit_in_own_batch(writer, gates, 1, b"b")
        gates.gate[1].set()
        assert gates.landed[1].wait(timeout=60)
        assert not b.done()  # b's fragment landed, but a was submitted first
        gates.open_all()
        assert (a.result(timeout=60).start, b.result(timeout=60).start) == (2, 3)
    assert bodies(store) == [b"r0", b"a", b"b"]


def test_07_a_failed_fragment_upload_fails_exactly_the_appends_it_carried(store):
    LogWriter(store).append(b"r0")
    gates = Gates(store)
    gates.fail[1] = AccessDenied("injected: the upload of b's fragment was refused")
    with LogWriter(gates, LogWriterOptions(batch_bytes=1)) as writer:
        a = submit_in_own_batch(writer, gates, 0, b"a")
        b = submit_in_own_batch(writer, gates, 1, [b"b1", b"b2"])
        c = submit_in_own_batch(writer, gates, 2, b"c")
        gates.open_all()
        with pytest.raises(CommitFailed, match="AccessDenied: injected") as refused:  # the refusal is the cause
            b.result(timeout=60)
        assert isinstance(refused.value.__cause__, AccessDenied)
        assert (a.result(timeout=60).start, c.result(timeout=60).start) == (2, 3)
        assert writer.submit(b"d").result(timeout=60).start == 4  # the writer keeps serving
    assert bodies(store) == [b"r0", b"a", b"c", b"d"]


def test_08_a_failed_commit_fails_exactly_the_appends_it_carried(store):
    LogWriter(store).append(b"r0")
    with LogWriter(FailingStore(store, lambda key: key == MANIFEST_KEY,
                                 lambda key: AccessDenied("injected: the manifest write was refused"),
                                 ops=["put_if_match"], calls={1}), LogWriterOptions(batch_bytes=1)) as writer:
        assert writer.submit(b"a").result(timeout=60).start == 2
        b = writer.submit([b"b1", b"b2"])
        with pytest.raises(CommitFailed, match="AccessDenied: injected") as refused:  # the refusal is the cause
            b.result(timeout=60)
        assert writer.submit(b"c").result(timeout=60).start == 3  # b took no offsets
    assert bodies(store) == [b"r0", b"a", b"c"]
    manifest_paths = {f.path for f in LogReader(store).manifest().fragments}
    fragments = [m.key for m in store.list("log/")]
    assert len(fragments) == 4 and len(set(fragments) - manifest_paths) == 1  # b's: kept, for GC


class UnknownOnce(ForwardingStore):
    """The first manifest write times out without writing, and the read that would tell
    whether it landed is refused: its outcome cannot be established."""

    def __init__(self, inner):
        super().__init__(inner)
        self.timed_out = self.refused = False

    def put_if_match(self, key, data, etag):
        if key == MANIFEST_KEY and not self.timed_out:
            self.timed_out = True
            raise AmbiguousWrite(key, "injected: the manifest write timed out")
        return self.inner.put_if_match(key, data, etag)

    def get(self, key):
        if key == MANIFEST_KEY and self.timed_out and not self.refused:
            self.refused = True
            raise AccessDenied("injected: reading the manifest was refused")
        return self.inner.get(key)


def test_09_an_unknown_commit_outcome_surfaces_as_such_and_keeps_the_fragments(store):
    LogWriter(store).append(b"r0")
    with LogWriter(UnknownOnce(store), LogWriterOptions(batch_bytes=1)) as writer:
        a = writer.submit(b"a")
        with pytest.raises(CommitOutcomeUnknown) as raised:
            a.result(timeout=60)
        assert isinstance(raised.value.__cause__, AccessDenied)
        assert writer.submit(b"b").result(timeout=60).start == 2
    assert len(list(store.list("log/"))) == 3  # a's fragment was not deleted


def test_10_a_commit_that_loses_a_race_rebases_and_keeps_submit_order(store):
    """Another writer commits just before each of our first two manifest writes: ours rebase
    (412, reload, retry) while later batches land behind them; offsets still follow submits."""
    LogWriter(store).append(b"r0")

    class Competitor(ForwardingStore):
        races = 2

        def put_if_match(self, key, data, etag):
            if key == MANIFEST_KEY and self.races:
                self.races -= 1
                LogWriter(store).append(b"other")
            return self.inner.put_if_match(key, data, etag)

    with LogWriter(Competitor(store), LogWriterOptions(batch_interval_s=0.0)) as writer:
        futures = [writer.submit(f"m{i}".encode()) for i in range(50)]
        writer.flush()
    starts = [f.result().start for f in futures]
    assert starts == sorted(starts) and len(set(starts)) == 50
    log = bodies(store)
    assert [log[s - 1] for s in starts] == [f"m{i}".encode() for i in range(50)]
    assert log.count(b"other") == 2


def test_11_mixed_schemas_in_one_batch_commit_in_submit_order(store):
    with LogWriter(store, LogWriterOptions(merge_schema=True, batch_interval_s=3600, batch_bytes=1 << 30)) as writer:
        futures = [
            writer.submit(pa.table({"id": pa.array([1, 2], pa.int64())})),
            writer.submit(pa.table({"id": pa.array([3], pa.int64()), "extra": ["x"]})),
            writer.submit(pa.table({"id": pa.array(["not an int"])})),  # fails alone
            writer.submit(pa.table({"id": pa.array([4], pa.int64())})),
        ]
        writer.flush()
    assert [(f.result().start, f.result().limit) for f in futures if not f.exception()] == [
        (1, 3), (3, 4), (4, 5)]
    with pytest.raises(SchemaMismatch):
        futures[2].result()
    table = LogReader(store).read_table()
    assert table.column("id").to_pylist() == [1, 2, 3, 4]
    assert table.column("extra").to_pylist() == [None, None, "x", None]


def test_12_a_cancelled_submit_is_never_written(store):
    gates = Gates(store)
    with LogWriter(gates, LogWriterOptions(batch_bytes=1)) as writer:
        first = submit_in_own_batch(writer, gates, 0, b"first")
        cancelled = writer.submit(b"cancelled")
        assert cancelled.cancel()
        gates.open_all()
        assert first.result(timeout=60).start == 1
        assert writer.submit(b"after").result(timeout=60).start == 2
    assert bodies(store) == [b"first", b"after"]


def test_13_bad_raw_records_are_refused_at_submit(store):
    with LogWriter(store) as writer:
        with pytest.raises(ValueError, match="must be bytes"):
            writer.submit([b"ok", None])
        with pytest.raises(ValueError, match="must be bytes"):
            writer.submit(["text"])


def test_14_many_threads_under_faults_every_future_tells_the_truth(store):
    """Submits from 4 threads through a store that drops, fails, times out after writing and
    storms 412s: each future resolves to its own offsets or raises; every acknowledged record
    is in the log exactly there, each thread's acknowledged records in its submit order, and
    nothing else is in the log except appends whose future raised."""
    LogWriter(store).append(b"r0")
    faulty = FaultyStore(store, seed=7, drop=0.05, error_5xx=0.05, timeout_after_write=0.05,
                         precondition_storm=0.05)
    results: dict[bytes, object] = {}

    def produce(t):
        with LogWriter(faulty, LogWriterOptions(batch_interval_s=0.001, max_manifest_writes=8)) as writer:
            futures = {f"t{t}-{i}".encode(): writer.submit(f"t{t}-{i}".encode()) for i in range(60)}
            writer.flush()
        for body, future in futures.items():
            results[body] = future.exception() or future.result()

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log = bodies(store)
    acked = {body: r for body, r in results.items() if not isinstance(r, BaseException)}
    assert acked, "no append succeeded: the fault rates are too high to test anything"
    for body, appended in acked.items():
        assert appended.limit == appended.start + 1 and log[appended.start - 1] == body
    for t in range(4):
        mine = [acked[b].start for b in (f"t{t}-{i}".encode() for i in range(60)) if b in acked]
        assert mine == sorted(mine)
    assert len(log) == len(set(log))
    assert set(log) - set(acked) <= {b"r0"} | {b for b, r in results.items() if isinstance(r, BaseException)}
    assert sum(faulty.counts.values()) > 0


class HeldManifestWrites(ForwardingStore):
    """Manifest writes (numbered from 0 in the order they are sent) wait until the test releases
    them: `sent[i]` says write i is waiting; `before[i]` raises instead of writing, `after[i]`
    raises after writing (the answer was lost); `written[i]` is set once write i was applied,
    and its answer then waits for `answer[i]` when the test put one there. `uploads` counts
    fragment uploads."""

    def __init__(self, inner, writes=8):
        super().__init__(inner)
        self.sent = [threading.Event() for _ in range(writes)]
        self.release = [threading.Event() for _ in range(writes)]
        self.answered = [threading.Event() for _ in range(writes)]
        self.written = [threading.Event() for _ in range(writes)]
        self.answer: dict[int, threading.Event] = {}
        self.before: dict[int, BaseException] = {}
        self.after: dict[int, BaseException] = {}
        self.conditions: list[str] = []
        self.data: list[bytes] = []
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._uploaded = threading.Condition()
        self.uploads = 0

    def put_if_absent(self, key, data):
        etag = self.inner.put_if_absent(key, data)
        with self._uploaded:
            self.uploads += 1
            self._uploaded.notify_all()
        return etag

    def wait_uploads(self, n):
        with self._uploaded:
            assert self._uploaded.wait_for(lambda: self.uploads >= n, timeout=60)

    def put_if_match(self, key, data, etag):
        if key != MANIFEST_KEY:
            return self.inner.put_if_match(key, data, etag)
        with self._lock:
            i = next(self._numbers)
            self.conditions.append(etag)
            self.data.append(bytes(data))
        self.sent[i].set()
        self.release[i].wait()
        try:
            if i in self.before:
                raise self.before[i]
            written = self.inner.put_if_match(key, data, etag)
            self.written[i].set()
            if i in self.answer:
                self.answer[i].wait()
            if i in self.after:
                raise self.after[i]
            return written
        finally:
            self.answered[i].set()

    def release_all(self):
        for event in self.release:
            event.set()

    def release_in_order(self, n):
        """Let writes 0..n-1 through one at a time (each answered before the next is applied),
        then all later ones."""
        for i in range(n):
            self.release[i].set()
            assert self.answered[i].wait(timeout=60)
        self.release_all()


def pipelined(store, held, bodies_, **kw):
    """Submit each body in its own batch; return the futures once every one's manifest write
    was sent (all in flight together), and the order in which the futures resolved."""
    resolved: list[bytes] = []
    writer = LogWriter(held, LogWriterOptions(**{"batch_bytes": 1, "max_manifest_writes": 8, **kw}))
    futures = []
    for i, body in enumerate(bodies_):
        future = writer.submit(body)
        future.add_done_callback(lambda f, body=body: resolved.append(body))
        futures.append(future)
        assert held.sent[i].wait(timeout=60), f"manifest write {i} was not sent while {i - 1} was in flight"
    return writer, futures, resolved


def test_15_manifest_writes_are_pipelined_and_appends_acknowledged_in_offset_order(store):
    """Three manifest writes are in flight at once, each conditioned on the ETag the one before
    will produce; the later ones are answered first, yet nothing is acknowledged before the
    appends ahead of it, and offsets follow submit order."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        assert held.conditions[1] != held.conditions[0]  # chained on the prediction, not a read
        held.release[0].set()
        assert held.answered[0].wait(timeout=60)
        assert futures[0].result(timeout=60).start == 2
        assert not futures[1].done() and not futures[2].done()
        held.release_all()
        writer.flush()
    assert [(f.result().start, f.result().limit) for f in futures] == [(2, 3), (3, 4), (4, 5)]
    assert resolved == [b"a", b"b", b"c"]
    assert bodies(store) == [b"r0", b"a", b"b", b"c"]


def test_16_a_chained_write_after_a_lost_race_falls_back_to_the_ordinary_commit(store):
    """Another writer commits while our three writes are in flight: the first loses (412), so
    the ones chained on it can never land; all three are committed again after a reload, in
    order, after the other writer's record, each once."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        LogWriter(store).append(b"other")
        held.release_in_order(3)
        writer.flush()
        assert writer._chain.resent == 0  # a was conditioned on a stored version: no reordering
    assert [f.result().start for f in futures] == [3, 4, 5]
    assert resolved == [b"a", b"b", b"c"]
    assert bodies(store) == [b"r0", b"other", b"a", b"b", b"c"]


@pytest.mark.parametrize("landed", [True, False])
def test_17_an_ambiguous_write_in_the_chain_is_resolved_once(store, landed):
    """The first of three pipelined writes times out, having written (landed) or not: either
    the writes chained on it land and prove it landed, or they lose (412) and it is resolved by
    the compare-and-swap's ambiguity rules. Either way each append is in the log once, and
    acknowledged in order."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    timeout = AmbiguousWrite(MANIFEST_KEY, "injected: the answer was lost")
    (held.after if landed else held.before)[0] = timeout
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        held.release_in_order(3)
        writer.flush()
    assert [f.result().start for f in futures] == [2, 3, 4]
    assert resolved == [b"a", b"b", b"c"]
    assert bodies(store) == [b"r0", b"a", b"b", b"c"]


def test_18_a_write_that_lands_late_after_the_chain_broke_is_not_a_duplicate(store):
    """The second of three pipelined writes is held by the store and applied late, after the
    writer has seen the third lose: it lands (its condition still holds), and the resolution
    finds it instead of appending its record a second time."""
    LogWriter(store).append(b"r0")
    late = LateLandingStore(store, keys=[MANIFEST_KEY], writes=[2], land="after_get")
    held = HeldManifestWrites(late)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        held.release_in_order(3)
        writer.flush()
    assert late.counts["landed"] == 1, late.counts  # the scenario really happened
    assert [f.result().start for f in futures] == [2, 3, 4]
    assert resolved == [b"a", b"b", b"c"]
    assert bodies(store) == [b"r0", b"a", b"b", b"c"]


def test_19_a_refused_write_in_the_chain_fails_exactly_the_appends_it_carried(store):
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    held.before[1] = AccessDenied("injected: the manifest write was refused")
    writer, futures, resolved = pipelined(store, held, [b"a", [b"b1", b"b2"], b"c"])
    with writer:
        held.release_in_order(3)
        writer.flush()
        with pytest.raises(CommitFailed, match="AccessDenied: injected") as refused:  # the refusal is the cause
            futures[1].result()
        assert (futures[0].result().start, futures[2].result().start) == (2, 3)
        assert writer.submit(b"d").result(timeout=60).start == 4  # the writer keeps serving
    assert bodies(store) == [b"r0", b"a", b"c", b"d"]


class NotMd5Etags(ForwardingStore):
    """Claims MD5 ETags, but answers with others (as S3 does under SSE-KMS)."""

    md5_etags = True

    def get(self, key):
        blob = self.inner.get(key)
        return Blob(blob.data, "x" + blob.etag)

    def put_if_match(self, key, data, etag):
        return "x" + self.inner.put_if_match(key, data, etag[1:] if etag.startswith("x") else "not-ours")


def test_20_etags_that_are_not_md5_end_pipelining_after_one_lost_write(store):
    """The write chained on a wrong prediction loses (412) and is committed again; from then
    on the writer sends a manifest write only once the one before was answered, conditioned
    on the ETag the store answered, even when a batch lands while one is in flight."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(NotMd5Etags(store))
    writer, futures, _ = pipelined(store, held, [b"a", b"b"])
    with writer:
        held.release_in_order(2)  # a lands; b, chained on a's predicted ETag, loses
        assert held.sent[2].wait(timeout=60)  # b committed again: held.release[2] is set
        assert [f.result(timeout=60).start for f in futures] == [2, 3]
        held.release[3].clear()
        held.release[4].clear()
        c = writer.submit(b"c")
        assert held.sent[3].wait(timeout=60)  # c's write is in flight, held
        d = writer.submit(b"d")
        held.wait_uploads(4)  # d's fragment landed while c's write was in flight
        held.release[3].set()
        held.release[4].set()
        assert (c.result(timeout=60).start, d.result(timeout=60).start) == (4, 5)
    assert bodies(store) == [b"r0", b"a", b"b", b"c", b"d"]
    assert [i for i, c in enumerate(held.conditions) if not c.startswith("x")] == [1]



#: every link rolls the fragments before it into a snapshot: a landed link's fragment leaves the
#: manifest's own list as soon as the link after it lands
_ROLL_EVERY_LINK = SnapshotOptions(snapshot_rollover_threshold=2, fragment_rollover_threshold=3)


def _false_answer(kind: str) -> BaseException:
    """What a store may answer for a write that landed: a resent PUT's 412, an error it took
    for one before sending, a refusal (or an error it could not classify)."""
    return {
        "412": PreconditionFailed(MANIFEST_KEY, "injected: landed, answered 412 (resent PUT)"),
        "not-sent": TransientError("injected: landed, answered as never sent"),
        "refused": AccessDenied("injected: landed, answered with a refusal"),
    }[kind]


def _exactly_once(store, expected):
    assert bodies(store) == expected
    assert verify(store).problems == []


@pytest.mark.parametrize("kind", ["412", "not-sent", "refused"])
def test_21_a_success_chained_on_a_write_proves_it_landed_whatever_it_answered(store, kind):
    """Write b lands but is answered with a failure; c, chained on b's bytes, succeeds (which
    it can only if b landed) and rolls b's fragment into a snapshot. Both answers are in before
    the chain looks (the test holds the commit thread): b is acknowledged at the offset it
    landed at, not committed a second time, and acknowledgements follow offsets."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    held.after[1] = _false_answer(kind)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"], snapshot_options=_ROLL_EVERY_LINK)
    with writer:
        with writer._commit_lock:  # the commit thread settles only once every answer is in
            held.release_in_order(3)
        writer.flush()
    assert [(f.result().start, f.result().limit) for f in futures] == [(2, 3), (3, 4), (4, 5)]
    assert resolved == [b"a", b"b", b"c"]
    _exactly_once(store, [b"r0", b"a", b"b", b"c"])


@pytest.mark.parametrize("kind", ["412", "not-sent"])
def test_22_a_write_committed_again_after_a_wrong_failure_is_found_in_a_snapshot(store, kind):
    """Write b lands but is answered 412 (or "not sent"); another writer's commit then rolls
    b's fragment into a snapshot, so c (chained on b) loses. Nothing proves b landed, and b and
    c are committed again: each is looked for from where the chain placed it, through the
    snapshot tree, so b is found at its offset (not appended twice) and only c is appended."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    held.after[1] = _false_answer(kind)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        with writer._commit_lock:
            for i in range(2):
                held.release[i].set()
                assert held.answered[i].wait(timeout=60)
            LogWriter(store, LogWriterOptions(snapshot_options=_ROLL_EVERY_LINK)).append(b"other")
            held.release_all()
            assert held.answered[2].wait(timeout=60)  # c: 412
        writer.flush()
    assert [f.result().start for f in futures] == [2, 3, 5]
    assert resolved == [b"a", b"b", b"c"]
    _exactly_once(store, [b"r0", b"a", b"b", b"other", b"c"])
    assert LogReader(store).manifest().fragments[0].start > 3  # b (at 3) was rolled into a snapshot


def test_23_a_refused_write_found_in_the_log_is_acknowledged(store):
    """b lands but is answered with a refusal, then another writer commits, so c (chained on
    b) loses: nothing proves b landed but the log itself, which is read once before failing
    b's append."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    held.after[1] = _false_answer("refused")
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        with writer._commit_lock:
            for i in range(2):
                held.release[i].set()
                assert held.answered[i].wait(timeout=60)
            LogWriter(store).append(b"other")
            held.release_all()
            assert held.answered[2].wait(timeout=60)  # c: 412
        writer.flush()
    assert [f.result().start for f in futures] == [2, 3, 5]
    assert resolved == [b"a", b"b", b"c"]
    _exactly_once(store, [b"r0", b"a", b"b", b"other", b"c"])


class _Unreachable(ForwardingStore):
    """Once `failing` is set, manifest writes fail without being sent."""

    def __init__(self, inner):
        super().__init__(inner)
        self.failing = threading.Event()

    def put_if_match(self, key, data, etag):
        if key == MANIFEST_KEY and self.failing.is_set():
            raise TransientError("injected: store unreachable (request not sent)")
        return self.inner.put_if_match(key, data, etag)


def test_24_a_write_chained_on_one_whose_outcome_is_unknown_is_unknown_too(store):
    """b and c are held by the store (timeouts), c conditioned on b's bytes; the store then
    stays unreachable until the compare-and-swap gives up. b ends unknown (its condition
    still holds), and so must c: b's base still being there does not make c's condition gone,
    since b may still land and create it. Both land later: neither was reported failed."""
    LogWriter(store).append(b"r0")
    late = LateLandingStore(store, keys=[MANIFEST_KEY], writes=[2, 3], land="manual")
    unreachable = _Unreachable(late)
    held = HeldManifestWrites(unreachable, writes=64)
    writer, futures, _ = pipelined(store, held, [b"a", b"b", b"c"])
    writer.committer._manifest.policy = CasPolicy(max_attempts=3, deadline_s=60, backoff_base_s=0.001,
                                                  backoff_cap_s=0.01)
    with writer:
        for i in range(3):  # a lands; b and c are held by the store, in this order
            held.release[i].set()
            assert held.answered[i].wait(timeout=60)
        unreachable.failing.set()
        held.release_all()
        writer.flush()
    assert futures[0].result().start == 2
    for future in futures[1:]:
        with pytest.raises(CommitOutcomeUnknown):
            future.result()
    assert bodies(store) == [b"r0", b"a"]
    late.land_all()
    assert late.counts["landed"] == 2, late.counts
    _exactly_once(store, [b"r0", b"a", b"b", b"c"])


def test_25_submit_futures_are_futures_with_the_state_future_init_sets():
    """`submit` returns a lighter Future (its condition binds no lock methods per instance):
    it must hold exactly the state `Future.__init__` sets, so that every Future method works
    on it, on every Python this runs on."""
    from concurrent.futures import Future

    from wal3_spark.log.writer import _AppendFuture, _Condition

    ours, theirs = _AppendFuture(_Condition()), Future()
    assert isinstance(ours, Future)
    assert set(vars(ours)) == set(vars(theirs))
    for name, value in vars(theirs).items():
        if name != "_condition":
            assert type(getattr(ours, name)) is type(value) and getattr(ours, name) == value, name
    condition = ours._condition
    assert isinstance(condition, threading.Condition) and not condition._is_owned()
    with condition:
        assert condition._is_owned()
        with condition:  # reentrant, as Future's own condition is
            assert not condition.wait(timeout=0)
    assert not condition._is_owned()


def _until_waiting(future, waiters):
    """Spin (no sleep) until `waiters` threads wait on `future`'s condition."""
    deadline = time.monotonic() + 60
    while len(future._condition._waiters) < waiters:
        assert time.monotonic() < deadline, "the waiting thread never waited"


def test_26_threads_blocked_on_submit_futures_wake_with_their_outcome(store):
    """result(), exception(), concurrent.futures.wait and as_completed, each blocked in another
    thread before the append commits (or fails), return its outcome when it does."""
    from concurrent.futures import ALL_COMPLETED, as_completed, wait

    gates = Gates(store)
    gates.fail[1] = AccessDenied("injected: upload refused")
    got: dict[str, object] = {}
    with LogWriter(gates, LogWriterOptions(batch_bytes=1)) as writer:
        ok = submit_in_own_batch(writer, gates, 0, b"ok")
        bad = submit_in_own_batch(writer, gates, 1, b"bad")
        threads = [
            threading.Thread(target=lambda: got.update(result=ok.result(timeout=60))),
            threading.Thread(target=lambda: got.update(exception=bad.exception(timeout=60))),
            threading.Thread(target=lambda: got.update(
                wait=wait([ok, bad], timeout=60, return_when=ALL_COMPLETED).not_done)),
            threading.Thread(target=lambda: got.update(
                as_completed={f.exception() is None for f in as_completed([ok, bad], timeout=60)})),
        ]
        for thread in threads:
            thread.start()
        _until_waiting(ok, 1)  # result(); wait() and as_completed() use the futures' own waiter lists
        _until_waiting(bad, 1)
        gates.open_all()
        for thread in threads:
            thread.join(timeout=60)
    assert got["result"].start == 1
    assert isinstance(got["exception"], CommitFailed) and isinstance(got["exception"].__cause__, AccessDenied)
    assert got["wait"] == set() and got["as_completed"] == {True, False}
    assert bodies(store) == [b"ok"]


def test_27_a_future_sharing_its_condition_waits_for_its_own_outcome():
    """Futures submitted between two cuts share one condition, notified whenever any of them
    resolves: a thread blocked in result() or exception() on one of them must go on waiting
    when another resolves (Future's own methods wake once and raise TimeoutError), and return
    its own outcome; a timeout still expires."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from wal3_spark.log.writer import _AppendFuture, _Condition

    condition = _Condition()
    first, second, third = (_AppendFuture(condition) for _ in range(3))
    got: dict[str, object] = {}

    def block(name, call):
        try:
            got[name] = call()
        except BaseException as exc:  # noqa: BLE001 - the test asserts what it was
            got[name] = exc

    threads = [threading.Thread(target=block, args=("result", second.result)),
               threading.Thread(target=block, args=("exception", third.exception))]
    for thread in threads:
        thread.start()
    _until_waiting(first, 2)
    first.set_result("first")
    deadline = time.monotonic() + 60  # both woke: each waits again, or (wrongly) returned
    while len(condition._waiters) < 2 and not got:
        assert time.monotonic() < deadline, "the blocked threads neither waited again nor returned"
    assert got == {}, got
    second.set_result("second")
    third.set_exception(ValueError("third"))
    for thread in threads:
        thread.join(timeout=60)
    assert got["result"] == "second"
    assert isinstance(got["exception"], ValueError)
    with pytest.raises(FutureTimeout):
        _AppendFuture(condition).result(timeout=0.01)


def _reordered(held):
    """b and c (chained on a's and b's predicted ETags) reach the store before a is applied and
    lose (412); a then lands as predicted. The chain then sends c's bytes on a's ETag (write 3)."""
    for i in (1, 2, 0):
        held.release[i].set()
        assert held.answered[i].wait(timeout=60)
    assert held.sent[3].wait(timeout=60)
    assert (held.data[3], held.conditions[3]) == (held.data[2], held.conditions[1])


def test_28_links_lost_to_a_reordering_land_with_one_resend_while_the_chain_keeps_sending(store):
    """After the reordering of `_reordered`, one write of c's bytes conditioned on a carries b
    and c, and the chain does not drain: d's write goes out, chained on c's bytes, while that
    resend is still held by the store. Each append is in the log once, acknowledged in order."""
    LogWriter(store).append(b"r0")
    held = HeldManifestWrites(store)
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        _reordered(held)
        d = writer.submit(b"d")
        sent_while_held = held.sent[4].wait(timeout=60)
        b_pending = not futures[1].done()  # b: decided by the resend, still held
        held.release_in_order(5)
        assert sent_while_held, "the chain waited for the resend"
        assert held.conditions[4] == md5_etag(held.data[2])
        assert b_pending
        writer.flush()
        assert (writer._chain.resent, writer._chain.drained) == (1, 0)
    assert [f.result().start for f in futures + [d]] == [2, 3, 4, 5]
    assert resolved == [b"a", b"b", b"c"]
    _exactly_once(store, [b"r0", b"a", b"b", b"c", b"d"])


@pytest.mark.parametrize("kind", ["landed", "not-landed", "lands-late", "lost-race"])
def test_29_a_resend_that_does_not_succeed_is_resolved_once(store, kind):
    """The resend of `_reordered` times out having written, or not, or to land late (right after
    the chain's next read), or loses to another writer's commit: the chain waits for every
    answer and resolves b and c once, in order (after the other writer's record when it lost)."""
    LogWriter(store).append(b"r0")
    late = LateLandingStore(store, keys=[MANIFEST_KEY], writes=[4] if kind == "lands-late" else [],
                            land="after_get")
    held = HeldManifestWrites(late)
    timeout = AmbiguousWrite(MANIFEST_KEY, "injected: the answer was lost")
    if kind in ("landed", "not-landed"):
        (held.after if kind == "landed" else held.before)[3] = timeout
    writer, futures, resolved = pipelined(store, held, [b"a", b"b", b"c"])
    with writer:
        _reordered(held)
        if kind == "lost-race":
            LogWriter(store).append(b"other")
        held.release_all()
        writer.flush()
        assert (writer._chain.resent, writer._chain.drained) == (1, 1)
    if kind == "lands-late":
        assert late.counts["landed"] == 1, late.counts  # the scenario really happened
    other = [b"other"] if kind == "lost-race" else []
    assert [f.result().start for f in futures] == [2, 3 + len(other), 4 + len(other)]
    assert resolved == [b"a", b"b", b"c"]
    _exactly_once(store, [b"r0", b"a", *other, b"b", b"c"])
