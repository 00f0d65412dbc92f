"""Cursor lag, watched as Kafka users watch consumer lag: records and bytes behind the tail and
how long ago each cursor moved, in `wal3 info` and `wal3 cursor list` (text and `--json`).
Bytes behind come from fragment and snapshot-pointer sizes, loading only the snapshots that
straddle the cursor."""

from __future__ import annotations

import itertools
import json
import re

import pyarrow as pa
import pytest

from tests.support.fakes import HookedStore, snapshotted_log
from tests.cli.test_00_cli import ok
from wal3_spark.clock import micros
from wal3_spark.format.layout import SNAPSHOT_PREFIX, Cursor, cursor_key, dumps
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.cursor_lag import bytes_from, cursor_lags
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.storage import open_store

_names = itertools.count()
HOUR_US = 3600 * 1_000_000


@pytest.fixture(scope="module")
def deep_log():
    """600 one-record commits compacted with thresholds (3, 4): a snapshot tree of depth 4+."""
    return snapshotted_log(f"memory://lag-{next(_names)}", 600, SnapshotOptions(3, 4))


def snapshot_gets(store: HookedStore) -> int:
    return sum(n for key, n in store.gets.items() if key.startswith(SNAPSHOT_PREFIX))


def test_00_bytes_behind_sum_every_fragment_holding_an_offset_at_or_after_the_cursor(deep_log):
    manifest = LogReader(deep_log).manifest()
    refs = list(iter_fragments(deep_log, manifest))
    for offset in range(1, manifest.next_offset + 1):
        expected = sum(ref.num_bytes for ref in refs if ref.limit > offset)
        assert bytes_from(deep_log, manifest, offset) == expected, offset


def test_01_a_cursor_far_behind_loads_one_snapshot_per_depth_not_the_tree(deep_log):
    manifest = LogReader(deep_log).manifest()
    depth = max(p.depth for p in manifest.snapshots)
    all_snapshots = len(list(deep_log.list(SNAPSHOT_PREFIX)))
    assert depth >= 4 and all_snapshots > 5 * depth
    # A fresh URL: nothing cached from the other tests.
    store = HookedStore(deep_log, when=lambda key: False, hook=lambda: None)
    store.url = f"{deep_log.url}#fresh-{next(_names)}"
    assert bytes_from(store, manifest, 7) > 0
    assert 1 <= snapshot_gets(store) <= depth, f"{snapshot_gets(store)} snapshots for depth {depth}"


def test_02_lag_counts_records_bytes_and_the_age_of_the_last_move():
    store = open_store(f"memory://lag-{next(_names)}")
    with LogWriter(store) as writer:
        for i in range(5):
            writer.append(pa.table({"id": list(range(i * 10, i * 10 + 10))}))
    refs = LogReader(store).manifest().fragments
    cursors = CursorStore(store)
    cursors.advance("late", 15)
    cursors.advance("done", 51)
    state = {s.name: s for s in cursors.list()}
    at = state["late"].cursor.epoch_us + 90 * 1_000_000
    manifest = LogReader(store).manifest()
    late, done = cursor_lags(store, manifest, [state["late"], state["done"]], at_us=at)[::-1]
    assert (late.name, late.offset, late.records_behind) == ("late", 15, 36)
    assert late.bytes_behind == sum(r.num_bytes for r in refs[1:])   # 15 is inside the 2nd fragment
    assert late.moved_ago_s == 90.0 and late.moved_epoch_us == state["late"].cursor.epoch_us
    assert (done.records_behind, done.bytes_behind) == (0, 0)

    GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()   # collects below the lowest cursor
    manifest = LogReader(store).manifest()
    assert manifest.oldest_offset == 11
    [late] = cursor_lags(store, manifest, [cursors.get("late")], at_us=at)
    assert (late.records_behind, late.bytes_behind) == (36, sum(r.num_bytes for r in refs[1:]))


@pytest.mark.slow
def test_03_info_and_cursor_list_show_lag_as_text_and_json(tmp_path):
    url = str(tmp_path / "log")
    store = open_store(url)
    with LogWriter(store) as writer:
        for i in range(4):
            writer.append(pa.table({"id": list(range(i * 10, i * 10 + 10))}))
    refs = LogReader(store).manifest().fragments
    CursorStore(store).advance("current", 41)
    # A consumer that stopped an hour ago, half-way through the second fragment.
    stalled = Cursor(15, micros() - HOUR_US, "a stalled consumer")
    store.put_if_absent(cursor_key("stalled"), dumps(stalled.to_dict()))
    stalled_bytes = sum(r.num_bytes for r in refs[1:])

    listed = json.loads(ok("cursor", "list", url, "--json"))
    assert (listed["oldest_offset"], listed["next_offset"]) == (1, 41)
    current, old = listed["cursors"]
    assert (current["name"], current["records_behind"], current["bytes_behind"]) == ("current", 0, 0)
    assert (old["name"], old["offset"], old["records_behind"], old["bytes_behind"]) == (
        "stalled", 15, 26, stalled_bytes)
    assert old["moved_epoch_us"] == stalled.epoch_us and 3600 <= old["moved_ago_s"] < 3660

    table = ok("cursor", "list", url).splitlines()
    assert table[0].split() == ["CURSOR", "OFFSET", "RECORDS_BEHIND", "BYTES_BEHIND", "MOVED"]
    assert table[1].split()[:4] == ["current", "41", "0", "0"]
    assert re.fullmatch(rf"stalled +15 +26 +{stalled_bytes} +1h00m ago", table[2]), table[2]

    info = json.loads(ok("info", url, "--json"))
    assert info["cursors"] == {"current": 41, "stalled": 15}
    assert info["lag"]["stalled"]["bytes_behind"] == stalled_bytes
    assert info["lag"]["current"]["records_behind"] == 0
    text = ok("info", url)
    assert re.search(r"\ncursors +current at 41: 0 records, 0 bytes behind; moved [0-9ms]+ ago\n", text), text
    assert re.search(rf"\n +stalled at 15: 26 records, {stalled_bytes} bytes behind; moved 1h00m ago\n", text), text


@pytest.mark.slow
def test_04_no_cursors_list_nothing(tmp_path):
    url = str(tmp_path / "log")
    LogWriter(open_store(url)).append(b"x")
    assert ok("cursor", "list", url) == ""
    assert json.loads(ok("cursor", "list", url, "--json"))["cursors"] == []
    assert "cursors        none\n" in ok("info", url)
