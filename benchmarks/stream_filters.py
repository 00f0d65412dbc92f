"""Stream filters: reading one key of a multiplexed log with and without them.

One log of `--fragments` fragments (default 1,000), each holding `--keys-per-fragment` keys
(default 10) drawn at random from `--keys` (default 1,000), `--rows` rows per key in each: every
key is in about fragments x keys-per-fragment / keys fragments (1%). The same records are
written twice, to a log whose fragments carry stream filters of the key column and to one
whose fragments do not. For `--sample` keys, alternating the sides, `--rounds` times:

- filtered: `LogReader.read_table(filter_column=, filter_values=[key])` on the filtered log;
- unfiltered: the same call on the log without filters (every fragment fetched, rows exact);
- full scan: `read_table()` of the log without filters, then the key's rows picked out.

Printed: fragments fetched (GETs of fragment objects, counted by a store wrapper) and read
time (medians, with min-max over the rounds), the filters' measured false-positive rate
(fragments fetched that did not hold the key, over all fragments that did not), bytes per
filter and per manifest entry, Parquet bytes per fragment with and without the column's
Parquet bloom filter, and the size and parse time of a manifest of `--manifest-fragments`
entries (default 100,000) with and without filters.

    ./dev python benchmarks/stream_filters.py [--latency-ms 0] [--rounds 3]

`--latency-ms` adds that much to every request of the reads (an object store's first-byte
latency; the local filesystem has almost none).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from wal3_spark.format.fragment import encode_table  # noqa: E402
from wal3_spark.format.layout import FragmentRef, fragment_path  # noqa: E402
from wal3_spark.format.manifest import Manifest  # noqa: E402
from wal3_spark.format.setsum import Setsum  # noqa: E402
from wal3_spark.format.stream_filter import StreamFilter, key_bytes  # noqa: E402
from wal3_spark.log.reader import LogReader  # noqa: E402
from wal3_spark.log.writer import LogWriter, LogWriterOptions  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402
from wal3_spark.storage.base import Blob, ObjectStore  # noqa: E402
from wal3_spark.storage.forwarding import ForwardingStore  # noqa: E402
from wal3_spark.testing.latency import LatencyStore  # noqa: E402


class FragmentGets(ForwardingStore):
    """`inner`, counting GETs of fragment objects."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.fragments = 0

    def get(self, key: str) -> Blob:
        if key.startswith("log/"):
            self.fragments += 1
        return self.inner.get(key)


def workload(args: argparse.Namespace) -> list[pa.Table]:
    rng = random.Random(7)
    tables = []
    for _ in range(args.fragments):
        keys = rng.sample(range(args.keys), args.keys_per_fragment)
        tenants = [f"tenant-{k:04d}" for k in keys for _ in range(args.rows)]
        tables.append(pa.table({"tenant": tenants, "payload": [uuid.uuid4().hex for _ in tenants]}))
    return tables


def write(url: str, tables: list[pa.Table], filter_column: str | None) -> None:
    with LogWriter(url, LogWriterOptions(filter_column=filter_column)) as writer:
        for table in tables:
            writer.append(table)


def timed_read(url: str, key: str, latency_s: float, side: str) -> tuple[float, int, int]:
    """(seconds, fragments fetched, rows) of one read of `key`."""
    counting = FragmentGets(open_store(url))
    store = LatencyStore(counting, latency_s) if latency_s else counting
    reader = LogReader(store)
    began = time.perf_counter()
    if side == "full scan":
        table = reader.read_table()
        rows = sum(1 for t in table["tenant"].to_pylist() if t == key)
    else:
        rows = reader.read_table(filter_column="tenant", filter_values=[key]).num_rows
    return time.perf_counter() - began, counting.fragments, rows


def manifest_sizes(count: int, keys_per_fragment: int, rounds: int) -> dict[str, tuple[int, float]]:
    """Bytes and parse seconds (median of `rounds`, the configurations alternating) of a
    manifest of `count` entries, without and with filters of `keys_per_fragment` keys (and of
    10,000 keys: a filter at its size cap)."""
    encoded = {}
    for label, keys in (("no filters", 0), (f"{keys_per_fragment} keys each", keys_per_fragment),
                        ("10,000 keys each (capped)", 10_000)):
        refs = []
        start = 1
        shared = StreamFilter.build("tenant", [key_bytes(f"k{i}") for i in range(keys)]) if keys else None
        for i in range(count):
            fid = uuid.UUID(int=(0x0192 << 112) | (0x7 << 76) | (0x8 << 60) | i)
            setsum = Setsum.from_hexdigest(f"{i:064x}")
            refs.append(FragmentRef(fragment_path(fid), str(fid), start, start + 100, 40_000, setsum, shared))
            start += 100
        manifest = Manifest(Setsum.sum(r.setsum for r in refs), Setsum(), 40_000 * count, "bench",
                            (), tuple(refs))
        encoded[label] = manifest.to_bytes()
    times: dict[str, list[float]] = {label: [] for label in encoded}
    for round_ in range(rounds):
        labels = list(encoded) if round_ % 2 == 0 else list(reversed(encoded))
        for label in labels:
            began = time.perf_counter()
            Manifest.from_bytes(encoded[label])
            times[label].append(time.perf_counter() - began)
    return {label: (len(data), statistics.median(times[label])) for label, data in encoded.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fragments", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--keys-per-fragment", type=int, default=10)
    parser.add_argument("--rows", type=int, default=5, help="rows per key in a fragment")
    parser.add_argument("--sample", type=int, default=5, help="keys read per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--manifest-fragments", type=int, default=100_000)
    args = parser.parse_args()

    tables = workload(args)
    root = Path(tempfile.mkdtemp(prefix="wal3-filters-"))
    filtered, plain = (root / "filtered").as_uri(), (root / "plain").as_uri()
    began = time.perf_counter()
    write(filtered, tables, "tenant")
    with_s = time.perf_counter() - began
    began = time.perf_counter()
    write(plain, tables, None)
    without_s = time.perf_counter() - began
    print(f"wrote {args.fragments} fragments x {args.keys_per_fragment} of {args.keys} keys x "
          f"{args.rows} rows twice: {with_s:.1f} s with filters, {without_s:.1f} s without")

    holders: dict[str, set[int]] = {}
    for i, table in enumerate(tables):
        for tenant in set(table["tenant"].to_pylist()):
            holders.setdefault(tenant, set()).add(i)
    rng = random.Random(11)
    latency_s = args.latency_ms / 1000
    sides = {"filtered": filtered, "unfiltered": plain, "full scan": plain}
    seconds: dict[str, list[float]] = {s: [] for s in sides}
    fetched: dict[str, list[int]] = {s: [] for s in sides}
    false_positive, negatives = 0, 0
    for round_ in range(args.rounds):
        keys = [f"tenant-{k:04d}" for k in rng.sample(range(args.keys), args.sample)]
        for index, key in enumerate(keys):
            shift = (round_ + index) % len(sides)  # each side first, second and last in turn
            order = list(sides)[shift:] + list(sides)[:shift]
            for side in order:
                s, n, rows = timed_read(sides[side], key, latency_s, side)
                assert rows == len(holders.get(key, ())) * args.rows, (side, key, rows)
                seconds[side].append(s)
                fetched[side].append(n)
                if side == "filtered":
                    false_positive += n - len(holders.get(key, ()))
                    negatives += args.fragments - len(holders.get(key, ()))

    print(f"\nreading one key (latency {args.latency_ms:g} ms per request; medians of "
          f"{args.rounds} rounds x {args.sample} keys, sides alternating, min-max)")
    print(f"{'side':<12} {'fragments fetched':>18} {'share':>7} {'read s':>8} {'min-max s':>14} {'vs full scan':>13}")
    full = statistics.median(seconds["full scan"])
    for side in sides:
        med_n = statistics.median(fetched[side])
        med_s = statistics.median(seconds[side])
        print(f"{side:<12} {med_n:>18.0f} {med_n / args.fragments:>7.1%} {med_s:>8.3f} "
              f"{min(seconds[side]):>6.3f}-{max(seconds[side]):<7.3f} {full / med_s:>12.1f}x")
    print(f"\nmeasured false-positive rate: {false_positive / max(1, negatives):.3%} "
          f"({false_positive} of {negatives} fragments without the key were fetched)")

    manifest = LogReader(filtered).manifest()
    refs = list(manifest.fragments)
    store = open_store(filtered)
    for pointer in manifest.snapshots:
        from wal3_spark.log.snapshots import load_snapshot

        refs.extend(load_snapshot(store, pointer).fragments)
    with_filter = [r for r in refs if r.filter is not None]
    bits = statistics.median(len(r.filter.bits) for r in with_filter)
    entry_with = statistics.median(len(json.dumps(r.to_dict(), separators=(",", ":"))) for r in with_filter)
    entry_without = statistics.median(
        len(json.dumps({k: v for k, v in r.to_dict().items() if k != "filter"}, separators=(",", ":")))
        for r in with_filter)
    sample_table = tables[0]
    plain_bytes = len(encode_table(sample_table, sample_table.schema, 1_700_000_000_000_000,
                                   item_hash="blake3").data)
    from wal3_spark.format.fragment import FragmentBuilder

    builder = FragmentBuilder(sample_table.schema, 1_700_000_000_000_000, item_hash="blake3",
                              filter_column="tenant")
    builder.add(sample_table)
    bloom_bytes = len(builder.finish().data)
    print(f"\nper fragment: filter {bits:.0f} bytes ({with_filter[0].filter.hashes} hashes); "
          f"manifest entry {entry_without:.0f} -> {entry_with:.0f} bytes; Parquet file "
          f"{plain_bytes} -> {bloom_bytes} bytes with the column's Parquet bloom filter")

    print(f"\na manifest of {args.manifest_fragments:,} fragment entries")
    print(f"{'filters':<28} {'bytes':>14} {'per entry':>10} {'parse s (median)':>17}")
    for label, (size, parse_s) in manifest_sizes(args.manifest_fragments, args.keys_per_fragment,
                                                  args.rounds).items():
        print(f"{label:<28} {size:>14,} {size / args.manifest_fragments:>10.0f} {parse_s:>17.2f}")


if __name__ == "__main__":
    main()
