"""Stores for testing code that runs on wal3-spark: they fail, land writes late or answer slowly,
as a real object store can, on purpose. `wal3 stress`, the test suite and the benchmarks use them.

Not part of the library's API (`wal3_spark`, `wal3_spark.storage` export none of them): nothing
in production should wrap its store in one.
- `FaultyStore`: random drops, 5xx, timeouts after the write, spurious 412s and delays;
- `LateLandingStore`: chosen conditional writes time out and land later, still conditioned;
- `LatencyStore`: every request waits a given time, a share of them much longer.

And the real servers they run against on loopback: SeaweedFS for S3 (`seaweedfs`), fake-gcs-server
and Azurite (`emulators`).
"""

from __future__ import annotations

from wal3_spark.testing.faults import FAULT_KINDS, LATE_KINDS, FaultyStore, InjectingStore, LateLandingStore
from wal3_spark.testing.latency import LatencyStore

__all__ = [
    "FAULT_KINDS",
    "LATE_KINDS",
    "FaultyStore",
    "InjectingStore",
    "LateLandingStore",
    "LatencyStore",
]
