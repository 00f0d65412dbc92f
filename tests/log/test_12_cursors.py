"""Cursors on the in-memory store: a consumer's position moves forward by compare-and-swap, never
backwards, and names are checked (validation of bad cursor objects: log/test_13_cursor_validation; lag: log/test_14_cursor_lag)."""

from __future__ import annotations

import pytest

from wal3_spark.clock import ManualClock
from wal3_spark.errors import CursorError
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter


def test_00_cursors_move_forward_by_cas(store):
    LogWriter(store).append([b"r"] * 10)  # offsets [1, 11): cursors stay within them
    cursors = CursorStore(store)
    cursors.advance("billing", 5)
    cursors.advance("billing", 3)  # never backwards
    assert cursors.get("billing").cursor.offset == 5
    with pytest.raises(CursorError, match="refusing"):
        cursors.move("billing", 2)
    stale = cursors.get("billing")
    cursors.move("billing", 9)
    with pytest.raises(CursorError, match="moved by someone else"):
        cursors.move("billing", 10, expected=stale)
    cursors.create("audit", 1)
    assert sorted(s.name for s in cursors.list()) == ["audit", "billing"]
    assert cursors.lowest() == 1
    cursors.delete("audit")
    assert [s.name for s in cursors.list()] == ["billing"]
    with pytest.raises(CursorError, match="invalid cursor name"):
        cursors.get("../escape")


def test_01_moves_are_stamped_by_the_injected_clock(store):
    LogWriter(store).append([b"r"] * 3)
    cursors = CursorStore(store, clock=ManualClock(now=1_700_000_000.25))
    assert cursors.create("c", 1).cursor.epoch_us == 1_700_000_000_250_000
    later = CursorStore(store, clock=ManualClock(now=1_700_000_060.0))
    assert later.advance("c", 2).cursor.epoch_us == 1_700_000_060_000_000
