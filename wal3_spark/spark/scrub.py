"""Distributed scrub: `verify` with every fragment's setsum recomputed on Spark executors.

The driver reads the manifest and the snapshots it points at and checks every invariant, as
`wal3_spark.verify.verify` does; only the per-fragment work (fetch, decode, recompute the setsum,
compare with the manifest) is spread over the cluster.
"""

from __future__ import annotations

from wal3_spark.verify import VerifyReport, check_fragment, verify


def scrub(spark, url: str, options: dict[str, str] | None = None, partitions: int | None = None) -> VerifyReport:
    from wal3_spark.spark.options import location

    opts = location({"path": url, **(options or {})})

    def on_executors(store, refs, raw, item_hash):
        if not refs:
            return []
        n = partitions or max(1, min(len(refs), spark.sparkContext.defaultParallelism * 4))

        def run(items):
            executor_store = opts.open_store()
            return [check_fragment(executor_store, ref, raw, item_hash) for ref in items]

        return spark.sparkContext.parallelize(refs, n).mapPartitions(run).collect()

    return verify(opts.open_store(), checker=on_executors)
