"""The rules an append must satisfy (`wal3_spark.log.invariants`), one at a time: each predicate
refuses what its rule forbids and lets through what it allows, and the committer applies it."""

from __future__ import annotations

import json
from dataclasses import replace
from uuid import uuid4

import pyarrow as pa
import pytest

from tests.support.fakes import FakeFragment, write_chroma_s3_log
from wal3_spark import errors
from wal3_spark.format.garbage import Garbage
from wal3_spark.format.layout import BLAKE3, GARBAGE_KEY, MANIFEST_KEY, fragment_path
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7
from wal3_spark.log import invariants
from wal3_spark.log.committer import Committer
from wal3_spark.log.replaced import REPLACED_PREFIX

T0 = 1_800_000_000_000_000  # µs since the epoch: the fragments' write times count from here
SCHEMA = pa.schema([("id", pa.int64())])


def fragment(written_us: int, *, item_hash: str | None = None, uuid: str | None = None) -> FakeFragment:
    """A fragment written at `written_us` (its UUIDv7 time), or named by another `uuid` (its age unknown)."""
    uuid = uuid or str(new_uuid7(written_us))
    return FakeFragment(fragment_path(uuid), uuid, 1, 10, Setsum.of(uuid.encode()), item_hash)


def raw_log(*fragments: FakeFragment) -> Manifest:
    return Manifest.empty("test").with_fragments(list(fragments) or [fragment(T0)], "test")


def test_00_a_sealed_log_takes_no_appends(store):
    invariants.check_not_sealed(raw_log(), "L")
    with pytest.raises(errors.LogSealed):
        invariants.check_not_sealed(raw_log().sealed_by("test"), "L")
    Committer(store).create()
    Committer(store).seal()
    with pytest.raises(errors.LogSealed):
        Committer(store).commit([fragment(T0)])


def test_01_a_sequence_numbered_log_takes_no_appends(store):
    write_chroma_s3_log(store)
    chroma = Manifest.from_bytes(store.get(MANIFEST_KEY).data)
    with pytest.raises(errors.AppendsUnsupported):
        invariants.check_appends_supported(chroma, "L")
    invariants.check_appends_supported(raw_log(), "L")
    with pytest.raises(errors.AppendsUnsupported):
        Committer(store).commit([fragment(T0)])


def test_02_fragments_written_before_the_orphan_horizon_are_refused(store):
    horizon = T0 + 1000
    manifest = raw_log().with_orphan_horizon(horizon, "gc")
    invariants.check_orphan_horizon(manifest, [fragment(horizon), fragment(horizon + 1)], "L")
    invariants.check_orphan_horizon(raw_log(), [fragment(0)], "L")  # no horizon: no refusal
    with pytest.raises(errors.PastOrphanHorizon, match="1 of this commit's fragments"):
        invariants.check_orphan_horizon(manifest, [fragment(horizon), fragment(horizon - 1)], "L")
    with pytest.raises(errors.PastOrphanHorizon):  # a fragment of unknown age is older than any horizon
        invariants.check_orphan_horizon(manifest, [fragment(0, uuid=str(uuid4()))], "L")
    # compactions of the log replaced fragments written up to horizon - 1: an earlier commit of
    # this one may have been replaced and swept, so the refusal does not say "rerun"
    with pytest.raises(errors.PastOrphanHorizon, match="already committed: do not rerun") as compacted:
        invariants.check_orphan_horizon(replace(manifest, compacted_written_us=horizon - 1),
                                        [fragment(horizon - 1)], "L")
    assert "wal3 cat" in str(compacted.value)
    with pytest.raises(errors.PastOrphanHorizon) as first:  # compactions older than the fragment
        invariants.check_orphan_horizon(replace(manifest, compacted_written_us=horizon - 2),
                                        [fragment(horizon - 1)], "L")
    assert "Nothing was committed; rerun the append" in str(first.value)
    assert "already committed" not in str(first.value)
    Committer(store).create()
    Committer(store).update(lambda m: m.with_orphan_horizon(horizon, "gc"))
    with pytest.raises(errors.PastOrphanHorizon):
        Committer(store).commit([fragment(horizon - 1)])
    assert Committer(store).commit([fragment(horizon)]).limit == 2


def test_03_the_target_schema_keeps_every_fragment_readable_as_the_log(store):
    structured = Manifest.empty("test", SCHEMA)
    assert invariants.target_schema(raw_log(), None, False, "L") is None
    with pytest.raises(errors.SchemaMismatch, match="raw `body` records cannot be appended"):
        invariants.target_schema(structured, None, False, "L")
    # an empty raw log created without a schema takes the first structured append's
    assert invariants.target_schema(Manifest.empty("test"), SCHEMA, False, "L") == SCHEMA
    with pytest.raises(errors.SchemaMismatch):  # a raw log holding records stays raw
        invariants.target_schema(raw_log(), SCHEMA, False, "L")
    wider = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(errors.SchemaMismatch):  # new columns only with merge
        invariants.target_schema(structured, wider, False, "L")
    assert invariants.target_schema(structured, wider, True, "L") == wider
    Committer(store).create(SCHEMA)
    with pytest.raises(errors.SchemaMismatch):
        Committer(store).commit([fragment(T0)], schema=None)


def test_04_fragments_hashed_otherwise_than_the_log_are_refused(store):
    invariants.check_item_hash([fragment(T0, item_hash=BLAKE3)], BLAKE3, "L")
    invariants.check_item_hash([fragment(T0)], None, "L")
    with pytest.raises(errors.CommitFailed, match="item_hash 'blake3'"):
        invariants.check_item_hash([fragment(T0, item_hash=BLAKE3), fragment(T0)], BLAKE3, "L")
    with pytest.raises(errors.CommitFailed):
        invariants.check_item_hash([fragment(T0, item_hash=BLAKE3)], None, "L")
    Committer(store).create(SCHEMA)
    with pytest.raises(errors.CommitFailed):
        Committer(store).commit([fragment(T0, item_hash=None)], schema=SCHEMA)


def collected_log(store, bound_us: int, *, horizon_us: int | None = None) -> Manifest:
    """A log whose garbage collection collected fragments written up to `bound_us`."""
    Committer(store).create()
    manifest = Committer(store).update(
        lambda m: replace(m, collected=Setsum.of(b"gone"), setsum=m.setsum + Setsum.of(b"gone"),
                          collected_written_us=bound_us,
                          orphan_horizon_us=horizon_us)
    )
    assert manifest is not None
    return manifest


def test_05_fragments_collected_since_their_commit_are_refused(store):
    bound = T0 + 1000
    manifest = collected_log(store, bound, horizon_us=T0)
    listed, gone, kept, young = fragment(bound - 2), fragment(bound - 1), fragment(bound), fragment(bound + 1)
    store.create(kept.path, b"fragment")
    # written after the newest collected fragment: cannot have been collected (no request made)
    assert invariants.may_be_collected(manifest, [young, kept]) == [kept]
    invariants.check_not_collected(store, manifest, [young, kept])
    # listed by the pending garbage: collected, not yet deleted
    store.create(GARBAGE_KEY, Garbage(fragment_paths_to_drop=(listed.path,)).to_bytes())
    store.create(listed.path, b"fragment")
    with pytest.raises(errors.AlreadyCollected) as pending:
        invariants.check_not_collected(store, manifest, [listed, kept])
    assert pending.value.pending
    # gone, younger than the orphan horizon: deleted by garbage collection's delete step
    with pytest.raises(errors.AlreadyCollected) as deleted:
        invariants.check_not_collected(store, manifest, [gone])
    assert not deleted.value.pending
    with pytest.raises(errors.AlreadyCollected):
        Committer(store).commit([gone])
    # gone and older than the orphan horizon: it may have been swept as an orphan instead
    swept = fragment(T0 - 1)
    with pytest.raises(errors.PastOrphanHorizon, match="deleted them, as orphans"):
        invariants.check_not_collected(store, manifest, [swept])
    # ... or, on a log whose compactions reach past its write time, replaced and then swept
    compacted = replace(manifest, compacted_written_us=T0)
    with pytest.raises(errors.PastOrphanHorizon, match=r"already committed: do not rerun.*cursor may also"):
        invariants.check_not_collected(store, compacted, [swept])
    # a compaction record still listing it proves the earlier commit
    store.create(f"{REPLACED_PREFIX}{new_uuid7(T0)}.json",
                 json.dumps({"fragment": "fragment/x.parquet", "replaced": [swept.path]}).encode())
    with pytest.raises(errors.PastOrphanHorizon, match=r"were already committed .* a compaction record"):
        invariants.check_not_collected(store, compacted, [swept])


def test_06_a_log_collected_before_the_bound_was_recorded_checks_every_fragment(store):
    collected_log(store, T0)
    manifest = replace(Manifest.from_bytes(store.get(MANIFEST_KEY).data), collected_written_us=None)
    young = fragment(T0 + 10**9)
    assert invariants.may_be_collected(manifest, [young]) == [young]
    assert invariants.may_be_collected(raw_log(), [young]) == []  # never collected
    with pytest.raises(errors.AlreadyCollected):
        invariants.check_not_collected(store, manifest, [young])
