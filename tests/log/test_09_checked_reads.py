"""Readers check the manifest they act on: a damaged one (a digit changed, a pointer dropped, a
schema that does not decode) fails every read with CorruptLog naming the manifest, and never
reads a shorter or different log. The CLI says the same in one line, without a traceback."""

from __future__ import annotations

import base64
import itertools
import json

import pyarrow as pa
import pytest

from wal3_spark.cli.main import main as wal3_main
from wal3_spark.errors import CorruptLog
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import SnapshotOptions, decode_schema
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

_names = itertools.count()


def nine_rows(url: str, raw: bool = False, appends: int = 3) -> object:
    """A log of `appends` appends of 3 rows each, with snapshots (small rollover thresholds)."""
    store = open_store(url)
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    for i in range(appends):
        if raw:
            writer.append([f"r{3 * i + j}".encode() for j in range(3)])
        else:
            writer.append(pa.table({"i": pa.array(range(3 * i, 3 * i + 3), pa.int64()), "s": ["x", "y", "z"]}))
    return store


def rewrite(store, data: bytes) -> None:
    store.put_if_match(MANIFEST_KEY, data, store.get(MANIFEST_KEY).etag)


def edit(store, change) -> None:
    doc = json.loads(store.get(MANIFEST_KEY).data)
    change(doc)
    rewrite(store, json.dumps(doc).encode())


def last_limit_below_start(doc: dict) -> None:
    """One digit of the last fragment's limit changed so that it falls below its start."""
    last = doc["fragments"][-1]
    text = str(last["limit"]["offset"])
    last["limit"]["offset"] = int("0" + text[1:]) if text[0] != "0" else 0
    assert last["limit"]["offset"] < last["start"]["offset"]


def drop_last_fragment(doc: dict) -> None:
    doc["fragments"].pop()


def last_limit_lowered(doc: dict) -> None:
    """The last limit moved down but stays above its start: the manifest alone balances, the
    fragment's record count gives it away."""
    doc["fragments"][-1]["limit"]["offset"] -= 1


def damaged_schema(doc: dict) -> None:
    text = doc["schema"]
    doc["schema"] = text[:10] + ("A" if text[10] != "A" else "B") + text[11:]


def _schema_renaming_s(doc: dict, name: str) -> bytes:
    schema = decode_schema(doc["schema"])
    return schema.set(schema.get_field_index("s"), schema.field("s").with_name(name)).serialize().to_pybytes()


def renamed_column(doc: dict) -> None:
    """A schema that decodes, with column `s` under another name (one base64 character changed
    can do that): read by name, the fragments' `s` would be left out and `t` read as nulls."""
    doc["schema"] = base64.b64encode(_schema_renaming_s(doc, "t")).decode()


def non_utf8_name(doc: dict) -> None:
    """A schema that decodes, with a column name that is not UTF-8 (pyarrow raises
    UnicodeDecodeError only when the name is asked for)."""
    data = _schema_renaming_s(doc, "qqqq").replace(b"qqqq", b"\xff\xfeqq")
    doc["schema"] = base64.b64encode(data).decode()


DAMAGES = [last_limit_below_start, drop_last_fragment, last_limit_lowered, damaged_schema, renamed_column,
           non_utf8_name]

READERS = {
    "read_table": lambda store: LogReader(store).read_table(),
    "read": lambda store: list(LogReader(store).read()),
    "scan": lambda store: LogReader(store).scan().reader.read_all(),
    "scan from an offset": lambda store: LogReader(store).scan(start=4).reader.read_all(),
    "plan": lambda store: LogReader(store).plan(),
}


@pytest.mark.parametrize("raw", [False, True], ids=["structured", "raw"])
def test_00_every_single_digit_change_is_refused_or_reads_the_same_log(raw):
    """Each digit of the manifest changed in turn: the read fails with CorruptLog, or (a digit
    no reader acts on: sizes, times, the writer) returns exactly the log, never fewer rows."""
    store = nine_rows(f"memory://checked-{next(_names)}", raw=raw, appends=6)
    good = store.get(MANIFEST_KEY).data
    expected = LogReader(store).read_table()
    outcomes = {"refused": 0, "same": 0}
    for pos, char in enumerate(good):
        if not chr(char).isdigit():
            continue
        rewrite(store, good[:pos] + str((int(chr(char)) + 1) % 10).encode() + good[pos + 1 :])
        try:
            table = LogReader(store).read_table()
        except CorruptLog as exc:
            assert exc.obj, exc
            outcomes["refused"] += 1
            continue
        assert table.equals(expected), (pos, good[max(0, pos - 40) : pos + 10], table.num_rows)
        outcomes["same"] += 1
    assert outcomes["refused"] > outcomes["same"] > 0, outcomes  # both kinds of digit were met


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("reader", list(READERS))
def test_01_every_reader_refuses_a_damaged_manifest(damage, reader):
    if reader == "plan" and damage in (last_limit_lowered, renamed_column):
        pytest.skip("a plan reads no fragment: the manifest alone is consistent")
    store = nine_rows(f"memory://checked-{next(_names)}")
    edit(store, damage)
    with pytest.raises(CorruptLog) as info:
        READERS[reader](store)
    if damage is last_limit_lowered:  # the manifest balances: the fragment read finds it
        assert info.value.obj.startswith("log/Uuid=")
    else:
        assert info.value.obj == MANIFEST_KEY


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("command", [["cat"], ["tail"], ["info"], ["verify"], ["cat", "--from", "4"]])
def test_02_the_cli_names_the_damaged_object_without_a_traceback(tmp_path, capsys, damage, command):
    url = f"file://{tmp_path}/log"
    edit(nine_rows(url), damage)
    if command == ["info"] and damage in (last_limit_lowered, renamed_column):
        pytest.skip("info reads no fragment: the manifest alone is consistent")
    code = wal3_main([command[0], url, *command[1:]])
    out = capsys.readouterr()
    assert code == 1, out
    assert "Traceback" not in out.err + out.out
    named = "log/Uuid=" if damage is last_limit_lowered else MANIFEST_KEY
    assert named in out.err + out.out
    if command != ["verify"] and damage is not last_limit_lowered:
        # refused before anything is printed (a fragment found wrong stops a stream of records
        # where it is, with exit status 1: never a shorter log that looks complete)
        assert '"_offset"' not in out.out


def test_03_verify_reports_a_schema_that_does_not_decode_as_corrupt():
    """pyarrow raises OSError ("Invalid flatbuffers message") for most damaged schemas."""
    store = nine_rows(f"memory://checked-{next(_names)}")
    edit(store, damaged_schema)
    report = verify(store)
    assert [(p.kind, p.obj) for p in report.problems] == [("corrupt", MANIFEST_KEY)]
    assert "Arrow IPC" in report.problems[0].detail


def test_04_a_fragment_path_and_its_uuid_must_agree():
    """A digit changed in a fragment's UUID (its path, or its seq_no, which the native scan and
    `_timestamp` pushdown take the write time from) is refused before anything is read."""
    store = nine_rows(f"memory://checked-{next(_names)}")

    def change_uuid(doc: dict) -> None:
        frag = doc["fragments"][-1]
        digit = next(i for i, c in enumerate(frag["seq_no"]) if c.isdigit())
        frag["seq_no"] = frag["seq_no"][:digit] + str((int(frag["seq_no"][digit]) + 1) % 10) + frag["seq_no"][digit + 1 :]

    edit(store, change_uuid)
    with pytest.raises(CorruptLog, match="names"):
        LogReader(store).bounds()


def test_05_a_fragments_count_from_its_footer(tmp_path):
    """What the native scan checks of the log's boundary fragments: one range GET, no decoding."""
    from wal3_spark.log.fragment_io import fragment_footer

    for store in (nine_rows(f"memory://checked-{next(_names)}"), nine_rows(f"file://{tmp_path}/log")):
        refs = [part.ref for part in LogReader(store).plan()]
        assert [fragment_footer(store, ref).num_rows for ref in refs] == [ref.records for ref in refs] == [3, 3, 3]
        store.delete(refs[0].path)
        store.put_if_absent(refs[0].path, b"not parquet")
        with pytest.raises(CorruptLog, match="Parquet footer"):
            fragment_footer(store, refs[0])


def test_06_json_nested_deeper_than_the_parser_goes_is_corrupt_not_a_crash(tmp_path):
    """A manifest, tag or pin of `[[[[…` raised RecursionError out of every reader and command."""
    from wal3_spark.log.manifest_reader import read_manifest
    from wal3_spark.log.tags import TagStore
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.storage import open_store

    url = (tmp_path / "log").as_uri()
    LogWriter(url).append(b"a")
    store = open_store(url)
    store.put_if_absent("tag/deep.json", b"[" * 100_000)
    with pytest.raises(CorruptLog, match="tag/deep.json.*nested too deeply"):
        TagStore(url).get("deep")
    store.put_if_match(MANIFEST_KEY, b"[" * 100_000, store.head(MANIFEST_KEY).etag)
    with pytest.raises(CorruptLog, match="nested too deeply"):
        read_manifest(store)
    assert wal3_main(["info", url]) == 1


def _digests(store) -> list[str | None]:
    return [f.get("blake3") for f in json.loads(store.get(MANIFEST_KEY).data)["fragments"]]


def _flip_last_data_byte(store, path: str) -> None:
    """One bit of a fragment's bytes changed, in its column data (before the footer)."""
    data = bytearray(store.get(path).data)
    data[len(data) // 3] ^= 1
    store.delete(path)
    store.put_if_absent(path, bytes(data))


@pytest.mark.parametrize("raw", [False, True], ids=["structured", "raw"])
def test_07_every_fragment_pointer_records_the_blake3_of_its_bytes(raw):
    """What makes the cheap read check possible: the writer's digest of the bytes it uploaded,
    in each pointer of the manifest and of its snapshots, and readers that take it back."""
    import blake3

    store = nine_rows(f"memory://checked-{next(_names)}", raw=raw)
    refs = [part.ref for part in LogReader(store).plan()]
    assert len(refs) == 3
    assert [ref.blake3 for ref in refs] == [blake3.blake3(store.get(r.path).data).hexdigest() for r in refs]
    assert _digests(store)[-1] == refs[-1].blake3  # the manifest's own pointer, as stored
    assert verify(store).ok


@pytest.mark.parametrize("raw", [False, True], ids=["structured", "raw"])
def test_08_a_verifying_read_checks_the_digest_and_names_it(raw):
    """A changed byte fails every verifying read with CorruptLog naming the fragment and its
    digest, before any decoding; `wal3 verify` reports it; an unverified read does not hash."""
    store = nine_rows(f"memory://checked-{next(_names)}", raw=raw)
    ref = LogReader(store).plan()[-1].ref
    _flip_last_data_byte(store, ref.path)
    for read in READERS.values():
        if read is READERS["plan"]:
            continue
        with pytest.raises(CorruptLog, match=f"{ref.path}.*do not match their blake3"):
            read(store)
    report = verify(store)
    assert not report.ok and any(ref.path in str(p) and "blake3" in str(p) for p in report.problems)


def test_09_a_pointer_without_a_digest_is_verified_by_its_setsum():
    """Logs written before the field (or by Chroma, whose writers drop it) stay readable and
    verifiable: a pointer without `blake3` falls back to the setsum recomputed from its records,
    which still catches a changed byte. A malformed digest is a damaged manifest, never a
    reason to skip the check."""
    store = nine_rows(f"memory://checked-{next(_names)}", appends=2)
    edit(store, lambda doc: [f.pop("blake3") for f in doc["fragments"]])
    assert _digests(store) == [None, None]
    assert LogReader(store).read_table().num_rows == 6 and verify(store).ok
    ref = LogReader(store).plan()[-1].ref
    assert ref.blake3 is None
    _flip_last_data_byte(store, ref.path)
    with pytest.raises(CorruptLog, match=ref.path):
        LogReader(store).read_table()
    assert not verify(store).ok

    other = nine_rows(f"memory://checked-{next(_names)}", appends=2)
    edit(other, lambda doc: doc["fragments"][-1].update(blake3="ABC"))
    with pytest.raises(CorruptLog, match="is not a digest"):
        LogReader(other).read_table()


def test_10_verify_and_records_reads_prove_every_record_where_the_digest_matches():
    """The digest proves the bytes are the writer's; `wal3 verify`, a copy and
    verifyOnRead=records recompute every record's setsum item as well, so a fragment whose
    pointer carries another setsum than its records (a writer's fault the digest cannot see)
    fails them while a default read passes it."""
    from dataclasses import replace

    from wal3_spark.format.setsum import Setsum
    from wal3_spark.log.committer import Committer
    from wal3_spark.log.fragment_io import load_fragment, write_fragments

    store = nine_rows(f"memory://checked-{next(_names)}", appends=1)
    manifest = LogReader(store).manifest()
    table = pa.table({"i": pa.array([7, 8], pa.int64()), "s": ["p", "q"]})
    (written,) = write_fragments(store, table.to_batches(), manifest.arrow_schema(),
                                 fragment_bytes=1 << 20, item_hash=manifest.item_hash)
    Committer(store).commit([replace(written, setsum=written.setsum + Setsum.of(b"x"))],
                            schema=manifest.arrow_schema())
    ref = LogReader(store).plan()[-1].ref
    assert ref.blake3 == written.blake3
    assert LogReader(store).read_table().num_rows == 5  # the bytes are the writer's
    with pytest.raises(CorruptLog, match="does not match its setsum"):
        load_fragment(store, ref, False, records=True, item_hash=manifest.item_hash)
    report = verify(store)
    assert not report.ok and any(ref.path in str(p) for p in report.problems)
