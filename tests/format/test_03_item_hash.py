"""BLAKE3-prehashed setsum items (docs/format.md section 3, `item_hash`): new structured logs record
`"item_hash": "blake3"`, older logs keep their direct SHA3 items forever, raw logs never carry
the field, and every reader, `verify` and `copy` use the item hash the log names."""

from __future__ import annotations

import json
from dataclasses import replace

import blake3
import pyarrow as pa
import pytest

from tests.support.fakes import chroma_testdata, data_file
from tests.format.test_02_fragment import small_table, three_chunks_table
from wal3_spark.errors import CommitFailed, CorruptLog
from wal3_spark.format.chunk_encoding import (
    BLAKE3,
    CHUNK_ROWS,
    encode_column,
    structured_setsum,
)
from wal3_spark.format.fragment import decode_fragment, encode_table, recompute_setsum
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

VECTORS = json.loads(data_file("setsum_vectors.json").read_text())["structured_chunks_blake3"]
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def table(ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def legacy_log(store, schema: pa.Schema = SCHEMA) -> None:
    """A structured log as wal3-spark created it before `item_hash` existed."""
    manifest = replace(Manifest.empty("old wal3-spark", schema), item_hash=None)
    store.put_if_absent(MANIFEST_KEY, manifest.to_bytes())


def manifest_doc(store) -> dict:
    return json.loads(store.get(MANIFEST_KEY).data)


@pytest.fixture
def store(local_url):
    return open_store(local_url)


@pytest.mark.parametrize("name, rows", [("small", small_table), ("three_chunks", three_chunks_table)])
def test_00_blake3_vectors(name, rows):
    vector, data = VECTORS[name], rows()
    encoded = encode_table(data, data.schema, vector["timestamp_us"], item_hash=BLAKE3)
    assert encoded.setsum.hexdigest() == vector["hexdigest"]
    assert encoded.item_hash == BLAKE3
    decoded = decode_fragment(encoded.data, path="p", raw=False)
    assert recompute_setsum(decoded, raw=False, item_hash=BLAKE3).hexdigest() == vector["hexdigest"]
    # the same bytes checked as a log without item_hash: a different setsum, never a match
    assert recompute_setsum(decoded, raw=False) != encoded.setsum


def test_01_a_blake3_item_is_the_digest_of_the_direct_item():
    data = three_chunks_table().slice(0, 10)
    columns = [c.combine_chunks() for c in data.columns]
    direct = structured_setsum(columns, 10, 7)
    prehashed = structured_setsum(columns, 10, 7, item_hash=BLAKE3)
    # one chunk: its direct item is the only one, so rebuild it from the encoder's pieces
    item = (0).to_bytes(8, "big") + (7).to_bytes(8, "big") + b"".join(
        bytes(piece.reshape(-1).view("u1")) for c in columns for piece in encode_column(c).pieces(0, 10)
    )
    assert direct == Setsum.of(item)
    assert prehashed == Setsum.of(blake3.blake3(item).digest())
    with pytest.raises(ValueError, match="unknown setsum item hash"):
        structured_setsum(columns, 10, 7, item_hash="md5")


def test_02_new_structured_logs_record_blake3_raw_logs_never(tmp_path):
    structured = open_store(str(tmp_path / "s"))
    LogWriter(structured).append(table(range(3)))
    assert manifest_doc(structured)["item_hash"] == "blake3"
    assert verify(structured).ok

    raw = open_store(str(tmp_path / "r"))
    LogWriter(raw).append([b"a", b"b"])
    assert "item_hash" not in manifest_doc(raw)

    # a log created empty without a schema becomes a new structured log at its first append
    late = open_store(str(tmp_path / "late"))
    Committer(late).create(None)
    assert "item_hash" not in manifest_doc(late)
    LogWriter(late).append(table(range(2)))
    assert manifest_doc(late)["item_hash"] == "blake3"
    assert verify(late).ok and LogReader(late).read_table().num_rows == 2


def test_03_manifest_field_position_and_parsing():
    manifest = Manifest.empty("w", SCHEMA).sealed_by("w")
    keys = list(json.loads(manifest.to_bytes()))
    # docs/format.md section 4's order: before txns, and the extensions after them
    assert keys[-4:] == ["schema", "sealed", "item_hash", "incarnation"]
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
    # Chroma's manifests (raw logs) still re-serialise byte for byte, without the field
    chroma = chroma_testdata("production_MANIFEST.json").read_bytes()
    assert Manifest.from_bytes(chroma).item_hash is None
    assert Manifest.from_bytes(chroma).to_bytes() == chroma.strip()

    doc = json.loads(manifest.to_bytes())
    with pytest.raises(CorruptLog, match="upgrade"):
        Manifest.from_bytes(json.dumps({**doc, "item_hash": "xxh3"}).encode())
    raw_doc = {k: v for k, v in doc.items() if k != "schema"}
    with pytest.raises(CorruptLog, match="a raw log with an 'item_hash'"):
        Manifest.from_bytes(json.dumps(raw_doc).encode())


def test_04_an_old_log_keeps_sha3_items_after_appends(store):
    legacy_log(store)
    LogWriter(store).append(table(range(5)))
    LogWriter(store, LogWriterOptions(merge_schema=True)).append(
        pa.table({"id": [5], "name": ["x"], "extra": [1.5]})
    )
    manifest = LogReader(store).manifest()
    assert manifest.item_hash is None and "item_hash" not in manifest_doc(store)
    assert len(manifest.arrow_schema()) == 3
    for ref in manifest.fragments:
        decoded = decode_fragment(store.get(ref.path).data, path=ref.path, raw=False)
        assert recompute_setsum(decoded, raw=False) == ref.setsum
        assert recompute_setsum(decoded, raw=False, item_hash=BLAKE3) != ref.setsum
    assert verify(store).ok
    assert LogReader(store).read_table().column("id").to_pylist() == list(range(6))


def test_05_merge_schema_appends_keep_blake3(store):
    LogWriter(store).append(table(range(3)))
    LogWriter(store, LogWriterOptions(merge_schema=True)).append(pa.table({"id": [3], "extra": [True]}))
    manifest = LogReader(store).manifest()
    assert manifest.item_hash == BLAKE3 and manifest.arrow_schema().names == ["id", "name", "extra"]
    assert verify(store).ok
    assert LogReader(store).read_table().column("extra").to_pylist() == [None] * 3 + [True]


@pytest.mark.parametrize("log_hash, fragment_hash", [(BLAKE3, None), (None, BLAKE3)])
def test_06_a_commit_of_fragments_hashed_otherwise_fails_and_changes_nothing(store, log_hash, fragment_hash):
    if log_hash is None:
        legacy_log(store)
    else:
        Committer(store).create(SCHEMA)
    before = store.get(MANIFEST_KEY).data
    files = write_fragments(store, table(range(3)).to_batches(), SCHEMA, fragment_bytes=1 << 20,
                            item_hash=fragment_hash)
    with pytest.raises(CommitFailed, match="item_hash"):
        Committer(store).commit(files, schema=SCHEMA)
    assert store.get(MANIFEST_KEY).data == before


def test_07_verify_and_copy_handle_old_and_new_logs(tmp_path):
    old, new, raw = (open_store(str(tmp_path / name)) for name in ("old", "new", "raw"))
    legacy_log(old)
    for rows in (4, 3 * CHUNK_ROWS // 2, 1):  # fragments of one chunk, two, one row
        LogWriter(old).append(table(range(rows)))
        LogWriter(new).append(table(range(rows)))
        LogWriter(raw).append([b"r"] * rows)
    for source in (old, new, raw):
        assert verify(source).ok
        dest = open_store(str(tmp_path / "copies" / source.url.rsplit("/", 1)[-1]))
        report = copy_log(source, dest)
        assert report.verified and report.rewritten == 0
        src_manifest, dst_manifest = LogReader(source).manifest(), LogReader(dest).manifest()
        assert dst_manifest.item_hash == src_manifest.item_hash  # the copy keeps the item hash
        assert dst_manifest.setsum == src_manifest.setsum
        assert verify(dest).ok
        assert LogReader(dest).read_table().equals(LogReader(source).read_table())
    assert [LogReader(s).manifest().item_hash for s in (old, new, raw)] == [None, BLAKE3, None]


def test_08_verify_checks_fragments_with_the_logs_item_hash(store):
    """A manifest that names the wrong item hash for its fragments fails verification."""
    legacy_log(store)
    LogWriter(store).append(table(range(3)))
    doc = manifest_doc(store)
    store.put_if_match(MANIFEST_KEY, json.dumps({**doc, "item_hash": "blake3"}).encode(),
                       store.get(MANIFEST_KEY).etag)
    report = verify(store)
    assert not report.ok
    assert [p.kind for p in report.problems] == ["corrupt"]
    assert "does not match its setsum" in report.problems[0].detail


def test_09_verify_names_an_unknown_item_hash_once(store):
    """A log written by a newer wal3-spark: verify says which field and what to do, naming the
    manifest once (its problem line already starts with the object's name)."""
    LogWriter(store).append(table(range(3)))
    doc = manifest_doc(store)
    store.put_if_match(MANIFEST_KEY, json.dumps({**doc, "item_hash": "k12"}).encode(),
                       store.get(MANIFEST_KEY).etag)
    report = verify(store)
    assert [(p.kind, p.obj) for p in report.problems] == [("corrupt", MANIFEST_KEY)]
    assert MANIFEST_KEY not in report.problems[0].detail
    assert "'k12'" in report.problems[0].detail and "upgrade" in report.problems[0].detail
