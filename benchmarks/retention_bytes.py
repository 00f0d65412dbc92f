"""Bytes kept under a `--max-bytes` retention policy over time: appends go on, garbage
collection runs now and then, and the log's bytes stay near the bound instead of growing.

A log gets a max-bytes policy of `--max-bytes` (default 4 MiB). `--appends` appends (default
2,000) of `--rows` rows each (default 500; 3 columns: `id` int64, `amount` float64, `kind`
string) are made; every `--gc-every` appends (default 100) one `collect_garbage` runs (grace 0,
so the files go in the same run), with a consumer's cursor left far behind at the start, which
the policy overtakes. Printed after each GC: the appends so far, the bytes ever appended
(`acc_bytes`), the bytes the manifest references, the bytes of fragment files on storage, the
oldest and next offsets, and the records the run removed by the policy; then the largest bytes
kept after any GC against the bound. One run, local filesystem (or `--url`).

    ./dev python benchmarks/retention_bytes.py [--max-bytes 4194304] [--appends 2000] [--rows 500] [--gc-every 100]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa

from wal3_spark import CursorStore, GCOptions, LogReader, LogWriter, collect_garbage, open_store, set_retention
from wal3_spark.format.layout import FRAGMENT_PREFIX
from wal3_spark.ops.retention import own_bytes


def _rows(first: int, count: int) -> pa.Table:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.table({"id": ids, "amount": ids * 1.5, "kind": pa.array([f"k{i % 97}" for i in ids])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a fresh log location (default: a temporary directory)")
    parser.add_argument("--max-bytes", type=int, default=4 << 20)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--gc-every", type=int, default=100)
    args = parser.parse_args()
    url = args.url or os.path.join(tempfile.mkdtemp(prefix="wal3-retention-"), "log")
    store = open_store(url)
    print(f"load average {os.getloadavg()[0]:.1f}; log {url}; policy max-bytes {args.max_bytes}")
    print(f"{'t (s)':>7} {'appends':>8} {'acc_bytes':>11} {'kept bytes':>11} {'files bytes':>12} "
          f"{'oldest':>8} {'next':>8} {'removed':>8}")
    kept_max = 0
    started = time.perf_counter()
    with LogWriter(store) as writer:
        writer.append(_rows(0, args.rows))
        CursorStore(store).advance("stalled", 1)  # a consumer that never reads again
        set_retention(store, max_bytes=args.max_bytes)
        for i in range(1, args.appends):
            writer.append(_rows(i * args.rows, args.rows))
            if (i + 1) % args.gc_every:
                continue
            report = collect_garbage(store, GCOptions(grace_s=0, writer="retention benchmark"))
            manifest = LogReader(store).manifest()
            kept = own_bytes(manifest)
            kept_max = max(kept_max, kept)
            files = sum(m.size for m in store.list(FRAGMENT_PREFIX))
            removed = report.retention_removed["records"] if report.retention_removed else 0
            print(f"{time.perf_counter() - started:7.1f} {i + 1:8d} {manifest.acc_bytes:11d} {kept:11d} "
                  f"{files:12d} {manifest.oldest_offset:8d} {manifest.next_offset:8d} {removed:8d}")
    print(f"largest bytes kept after a GC: {kept_max} ({kept_max / args.max_bytes:.2f}x the bound); "
          f"bytes appended: {LogReader(store).manifest().acc_bytes}")


if __name__ == "__main__":
    main()
