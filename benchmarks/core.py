"""Core-library benchmark: prints a table (docs/benchmarks.md records its output).

    ./dev python benchmarks/core.py [--quick]

1. append throughput (1 KB raw records; the 6-column table of jobs/benchmark.py, with a
   uuid string column) vs `pyarrow.parquet.write_table` + PUT of the same data to the same
   store (`create`, the durable create-if-absent fragments use), each side appending to what
   exists (a log and its writer; a store): both sides alternate in one run, medians with
   their spread;
2. object-store requests per commit (warm committer and cold committer);
3. commits/s with 1 and 8 concurrent committer processes, local filesystem, SeaweedFS and the
   GCS and Azure emulators (`--commits-only`: these rows alone);
4. manifest size and time to find the tail of a log with 100,000 fragments.

`--stores` measures instead, per store (local filesystem, SeaweedFS, and the fake-gcs-server
and Azurite emulators, each started once for the run), in one run whose rounds take the stores
in turn (the order reversed every other round): commits per second with 1 and 8 committer
processes (each for `--commit-seconds`), append latency p50/p99 at a fixed rate
(`benchmarks/latency.py`'s open-loop generator, `--rate` appends/s for `--latency-seconds`),
and reading a log of `--read-rows` rows (the 6 columns of jobs/benchmark.py, 4 fragments)
through `spark.read.format("wal3")` into the `noop` sink (Spark `local[2]`, one warm-up read
each). Medians of `--repeat` rounds with their spread:

    ./dev python benchmarks/core.py --stores --repeat 3
"""

from __future__ import annotations

import argparse
import io
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fakes import FakeFragment  # noqa: E402
from tests.support.seaweed import running_seaweed  # noqa: E402
from wal3_spark.format.layout import MANIFEST_KEY  # noqa: E402
from wal3_spark.format.manifest import Manifest, SnapshotOptions  # noqa: E402
from wal3_spark.format.setsum import Setsum  # noqa: E402
from wal3_spark.log.committer import Committer  # noqa: E402
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader  # noqa: E402
from wal3_spark.log.snapshots import roll_snapshots  # noqa: E402
from wal3_spark.log.writer import LogWriter, to_batches  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402
from wal3_spark.storage.base import ObjectStore  # noqa: E402
from wal3_spark.testing.emulators import running_azurite, running_fake_gcs  # noqa: E402

ROWS: list[tuple[str, str, str]] = []


def row(name: str, value: str, note: str = "") -> None:
    ROWS.append((name, value, note))
    print(f"{name:<58} {value:>16}  {note}", flush=True)


class CountingStore(ObjectStore):
    """Counts requests per (operation, key kind) on the way to `inner`."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.url, self.counts = inner, inner.url, Counter()

    def _count(self, op: str, key: str) -> None:
        self.counts[(op, "manifest" if key == MANIFEST_KEY else key.split("/")[0])] += 1

    def get(self, key):
        self._count("get", key)
        return self.inner.get(key)

    def head(self, key):
        self._count("head", key)
        return self.inner.head(key)

    def put_if_absent(self, key, data):
        self._count("put", key)
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key, data, etag):
        self._count("put", key)
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix=""):
        self._count("list", prefix)
        return self.inner.list(prefix)

    def list_children(self, prefix=""):
        self._count("list", prefix)
        return self.inner.list_children(prefix)

    def delete(self, key):
        self._count("delete", key)
        return self.inner.delete(key)


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _uuid_strings(n: int, rng: np.random.Generator) -> pa.Array:
    """n random UUID-formatted strings (what Spark's `uuid()` makes), built without a Python loop."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    chars = np.full((n, 36), ord("-"), dtype=np.uint8)
    hex_positions = [c for c in range(36) if c not in (8, 13, 18, 23)]
    chars[:, hex_positions] = digits[rng.integers(0, 16, (n, 32), dtype=np.uint8)]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def structured_table(rows: int) -> pa.Table:
    """The 6 columns of jobs/benchmark.py's table: id, name, amount, ts, bucket, tag."""
    ids = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("name-", pa.array(ids % 100_000).cast(pa.string()), ""),
            "amount": ids * 0.37,
            "ts": pa.array((1_700_000_000 + ids % 86_400) * 1_000_000, pa.timestamp("us", tz="UTC")),
            "bucket": ids % 1024,
            "tag": _uuid_strings(rows, np.random.default_rng(7)),
        }
    )


def _alternating(sides: dict, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds per run of each side, the sides taking turns after one warm-up each,
    so that both sides of a ratio see the same load on a shared machine; the order flips every
    round (ABBA), so neither side always runs first, after the other's garbage. CPU seconds are
    the whole process's (every thread), which a loaded machine disturbs far less than wall time."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for fn in sides.values():
        fn()
    order = list(sides.items())
    for round_ in range(repeat):
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - start, time.process_time() - cpu))
    return times


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def bench_append(base_url: str, quick: bool, repeat: int) -> None:
    raw_n = 20_000 if quick else 100_000
    rng = np.random.default_rng(1)
    blob = rng.integers(0, 256, raw_n * 1024, dtype=np.uint8).tobytes()
    bodies = [blob[i * 1024 : (i + 1) * 1024] for i in range(raw_n)]
    chunk = 20_000
    raw_tables = [pa.table({"body": pa.array(bodies[i : i + chunk], pa.binary())}) for i in range(0, raw_n, chunk)]
    rows = 200_000 if quick else 1_000_000
    table = structured_table(rows)
    struct_chunks = [table.slice(i, 250_000) for i in range(0, rows, 250_000)]
    counter = iter(range(10**6))

    for label, chunks, mb, target in (
        ("1 KB raw records", raw_tables, raw_n * 1024 / 1e6, 0.7),
        ("6-column table", struct_chunks, table.nbytes / 1e6, 0.95),
    ):
        # Both sides append to what exists already, as a user does: the log (created with the
        # writer's schema) and its writer, the baseline's store, are made once, untimed; each
        # round adds its chunks to them (the warm-up round included).
        writer = LogWriter(f"{base_url}/append-{next(counter)}")
        writer.committer.prepare(to_batches(chunks[0])[1])
        store = open_store(f"{base_url}/baseline-{next(counter)}")

        def ours() -> None:
            for t in chunks:
                writer.append(t)

        def baseline() -> None:
            # `create`: the durable create-if-absent a fragment upload uses (no MD5 ETag).
            for t in chunks:
                buf = io.BytesIO()
                pq.write_table(t, buf, compression="snappy")
                store.create(f"data/part-{next(counter)}.parquet", buf.getvalue())

        times = _alternating({"pyarrow": baseline, "wal3": ours}, repeat)
        walls = {name: [wall for wall, _ in runs] for name, runs in times.items()}
        cpus = {name: [cpu for _, cpu in runs] for name, runs in times.items()}
        t_base, t_ours = statistics.median(walls["pyarrow"]), statistics.median(walls["wal3"])
        ratios = [b / o for b, o in zip(walls["pyarrow"], walls["wal3"])]
        cpu_ratio = statistics.median(cpus["pyarrow"]) / statistics.median(cpus["wal3"])
        for side, name in (("pyarrow", "pyarrow write_table + PUT"), ("wal3", "wal3 LogWriter.append")):
            row(f"append {label}: {name}", f"{mb / statistics.median(walls[side]):,.0f} MB/s",
                f"{_spread(walls[side])}, CPU median {statistics.median(cpus[side]):.3f} s")
        row(f"append {label}: ratio wal3 / pyarrow (target >= {target})", f"{t_base / t_ours:.2f}",
            f"per-round ratios {min(ratios):.2f}-{max(ratios):.2f}, {repeat} rounds; CPU ratio {cpu_ratio:.2f}")


def bench_requests(base_url: str) -> None:
    store = CountingStore(open_store(f"{base_url}/requests"))
    Committer(store).create()
    warm = Committer(store)
    warm.load()
    files = [write_fragments(store, to_batches([b"x" * 100])[0], None, fragment_bytes=1 << 20) for _ in range(40)]
    store.counts.clear()
    for f in files[:20]:
        warm.commit(f)
    warm_gets, warm_puts = store.counts[("get", "manifest")] / 20, store.counts[("put", "manifest")] / 20
    store.counts.clear()
    for f in files[20:]:
        Committer(store).commit(f)
    cold_gets, cold_puts = store.counts[("get", "manifest")] / 20, store.counts[("put", "manifest")] / 20
    row("requests per commit, warm committer (fresh ETag)", f"{warm_gets:.1f} GET + {warm_puts:.1f} PUT",
        "manifest only; target 1 GET + 1 PUT")
    row("requests per commit, cold committer", f"{cold_gets:.1f} GET + {cold_puts:.1f} PUT", "manifest only")


def _commit_loop(args: tuple) -> tuple[int, int, float, float]:
    """One committer process: `commits` appends of one small fragment each, or as many as fit
    before `deadline` (a `time.time()`), whichever comes first."""
    url, options, writer, commits, deadline = args
    store = open_store(url, options)
    committer = Committer(store, writer=f"bench-{writer}")
    conflicts = done = 0
    started = time.time()
    while done < commits and time.time() < deadline:
        batches, _ = to_batches([f"w{writer}-c{done}".encode() * 8])
        conflicts += committer.commit(write_fragments(store, batches, None, fragment_bytes=1 << 20)).conflicts
        done += 1
    return done, conflicts, started, time.time()


_warm_barrier = None


def _pool_init(barrier) -> None:
    global _warm_barrier
    _warm_barrier = barrier


def _warm(logs: list[tuple[str, dict | None]]) -> int:
    """One commit to each of `logs` (imports, clients, first-use costs paid before any timed
    commit), then wait for the pool's other processes: so each process takes one of these."""
    for url, options in logs:
        _commit_loop((url, options, os.getpid(), 1, math.inf))
    _warm_barrier.wait(timeout=600)
    return os.getpid()


def bench_commits(label: str, url_for, options, commits: int) -> None:
    """Aggregate commit rate, timed from the first process's start of work to the last's end
    (process start-up and imports excluded)."""
    ctx = multiprocessing.get_context("spawn")
    for writers in (1, 8):
        url = url_for(f"commits-{writers}")
        Committer(open_store(url, options)).create()
        with ctx.Pool(writers) as pool:
            results = pool.map(_commit_loop, [(url, options, w, commits // writers, math.inf) for w in range(writers)])
        elapsed = max(r[3] for r in results) - min(r[2] for r in results)
        done, conflicts = sum(r[0] for r in results), sum(r[1] for r in results)
        records = LogReader(open_store(url, options)).bounds()[1] - 1
        assert records == done, f"{done} commits acknowledged, {records} records in the log"
        row(f"commits/s, {writers} committer process(es), {label}", f"{done / elapsed:,.0f}/s",
            f"{done} one-fragment commits, {conflicts} CAS conflicts, 0 failed, all present")


def commit_rate(pool, url: str, options, writers: int, seconds: float) -> tuple[float, int, int]:
    """(commits/s, commits, CAS conflicts) of `writers` processes of `pool` (started and
    warm) committing to a new log at `url` for `seconds`; every acknowledged commit must be in
    the log."""
    Committer(open_store(url, options)).create()
    deadline = time.time() + seconds
    results = pool.map(_commit_loop, [(url, options, w, 10**9, deadline) for w in range(writers)], chunksize=1)
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)
    done, conflicts = sum(r[0] for r in results), sum(r[1] for r in results)
    records = LogReader(open_store(url, options)).bounds()[1] - 1
    assert records == done, f"{done} commits acknowledged, {records} records in the log"
    return done / elapsed, done, conflicts


def append_latency(url: str, options, rate: float, seconds: float) -> tuple[float, float, int]:
    """(p50, p99 in ms, appends) of `benchmarks/latency.py`'s open-loop run against the store
    itself (no added latency): one 100-byte record per append, `LogWriter`'s defaults but 8
    manifest writes allowed in flight (which GCS and Azure, without MD5 ETags, do not use)."""
    import latency

    settings = argparse.Namespace(latency_ms=0.0, tail_methods="", tail_factor=10.0, gc_freeze=False,
                                  rate=rate, seconds=seconds, record_bytes=100, warmup_s=2.0)
    run = latency.measure("store", settings, 0.0, {"batch_interval_s": 0.02, "max_manifest_writes": 8},
                          open_store(url, options))
    p50, p99 = np.percentile(run.latencies_ms, [50, 99])
    return float(p50), float(p99), run.appends


def bench_stores(args: argparse.Namespace) -> None:
    """The per-store rows (see the module's docstring)."""
    import uuid

    from wal3_spark.jobs.common import session

    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp, running_seaweed(Path(tmp) / "seaweed") as s3, \
            running_fake_gcs(Path(tmp) / "gcs") as gcs, running_azurite(Path(tmp) / "azurite") as azure:  # fmt: skip
        stores = [
            ("local filesystem", lambda n: f"file://{tmp}/local/{n}-{uuid.uuid4().hex[:8]}", None),
            ("SeaweedFS S3", s3.new_url, s3.options),
            ("fake-gcs-server (emulator)", gcs.new_url, gcs.options),
            ("Azurite (emulator)", azure.new_url, azure.options),
        ]
        measures = ("commits/s, 1", "commits/s, 8", f"p50 ms, {args.rate:g}/s", f"p99 ms, {args.rate:g}/s",
                    f"read {args.read_rows / 1e6:g}M rows, s")
        got: dict[str, dict[str, list[float]]] = {label: {m: [] for m in measures} for label, _, _ in stores}
        conflicts: dict[str, int] = dict.fromkeys(got, 0)

        def rounds():
            for round_ in range(args.repeat):
                yield round_, stores if round_ % 2 == 0 else stores[::-1]

        ctx = multiprocessing.get_context("spawn")
        scratch = [(url_for("warm-up"), options) for _, url_for, options in stores]
        for url, options in scratch:
            Committer(open_store(url, options)).create()
        with ctx.Pool(8, initializer=_pool_init, initargs=(ctx.Barrier(8),)) as pool:
            assert len(set(pool.map(_warm, [scratch] * 8, chunksize=1))) == 8
            for round_, order in rounds():
                for label, url_for, options in order:
                    for writers, measure in ((1, measures[0]), (8, measures[1])):
                        rate, _, lost_races = commit_rate(pool, url_for(f"commits-{writers}"), options, writers,
                                                          args.commit_seconds)
                        got[label][measure].append(rate)
                        conflicts[label] += lost_races if writers == 8 else 0
                    p50, p99, _ = append_latency(url_for("latency"), options, args.rate, args.latency_seconds)
                    got[label][measures[2]].append(p50)
                    got[label][measures[3]].append(p99)
                    print(f"round {round_ + 1}, {label}: commits/s {got[label][measures[0]][-1]:.0f} / "
                          f"{got[label][measures[1]][-1]:.0f}, append p50 {p50:.0f} ms p99 {p99:.0f} ms, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                load.append(os.getloadavg()[0])

        table = structured_table(args.read_rows)
        logs: dict[str, tuple[str, dict | None]] = {}
        for label, url_for, options in stores:
            url = url_for("read")
            with LogWriter(url, options=options) as writer:
                for piece in table.to_batches(max_chunksize=-(-args.read_rows // 4)):
                    writer.append(pa.Table.from_batches([piece]))
            assert LogReader(url, options=options).bounds() == (1, args.read_rows + 1)
            logs[label] = (url, options)
        del table
        spark = session("wal3-store-benchmark", master="local[2]",
                        conf={"spark.ui.showConsoleProgress": "false",
                              "spark.sql.execution.arrow.maxRecordsPerBatch": "65536"})

        def read(label: str) -> None:
            url, options = logs[label]
            spark.read.format("wal3").options(**(options or {})).load(url).write.format("noop").mode("overwrite").save()

        for label, _, _ in stores:
            read(label)  # warm-up
        for round_, order in rounds():
            for label, _, _ in order:
                start = time.perf_counter()
                read(label)
                got[label][measures[4]].append(time.perf_counter() - start)
            print(f"round {round_ + 1}, reads: " + ", ".join(f"{label} {got[label][measures[4]][-1]:.1f} s"
                                                            for label, _, _ in stores), flush=True)
            load.append(os.getloadavg()[0])
        spark.stop()

    print(f"\nper store: medians of {args.repeat} rounds (min-max); load average (1 min) "
          f"{min(load):.1f}-{max(load):.1f} over the run; emulator rows are emulator figures")
    print("commits/s: 1 committer, 8 committer processes; p50/p99: append latency at a fixed rate")
    print(f"{'store':<28} " + " ".join(f"{m:>20}" for m in measures))
    for label, values in got.items():
        cells = [f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" if not m.startswith("read")
                 else f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" for m, v in values.items()]
        print(f"{label:<28} " + " ".join(f"{c:>20}" for c in cells) + f"  ({conflicts[label]:,} CAS conflicts, 8 committers)")


def bench_long_manifest(base_url: str, fragments: int) -> None:
    store = CountingStore(open_store(f"{base_url}/long"))
    options = SnapshotOptions()
    manifest = Manifest.empty("bench")

    start = time.perf_counter()
    for i in range(fragments):
        u = f"01900000-0000-7000-8000-{i:012x}"
        manifest = manifest.with_fragments([FakeFragment(f"log/Uuid={u}.parquet", u, 10, 4096, Setsum.of(u.encode()))], "bench")
        manifest = roll_snapshots(store, manifest, options, "bench")
    build = time.perf_counter() - start
    manifest.scrub()
    store.inner.put_if_absent(MANIFEST_KEY, manifest.to_bytes())
    size = len(manifest.to_bytes())
    store.counts.clear()
    reader = LogReader(store)
    t = _best(lambda: reader.bounds(), 5)
    gets = store.counts[("get", "manifest")] / 5
    row(f"manifest size, {fragments:,} fragments", f"{size / 1000:,.0f} KB",
        f"{len(manifest.fragments)} fragments + {len(manifest.snapshots)} snapshot pointers; target <= 600 KB")
    row(f"find the tail, {fragments:,} fragments", f"{t * 1000:.1f} ms",
        f"{gets:.0f} GET (manifest) and nothing else; built in {build:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller data, for a smoke run")
    parser.add_argument("--repeat", type=int, default=5, help="alternating rounds per append measure")
    parser.add_argument("--append-only", action="store_true", help="only the append throughput rows")
    parser.add_argument("--commits-only", action="store_true",
                        help="only the commit-rate rows, on every store (local, SeaweedFS and the emulators)")
    parser.add_argument("--stores", action="store_true",
                        help="only the per-store rows: commits/s, append latency and a Spark read, on every store")
    parser.add_argument("--commit-seconds", type=float, default=5.0, help="--stores: seconds per commit-rate measure")
    parser.add_argument("--rate", type=float, default=100.0, help="--stores: appends per second of the latency measure")
    parser.add_argument("--latency-seconds", type=float, default=12.0,
                        help="--stores: seconds per latency measure (the first 2 not measured)")
    parser.add_argument("--read-rows", type=int, default=3_000_000, help="--stores: rows of the log read through Spark")
    args = parser.parse_args()
    if args.stores:
        bench_stores(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = f"file://{tmp}"
        print(f"{'measure':<58} {'value':>16}  note")
        if not args.commits_only:
            bench_append(base, args.quick, args.repeat)
            if args.append_only:
                return
            bench_requests(base)
        commits = 100 if args.quick else 400
        bench_commits("local filesystem", lambda n: f"{base}/{n}", None, commits)
        (Path(tmp) / "seaweed").mkdir()
        with running_seaweed(Path(tmp) / "seaweed") as server:
            bench_commits("SeaweedFS S3", server.new_url, server.options, commits // 2)
        with running_fake_gcs(Path(tmp) / "gcs") as gcs:
            bench_commits("fake-gcs-server (emulator)", gcs.new_url, gcs.options, commits // 2)
        with running_azurite(Path(tmp) / "azurite") as azure:
            bench_commits("Azurite (emulator)", azure.new_url, azure.options, commits // 2)
        if not args.commits_only:
            bench_long_manifest(base, 10_000 if args.quick else 100_000)


if __name__ == "__main__":
    main()
