"""Compaction: a log of many small appends read before and after `wal3_spark.compact`, against
the same records written as few large appends.

`--rows` rows (default 200,000) of 3 columns (`id` int64, `amount` float64, `kind` string) are
appended to one log as `--small` appends (default 2,000) and to another as `--large` appends
(default 20). The small log is read whole with `LogReader.read_table` `--rounds` times, then
compacted (`compact`, timed: MB of fragments read per second), then the compacted log and the
large log are read whole in turn, alternating, `--rounds` times. Printed: the load average, each
side's median read time with its min-max, the ratio of the compacted log's median to the large
log's, and the compaction's throughput.

    ./dev python benchmarks/compaction.py [--rows 200000] [--small 2000] [--large 20] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

from wal3_spark import LogReader, LogWriter, compact
from wal3_spark.clock import ManualClock


def _rows(first: int, count: int) -> pa.Table:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.table({"id": ids, "amount": ids * 1.5, "kind": pa.array([f"k{i % 97}" for i in ids])})


def _write(url: str, rows: int, appends: int) -> None:
    per = rows // appends
    with LogWriter(url) as writer:
        for i in range(appends):
            writer.append(_rows(i * per, per))


def _read_s(url: str, rows: int) -> float:
    start = time.perf_counter()
    assert LogReader(url).read_table().num_rows == rows
    return time.perf_counter() - start


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--large", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="wal3-compaction-")
    small, large = f"file://{root}/small", f"file://{root}/large"
    rows = args.rows // args.small * args.small
    _write(small, rows, args.small)
    _write(large, rows, args.large)
    print(f"load average {os.getloadavg()[0]:.1f}; {rows} rows, {args.small} vs {args.large} appends")
    before = [_read_s(small, rows) for _ in range(args.rounds)]
    size = sum(f.num_bytes for f in LogReader(small).manifest().fragments)
    # compact as if 16 minutes later: the appends have just been written, and compaction leaves
    # fragments younger than its settle time alone
    later = ManualClock(time.time() + 1000.0)
    start = time.perf_counter()
    report = compact(small, clock=later)
    took = time.perf_counter() - start
    compacted, baseline = [], []
    for _ in range(args.rounds):  # the two sides alternate
        compacted.append(_read_s(small, rows))
        baseline.append(_read_s(large, rows))
    ratio = statistics.median(compacted) / statistics.median(baseline)
    print(f"read, {args.small} appends, not compacted: {_spread(before)}")
    print(f"read, {args.small} appends, compacted ({report.fragments_before} -> "
          f"{report.fragments_after} fragments): {_spread(compacted)}")
    print(f"read, {args.large} appends: {_spread(baseline)}; compacted / large = {ratio:.2f}x")
    print(f"compaction: {size / 1e6:.2f} MB read, {report.bytes_written / 1e6:.2f} MB written in "
          f"{took:.2f} s: {size / 1e6 / took:.1f} MB/s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
