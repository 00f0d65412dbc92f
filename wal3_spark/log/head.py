"""A log's current manifest, in one GET: what every reader and the fragment checks start from."""

from __future__ import annotations

from wal3_spark.errors import LogNotFound, ObjectNotFound
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
