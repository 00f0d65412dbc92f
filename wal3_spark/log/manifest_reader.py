"""A log's current manifest, in one GET: what every reader and the fragment checks start from."""

from __future__ import annotations

from wal3_spark.errors import CorruptLog, LogNotFound, ObjectNotFound
from wal3_spark.format.incarnation import describe
from wal3_spark.format.layout import MANIFEST_KEY, KnownRefs
from wal3_spark.format.manifest import Manifest
from wal3_spark.storage.base import ObjectStore


def read_manifest(store: ObjectStore, known_refs: KnownRefs | None = None) -> Manifest:
    """The manifest as stored now; LogNotFound when the log has none. `known_refs` reuses the
    fragment pointers a reader parsed before."""
    try:
        return Manifest.from_bytes(store.get(MANIFEST_KEY).data, known=known_refs)
    except ObjectNotFound:
        raise LogNotFound(store.url) from None


def incarnations_agree(first: object, second: object, then: str) -> None:
    """A log is taken for created again only when a second read of its manifest agrees with the
    first: the setsum does not cover the incarnation, so one damaged read must neither restart a
    consumer at the oldest offset (its records delivered twice) nor fail it as if the log were
    gone. Two reads that disagree are a CorruptLog; `then` says what happens next."""
    if second != first:
        raise CorruptLog(
            "a log's incarnation never changes", MANIFEST_KEY,
            f"two reads of it gave incarnations {describe(first)} and {describe(second)}: "
            f"a read was damaged; {then}",
        )
