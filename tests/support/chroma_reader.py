"""What Chroma's wal3 computes from a raw log, following its code path step by step, for the
interop tests (chroma-core/chroma `rust/wal3` as of its commit of 2026-08-22). Nothing of
wal3-spark's reader is used: the manifest is taken as Chroma's serde structs take it and each
fragment as its `checksum_parquet` reads it, so a test learns what a Chroma process would see.

- `Manifest` (`rust/wal3/src/manifest.rs`) and `Fragment` (`rust/wal3/src/lib.rs`) derive serde's
  `Deserialize` without `deny_unknown_fields`: a pointer's extensions (`blake3`, `filter`,
  `segments`) are ignored; `seq_no` is an untagged `FragmentIdentifier` (integer or UUID).
- `checksum_parquet` (`rust/wal3/src/interfaces/mod.rs`) is what both `parse_parquet` (reads
  that compute the setsum: `LogReader::read_parquet`, `copy`) and `parse_parquet_fast` (the log
  service's cached read, `read_fragment_record_bytes` in `rust/log-service/src/lib.rs`) call. It
  takes the `offset` column (absolute) or `relative_offset` (plus the pointer's `start`), needs
  `timestamp_us` uint64 and `body` binary, and fails with `CorruptFragment("inconsistent
  epoch_micros ...")` on the first row whose `timestamp_us` differs from the rows before it,
  whether it computes the setsum or not. The setsum's item per row is
  `u64_be(offset as stored) || u64_be(timestamp_us) || body`.
- `LogReader::scrub` (`rust/wal3/src/reader.rs`) reads every pointer's fragment with
  `read_fragment` (`read_fragment_uuid_with_bytes` in `interfaces/repl/fragment_manager.rs` for
  UUID paths: `parse_parquet`, start and limit from the rows' offsets) and compares path, seq_no,
  num_bytes, start, limit and setsum with the pointer, in that order, then the sum of the
  pointers' setsums with the manifest's.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.setsum import Setsum
from wal3_spark.storage.base import ObjectStore


class ChromaError(Exception):
    """An error Chroma's wal3 returns: `variant` names its `Error` (or `ScrubError`) variant."""

    def __init__(self, variant: str, detail: str) -> None:
        super().__init__(f"{variant}: {detail}")
        self.variant = variant


@dataclass(frozen=True)
class ChromaFragment:
    """A fragment pointer as Chroma's `Fragment` deserialises it (the six fields it has)."""

    path: str
    seq_no: int | str
    start: int
    limit: int
    num_bytes: int
    setsum: str


def fragments(store: ObjectStore) -> tuple[str, list[ChromaFragment]]:
    """The manifest's setsum and fragment pointers, as serde reads them (unknown fields ignored).
    A log with snapshots is not modelled here (the interop tests' logs have none)."""
    doc = json.loads(store.get(MANIFEST_KEY).data)
    if doc["snapshots"]:
        raise NotImplementedError("snapshots are not followed by this test reader")
    return doc["setsum"], [
        ChromaFragment(f["path"], f["seq_no"], f["start"]["offset"], f["limit"]["offset"],
                       f["num_bytes"], f["setsum"])
        for f in doc["fragments"]
    ]


def checksum_parquet(data: bytes, start: int | None, compute_setsum: bool) -> tuple[Setsum, list[tuple[int, bytes]]]:
    """Chroma's `checksum_parquet`: the setsum (when asked) and the records at their absolute
    offsets; `start` is the pointer's start for relative offsets, None for absolute ones."""
    digests: list[bytes] = []
    records: list[tuple[int, bytes]] = []
    singleton: int | None = None
    for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches():
        names = batch.schema.names
        if "offset" in names:
            if start is not None:
                raise ChromaError("Internal", "absolute offsets with a starting position")
            offsets, base = batch.column("offset"), 0
        elif "relative_offset" in names:
            if start is None:
                raise ChromaError("Internal", "relative offsets without a starting position")
            offsets, base = batch.column("relative_offset"), start
        else:
            raise ChromaError("CorruptFragment", "missing offset or relative_offset column")
        for name, kind in (("timestamp_us", pa.uint64()), ("body", pa.binary())):
            if name not in names:
                raise ChromaError("CorruptFragment", f"missing {name} column")
            if batch.column(name).type != kind:
                raise ChromaError("CorruptFragment", f"{name} column is not {kind}")
        if offsets.type != pa.uint64():
            raise ChromaError("CorruptFragment", "offset column is not UInt64Array")
        for raw, ts, body in zip(offsets.to_pylist(), batch.column("timestamp_us").to_pylist(),
                                 batch.column("body").to_pylist()):
            if singleton is not None and singleton != ts:
                raise ChromaError("CorruptFragment",
                                  f"inconsistent epoch_micros: expected {singleton} but found {ts}")
            singleton = ts
            if compute_setsum:
                digests.append(hashlib.sha3_256(struct.pack(">QQ", raw, ts) + body).digest())
            records.append((raw + base, body))
    return Setsum.from_digests(digests), records


def _start_for(ref: ChromaFragment) -> int | None:
    """UUID fragments (the replicated backend's, and wal3-spark's) hold relative offsets; the S3
    backend's sequence-numbered ones absolute offsets."""
    return ref.start if isinstance(ref.seq_no, str) else None


def read(store: ObjectStore) -> list[tuple[int, bytes]]:
    """Every record, as the log service reads them: the manifest's fragments in order, each
    through `parse_parquet_fast` (no setsum)."""
    out: list[tuple[int, bytes]] = []
    for ref in fragments(store)[1]:
        out.extend(checksum_parquet(store.get(ref.path).data, _start_for(ref), False)[1])
    return out


def scrub(store: ObjectStore) -> list[str]:
    """`LogReader::scrub`: the errors it returns, by variant ([] when the log scrubs clean)."""
    setsum, refs = fragments(store)
    errors: list[str] = []
    total = Setsum()
    for ref in refs:
        data = store.get(ref.path).data
        try:
            computed, records = checksum_parquet(data, _start_for(ref), True)
        except ChromaError as exc:
            errors.append(exc.variant)
            continue
        start = min(o for o, _ in records)
        limit = max(o for o, _ in records) + 1
        for variant, ours, theirs in (("MismatchedNumBytes", ref.num_bytes, len(data)),
                                      ("MismatchedStart", ref.start, start),
                                      ("MismatchedLimit", ref.limit, limit),
                                      ("MismatchedFragmentSetsum", ref.setsum, computed.hexdigest())):
            if ours != theirs:
                errors.append(variant)
                break
        else:
            total += computed
    if total.hexdigest() != setsum:
        errors.insert(0, "OverallMismatch")
    return errors
