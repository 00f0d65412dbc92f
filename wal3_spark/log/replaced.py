"""Compaction records: which fragments a compaction replaced, and where they sat in the log.

docs/format.md section 4, "Compacted fragments". Before its compare-and-swap a compaction writes
`compacted/<new fragment's UUID>.json`. Two readers need it:

- garbage collection's orphan sweep keeps the fragments a record lists (and the snapshots it
  lifted, `snapshots`) for the orphan grace after the compaction (readers that planned on the
  older manifest finish), not by their age;
- a writer resolving a commit (an ambiguous manifest write, a retried commit of the same
  fragments, a pipelined write answered with a refusal) looks for its fragments by their paths:
  a fragment a compaction replaced is not in the manifest any more, but a record listing it is
  proof that it was committed, at the offsets the record gives, in the incarnation it names (the
  compaction planned on a manifest that held it). Without this a compaction running inside a
  writer's commit deadline would make it append the fragments a second time.

The manifest's `compacted_written_us` bounds which commits look: a compaction only replaces
committed fragments and raises the bound, in the same compare-and-swap, to the newest write time
(UUIDv7) of the fragments it replaces; a commit whose fragments were all written after the bound
of the manifest it decides on cannot be a re-commit of compacted ones, and makes no request. The
common commit, of fragments written after the last compacted one, is that.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from wal3_spark.errors import CorruptLog, ObjectNotFound
from wal3_spark.format.deletion import is_log_object
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest, NewFragment
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: where a compaction records the fragments it replaced
REPLACED_PREFIX = "compacted/"
#: records are looked for from this long before the oldest fragment looked for was written: a
#: record's key is the compactor's clock, the fragment's path its writer's
CLOCK_MARGIN_S = 3600.0


def record_replaced(store: ObjectStore, new: FragmentRef, run: Sequence[FragmentRef],
                    incarnation: str | None, snapshots: Sequence[str] = ()) -> None:
    """Write the record of a compaction of `run` into `new` (before its compare-and-swap);
    `snapshots`: the snapshots the compaction lifts (their pointers replaced by their
    fragments), which readers of the older manifest read too."""
    doc: dict = {
        "fragment": new.path,
        "replaced": [f.path for f in run],
        "offsets": [[f.start, f.limit] for f in run],
        "incarnation": incarnation,
    }
    if snapshots:
        doc["snapshots"] = list(snapshots)
    body = json.dumps(doc).encode()
    store.create(f"{REPLACED_PREFIX}{new.seq_no}.json", body)


def _written_us(path_uuid: str) -> int:
    return uuid7_timestamp_us(path_uuid) or 0


def may_be_compacted(manifest: Manifest, fragments: Sequence[NewFragment]) -> list[NewFragment]:
    """The fragments a compaction may have replaced after an earlier commit of them: those
    written (UUIDv7 time; 0 when unknown) at or before `Manifest.compacted_written_us`."""
    bound = manifest.compacted_written_us
    if bound is None:
        return []
    return [f for f in fragments if _written_us(f.uuid) <= bound]


def replaced_positions(store: ObjectStore, manifest: Manifest,
                       fragments: Sequence[NewFragment]) -> dict[str, tuple[int, int]]:
    """Where an earlier commit placed those of `fragments` that a compaction since replaced,
    `{path: (start, limit)}`, from the compaction records of `manifest`'s incarnation. No
    request unless `may_be_compacted` names some. Records are never deleted while their
    fragments may be looked for: garbage collection deletes one only after it raised the orphan
    horizon past every fragment it lists, and a commit refuses fragments older than it."""
    suspects = may_be_compacted(manifest, fragments)
    if not suspects:
        return {}
    wanted = {f.path for f in suspects}
    after_us = min(_written_us(f.uuid) for f in suspects) - int(CLOCK_MARGIN_S * 1e6)
    found: dict[str, tuple[int, int]] = {}
    for key, doc in _records(store, after_us):
        offsets = doc.get("offsets")
        if doc.get("incarnation") != manifest.incarnation or not isinstance(offsets, list):
            continue  # another log's under this name, or a record without offsets (older)
        for path, span in zip(doc.get("replaced", []), offsets, strict=False):
            if path in wanted:
                if not (isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)):
                    raise CorruptLog("a compaction record's offsets are [start, limit] pairs", key,
                                     f"{span!r} for {path}")
                found[path] = (span[0], span[1])
    return found


def replaced_paths(store: ObjectStore, paths: set[str]) -> set[str]:
    """Which of `paths` a compaction record lists: fragments that were committed and that
    readers of an older manifest may still read (so an aborting writer must not delete them)."""
    if not paths:
        return set()
    listed: set[str] = set()
    for _, doc in _records(store, 0):
        listed.update(p for p in doc.get("replaced", []) if p in paths)
    return listed


def replaced_held(store: ObjectStore, before_us: int) -> tuple[frozenset[str], list[str]]:
    """For GC's orphan sweep: the fragments compactions replaced less than the orphan grace ago
    (compacted after `before_us`), kept like referenced ones, and the records of older
    compactions, which the sweep deletes after it raised the orphan horizon (their fragments
    are ordinary orphans by then)."""
    held: set[str] = set()
    old: list[str] = []
    for meta in store.list(REPLACED_PREFIX):
        if not is_log_object(meta.key):  # not a record of ours: neither kept nor deleted
            continue
        when = uuid7_timestamp_us(meta.key[len(REPLACED_PREFIX):].removesuffix(".json"))
        if when is not None and when < before_us:
            old.append(meta.key)
            continue
        doc = _load(store, meta.key)
        if doc is not None:
            held.update(p for p in [*doc.get("replaced", []), *doc.get("snapshots", [])] if isinstance(p, str))
    return frozenset(held), old


def _records(store: ObjectStore, after_us: int) -> list[tuple[str, dict]]:
    """The compaction records made at or after `after_us` (by their key's UUIDv7), parsed."""
    out: list[tuple[str, dict]] = []
    for meta in store.list(REPLACED_PREFIX):
        if not is_log_object(meta.key):
            continue
        when = uuid7_timestamp_us(meta.key[len(REPLACED_PREFIX):].removesuffix(".json"))
        if when is not None and when < after_us:
            continue
        doc = _load(store, meta.key)
        if doc is not None:
            out.append((meta.key, doc))
    return out


def _load(store: ObjectStore, key: str) -> dict | None:
    try:
        doc = json.loads(store.get(key).data)
    except ObjectNotFound:  # deleted meanwhile by a sweep: its grace is over
        return None
    except ValueError as exc:
        raise CorruptLog("a compaction record is JSON", key, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise CorruptLog("a compaction record is a JSON object", key, f"not one: {type(doc).__name__}")
    return doc
