"""Compaction: a log of many small appends read before and after `wal3_spark.compact`, against
the same records written as few large appends.

`--rows` rows (default 200,000) of 3 columns (`id` int64, `amount` float64, `kind` string) are
appended to one log as `--small` appends (default 2,000) and to another as `--large` appends
(default 20). The small log is read whole with `LogReader.read_table` `--rounds` times, then
compacted (`compact`, timed: MB of fragments read per second), then the compacted log and the
large log are read whole in turn, alternating, `--rounds` times. Printed: the load average, each
side's median read time with its min-max, the ratio of the compacted log's median to the large
log's, and the compaction's throughput.

`--spark` adds, in Spark `local[2]` (one warm-up read of each log first): before the compaction
the small log's `spark.read.format("wal3").load(url).count()` against the large log's, and after
it, each alternating with the large log's, the compacted log's `format("wal3")` count, the
native scan's count (`Wal3Log.forPath(spark, url).toDF().count()`) and the native scan's full
read (`toDF()` into Spark's `noop` sink). `--s3` adds the same small log written to a SeaweedFS
server the benchmark starts (`wal3_spark.testing.seaweedfs`), compacted there (MB/s), then read
with `LogReader` against the large log written there too, alternating.

    ./dev python benchmarks/compaction.py [--rows 200000] [--small 2000] [--large 20] [--rounds 7] \
        [--spark] [--s3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from wal3_spark import LogReader, LogWriter, compact
from wal3_spark.clock import ManualClock


def _rows(first: int, count: int) -> pa.Table:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.table({"id": ids, "amount": ids * 1.5, "kind": pa.array([f"k{i % 97}" for i in ids])})


def _write(url: str, rows: int, appends: int, options: dict[str, str] | None = None) -> None:
    per = rows // appends
    with LogWriter(url, options=options) as writer:
        for i in range(appends):
            writer.append(_rows(i * per, per))


def _read_s(url: str, rows: int, options: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    assert LogReader(url, options=options).read_table().num_rows == rows
    return time.perf_counter() - start


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})"


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _compact_timed(url: str, options: dict[str, str] | None = None) -> tuple[Any, float, int]:
    """The compaction's report, seconds and the bytes of fragments it read; as if 16 minutes
    later: the appends have just been written, and compaction leaves fragments younger than its
    settle time alone."""
    size = sum(f.num_bytes for f in LogReader(url, options=options).manifest().fragments)
    later = ManualClock(time.time() + 1000.0)
    start = time.perf_counter()
    report = compact(url, clock=later, options=options)
    return report, time.perf_counter() - start, size


def _alternate(rounds: int, sides: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Each side timed once per round, in turn, the order reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for name in order:
            times[name].append(_timed(sides[name]))
    return times


def _ratio(times: dict[str, list[float]], side: str, baseline: str) -> str:
    return f"{statistics.median(times[side]) / statistics.median(times[baseline]):.2f}x"


def _spark_counts(args: argparse.Namespace, small: str, large: str, rows: int) -> None:
    """`format("wal3")` and native-scan reads of the small log (before and after compaction)
    against the large one; prints each side's median and the ratio."""
    from wal3_spark.jobs.common import session
    from wal3_spark.spark import Wal3Log

    spark = session("wal3-compaction-benchmark", master="local[2]",
                    conf={"spark.ui.showConsoleProgress": "false"})
    try:
        def count(url: str) -> Callable[[], None]:
            return lambda: _check(spark.read.format("wal3").load(url).count(), rows)

        def native_count(url: str) -> Callable[[], None]:
            return lambda: _check(Wal3Log.forPath(spark, url).toDF().count(), rows)

        def native_read(url: str) -> Callable[[], None]:
            return lambda: Wal3Log.forPath(spark, url).toDF().write.format("noop").mode("overwrite").save()

        for warm in (count(small), count(large)):
            warm()
        before = _alternate(args.rounds, {"small": count(small), "large": count(large)})
        print(f"spark format count, {args.small} appends, not compacted: {_spread(before['small'])}; "
              f"{args.large} appends: {_spread(before['large'])}; ratio {_ratio(before, 'small', 'large')}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        report, took, _ = _compact_timed(small)
        print(f"compacted {report.fragments_before} -> {report.fragments_after} fragments in {took:.2f} s", flush=True)
        for name, make in (("format count", count), ("native count", native_count), ("native full read", native_read)):
            make(small)()
            make(large)()  # warm-up
            times = _alternate(args.rounds, {"compacted": make(small), "large": make(large)})
            print(f"spark {name}: compacted {_spread(times['compacted'])}, {args.large} appends "
                  f"{_spread(times['large'])}; ratio {_ratio(times, 'compacted', 'large')}; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        spark.stop()


def _check(got: int, rows: int) -> None:
    assert got == rows, (got, rows)


def _s3(args: argparse.Namespace, rows: int) -> None:
    """The small and large logs on SeaweedFS: the compaction's throughput there, and
    `LogReader` reads of the compacted log against the large one."""
    from wal3_spark.testing.seaweedfs import running_seaweed

    with tempfile.TemporaryDirectory() as tmp, running_seaweed(Path(tmp) / "seaweed") as server:
        small, large, options = server.new_url("small"), server.new_url("large"), server.options
        start = time.perf_counter()
        _write(small, rows, args.small, options)
        print(f"s3: {args.small} appends written in {time.perf_counter() - start:.1f} s", flush=True)
        _write(large, rows, args.large, options)
        before = _alternate(max(1, args.rounds // 2), {
            "small": lambda: _read_s(small, rows, options), "large": lambda: _read_s(large, rows, options)})
        print(f"s3 read, {args.small} appends, not compacted: {_spread(before['small'])}; ratio "
              f"{_ratio(before, 'small', 'large')}", flush=True)
        report, took, size = _compact_timed(small, options)
        print(f"s3 compaction: {size / 1e6:.2f} MB read, {report.bytes_written / 1e6:.2f} MB written "
              f"in {took:.2f} s: {size / 1e6 / took:.1f} MB/s ({report.fragments_before} -> "
              f"{report.fragments_after} fragments); load average {os.getloadavg()[0]:.1f}", flush=True)
        times = _alternate(args.rounds, {
            "compacted": lambda: _read_s(small, rows, options), "large": lambda: _read_s(large, rows, options)})
        print(f"s3 read: compacted {_spread(times['compacted'])}, {args.large} appends "
              f"{_spread(times['large'])}; ratio {_ratio(times, 'compacted', 'large')}", flush=True)


def _local(args: argparse.Namespace, small: str, large: str, rows: int) -> None:
    """`LogReader` reads of the small log before and after compaction against the large one."""
    before = [_read_s(small, rows) for _ in range(args.rounds)]
    report, took, size = _compact_timed(small)
    times = _alternate(args.rounds, {"compacted": lambda: _read_s(small, rows), "large": lambda: _read_s(large, rows)})
    compacted, baseline = times["compacted"], times["large"]
    print(f"read, {args.small} appends, not compacted: {_spread(before)}")
    print(f"read, {args.small} appends, compacted ({report.fragments_before} -> "
          f"{report.fragments_after} fragments): {_spread(compacted)}")
    print(f"read, {args.large} appends: {_spread(baseline)}; compacted / large = {_ratio(times, 'compacted', 'large')}")
    print(f"compaction: {size / 1e6:.2f} MB read, {report.bytes_written / 1e6:.2f} MB written in "
          f"{took:.2f} s: {size / 1e6 / took:.1f} MB/s; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--large", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--spark", action="store_true", help="format(\"wal3\") and native-scan reads in Spark local[2]")
    parser.add_argument("--s3", action="store_true", help="compaction and reads on a SeaweedFS server it starts")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="wal3-compaction-")
    small, large = f"file://{root}/small", f"file://{root}/large"
    rows = args.rows // args.small * args.small
    _write(small, rows, args.small)
    _write(large, rows, args.large)
    print(f"load average {os.getloadavg()[0]:.1f}; {rows} rows, {args.small} vs {args.large} appends")
    _local(args, small, large, rows)
    if args.spark:  # a small log of its own, compacted between the two halves
        _write(f"file://{root}/spark-small", rows, args.small)
        _spark_counts(args, f"file://{root}/spark-small", large, rows)
    if args.s3:
        _s3(args, rows)


if __name__ == "__main__":
    main()
