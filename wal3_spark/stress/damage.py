"""The fault "damage a manifest digit": now and then a reader's GET of the manifest returns it
with one ASCII digit changed (bit rot, a bad hand edit, a buggy tool), as the log's other
processes never see it.

A reader must refuse such a manifest (`CorruptLog`, from the checks every reader applies) or
read exactly what the undamaged one holds: never a shorter log. `ManifestDamage` serves the
damage and remembers the undamaged bytes; the stress reader judges each cycle that planned on
a damaged manifest (`judge`):

- refused: the cycle failed with CorruptLog;
- harmless: it completed, and the damage changed nothing a read acts on (a size, a time, the
  writer's name), or it read exactly what the undamaged manifest would have let it read;
- shortened: it completed on a manifest that differed where reads look and delivered fewer
  records than the undamaged one holds: a violation (the run fails).

Only readers get this store: a writer that rewrote a damaged manifest would publish the damage
for everyone, which is a different fault (storage corruption, which `wal3 verify` reports).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from wal3_spark.errors import CorruptLog
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest
from wal3_spark.storage.base import Blob, ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore

#: the summary's counters, by outcome (`damage_manifest` counts the damaged GETs)
OUTCOMES = ("damage_refused", "damage_harmless", "damage_shortened")


@dataclass(frozen=True)
class Damage:
    original: bytes
    damaged: bytes


class ManifestDamage(ForwardingStore):
    """`inner`, except that a GET of the manifest is damaged with `probability`: one of its
    digits is replaced by another."""

    def __init__(self, inner: ObjectStore, probability: float, seed: int) -> None:
        super().__init__(inner)
        self.probability = probability
        self.rng = random.Random(seed)
        self.count = 0
        self._served: list[Damage] = []
        self._lock = threading.Lock()

    def get(self, key: str) -> Blob:
        blob = self.inner.get(key)
        if key != MANIFEST_KEY or not self.probability:
            return blob
        with self._lock:
            if self.rng.random() >= self.probability:
                return blob
            digits = [i for i, c in enumerate(blob.data) if 48 <= c <= 57]
            if not digits:
                return blob
            at = self.rng.choice(digits)
            digit = (blob.data[at] - 48 + self.rng.randrange(1, 10)) % 10 + 48
            damaged = blob.data[:at] + bytes([digit]) + blob.data[at + 1 :]
            self.count += 1
            self._served.append(Damage(blob.data, damaged))
        return Blob(damaged, blob.etag)

    def take(self) -> list[Damage]:
        """The damaged manifests served since the last call."""
        with self._lock:
            served, self._served = self._served, []
        return served


def judge(hit: Damage, start: int, end: int, wanted: int, cut_short: bool) -> str:
    """The outcome of a cycle that completed without error after planning on the damaged
    manifest of `hit`, having read offsets [start, end) of at most `wanted` records
    (`cut_short`: it stopped early on its own deadline)."""
    original = Manifest.from_bytes(hit.original)
    try:
        seen = Manifest.from_bytes(hit.damaged)
    except CorruptLog:  # the parse refuses it, yet the cycle completed: it did not plan on it
        return "damage_refused"
    if _what_reads_act_on(seen) == _what_reads_act_on(original):
        return "damage_harmless"
    if end >= min(original.next_offset, start + wanted) or cut_short:
        return "damage_harmless"
    return "damage_shortened"


def _what_reads_act_on(manifest: Manifest) -> tuple:
    return (
        manifest.oldest_offset, manifest.next_offset, manifest.schema, manifest.item_hash,
        tuple((f.path, f.seq_no, f.start, f.limit, f.setsum) for f in manifest.fragments),
        tuple((s.path_to_snapshot, s.start, s.limit, s.depth, s.setsum) for s in manifest.snapshots),
    )
