"""The object stores: semantics and error contract on every backend, atomicity under
multi-process contention (local filesystem and a real SeaweedFS), S3 failure classification,
pickling, and the fault-injection wrapper."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import pickle
import random
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    ProxyConnectionError,
    ReadTimeoutError,
    SSLError,
)

from tests.support.emulators import cloud_url
from tests.support.seaweed import SeaweedServer
from tests.support.unprivileged import shared_tmp_dir, unprivileged
from wal3_spark.clock import ManualClock
from wal3_spark.errors import (
    AmbiguousWrite,
    InvalidOption,
    InvalidUrl,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.storage import (
    STORE_OPTIONS,
    AzureStore,
    GCSStore,
    LocalStore,
    MemoryStore,
    ObjectStore,
    S3Settings,
    S3Store,
    join_url,
    open_store,
)
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.storage.prefixed import PrefixedStore
from wal3_spark.storage.retry import backoff_delays, retry
from wal3_spark.testing import FaultyStore, LateLandingStore


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def check_etag(store: ObjectStore, etag: str, data: bytes) -> bool:
    """Whether `etag` is the one `store` gives `data`: its MD5 where the store says ETags are
    MD5s; elsewhere (GCS generations, Azure's opaque ETags) any non-empty ETag, the tests then
    comparing it with what `get` and `head` report."""
    return etag == md5(data) if store.md5_etags else isinstance(etag, str) and bool(etag)


@pytest.fixture(params=["memory", "local", "s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[ObjectStore]:
    if request.param == "memory":
        s: ObjectStore = open_store(f"memory://{uuid.uuid4().hex}")
    elif request.param == "local":
        s = open_store(str(tmp_path / "store"))
    else:
        url, options = cloud_url(request, request.param)
        s = open_store(url, options)
    yield s
    s.close()


@pytest.fixture
def s3_store(seaweed: SeaweedServer, request: pytest.FixtureRequest) -> Iterator[S3Store]:
    s = open_store(seaweed.new_url(request.node.name), seaweed.options)
    assert isinstance(s, S3Store)
    s.retry_base_s = s.retry_cap_s = 0.001  # keep retry tests fast
    yield s
    s.close()


# ------------------------------------------------------------------------------ semantics


def test_00_missing_objects_raise_object_not_found(store: ObjectStore) -> None:
    for call in (
        store.get,
        store.get_buffer,
        store.head,
        lambda k: store.get_range(k, 0, 10),
        lambda k: store.get_range(k, 0, 0),
    ):
        with pytest.raises(ObjectNotFound) as info:
            call("no/such/key")
        assert info.value.key == "no/such/key"
    assert not store.exists("no/such/key")
    store.delete("no/such/key")  # deleting a missing object is fine


def test_01_put_if_absent_creates_exactly_once(store: ObjectStore) -> None:
    etag = store.put_if_absent("a/b", b"first")
    assert check_etag(store, etag, b"first")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("a/b", b"second")
    assert store.get("a/b").data == b"first"
    assert store.get("a/b").etag == etag
    assert store.exists("a/b")


def test_02_empty_and_large_objects_round_trip(store: ObjectStore) -> None:
    assert check_etag(store, store.put_if_absent("empty", b""), b"")
    assert store.get("empty").data == b""
    big = random.Random(7).randbytes(5 * 1024 * 1024 + 3)
    # a single PUT: a multipart upload would have an ETag like "<md5 of md5s>-2"
    etag = store.put_if_absent("big", big)
    assert check_etag(store, etag, big)
    blob = store.get("big")
    assert blob.data == big and blob.etag == etag
    assert store.get_buffer("big") == big and store.get_buffer("empty") == b""


def test_03_put_if_match_is_compare_and_swap_on_the_etag(store: ObjectStore) -> None:
    e1 = store.put_if_absent("counter", b"1")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("counter", b"2", md5(b"something else"))
    assert store.get("counter").data == b"1"
    e2 = store.put_if_match("counter", b"2", e1)
    assert check_etag(store, e2, b"2") and e2 == store.get("counter").etag != e1
    with pytest.raises(PreconditionFailed):
        store.put_if_match("counter", b"3", e1)  # stale ETag
    e3 = store.put_if_match("counter", b"3", f'"{e2}"')  # quoted ETags are accepted
    assert store.get("counter").data == b"3" and check_etag(store, e3, b"3")
    # a CAS that writes identical bytes still succeeds (same ETag where ETags are MD5s)
    e4 = store.put_if_match("counter", b"3", e3)
    assert e4 == store.head("counter").etag and (e4 == e3 or not store.md5_etags)


def test_04_put_if_match_on_a_missing_object_fails(store: ObjectStore) -> None:
    with pytest.raises(PreconditionFailed):
        store.put_if_match("never/written", b"x", md5(b"x"))
    etag = store.put_if_absent("gone", b"x")
    store.delete("gone")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("gone", b"y", etag)
    assert not store.exists("gone")


def test_05_delete_then_recreate(store: ObjectStore) -> None:
    store.put_if_absent("k", b"1")
    store.delete("k")
    with pytest.raises(ObjectNotFound):
        store.get("k")
    store.delete("k")
    assert check_etag(store, store.put_if_absent("k", b"2"), b"2")
    assert store.get("k").data == b"2"


def test_06_head_reports_size_etag_and_mtime(store: ObjectStore) -> None:
    etag = store.put_if_absent("dir/obj", b"hello")
    meta = store.head("dir/obj")
    assert (meta.key, meta.size, meta.etag) == ("dir/obj", 5, etag)
    assert check_etag(store, etag, b"hello")
    assert abs(meta.last_modified - time.time()) < 300


def test_07_list_is_recursive_sorted_relative_and_prefix_filtered(store: ObjectStore) -> None:
    keys = ["b", "a/c/d", "ab", "a-c", "a/b"]
    etags = {key: store.put_if_absent(key, key.encode()) for key in keys}
    listed = list(store.list())
    assert [m.key for m in listed] == sorted(keys) == ["a-c", "a/b", "a/c/d", "ab", "b"]
    assert all(m.size == len(m.key) and m.etag == etags[m.key] for m in listed)
    assert [m.key for m in store.list("a")] == ["a-c", "a/b", "a/c/d", "ab"]
    assert [m.key for m in store.list("a/")] == ["a/b", "a/c/d"]
    assert [m.key for m in store.list("a/c/")] == ["a/c/d"]
    assert list(store.list("zz")) == []
    assert list(store.list("../")) == []
    store.delete("ab")
    assert "ab" not in [m.key for m in store.list()]


def test_08_list_children_names_the_directories_directly_under_a_prefix(store: ObjectStore) -> None:
    keys = ["a/manifest/MANIFEST", "a/log/f1", "a-b/x", "b/c/d/e", "top", "b/c/f", "_dirty/m"]
    for key in keys:
        store.put_if_absent(key, b"")
    assert list(store.list_children()) == ["_dirty", "a", "a-b", "b"]
    assert list(store.list_children("b/")) == ["c"]
    assert list(store.list_children("b/c/")) == ["d"]
    assert list(store.list_children("a/log/")) == []
    assert list(store.list_children("zz/")) == []
    for bad in ("a", "/", "../", "a//"):
        with pytest.raises(ValueError):
            list(store.list_children(bad))


def test_09_list_children_of_a_prefixed_store_are_relative(store: ObjectStore) -> None:
    etags = {key: store.put_if_absent(key, b"1") for key in ("logs/a/manifest/MANIFEST", "logs/b/log/f", "other/c/x")}
    logs = PrefixedStore(store, "logs")
    assert logs.url == join_url(store.url, "logs")
    assert list(logs.list_children()) == ["a", "b"]
    a = PrefixedStore(logs, "a")
    assert [m.key for m in a.list()] == ["manifest/MANIFEST"]
    assert a.head("manifest/MANIFEST").key == "manifest/MANIFEST"
    etag = a.put_if_absent("log/f", b"2")
    assert store.get("logs/a/log/f").data == b"2" and check_etag(store, etag, b"2")
    assert [(m.key, m.etag) for m in logs.list("a/")] == [
        ("a/log/f", etag), ("a/manifest/MANIFEST", etags["logs/a/manifest/MANIFEST"])
    ]
    a.delete("log/f")
    assert not store.exists("logs/a/log/f")


def test_10_stores_are_isolated_by_root(store: ObjectStore) -> None:
    sibling = open_store(store.url + "-sibling", _options_for(store))
    child = open_store(join_url(store.url, "child"), _options_for(store))
    sibling.put_if_absent("x", b"s")
    child.put_if_absent("y", b"c")
    assert [m.key for m in store.list()] == ["child/y"]
    assert store.get("child/y").data == b"c"
    assert [m.key for m in sibling.list()] == ["x"]


def _options_for(store: ObjectStore) -> dict[str, str]:
    if isinstance(store, GCSStore):
        return {"endpoint": store.settings.endpoint}
    if isinstance(store, AzureStore):
        return {"connectionString": store.settings.connection_string or ""}
    if isinstance(store, S3Store):
        s = store.settings
        return {
            "endpoint": s.endpoint or "",
            "accessKeyId": s.access_key_id or "",
            "secretAccessKey": s.secret_access_key or "",
        }
    return {}


@pytest.mark.parametrize(
    ("start", "length", "expected"),
    [
        (0, 3, b"012"),
        (7, 10, b"789"),
        (10, 5, b""),
        (20, 1, b""),
        (2, 0, b""),
        (-3, 10, b"789"),
        (-3, 2, b"78"),
        (-20, 3, b"012"),
    ],
)
def test_11_get_range(store: ObjectStore, start: int, length: int, expected: bytes) -> None:
    store.put_if_absent("digits", b"0123456789")
    store.put_if_absent("empty", b"")
    assert store.get_range("digits", start, length) == expected
    assert store.get_range("empty", start, length) == b""


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", "a/../b", ".hidden", "a/.tmp"])
def test_12_invalid_keys_are_rejected_everywhere(store: ObjectStore, key: str) -> None:
    for call in (
        lambda: store.get(key),
        lambda: store.put_if_absent(key, b"x"),
        lambda: store.put_if_match(key, b"x", "e"),
        lambda: store.delete(key),
    ):
        with pytest.raises(ValueError):
            call()


# ----------------------------------------------------------------------------- contention

PROCESSES = 8
_barrier: Any = None  # set in each pool process: lines the workers up before every race


def _init_worker(barrier: Any) -> None:
    global _barrier
    _barrier = barrier


def _increment_worker(args: tuple[ObjectStore, str, int]) -> tuple[list[int], int]:
    """Read-CAS-retry `count` increments of the counter at `key`; the values written and the
    number of lost CAS."""
    store, key, count = args
    _barrier.wait(60)
    written: list[int] = []
    conflicts = 0
    while len(written) < count:
        blob = store.get(key)
        value = int(blob.data) + 1
        try:
            store.put_if_match(key, str(value).encode(), blob.etag)
        except PreconditionFailed:
            conflicts += 1
            continue
        written.append(value)
    return written, conflicts


def _create_worker(args: tuple[ObjectStore, list[str], int]) -> tuple[int, list[str]]:
    """Race the other workers to create each of `keys`; the keys this worker created."""
    store, keys, worker = args
    won = []
    for key in keys:
        _barrier.wait(60)
        try:
            store.put_if_absent(key, str(worker).encode())
            won.append(key)
        except PreconditionFailed:
            pass
    return worker, won


@pytest.fixture(scope="module")
def race(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., list[Any]]]:
    """`race(fn, args)`: `fn(a)` for each of the PROCESSES `args`, one per spawned process.

    One pool serves every contention test (spawning is the slow part). Each task waits at the
    shared barrier, so no process can take two tasks: all PROCESSES run at once.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    with ctx.Pool(PROCESSES, initializer=_init_worker, initargs=(barrier,)) as pool:

        def run(fn: Callable[[Any], Any], args: list[Any]) -> list[Any]:
            assert len(args) == PROCESSES
            barrier.reset()  # in case an earlier failure broke it
            return pool.map_async(fn, args, chunksize=1).get(timeout=120)

        yield run


def _contention_store(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> ObjectStore:
    if backend == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(*cloud_url(request, backend))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "increments"), [("local", 25), ("s3", 25), ("gcs", 6), ("azure", 6)])
def test_13_concurrent_cas_increments_from_processes_never_lose_an_update(
    backend: str,
    increments: int,
    race: Callable[..., list[Any]],
    request: pytest.FixtureRequest,
    tmp_path: Any,
) -> None:
    # the emulators are single processes sharing the machine's two cores: fewer rounds
    store = _contention_store(backend, request, tmp_path)
    store.put_if_absent("counter", b"0")
    results = race(_increment_worker, [(store, "counter", increments)] * PROCESSES)
    total = PROCESSES * increments
    assert int(store.get("counter").data) == total
    # every value was written by exactly one process: no two CAS won from the same ETag
    assert sorted(v for written, _ in results for v in written) == list(range(1, total + 1))
    assert sum(conflicts for _, conflicts in results) > 0, "the processes never contended"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "rounds"), [("local", 10), ("s3", 3), ("gcs", 10), ("azure", 10)])
def test_14_racing_creates_from_processes_have_exactly_one_winner(
    backend: str,
    rounds: int,
    race: Callable[..., list[Any]],
    request: pytest.FixtureRequest,
    tmp_path: Any,
) -> None:
    # SeaweedFS makes the losers of a racing create wait 1-3 s for a per-key lock: few rounds
    store = _contention_store(backend, request, tmp_path)
    keys = [f"race/{i}" for i in range(rounds)]
    results = race(_create_worker, [(store, keys, w) for w in range(PROCESSES)])
    winners = Counter(key for _, won in results for key in won)
    assert winners == Counter(keys), "each key must be created by exactly one process"
    for worker, won in results:
        for key in won:
            assert store.get(key).data == str(worker).encode()


def _churn_worker(args: tuple[ObjectStore, str, int, int]) -> tuple[list[bytes], int, int]:
    """Delete, recreate and CAS one key at random; every version written is unique. Returns
    the versions this worker's CAS replaced, its lost CAS and its deletes."""
    store, key, rounds, seed = args
    rng = random.Random(seed)
    _barrier.wait(60)
    replaced: list[bytes] = []
    conflicts = deletes = 0
    for _ in range(rounds):
        r = rng.random()
        if r < 0.15:
            store.delete(key)
            deletes += 1
        elif r < 0.3:
            with contextlib.suppress(PreconditionFailed):
                store.put_if_absent(key, uuid.uuid4().bytes)
        else:
            try:
                blob = store.get(key)
                store.put_if_match(key, uuid.uuid4().bytes, blob.etag)
            except ObjectNotFound:
                continue
            except PreconditionFailed:
                conflicts += 1
                continue
            replaced.append(blob.data)
    return replaced, conflicts, deletes


def test_15_local_cas_racing_deletes_and_recreates_never_wins_twice_from_one_version(
    race: Callable[..., list[Any]], tmp_path: Any
) -> None:
    # deletes remove the key's lock file while other processes wait on it: a CAS must still be
    # the only one to replace the version it compared
    store = LocalStore(str(tmp_path / "store"))
    store.put_if_absent("churn/key", uuid.uuid4().bytes)
    results = race(_churn_worker, [(store, "churn/key", 300, seed) for seed in range(PROCESSES)])
    replaced = Counter(v for versions, _, _ in results for v in versions)
    assert replaced and max(replaced.values()) == 1, "two CAS won from the same version"
    assert sum(c for _, c, _ in results) > 0 and sum(d for _, _, d in results) > 0
    store.delete("churn/key")
    assert not (tmp_path / "store" / "churn").exists()  # no lock file left, so no directory


def test_16_local_cas_from_threads_never_loses_an_update(tmp_path: Any) -> None:
    store = LocalStore(str(tmp_path))
    store.put_if_absent("counter", b"0")
    threads, increments = 4, 25  # flock excludes threads too: each opens its own lock fd

    def worker() -> None:
        done = 0
        while done < increments:
            blob = store.get("counter")
            try:
                store.put_if_match("counter", str(int(blob.data) + 1).encode(), blob.etag)
                done += 1
            except PreconditionFailed:
                pass

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert int(store.get("counter").data) == threads * increments


# -------------------------------------------------------------------------- local backend


def test_17_local_store_hides_temp_and_lock_files(tmp_path: Any) -> None:
    store = LocalStore(str(tmp_path))
    etag = store.put_if_absent("dir/obj", b"1")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("dir/obj", b"2")
    store.put_if_match("dir/obj", b"3", etag)
    on_disk = sorted(os.listdir(tmp_path / "dir"))
    assert on_disk == [".obj.lock", "obj"], "temp files must be cleaned up"
    assert [m.key for m in store.list()] == ["dir/obj"]


def test_18_local_store_removes_the_lock_file_of_a_deleted_key(tmp_path: Any) -> None:
    # what a GC of a 12-fragment log does to its fragments: before, each left a `.<name>.lock`
    store = LocalStore(str(tmp_path))
    for i in range(12):
        etag = store.put_if_absent(f"log/f{i}", b"x")
        store.put_if_match(f"log/f{i}", b"y", etag)
    assert len(os.listdir(tmp_path / "log")) == 24  # objects and the lock files of their CAS
    for i in range(12):
        store.delete(f"log/f{i}")
    store.delete("log/never-written")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("log/never-written", b"x", md5(b"x"))
    assert not (tmp_path / "log").exists()  # no lock file left, so the empty directory went too
    # a live object keeps its lock file; it goes with the object
    etag = store.put_if_absent("manifest", b"1")
    store.put_if_match("manifest", b"2", etag)
    assert sorted(os.listdir(tmp_path)) == [".manifest.lock", "manifest"]
    store.delete("manifest")
    assert os.listdir(tmp_path) == []  # the store's root itself stays


def test_19_local_store_reports_refused_permissions_as_access_denied() -> None:
    root = shared_tmp_dir()
    try:
        store = LocalStore(os.path.join(root, "store"))
        for key in ("a/readable", "a/secret", "b/hidden", "sticky/x"):
            store.put_if_absent(key, b"data")
        base = os.path.join(root, "store")
        os.chmod(os.path.join(base, "a", "secret"), 0)
        os.chmod(os.path.join(base, "b"), 0)
        os.chmod(os.path.join(base, "sticky"), 0o1777)  # others may create, not delete, files

        def attempt(call: Callable[[], object]) -> tuple[str, str]:
            try:
                call()
            except StorageError as exc:
                return type(exc).__name__, str(exc)
            return "ok", ""

        def as_nobody() -> dict[str, Any]:
            return {
                "listed": [m.key for m in store.list("a/")],  # a listing reads no file
                "get": attempt(lambda: store.get("a/secret")),
                "head": attempt(lambda: store.head("a/secret")),
                "list": attempt(lambda: list(store.list())),
                "delete": attempt(lambda: store.delete("sticky/x")),
            }

        seen = unprivileged(as_nobody)
        assert seen["listed"] == ["a/readable", "a/secret"]
        for op, obj in (("get", "a/secret"), ("head", "a/secret"), ("list", "b"), ("delete", "sticky/x")):
            kind, message = seen[op]
            assert kind == "AccessDenied", (op, seen[op])
            assert "permission denied" in message and os.path.join(base, obj) in message, message
        assert store.exists("sticky/x"), "a refused delete must not look like a success"
    finally:
        for dirpath, _, _ in os.walk(root):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(root)


def test_20_local_store_urls(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("rel/logs")
    assert isinstance(store, LocalStore)
    assert store.root == str(tmp_path / "rel" / "logs")
    assert store.url == f"file://{tmp_path}/rel/logs"
    spaced = open_store(str(tmp_path / "a b"))
    assert spaced.url.endswith("/a%20b")
    spaced.put_if_absent("k", b"v")
    assert open_store(spaced.url).get("k").data == b"v"  # the URL round-trips
    assert open_store(f"file://{tmp_path}/rel/logs").url == store.url
    with pytest.raises(InvalidUrl):
        open_store("file://otherhost/x")


def test_20b_a_local_path_that_is_not_utf8_round_trips_through_its_url(tmp_path: Any) -> None:
    """A directory named with a byte that is not UTF-8 (Python holds it as a surrogate) made
    every command fail with a UnicodeEncodeError traceback (the URL quoted the surrogate), and
    `file:///…/%FF` opened `…/\\ufffd`, another directory. The URL holds the path's bytes."""
    import subprocess
    import sys

    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter

    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/set\xff/log")
    store = open_store(path)
    assert store.url == f"file://{tmp_path}/set%FF/log"
    LogWriter(path).append(b"a")
    assert (tmp_path / os.fsdecode(b"set\xff") / "log" / "manifest" / "MANIFEST").exists()
    assert LogReader(store.url).read_table().column("body").to_pylist() == [b"a"]
    assert open_store(store.url).root == store.root
    done = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "info", os.fsencode(path)],
                          capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"set%FF/log" in done.stdout


def test_21_memory_stores_share_objects_by_name() -> None:
    name = uuid.uuid4().hex
    a, b = open_store(f"memory://{name}"), open_store(f"memory://{name}")
    a.put_if_absent("k", b"v")
    assert b.get("k").data == b"v"
    assert isinstance(a, MemoryStore)
    assert pickle.loads(pickle.dumps(a)).get("k").data == b"v"
    assert list(open_store(f"memory://{name}/k2").list()) == []


# ----------------------------------------------------------------------------- URLs, options


def test_22_open_store_dispatches_on_the_scheme() -> None:
    assert isinstance(open_store("s3://bucket/a/b"), S3Store)
    s3a = open_store("s3a://bucket/a/b/")
    assert isinstance(s3a, S3Store) and s3a.url == "s3://bucket/a/b"
    assert (s3a.bucket, s3a.prefix) == ("bucket", "a/b")
    assert open_store("s3://bucket").url == "s3://bucket"
    assert isinstance(open_store("gs://bucket/x"), GCSStore)
    for bad in ("hdfs://nn/x", "wasb://c@a/x", "s3:///no-bucket", "memory://", "", "s3://b/x?y=1"):
        with pytest.raises(InvalidUrl):
            open_store(bad)


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\u2028"])
def test_22b_a_url_or_path_with_a_control_character_is_refused(char: str, tmp_path: Any) -> None:
    """urlsplit drops a trailing newline silently (`s3://b/x\\n` opened `s3://b/x`, a branch or a
    log somewhere else than typed) and a path kept it in a directory's name."""
    for url in (f"s3://bucket/x{char}", f"gs://bucket/{char}x", f"az://c/x{char}", f"memory://m/x{char}",
                f"file://{tmp_path}/x{char}", f"{tmp_path}/x{char}", f"file://{tmp_path}/x%0A"):
        with pytest.raises(InvalidUrl, match="control character"):
            open_store(url)
    assert list(tmp_path.iterdir()) == []


def test_23_join_url() -> None:
    assert join_url("s3://b/logs", "a") == "s3://b/logs/a"
    assert join_url("s3://b/logs/", "/a/b/") == "s3://b/logs/a/b"
    assert join_url("file:///tmp/x", "") == "file:///tmp/x"


@pytest.mark.parametrize("url, reads", [
    ("s3://bucket/logs", "reads accessKeyId, endpoint, endpointUrl, pathStyle, region"),
    ("s3a://bucket/logs", "reads accessKeyId"),
    ("gs://bucket/logs", "reads endpoint, endpointUrl, project, serviceAccountFile"),
    ("az://container/logs", "reads accountKey, accountName, connectionString, endpoint"),
    ("abfss://container@acct.dfs.core.windows.net/logs", "reads accountKey"),
    ("file:///tmp/wal3-never-created", "a file store reads none"),
    ("/tmp/wal3-never-created", "a file store reads none"),
    ("memory://options", "a memory store reads none"),
])
def test_23b_an_unknown_store_option_is_an_error_naming_the_known_ones(url: str, reads: str) -> None:
    """`endpont=` was ignored, so every request went to the cloud's default endpoint. A name no
    store knows is refused for every kind of store; known names in any case, and another
    store's (one set of options may open several stores: a copy from S3 to a path), are not."""
    for options in ({"endpont": "http://127.0.0.1:1"}, {"region": "x", "Acess_Key": "k"}):
        with pytest.raises(InvalidOption) as info:
            open_store(url, options)
        message = str(info.value)
        typo = next(k for k in options if k != "region")
        assert f"unknown store option {typo!r}" in message and reads in message, message
        assert "the store options are accessKeyId, accountKey" in message and "sasToken" in message
    for fine in ({"ENDPOINT": "http://127.0.0.1:1", "AccountName": "a"}, {"accountName": "a", "region": "r", "project": "p"}):
        open_store(url, fine)


def test_24_s3_options_are_case_insensitive_and_fall_back_to_the_environment() -> None:
    assert STORE_OPTIONS == {
        "endpoint", "endpointurl", "region", "accesskeyid", "secretaccesskey", "sessiontoken",
        "pathstyle", "serviceaccountfile", "project", "accountname", "accountkey", "sastoken",
        "connectionstring",
    }  # fmt: skip
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_DEFAULT_REGION": "eu-west-3"}
    s = S3Settings.from_options({"ENDPOINTURL": "http://opt:2", "PathStyle": "false"}, env)
    assert (s.endpoint, s.region, s.path_style) == ("http://opt:2", "eu-west-3", False)
    s = S3Settings.from_options({}, {**env, "AWS_ENDPOINT_URL_S3": "http://s3env:3"})
    assert (s.endpoint, s.path_style) == ("http://s3env:3", True)
    s = S3Settings.from_options({"endpoint": "http://x:1"}, {})
    assert s.region == "us-east-1" and s.access_key_id is None
    s = S3Settings.from_options({}, {})
    assert (s.endpoint, s.region, s.path_style) == (None, None, False)
    s = S3Settings.from_options({"accessKeyId": "AK", "secretAccessKey": "SK", "x": "y"}, {})
    assert (s.access_key_id, s.secret_access_key) == ("AK", "SK")
    bad_options = (
        {"pathStyle": "maybe"},
        {"endpoint": "host:9000"},
        {"accessKeyId": "AK"},
        {"sessionToken": "T"},
    )
    for bad in bad_options:
        with pytest.raises(InvalidOption):
            S3Settings.from_options(bad, {})


def test_25_credentials_never_appear_in_repr() -> None:
    store = open_store(
        "s3://bucket/p",
        {"accessKeyId": "AKIDSECRETISH", "secretAccessKey": "TOPSECRET", "sessionToken": "TOK"},
    )
    text = repr(store) + repr(store.settings) + str(vars(store).get("settings"))
    for secret in ("AKIDSECRETISH", "TOPSECRET", "TOK"):
        assert secret not in text


# ------------------------------------------------------------------------- S3 specifics


def test_26_s3_wrong_secret_is_a_storage_error_without_the_secret(seaweed: SeaweedServer) -> None:
    wrong = "not-the-secret-9f8e7d"
    store = open_store(seaweed.new_url("auth"), {**seaweed.options, "secretAccessKey": wrong})
    for call in (lambda: store.get("k"), lambda: store.put_if_absent("k", b"v")):
        with pytest.raises(StorageError) as info:
            call()
        assert not isinstance(info.value, (ObjectNotFound, PreconditionFailed, TransientError))
        assert wrong not in str(info.value) and "403" in str(info.value)


def test_27_s3_unreachable_endpoint_is_transient_after_retries(seaweed: SeaweedServer) -> None:
    from wal3_spark.testing.seaweedfs import free_ports

    port = free_ports(1)[0]
    store = open_store("s3://bucket/p", {**seaweed.options, "endpoint": f"http://127.0.0.1:{port}"})
    assert isinstance(store, S3Store)
    store.retry_attempts, store.retry_base_s = 3, 0.001
    for call in (lambda: store.get("k"), lambda: store.put_if_absent("k", b"v")):
        with pytest.raises(TransientError) as info:
            call()
        assert seaweed.secret_key not in str(info.value)


def test_28_s3_missing_bucket_is_a_storage_error(seaweed: SeaweedServer) -> None:
    store = open_store(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/p", seaweed.options)
    for call in (lambda: store.get("k"), lambda: list(store.list())):
        with pytest.raises(StorageError, match="does not exist"):
            call()


def test_29_s3_list_paginates(s3_store: S3Store) -> None:
    keys = [f"k{i}" for i in range(5)]
    for key in reversed(keys):
        s3_store.put_if_absent(key, b"")
    s3_store.list_page_size = 2
    assert [m.key for m in s3_store.list()] == keys


def test_30_s3_list_children_paginates_and_never_lists_the_objects(s3_store: S3Store) -> None:
    names = [f"log{i}" for i in range(5)]
    for name in names:
        for j in range(3):
            s3_store.put_if_absent(f"{name}/log/f{j}", b"")
    s3_store.list_page_size = 2
    calls: list[dict] = []
    client = s3_store._s3()
    original = client.list_objects_v2

    def spy(**kwargs: Any) -> Any:
        page = original(**kwargs)
        calls.append(page)
        return page

    client.list_objects_v2 = spy
    assert list(s3_store.list_children()) == names
    assert len(calls) == 3  # 5 children, 2 per page
    assert all(not page.get("Contents") for page in calls)  # no object was listed


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _http_error(status: int, code: str) -> AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return AWSResponse("http://injected", status, {}, _Raw(body))


def _inject(store: S3Store, operation: str, faults: list[Any]) -> list[int]:
    """Answer the next calls of `operation` with `faults` (an exception to raise, a response
    to return, or None to let the request through); returns a list counting every call."""
    calls: list[int] = []

    def before_send(**_: Any) -> AWSResponse | None:
        calls.append(1)
        fault = faults.pop(0) if faults else None
        if isinstance(fault, Exception):
            raise fault
        return fault

    store._s3().meta.events.register(f"before-send.s3.{operation}", before_send)
    return calls


def test_31_s3_conditional_put_is_never_retried_after_sending(s3_store: S3Store) -> None:
    read_timeout = ReadTimeoutError(endpoint_url="http://injected")
    calls = _inject(s3_store, "PutObject", [read_timeout, _http_error(500, "InternalError")])
    with pytest.raises(AmbiguousWrite):
        s3_store.put_if_absent("k", b"v")
    with pytest.raises(AmbiguousWrite):
        s3_store.put_if_absent("k", b"v")
    assert len(calls) == 2  # one request each: no retry
    assert s3_store.put_if_absent("k", b"v") == md5(b"v")


def test_32_s3_conditional_put_retries_what_changed_nothing(s3_store: S3Store) -> None:
    refused = EndpointConnectionError(endpoint_url="http://injected")
    conflict = _http_error(409, "ConditionalRequestConflict")
    calls = _inject(s3_store, "PutObject", [refused, conflict, _http_error(429, "SlowDown")])
    assert s3_store.put_if_absent("k", b"v") == md5(b"v")
    assert len(calls) == 4
    _inject(s3_store, "PutObject", [_http_error(409, "ConditionalRequestConflict")] * 10)
    with pytest.raises(PreconditionFailed):  # conflicts on every attempt: someone else won
        s3_store.put_if_match("k", b"w", md5(b"v"))
    assert s3_store.get("k").data == b"v"


def test_33_s3_if_match_404_from_aws_is_a_precondition_failure(s3_store: S3Store) -> None:
    _inject(s3_store, "PutObject", [_http_error(404, "NoSuchKey")])
    with pytest.raises(PreconditionFailed):
        s3_store.put_if_match("k", b"v", md5(b"x"))


def test_34_s3_reads_retry_transient_failures(s3_store: S3Store) -> None:
    s3_store.put_if_absent("k", b"v")
    faults = [ReadTimeoutError(endpoint_url="x"), _http_error(503, "SlowDown")]
    calls = _inject(s3_store, "GetObject", faults)
    assert s3_store.get("k").data == b"v"
    assert len(calls) == 3
    _inject(s3_store, "GetObject", [_http_error(500, "InternalError")] * 10)
    with pytest.raises(TransientError):
        s3_store.get("k")


def test_35_pickled_s3_store_resolves_credentials_from_the_environment(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in seaweed.env.items():
        monkeypatch.setenv(name, value)
    store = open_store(seaweed.new_url("pickle"))
    store.put_if_absent("k", b"v")  # creates the client, which must not be pickled
    data = pickle.dumps(store)
    assert len(data) < 1000
    assert seaweed.secret_key.encode() not in data and seaweed.access_key.encode() not in data
    copy = pickle.loads(data)
    assert copy.get("k").data == b"v"
    copy.put_if_absent("k2", b"w")
    assert store.get("k2").data == b"w"


def test_36_pickled_s3_store_with_explicit_credentials_works(seaweed: SeaweedServer) -> None:
    store = open_store(seaweed.new_url("pickle"), seaweed.options)
    store.put_if_absent("k", b"v")
    data = pickle.dumps(store)
    assert len(data) < 1000
    assert pickle.loads(data).get("k").data == b"v"


# ---------------------------------------------------------------------------------- retry


def test_37_backoff_delays_are_bounded_and_jittered() -> None:
    delays = list(backoff_delays(6, base=0.1, cap=0.5, rng=random.Random(1)))
    ceilings = [0.1, 0.2, 0.4, 0.5, 0.5]
    assert len(delays) == 5
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings))
    full = list(backoff_delays(200, base=1, cap=1, jitter=1.0, rng=random.Random(2)))
    assert min(full) < 0.1 and max(full) > 0.9
    assert list(backoff_delays(1)) == []
    with pytest.raises(ValueError):
        list(backoff_delays(0))


def test_38_retry_retries_only_what_it_is_told_to() -> None:
    calls, clock = [], ManualClock()

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("flaky")
        return "done"

    assert retry(flaky, attempts=5, clock=clock) == "done"
    assert len(calls) == 3 and len(clock.sleeps) == 2
    calls.clear()
    with pytest.raises(TransientError):
        retry(lambda: flaky() and flaky() and flaky(), attempts=2, clock=clock)
    with pytest.raises(PreconditionFailed):
        retry(lambda: (_ for _ in ()).throw(PreconditionFailed("k")), clock=clock)


# --------------------------------------------------------------------------------- faults


def _faulty(**probabilities: float) -> tuple[MemoryStore, FaultyStore]:
    inner = MemoryStore(uuid.uuid4().hex)
    return inner, FaultyStore(inner, seed=42, max_delay_s=0.0005, **probabilities)


def test_39_faulty_creates_fail_as_advertised_and_never_with_a_false_412() -> None:
    inner, store = _faulty(
        drop=0.15, delay=0.3, error_5xx=0.15, timeout_after_write=0.15, precondition_storm=0.3
    )
    outcomes: Counter[str] = Counter()
    for i in range(400):
        key = f"k{i}"
        try:
            store.put_if_absent(key, b"v")
            outcome = "ok"
        except PreconditionFailed:
            pytest.fail(f"false 412 on the create of a new key {key}")
        except TransientError:
            outcome = "transient"
        except AmbiguousWrite as exc:
            outcome = "landed" if "timeout" in str(exc) else "5xx"
        outcomes[outcome] += 1
        assert inner.exists(key) == (outcome in ("ok", "landed")), outcome
    counts = store.counts
    assert counts["drop"] == outcomes["transient"] > 0
    assert counts["error_5xx"] == outcomes["5xx"] > 0
    assert counts["timeout_after_write"] == outcomes["landed"] > 0
    assert counts["delay"] > 0 and counts["precondition_storm"] == 0
    existing = [m.key for m in inner.list()]
    for key in existing:  # the storm may fire now, and no create can succeed
        with pytest.raises((PreconditionFailed, TransientError, AmbiguousWrite)):
            store.put_if_absent(key, b"other")
        assert inner.get(key).data == b"v"
    assert store.counts["precondition_storm"] > 0


def test_40_faulty_cas_storm_never_writes_and_timeouts_do() -> None:
    inner, store = _faulty(precondition_storm=0.4, timeout_after_write=0.3)
    etag = inner.put_if_absent("c", b"0")
    stormed = landed = 0
    for i in range(1, 200):
        try:
            etag = store.put_if_match("c", str(i).encode(), etag)
        except PreconditionFailed:
            stormed += 1
            assert inner.get("c").etag == etag  # spurious: nothing was written
        except AmbiguousWrite:
            landed += 1
            assert inner.get("c").data == str(i).encode()
            etag = inner.get("c").etag
    assert store.counts["precondition_storm"] == stormed > 0
    assert store.counts["timeout_after_write"] == landed > 0


def test_41_faulty_reads_are_retried_inside_the_wrapper() -> None:
    inner, store = _faulty(drop=0.2, error_5xx=0.1, delay=0.5)
    inner.put_if_absent("k", b"v")
    escaped = 0
    for _ in range(300):
        try:
            assert store.get("k").data == b"v"
            assert store.get_range("k", 0, 1) == b"v"
            assert [m.key for m in store.list()] == ["k"]
        except TransientError:
            escaped += 1  # all read_attempts tries drew a fault: rare, as after real retries
    counts = store.counts
    assert counts["drop"] > 100 and counts["error_5xx"] > 50 and counts["delay"] > 0
    assert escaped < 30  # about 0.3**4 of the 900 reads


def test_42_faulty_store_is_thread_safe_and_picklable() -> None:
    inner, store = _faulty(drop=0.2, error_5xx=0.2)
    failures: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(100):
            try:
                store.put_if_absent(f"t{t}/{i}", b"v")
            except (TransientError, AmbiguousWrite) as exc:
                with lock:
                    failures[type(exc).__name__] += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts["drop"] == failures["TransientError"] > 0
    assert store.counts["error_5xx"] == failures["AmbiguousWrite"] > 0
    assert len(list(inner.list())) == 800 - sum(failures.values())
    copy = pickle.loads(pickle.dumps(store))
    assert copy.counts == store.counts and copy.url == store.url
    with pytest.raises(ValueError):
        FaultyStore(inner, seed=1, drop=0.6, error_5xx=0.6)


def _late(**kw: Any) -> tuple[MemoryStore, LateLandingStore, str]:
    inner = MemoryStore(uuid.uuid4().hex)
    etag = inner.put_if_absent("m", b"v0")
    return inner, LateLandingStore(inner, **{"keys": ["m"], **kw}), etag


def test_43_late_write_is_ambiguous_then_lands_right_after_the_next_get() -> None:
    inner, store, etag = _late(writes=[1])
    with pytest.raises(AmbiguousWrite):
        store.put_if_match("m", b"v1", etag)
    assert inner.get("m").data == b"v0" and store.pending == 1
    store.head("m")  # not a GET of the key: nothing lands
    assert inner.get("m").data == b"v0"
    seen = store.get("m")  # the caller still sees the state the write was conditioned on...
    assert seen.data == b"v0" and seen.etag == etag
    assert inner.get("m").data == b"v1"  # ...and it lands the moment after
    assert store.counts == {"held": 1, "landed": 1, "condition_lost": 0, "failed": 0}
    # only the chosen write was held; others pass through
    assert store.put_if_match("m", b"v2", inner.get("m").etag) and inner.get("m").data == b"v2"


def test_44_late_write_keeps_its_condition() -> None:
    inner, store, etag = _late(writes=[1], land="after_requests", after_requests=3)
    with pytest.raises(AmbiguousWrite):
        store.put_if_match("m", b"late", etag)
    newer = store.put_if_match("m", b"newer", etag)  # request 1: the store moves on
    store.get("m")  # request 2
    assert store.pending == 1
    store.list()  # request 3: the late write is processed, and loses its condition
    assert store.pending == 0 and inner.get("m").etag == newer
    assert store.counts["condition_lost"] == 1 and store.counts["landed"] == 0


def test_45_late_creates_random_and_manual_triggers_and_other_keys() -> None:
    inner, store, _ = _late(writes=[1, 2], land="manual", methods=["put_if_absent"], keys=["a", "b"])
    with pytest.raises(AmbiguousWrite):
        store.put_if_absent("a", b"x")
    with pytest.raises(AmbiguousWrite):
        store.put_if_absent("b", b"y")
    store.put_if_absent("c", b"z")  # not a chosen key
    for _ in range(20):
        store.get("a") if store.exists("a") else None
    assert not inner.exists("a") and not inner.exists("b") and store.pending == 2
    inner.put_if_absent("b", b"other")
    store.land_all()
    assert inner.get("a").data == b"x" and inner.get("b").data == b"other"
    assert store.counts == {"held": 2, "landed": 1, "condition_lost": 1, "failed": 0}
    inner2 = MemoryStore(uuid.uuid4().hex)
    rand = LateLandingStore(inner2, probability=0.5, land="random", after_requests=4, seed=7)
    etag = inner2.put_if_absent("k", b"0")
    for i in range(200):
        try:
            etag = rand.put_if_match("k", str(i).encode(), etag)
        except (AmbiguousWrite, PreconditionFailed):
            pass  # held, or a held write landed in between
        etag = rand.get("k").etag
    rand.land_all()
    counts = rand.counts
    assert 50 < counts["held"] < 150 and counts["landed"] > 0 and counts["condition_lost"] > 0
    assert counts["held"] == counts["landed"] + counts["condition_lost"]
    copy = pickle.loads(pickle.dumps(rand))
    assert copy.pending == 0 and copy.counts == counts
    with pytest.raises(ValueError):
        LateLandingStore(inner2, land="later")  # type: ignore[arg-type]


def test_46_store_fixtures(store_url: str, store_options: dict[str, str]) -> None:
    store = open_store(store_url, store_options)
    store.put_if_absent("k", b"v")
    assert [m.key for m in store.list()] == ["k"]
    assert store_url.startswith(("file:///", "s3://", "gs://", "az://"))


class _FailingPuts:
    """A stand-in boto3 client whose every put_object raises `exc`; counts the calls."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0

    def put_object(self, **_: Any) -> dict[str, str]:
        self.calls += 1
        raise self.exc


_SENT_MAYBE = [
    SSLError(endpoint_url="https://injected", error="EOF while reading the response"),
    ReadTimeoutError(endpoint_url="https://injected"),
    ConnectionClosedError(endpoint_url="https://injected"),
    IncompleteReadError(actual_bytes=1, expected_bytes=2),
    ValueError("an answer botocore could not make sense of"),  # not classified by botocore
]
_NOT_SENT = [
    EndpointConnectionError(endpoint_url="https://injected"),
    ConnectTimeoutError(endpoint_url="https://injected"),
    ProxyConnectionError(proxy_url="https://proxy.injected"),
]


@pytest.mark.parametrize("exc", _SENT_MAYBE + _NOT_SENT, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("conditional", ["if-match", "if-absent"])
def test_47_s3_a_put_that_may_have_been_sent_is_ambiguous_never_resent(exc: Exception, conditional: str) -> None:
    """Only errors botocore raises before a request is sent (no connection made) are transient
    and retried; any other (a TLS error, which can come while reading the answer, a timeout, a
    dropped connection, a short answer) is an ambiguous write, sent once: a resent If-Match PUT
    that had landed would be answered with a false 412. The same for creates. No server needed."""
    store = S3Store("bucket")
    store.retry_base_s = store.retry_cap_s = 0.0
    client = _FailingPuts(exc)
    store._client = client
    expected = TransientError if exc in _NOT_SENT else AmbiguousWrite
    with pytest.raises(expected):
        if conditional == "if-match":
            store.put_if_match("k", b"v", md5(b"u"))
        else:
            store.put_if_absent("k", b"v")
    assert client.calls == (store.retry_attempts if expected is TransientError else 1)


class _PutsWithoutETag:
    """A stand-in boto3 client that applies every put_object but answers without an ETag."""

    def __init__(self) -> None:
        self.calls = 0

    def put_object(self, **_: Any) -> dict[str, str]:
        self.calls += 1
        return {}


@pytest.mark.parametrize("conditional", ["if-match", "if-absent"])
def test_48_s3_a_put_answered_without_an_etag_is_ambiguous(conditional: str) -> None:
    """The PUT was applied but its ETag is unknown: the caller must read the object back (an
    ambiguous write), never get a KeyError that callers would take for a refusal. No server."""
    store = S3Store("bucket")
    client = _PutsWithoutETag()
    store._client = client
    with pytest.raises(AmbiguousWrite):
        if conditional == "if-match":
            store.put_if_match("k", b"v", md5(b"u"))
        else:
            store.put_if_absent("k", b"v")
    assert client.calls == 1


def test_49_test_stores_route_every_call_and_stay_out_of_the_public_api() -> None:
    """The fault-injecting stores are `ForwardingStore`s whose every call goes through their
    fault hooks (a store that fails every request fails each method), and only
    `wal3_spark.testing` offers them: the library's exports never do."""
    import wal3_spark
    import wal3_spark.storage as storage
    from wal3_spark.testing import LatencyStore

    for name in ("FaultyStore", "LateLandingStore", "LatencyStore", "InjectingStore"):
        assert name not in storage.__all__ and not hasattr(storage, name)
        assert name not in wal3_spark.__all__
    for cls in (FaultyStore, LateLandingStore, LatencyStore):
        assert issubclass(cls, ForwardingStore)
    inner = MemoryStore(uuid.uuid4().hex)
    etag = inner.put_if_absent("k", b"v")
    down = FaultyStore(inner, seed=1, drop=1.0, read_attempts=1)
    calls = {
        "get": lambda: down.get("k"), "get_buffer": lambda: down.get_buffer("k"),
        "get_range": lambda: down.get_range("k", 0, 1),
        "head": lambda: down.head("k"), "list": lambda: down.list(""),
        "list_children": lambda: down.list_children(""), "delete": lambda: down.delete("k"),
        "put_if_absent": lambda: down.put_if_absent("n", b"x"),
        "put_if_match": lambda: down.put_if_match("k", b"x", etag),
    }
    for call in calls.values():
        with pytest.raises(TransientError):
            call()
    assert down.counts["drop"] == len(calls) and inner.get("k").data == b"v"
    assert repr(down) == f"FaultyStore({inner!r})" and down.md5_etags == inner.md5_etags


def test_50_local_store_prunes_emptied_directories_while_others_write_there(tmp_path: Any) -> None:
    """A delete that empties a directory removes it (and its empty parents: an object store has
    no directories); writers racing it in the same directory never fail: a create whose
    directory was pruned under it makes it again, and every object written is there to read."""
    from concurrent.futures import ThreadPoolExecutor

    store = LocalStore(str(tmp_path))

    def churn(worker: int) -> list[str]:
        kept = []
        for i in range(150):
            key = f"set/log{i % 3}/log/w{worker}-{i}"
            store.put_if_absent(key, b"x")
            if i % 5:
                store.delete(key)
            else:
                kept.append(key)
        return kept

    with ThreadPoolExecutor(4) as pool:
        kept = [key for keys in pool.map(churn, range(4)) for key in keys]
    assert sorted(m.key for m in store.list()) == sorted(kept)
    for key in kept:
        store.delete(key)
    assert os.listdir(tmp_path) == []


def test_51_get_buffer_is_read_only_and_outlives_the_object_and_later_reads(store: ObjectStore) -> None:
    """`get_buffer` (what fragment reads fetch with) hands out read-only bytes that stay valid
    while they are referred to: after the object is replaced or deleted, and after other reads
    (the local store reads into memory Arrow's pool reuses once it is freed, never before). A
    log set's prefixed store forwards it; a wrapper that changes `get` changes it too."""
    rng = random.Random(51)
    first, second = rng.randbytes(3 * 1024 * 1024 + 1), rng.randbytes(3 * 1024 * 1024 + 1)
    etag = store.put_if_absent("d/frag", first)
    store.put_if_absent("d/other", second)
    held = store.get_buffer("d/frag")
    assert held == first and len(held) == len(first)
    with pytest.raises(TypeError):
        memoryview(held)[0] = 0  # bytes, or a read-only view: nobody writes to what a store lends
    for _ in range(3):  # later reads of the same size, each freed at once: memory for reuse
        assert store.get_buffer("d/other") == second
    store.put_if_match("d/frag", b"replaced", etag)
    assert store.get_buffer("d/frag") == b"replaced"
    store.delete("d/frag")
    assert held == first
    with pytest.raises(ObjectNotFound):
        store.get_buffer("d/frag")
    assert PrefixedStore(store, "d").get_buffer("other") == second
    down = FaultyStore(store, seed=1, drop=1.0, read_attempts=1)
    with pytest.raises(TransientError):
        down.get_buffer("d/other")
    assert down.counts["drop"] == 1


class _GatedClock:
    """Each `monotonic` reading later than the one before; the thread named "held" sleeps until
    `gate` is set (a process pause that outlasts its delay; `holding` says it is asleep), every
    other sleep returns at once."""

    def __init__(self) -> None:
        self._t = 0.0
        self._lock = threading.Lock()
        self.gate = threading.Event()
        self.holding = threading.Event()

    def now(self) -> float:
        return 0.0

    def monotonic(self) -> float:
        with self._lock:
            self._t += 1.0
            return self._t

    def sleep(self, seconds: float) -> None:
        if threading.current_thread().name == "held":
            self.holding.set()
            self.gate.wait()


def test_52_an_ordered_latency_store_applies_writes_to_a_key_in_the_order_they_were_due() -> None:
    """`LatencyStore(ordered=True)` (benchmarks/latency.py --ordered): a conditional write due
    later waits for the one due earlier on the same key, even when the earlier one's thread is
    held past its delay; a write to another key does not wait. Without `ordered`, the later
    write acts first (the pessimistic default, which a process pause can reorder)."""
    from wal3_spark.testing import LatencyStore

    for ordered in (True, False):
        inner = MemoryStore(uuid.uuid4().hex)
        clock = _GatedClock()
        store = LatencyStore(inner, 0.1, clock=clock, ordered=ordered)
        acted: list[str] = []
        lock = threading.Lock()

        def write(key: str, data: bytes) -> None:
            with contextlib.suppress(PreconditionFailed):
                store.put_if_absent(key, data)
            with lock:
                acted.append(data.decode())

        held = threading.Thread(target=write, args=("k", b"first"), name="held")
        held.start()
        clock.holding.wait()  # the held write is due first, and sleeping past its delay
        other = threading.Thread(target=write, args=("other", b"elsewhere"))
        other.start()
        other.join()  # another key never waits
        later = threading.Thread(target=write, args=("k", b"second"))
        later.start()
        later.join(timeout=0.3)
        assert later.is_alive() == ordered
        clock.gate.set()
        held.join()
        later.join()
        if ordered:
            assert acted == ["elsewhere", "first", "second"] and inner.get("k").data == b"first"
        else:
            assert inner.get("k").data == b"second"
        assert not store._due
