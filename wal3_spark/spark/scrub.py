"""Distributed scrub: recompute every fragment's setsum on executors and compare with the manifest.

The driver reads the manifest (and the snapshots it points at), checks its invariants, and
sends the fragment list to executors; each executor fetches its fragments, checks the record
count and recomputes the setsum from the bytes. The sum of every fragment's recomputed setsum
plus `collected` must equal the manifest's setsum.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScrubReport:
    url: str
    fragments: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_fragment(store, ref, raw: bool) -> tuple[str | None, str]:
    """(problem or None, recomputed setsum hex) for one fragment."""
    from wal3_spark.errors import ObjectNotFound, Wal3Error
    from wal3_spark.fragment import decode_fragment, recompute_setsum

    try:
        data = store.get(ref.path).data
    except ObjectNotFound:
        return f"missing: {ref.path}: referenced fragment does not exist", ""
    try:
        decoded = decode_fragment(data, path=ref.path, raw=raw)
        actual = recompute_setsum(decoded, raw=raw)
    except Wal3Error as exc:
        return f"corrupt: {ref.path}: {exc}", ""
    if len(decoded.offsets) != ref.records:
        return (f"corrupt: {ref.path}: {len(decoded.offsets)} records, manifest says "
                f"{ref.records}"), actual.hexdigest()
    if actual != ref.setsum:
        return (f"corrupt: {ref.path}: recomputed setsum {actual.hexdigest()} != manifest "
                f"{ref.setsum.hexdigest()}"), actual.hexdigest()
    return None, actual.hexdigest()


def scrub(spark, url: str, options: dict[str, str] | None = None, partitions: int | None = None) -> ScrubReport:
    from wal3_spark.errors import CorruptLog
    from wal3_spark.reader import LogReader, iter_fragments
    from wal3_spark.setsum import Setsum
    from wal3_spark.spark.options import location

    opts = location({"path": url, **(options or {})})
    store = opts.open_store()
    report = ScrubReport(url)
    manifest = LogReader(store).manifest()
    try:
        manifest.scrub()
    except CorruptLog as exc:
        report.problems.append(f"invariant: {exc}")
    refs = list(iter_fragments(store, manifest, manifest.oldest_offset))
    report.fragments = len(refs)
    report.records = sum(r.records for r in refs)
    report.bytes = sum(r.num_bytes for r in refs)
    raw = manifest.is_raw
    n = partitions or max(1, min(len(refs), spark.sparkContext.defaultParallelism * 4))

    def run(items):
        s = opts.open_store()
        for ref in items:
            problem, digest = check_fragment(s, ref, raw)
            yield problem, digest

    results = spark.sparkContext.parallelize(refs, n).mapPartitions(run).collect() if refs else []
    total = Setsum()
    for problem, digest in results:
        if problem:
            report.problems.append(problem)
        if digest:
            total = total + Setsum.from_hexdigest(digest)
    if not any(p.startswith(("missing", "corrupt")) for p in report.problems):
        if total + manifest.collected != manifest.setsum:
            report.problems.append(
                f"invariant: sum of recomputed fragment setsums + collected "
                f"{(total + manifest.collected).hexdigest()} != manifest setsum "
                f"{manifest.setsum.hexdigest()}"
            )
    return report
