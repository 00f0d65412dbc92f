"""Small stand-ins shared by tests and benchmarks."""

from __future__ import annotations

import hashlib
import io
import itertools
import struct
import threading
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.storage import open_store
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore

#: reference data kept in the repository (where each file comes from: tests/data/README.md)
TESTDATA = Path(__file__).resolve().parents[1] / "data"


@dataclass(frozen=True)
class FakeFragment:
    """What the committer needs of a written fragment, without a file behind it: for tests of
    the pure manifest transitions and for building large manifests quickly."""

    path: str
    uuid: str
    records: int
    num_bytes: int
    setsum: Setsum
    item_hash: str | None = None


def data_file(name: str) -> Path:
    """A file of tests/data (setsum vectors, Chroma's manifests)."""
    path = TESTDATA / name
    if not path.exists():
        pytest.fail(f"{path} is missing: tests/data is part of the repository")
    return path


def chroma_testdata(name: str) -> Path:
    return data_file(f"chroma/{name}")


def chroma_fragment(start: int, bodies: list[bytes], ts: int) -> tuple[bytes, Setsum]:
    """A fragment as Chroma's S3 backend writes it (absolute `offset` from `start`, uint64,
    binary body) and its setsum."""
    offsets = list(range(start, start + len(bodies)))
    table = pa.table(
        {
            "offset": pa.array(offsets, pa.uint64()),
            "timestamp_us": pa.array([ts] * len(bodies), pa.uint64()),
            "body": pa.array(bodies, pa.binary()),
        },
        schema=pa.schema([pa.field("offset", pa.uint64(), False), pa.field("timestamp_us", pa.uint64(), False),
                          pa.field("body", pa.binary(), False)]),
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy")
    setsum = Setsum.from_digests(
        hashlib.sha3_256(struct.pack(">QQ", o, ts) + b).digest() for o, b in zip(offsets, bodies)
    )
    return buf.getvalue(), setsum


def write_chroma_s3_log(store: ObjectStore) -> ObjectStore:
    """A log as Chroma's S3 backend writes it into `store`: three fragments with absolute offsets
    1..9 at sequence-numbered paths (the last in a second bucket directory), body
    `chroma <seq>.<i>`, timestamp_us 1_700_000_000_000_000 + seq."""
    refs, start = [], 1
    for seq in range(1, 4):
        bodies = [f"chroma {seq}.{i}".encode() for i in range(seq + 1)]
        data, setsum = chroma_fragment(start, bodies, 1_700_000_000_000_000 + seq)
        path = f"log/Bucket={seq // 3:016x}/FragmentSeqNo={seq:016x}.parquet"
        store.put_if_absent(path, data)
        refs.append(FragmentRef(path, seq, start, start + len(bodies), len(data), setsum))
        start += len(bodies)
    manifest = Manifest(Setsum.sum(r.setsum for r in refs), Setsum(), sum(r.num_bytes for r in refs),
                        "chroma", (), tuple(refs))
    store.put_if_absent(MANIFEST_KEY, manifest.to_bytes())
    return store

def snapshotted_log(url: str, records: int, options: SnapshotOptions) -> ObjectStore:
    """A raw log of `records` one-record commits (bodies `record 0`, `record 1`, ...) compacted
    with small rollover thresholds: a deep snapshot tree from a few hundred commits."""
    store = open_store(url)
    writer = LogWriter(store, LogWriterOptions(snapshot_options=options))
    for i in range(records):
        writer.append(f"record {i}".encode())
    return store


class HookedStore(ForwardingStore):
    """`inner` as another process sees it at the worst moment: `hook()` runs once, just before
    (or with `after`, just after) the first `get` of a key for which `when(key)` holds, e.g. GC
    running between a reader's manifest GET and its fragment GETs. The URL differs from the
    inner store's, so that nothing cached for the inner store is reused; the hook should act
    on `inner`. `gets` counts GETs by key."""

    def __init__(
        self,
        inner: ObjectStore,
        when: Callable[[str], bool],
        hook: Callable[[], object],
        *,
        after: bool = False,
    ) -> None:
        super().__init__(inner)
        self.when, self.hook, self.after = when, hook, after
        self.url = inner.url + "#hooked"
        self.fired = False
        self.gets: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _fires(self, key: str) -> bool:
        with self._lock:
            self.gets[key] += 1
            fire = not self.fired and self.when(key)
            self.fired = self.fired or fire
        return fire

    def get(self, key: str) -> Blob:
        fire = self._fires(key)
        if fire and not self.after:
            self.hook()
        blob = self.inner.get(key)
        if fire and self.after:
            self.hook()
        return blob


class FailingStore(ForwardingStore):
    """`inner`, except that the calls named in `ops` on keys `when(key)` holds for raise
    `error(key)` without being sent: a store failing the way real ones do (refused permission,
    retries exhausted, a race lost to another writer, an outage). `calls` picks which of those
    calls fail, counted from 0 (`{1}`: the second; `range(2)`: the first two; None: every one);
    `down` turns the failures off and on (an outage that starts and ends mid-test). For the
    listings the key is the prefix. `failed` counts the calls that failed."""

    OPERATIONS = frozenset({"get", "get_range", "head", "put_if_absent", "put_if_match", "list",
                            "list_children", "delete"})

    def __init__(
        self,
        inner: ObjectStore,
        when: Callable[[str], bool],
        error: Callable[[str], Exception],
        *,
        ops: Iterable[str] = ("get",),
        calls: Container[int] | None = None,
        down: bool = True,
    ) -> None:
        super().__init__(inner)
        self.ops = frozenset(ops)
        unknown = self.ops - self.OPERATIONS
        assert not unknown, f"FailingStore cannot fail {sorted(unknown)}: one of {sorted(self.OPERATIONS)}"
        self.when, self.error, self.calls, self.down = when, error, calls, down
        self.failed = 0
        self._seen = itertools.count()
        self._lock = threading.Lock()

    def _check(self, op: str, key: str) -> None:
        if not (self.down and op in self.ops and self.when(key)):
            return
        with self._lock:
            n = next(self._seen)
            fails = self.calls is None or n in self.calls
            self.failed += fails
        if fails:
            raise self.error(key)

    def get(self, key: str) -> Blob:
        self._check("get", key)
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._check("get_range", key)
        return self.inner.get_range(key, start, length)

    def head(self, key: str) -> ObjectMeta:
        self._check("head", key)
        return self.inner.head(key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._check("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._check("put_if_match", key)
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        self._check("list", prefix)
        return self.inner.list(prefix)

    def list_children(self, prefix: str = "") -> Iterator[str]:
        self._check("list_children", prefix)
        return self.inner.list_children(prefix)

    def delete(self, key: str) -> None:
        self._check("delete", key)
        self.inner.delete(key)


class CountingStore(ForwardingStore):
    """`inner`, counting requests by (operation, first segment of the key): under a log set's
    prefix, the segment is the log's name, so a test sees which logs a piece of code touched.
    Listings count under the first segment of their prefix ("" for the whole store).
    Thread-safe (log sets read many logs at once)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def _count(self, op: str, key: str) -> None:
        with self._lock:
            self.counts[(op, key.split("/")[0])] += 1

    def by_operation(self) -> Counter[str]:
        totals: Counter[str] = Counter()
        with self._lock:
            for (op, _), n in self.counts.items():
                totals[op] += n
        return totals

    def requests(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def logs_touched(self) -> set[str]:
        with self._lock:
            return {segment for _, segment in self.counts}

    def get(self, key: str) -> Blob:
        self._count("get", key)
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._count("get", key)
        return self.inner.get_range(key, start, length)

    def head(self, key: str) -> ObjectMeta:
        self._count("head", key)
        return self.inner.head(key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._count("put", key)
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._count("put", key)
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        self._count("list", prefix)
        return self.inner.list(prefix)

    def list_children(self, prefix: str = "") -> Iterator[str]:
        self._count("list_children", prefix)
        return self.inner.list_children(prefix)

    def delete(self, key: str) -> None:
        self._count("delete", key)
        self.inner.delete(key)
