"""UUIDv7: the fragment paths' names carry their write time to the microsecond (docs/format.md section 3), are
ordered by it and random within it; foreign UUIDs have no time."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wal3_spark.format.uuid7 import new_uuid7, uuid7_timestamp_us

TS = 1_700_000_000_123_456


@given(st.integers(min_value=0, max_value=(1 << 48) * 1000 - 1))
def test_00_uuid7_carries_the_exact_timestamp(timestamp_us):
    u = new_uuid7(timestamp_us)
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert uuid7_timestamp_us(u) == timestamp_us
    assert uuid7_timestamp_us(str(u)) == timestamp_us


def test_01_uuid7_ordering_randomness_and_non_v7():
    assert new_uuid7(TS) != new_uuid7(TS)
    assert new_uuid7(TS) < new_uuid7(TS + 1000)
    assert uuid7_timestamp_us(uuid.uuid4()) is None
    assert uuid7_timestamp_us("not a uuid") is None
    foreign = uuid.UUID(int=(1234 << 80) | (0x7 << 76) | (0xFFF << 64) | (0b10 << 62))
    assert uuid7_timestamp_us(foreign) == 1234 * 1000
    with pytest.raises(ValueError):
        new_uuid7(-1)
