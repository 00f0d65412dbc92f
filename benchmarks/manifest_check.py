"""What checking a manifest costs every read: `Manifest.from_bytes` with and without its checks
(`scrub`: values, ranges, order, uniqueness, the setsum balance), alternating, medians.

    ./dev python benchmarks/manifest_check.py [--rounds 21] [--fragments 100000]
    ./dev python benchmarks/manifest_check.py --save DIR      # write both manifests to DIR
    python benchmarks/manifest_check.py --time DIR/compacted.json   # with PYTHONPATH=CHECKOUT:
        the median parse time of that checkout's `Manifest.from_bytes`, cold and warm, as JSON
        (to compare two checkouts, alternating processes: docs/benchmarks.md gives the loop)

Two manifests: a log of `--fragments` one-record fragments compacted with Chroma's default
thresholds (what a writer leaves: about 2,000 fragments and a few dozen snapshot pointers), and
the same number of fragments in the manifest itself (no snapshots: the worst case a manifest
written by another tool could hold). Each is parsed cold (fresh `KnownRefs`: a new reader, a
Spark batch) and warm (the pointers parsed before: a stream's or a committer's re-read).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fakes import FakeFragment  # noqa: E402
from wal3_spark.format.layout import KnownRefs  # noqa: E402
from wal3_spark.format.manifest import Manifest, SnapshotOptions  # noqa: E402
from wal3_spark.format.setsum import Setsum  # noqa: E402
from wal3_spark.log.snapshots import roll_snapshots  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402


def fragments(n: int) -> list[FakeFragment]:
    out = []
    for i in range(n):
        u = f"01900000-0000-7000-8000-{i:012x}"
        out.append(FakeFragment(f"log/Uuid={u}.parquet", u, 1, 4096, Setsum.of(u.encode())))
    return out


def compacted(url: str, frags: list[FakeFragment]) -> bytes:
    store, options, manifest = open_store(url), SnapshotOptions(), Manifest.empty("bench")
    for frag in frags:
        manifest = roll_snapshots(store, manifest.with_fragments([frag], "bench"), options, "bench")
    return manifest.to_bytes()


def flat(frags: list[FakeFragment]) -> bytes:
    return Manifest.empty("bench").with_fragments(frags, "bench").to_bytes()


def alternate(sides: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Each round runs both sides, their order swapped every round (ABBA)."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(rounds):
        for name in names if i % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def report(label: str, data: bytes, rounds: int) -> None:
    manifest = Manifest.from_bytes(data)
    shape = f"{len(manifest.fragments):,} fragments + {len(manifest.snapshots)} snapshot pointers"
    for warmth in ("cold", "warm"):
        warm = KnownRefs()
        Manifest.from_bytes(data, known=warm)

        def parse(check: bool, warm: KnownRefs = warm, cold: bool = warmth == "cold") -> object:
            return Manifest.from_bytes(data, known=KnownRefs() if cold else warm, check=check)

        times = alternate({"unchecked": lambda: parse(False), "checked": lambda: parse(True)}, rounds)
        before, after = (statistics.median(times[k]) * 1000 for k in ("unchecked", "checked"))
        spread = {k: f"{min(v) * 1000:.2f}-{max(v) * 1000:.2f}" for k, v in times.items()}
        print(f"{label:<10} {warmth}  ({shape}, {len(data) / 1000:,.0f} KB): parse "
              f"{before:.2f} ms (spread {spread['unchecked']}), parse + check {after:.2f} ms "
              f"(spread {spread['checked']}): +{after - before:.2f} ms, ratio {after / before:.2f}",
              flush=True)


def time_checkout(path: Path, rounds: int) -> None:
    """Median cold and warm parse of the manifest at `path` by whatever `wal3_spark` imports
    (the checkout on PYTHONPATH): what a reader's manifest read costs there."""
    data = path.read_bytes()
    warm = KnownRefs()
    Manifest.from_bytes(data, known=warm)
    out = {}
    for name, known in (("cold", None), ("warm", warm)):
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            Manifest.from_bytes(data, known=known if known is not None else KnownRefs())
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1000
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fragments", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--save", type=Path, help="write compacted.json and flat.json there")
    parser.add_argument("--time", type=Path, help="time this checkout's parse of a saved manifest")
    args = parser.parse_args()
    if args.time is not None:
        time_checkout(args.time, args.rounds)
        return
    frags = fragments(args.fragments)
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            (args.save / "compacted.json").write_bytes(compacted(f"file://{tmp}/long", frags))
        (args.save / "flat.json").write_bytes(flat(frags))
        return
    with tempfile.TemporaryDirectory() as tmp:
        report("compacted", compacted(f"file://{tmp}/long", frags), args.rounds)
    report("flat", flat(frags), max(5, args.rounds // 4))


if __name__ == "__main__":
    main()
