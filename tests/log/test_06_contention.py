"""Eight writer processes append to one log at once, on the local filesystem, SeaweedFS,
fake-gcs-server and Azurite:
every record lands exactly once, offsets are contiguous from 1, verify is clean, and the
compare-and-swap really was contended."""

from __future__ import annotations

import pytest

from tests.support.workload import assert_exactly_once, expected_bodies, run_processes
from wal3_spark.storage import open_store

pytestmark = pytest.mark.slow

WRITERS = 8
COMMITS = 25  # 200 commits, a third of them multi-fragment
#: the emulators serve every request from one process on the machine's two cores, as the eight
#: writers run: fewer commits each (64) still contend on every one
EMULATED_COMMITS = 8


def test_00_eight_processes_append_concurrently_and_nothing_is_lost_or_duplicated(store_url, store_options):
    url, options = store_url, store_options
    commits = EMULATED_COMMITS if url.startswith(("gs://", "az://")) else COMMITS
    stats, _ = run_processes(url, options, WRITERS, commits, thresholds=(4, 16))
    assert sum(s.commits for s in stats) == WRITERS * commits
    assert sum(s.conflicts for s in stats) > 0, "no CAS conflict was observed: the test proved nothing"
    ranges = sorted(r for s in stats for r in s.ranges)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and ranges[0][0] == 1
    store = open_store(url, options)
    assert_exactly_once(store, expected_bodies(WRITERS, commits))


FAULTS = {
    "drop": 0.05,
    "delay": 0.05,
    "error_5xx": 0.05,
    "timeout_after_write": 0.08,
    "precondition_storm": 0.1,
}


def test_01_faults_drops_5xx_timeouts_after_landing_and_412_storms_lose_nothing(local_url):
    """The same workload through a fault-injecting store: ambiguous writes that landed and
    spurious conflicts must neither lose nor duplicate a record."""
    stats, injected = run_processes(local_url, None, WRITERS, COMMITS, thresholds=(4, 16), faults=FAULTS)
    assert sum(s.commits for s in stats) == WRITERS * COMMITS
    for kind in FAULTS:
        assert injected[kind] > 0, f"no {kind} fault was injected: {dict(injected)}"
    assert_exactly_once(open_store(local_url), expected_bodies(WRITERS, COMMITS))
