"""Stream filters (docs/design/16-stream-filters.md): a Bloom filter of one column's values in each
fragment's manifest entry lets a reader of a few keys skip the fragments without them, with no
GET; the rows of the fragments read are filtered exactly; fragments without a filter, or with a
filter of another column, are read as before."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.fakes import CountingStore
from tests.support.memory import memory_store
from wal3_spark.errors import CorruptLog, FilterError
from wal3_spark.format.fragment import PARQUET_BLOOM_FILTERS, encode_table
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.stream_filter import (
    DEFAULT_MAX_FILTER_BYTES,
    StreamFilter,
    ValueFilter,
    key_bytes,
)
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.verify import verify


def _batch(tenants: list[str], first: int = 0) -> pa.Table:
    return pa.table({"tenant": tenants, "n": list(range(first, first + len(tenants)))})


def _multiplexed(store, fragments: int, keys: int, per_fragment: int, *, filter_column="tenant",
                 rows_per_key: int = 3, **writer) -> pa.Table:
    """`fragments` appends, each holding `per_fragment` of `keys` keys in turn: every key is in
    about fragments * per_fragment / keys fragments. Returns everything appended."""
    tables = []
    with LogWriter(store, LogWriterOptions(filter_column=filter_column, **writer)) as w:
        for f in range(fragments):
            tenants = [f"t{(f * per_fragment + j) % keys}" for j in range(per_fragment)
                       for _ in range(rows_per_key)]
            table = _batch(tenants, f * 1000)
            w.append(table)
            tables.append(table)
    return pa.concat_tables(tables)


# ---------------------------------------------------------------------------- the filter


def test_01_no_false_negatives_and_a_measured_false_positive_rate():
    keys = [key_bytes(f"tenant-{i}") for i in range(50)]
    f = StreamFilter.build("tenant", keys)
    assert all(f.might_contain_any([k]) for k in keys)
    probes = 20_000
    false = sum(f.might_contain_any([key_bytes(f"other-{i}")]) for i in range(probes))
    assert false / probes < 0.03  # sized for 1%
    assert not f.might_contain_any([])


def test_02_bits_are_stable_across_processes_and_versions():
    """The layout is the format's (BLAKE3 double hashing), never Python's `hash`: a golden
    vector, and the same bits from a process with another hash seed."""
    keys = [key_bytes(f"t{i}") for i in range(10)]
    f = StreamFilter.build("tenant", keys)
    assert (f.hashes, f.to_dict("00" * 32)["bits"]) == (7, "ctSqn8fLzYSahXGF")
    code = ("from wal3_spark.format.stream_filter import StreamFilter, key_bytes;"
            "print(StreamFilter.build('tenant', [key_bytes(f't{i}') for i in range(10)]).bits.hex())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin",
                                "PYTHONPATH": ":".join(sys.path)})
    assert other.stdout.strip() == f.bits.hex()
    # integers hash by value, whatever their width
    assert key_bytes(5) == key_bytes(pa.array([5], pa.int8()).to_pylist()[0])


def test_03_filters_stay_small():
    many = StreamFilter.build("tenant", [key_bytes(f"k{i}") for i in range(100_000)])
    assert len(many.bits) == DEFAULT_MAX_FILTER_BYTES
    few = StreamFilter.build("tenant", [key_bytes("acme")])
    assert len(few.bits) == 8


def test_04_entry_round_trip_and_damage():
    """A damaged filter, or one moved to another fragment's entry, is refused when a reader
    would use it (CorruptLog naming the fragment), never trusted to skip."""
    setsum = Setsum.from_hexdigest("11" * 32)
    f = StreamFilter.build("tenant", [key_bytes("acme")])
    path = "log/Uuid=0192a4f0-0000-7000-8000-000000000001.parquet"
    ref = FragmentRef(path, "0192a4f0-0000-7000-8000-000000000001", 1, 4, 100, setsum, f)
    doc = ref.to_dict()
    parsed = FragmentRef.from_dict(doc, MANIFEST_KEY)
    assert parsed == ref and parsed.to_dict() == doc
    wanted = ValueFilter("tenant", ("globex",))
    assert parsed.skipped_by(wanted) and not parsed.skipped_by(ValueFilter("tenant", ("acme",)))
    assert not parsed.skipped_by(ValueFilter("region", ("globex",)))  # another column's filter
    damaged = json.loads(json.dumps(doc))
    damaged["filter"]["bits"] = "AAAAAAAAAAA="
    with pytest.raises(CorruptLog, match="check digest") as err:
        FragmentRef.from_dict(damaged, MANIFEST_KEY).skipped_by(wanted)
    assert err.value.obj == path
    moved = json.loads(json.dumps(doc))
    moved["setsum"] = "22" * 32  # the same filter in another fragment's entry
    with pytest.raises(CorruptLog, match="check digest"):
        FragmentRef.from_dict(moved, MANIFEST_KEY).skipped_by(wanted)
    for field, value in (("hashes", 0), ("bits", ""), ("check", None), ("column", "")):
        malformed = json.loads(json.dumps(doc))
        malformed["filter"][field] = value
        with pytest.raises(CorruptLog, match="stream filter"):
            FragmentRef.from_dict(malformed, MANIFEST_KEY)
    newer = json.loads(json.dumps(doc))
    newer["filter"] = {"kind": "binary-fuse-8", "column": "tenant"}  # a newer writer's kind
    assert FragmentRef.from_dict(newer, MANIFEST_KEY).filter is None  # read as unfiltered
    without = json.loads(json.dumps(doc))
    del without["filter"]
    assert FragmentRef.from_dict(without, MANIFEST_KEY).filter is None


# ---------------------------------------------------------------------------- write and read


def test_05_one_key_read_fetches_few_fragments(store):
    """The acceptance check: one key among 100 over 200 fragments (each fragment holds 2 keys,
    so a key is in 4 fragments, 2%): the read fetches those and at most a few false positives,
    counted as GETs of fragment objects, and returns exactly the key's rows."""
    everything = _multiplexed(store, fragments=200, keys=100, per_fragment=2)
    counting = CountingStore(store)
    reader = LogReader(counting)
    got = reader.read_table(filter_column="tenant", filter_values=["t7"])
    fragment_gets = counting.counts[("get", "log")]
    assert 4 <= fragment_gets <= 8, fragment_gets  # 2% true, 4% at most with false positives
    want = [n for t, n in zip(everything["tenant"].to_pylist(), everything["n"].to_pylist()) if t == "t7"]
    assert got["n"].to_pylist() == want
    assert set(got["tenant"].to_pylist()) == {"t7"}
    # `_offset` stays the record's place in the log
    full = LogReader(store).read_table()
    by_offset = dict(zip(full["_offset"].to_pylist(), full["n"].to_pylist()))
    assert [by_offset[o] for o in got["_offset"].to_pylist()] == want
    # without the filter: every fragment
    counting.counts.clear()
    LogReader(counting).read_table()
    assert counting.counts[("get", "log")] == 200


def test_06_in_list_and_scan_and_plan(store):
    _multiplexed(store, fragments=40, keys=20, per_fragment=1)
    reader = LogReader(store)
    manifest = reader.manifest()
    values = ValueFilter.of(manifest.arrow_schema(), "tenant", ["t1", "t2"])
    plan = reader.plan(manifest=manifest, values=values)
    assert len(plan) == 4  # t1 and t2 are in two fragments each
    table = reader.scan(filter_column="tenant", filter_values=["t1", "t2"]).reader.read_all()
    assert set(table["tenant"].to_pylist()) == {"t1", "t2"} and table.num_rows == 12
    assert reader.read_table(filter_column="tenant", filter_values=["nobody"]).num_rows == 0


def test_07_false_positives_never_leak_rows(store):
    """Filters of the largest size over many keys say "maybe" often: the rows are still exact."""
    with LogWriter(store, LogWriterOptions(filter_column="tenant")) as w:
        for f in range(10):
            w.append(_batch([f"k{f}-{i}" for i in range(2000)]))
    got = LogReader(store).read_table(filter_column="tenant", filter_values=["k3-17", "k9-1999"])
    assert sorted(got["tenant"].to_pylist()) == ["k3-17", "k9-1999"]


def test_08_snapshots_keep_filters(store):
    """Fragments rolled into snapshots keep their filters: skipping works through them."""
    _multiplexed(store, fragments=30, keys=30, per_fragment=1,
                 snapshot_options=SnapshotOptions(2, 4))
    manifest = LogReader(store).manifest()
    assert manifest.snapshots
    counting = CountingStore(store)
    got = LogReader(counting).read_table(filter_column="tenant", filter_values=["t5"])
    assert got.num_rows == 3 and counting.counts[("get", "log")] == 1
    assert verify(store).ok


def test_09_integer_and_binary_columns(store):
    with LogWriter(store, LogWriterOptions(filter_column="account")) as w:
        for f in range(10):
            w.append(pa.table({"account": pa.array([f, f + 100], pa.int32()), "b": [b"x", b"y"]}))
    counting = CountingStore(store)
    got = LogReader(counting).read_table(filter_column="account", filter_values=["3", 104])
    assert sorted(got["account"].to_pylist()) == [3, 104]
    assert counting.counts[("get", "log")] == 2
    other = memory_store("filters")
    with LogWriter(other, LogWriterOptions(filter_column="b")) as w:
        w.append(pa.table({"b": [b"x"]}))
        w.append(pa.table({"b": [b"y"]}))
    assert LogReader(other).read_table(filter_column="b", filter_values=["y"])["b"].to_pylist() == [b"y"]


# ---------------------------------------------------------------------------- old and mixed


def test_10_fragments_without_filters_are_read(store):
    """A log whose first fragments were written without a filter (or with another column's):
    those are read, the filtered ones skipped, every wanted row found."""
    with LogWriter(store) as w:
        w.append(_batch(["a", "b"]))
    with LogWriter(store, LogWriterOptions(filter_column="n")) as w:
        w.append(_batch(["a", "c"], 10))
    with LogWriter(store, LogWriterOptions(filter_column="tenant")) as w:
        w.append(_batch(["a", "d"], 20))
        w.append(_batch(["e", "f"], 30))
    counting = CountingStore(store)
    got = LogReader(counting).read_table(filter_column="tenant", filter_values=["a"])
    assert got["n"].to_pylist() == [0, 10, 20]
    assert counting.counts[("get", "log")] == 3  # only the last fragment is skipped


def test_11_an_older_writer_dropping_filters_loses_no_rows(store):
    """An older wal3-spark rewrites entries without the field it does not know: the fragments
    are then read, not skipped."""
    _multiplexed(store, fragments=6, keys=6, per_fragment=1)
    blob = store.get(MANIFEST_KEY)
    doc = json.loads(blob.data)
    for frag in doc["fragments"]:
        frag.pop("filter")
    store.put_if_match(MANIFEST_KEY, json.dumps(doc, separators=(",", ":")).encode(), blob.etag)
    counting = CountingStore(store)
    got = LogReader(counting).read_table(filter_column="tenant", filter_values=["t2"])
    assert got.num_rows == 3 and counting.counts[("get", "log")] == 6


def test_12_manifest_entries_carry_the_filter(store):
    with LogWriter(store, LogWriterOptions(filter_column="tenant")) as w:
        w.append(_batch(["acme", "globex"]))
    doc = json.loads(store.get(MANIFEST_KEY).data)
    entry = doc["fragments"][0]["filter"]
    assert entry["column"] == "tenant" and entry["kind"] == "bloom-blake3"
    manifest = Manifest.from_bytes(store.get(MANIFEST_KEY).data)
    assert manifest.to_bytes() == store.get(MANIFEST_KEY).data  # byte-identical round trip


@pytest.mark.skipif(not PARQUET_BLOOM_FILTERS, reason="this pyarrow writes no Parquet bloom filters")
def test_13_fragments_carry_parquet_bloom_filters():
    table = _batch(["acme", "globex"] * 10)
    encoded = encode_table(table, table.schema, 1_700_000_000_000_000, item_hash="blake3")
    plain = pq.ParquetFile(pa.BufferReader(encoded.data)).metadata.row_group(0)
    assert all(plain.column(i).bloom_filter_offset is None for i in range(plain.num_columns))
    from wal3_spark.format.fragment import FragmentBuilder

    builder = FragmentBuilder(table.schema, 1_700_000_000_000_000, item_hash="blake3",
                              filter_column="tenant")
    builder.add(table)
    filtered = builder.finish()
    group = pq.ParquetFile(pa.BufferReader(filtered.data)).metadata.row_group(0)
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    assert group.column(names.index("tenant")).bloom_filter_offset is not None
    assert filtered.setsum == encoded.setsum  # the records, and so the setsum, are the same


# ---------------------------------------------------------------------------- errors


def test_14_errors_name_the_problem(store):
    with LogWriter(store, LogWriterOptions(filter_column="tenantt")) as w:
        with pytest.raises(FilterError, match="'tenantt' is not a column.*tenant, n"):
            w.append(_batch(["a"]))
    floats = memory_store("filters")
    with LogWriter(floats, LogWriterOptions(filter_column="x")) as w:
        with pytest.raises(FilterError, match="double.*string, binary or integer"):
            w.append(pa.table({"x": [1.5]}))
    raw = memory_store("filters")
    with LogWriter(raw, LogWriterOptions(filter_column="body")) as w:
        with pytest.raises(FilterError, match="raw"):
            w.append([b"bytes"])
    with LogWriter(store) as w:
        w.append(_batch(["a"]))
    reader = LogReader(store)
    with pytest.raises(FilterError, match="not an integer"):
        reader.read_table(filter_column="n", filter_values=["seven"])
    with pytest.raises(FilterError, match="together"):
        reader.read_table(filter_column="tenant")
    with pytest.raises(FilterError, match="not a column"):
        reader.read_table(filter_column="nope", filter_values=["a"])


def _rewrite_filters(store, change) -> None:
    blob = store.get(MANIFEST_KEY)
    doc = json.loads(blob.data)
    for frag in doc["fragments"]:
        change(frag["filter"])
    store.put_if_match(MANIFEST_KEY, json.dumps(doc, separators=(",", ":")).encode(), blob.etag)


def test_15_a_damaged_filter_fails_the_read_and_verify(store):
    _multiplexed(store, fragments=4, keys=4, per_fragment=1)
    assert verify(store).ok and verify(store, check_fragments=False).ok

    def flip(f: dict) -> None:
        f["bits"] = "AAAAAAAAAAA="  # says "no" to everything: would skip every fragment

    _rewrite_filters(store, flip)
    with pytest.raises(CorruptLog, match="check digest"):
        LogReader(store).read_table(filter_column="tenant", filter_values=["t1"])
    assert LogReader(store).read_table().num_rows == 12  # an unfiltered read does not use them
    for report in (verify(store), verify(store, check_fragments=False)):
        assert not report.ok
        assert any("check digest" in str(p) for p in report.problems)


def test_16_verify_finds_a_filter_that_misses_a_value(store):
    """A filter whose check digest is right but which misses a value of its fragment (a buggy
    writer): only reading the fragment can tell, and verify does."""
    _multiplexed(store, fragments=2, keys=2, per_fragment=1)
    setsums = [r.setsum.hexdigest() for r in LogReader(store).manifest().fragments]
    wrong = StreamFilter.build("tenant", [key_bytes("somebody else")])
    blob = store.get(MANIFEST_KEY)
    doc = json.loads(blob.data)
    doc["fragments"][0]["filter"] = wrong.to_dict(setsums[0])
    store.put_if_match(MANIFEST_KEY, json.dumps(doc, separators=(",", ":")).encode(), blob.etag)
    report = verify(store)
    assert [p.obj for p in report.problems] == [doc["fragments"][0]["path"]]
    assert "misses values" in str(report.problems[0])


def test_17_wal3_cat_filter(tmp_path):
    from tests.cli.test_00_cli import run_main

    url = (tmp_path / "log").as_uri()
    _multiplexed(url, fragments=6, keys=6, per_fragment=1)
    code, out, _ = run_main("cat", url, "--filter", "tenant=t2", "--filter", "tenant=t4")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["tenant"] for r in rows) == ["t2"] * 3 + ["t4"] * 3
    code, _, err = run_main("cat", url, "--filter", "tenant")
    assert code != 0 and "COLUMN=VALUE" in err


def test_18_a_branch_reads_its_parent_through_the_filters(tmp_path):
    """A branch of a filtered log: a filtered read returns the parent's rows of the key below
    the branch point (the fragment the point cuts read only up to it) and the branch's own."""
    from wal3_spark.log.branches import branch

    src, dst = (tmp_path / "src").as_uri(), (tmp_path / "dst").as_uri()
    everything = _multiplexed(src, fragments=10, keys=5, per_fragment=1)  # 3 rows per fragment
    at = 14  # inside the fifth fragment, [13, 16)
    branch(src, dst, at=at)
    with LogWriter(dst, LogWriterOptions(filter_column="tenant")) as w:
        w.append(_batch(["t4", "t1", "t4"], 5000))
    got = LogReader(dst).read_table(filter_column="tenant", filter_values=["t4"])
    below = [n for t, n in zip(everything["tenant"].to_pylist()[: at - 1],
                               everything["n"].to_pylist()[: at - 1]) if t == "t4"]
    assert got["n"].to_pylist() == below + [5000, 5002]
    assert got["_offset"].to_pylist()[-2:] == [at, at + 2]


def test_19_a_filter_value_that_is_not_text(tmp_path):
    """`wal3 cat --filter k=$'\\xff'` and a lone surrogate in `filter_values` raised
    UnicodeEncodeError with a traceback. A string column holds UTF-8 text only, so such a value
    can equal none of its values: a FilterError naming it. For a binary column the value's bytes
    are what the command line was given (Python decodes argv with surrogateescape)."""
    import subprocess
    import sys

    from tests.cli.test_00_cli import ROOT

    url = (tmp_path / "log").as_uri()
    with LogWriter(url, LogWriterOptions(filter_column="tenant")) as w:
        w.append(pa.table({"tenant": ["t1", "\xff"], "b": [b"\xff", b"\xc3\xbf"]}))
    reader = LogReader(url)
    for bad in ("\ud800", "t\udcff"):
        with pytest.raises(FilterError, match="not text.*no value of the string column 'tenant'"):
            reader.read_table(filter_column="tenant", filter_values=[bad])
    assert reader.read_table(filter_column="b", filter_values=["\udcff"])["b"].to_pylist() == [b"\xff"]
    assert reader.read_table(filter_column="b", filter_values=["\xff"])["b"].to_pylist() == [b"\xc3\xbf"]
    with pytest.raises(FilterError, match="not text"):
        reader.read_table(filter_column="b", filter_values=["\ud800"])

    def cat(value: bytes) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wal3_spark.cli", "cat", url.encode(), b"--filter", value],
                              cwd=ROOT, capture_output=True, timeout=120)

    done = cat(b"tenant=\xff")
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    assert b"not text" in done.stderr and b"not UTF-8" in done.stderr, done.stderr
    done = cat(b"b=\xff")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 and b'"_offset": 1' in done.stdout, done.stdout
    done = cat("tenant=\xff".encode())  # ÿ as UTF-8 text
    assert done.returncode == 0 and b'"_offset": 2' in done.stdout, done.stderr


def test_20_a_binary_filter_value_is_bytes_or_a_string(tmp_path):
    """`bytes(5)` is five zero bytes: an integer for a binary column read the rows holding
    b'\\x00' * 5, and None, a float or a list raised TypeError. Each is a FilterError."""
    url = (tmp_path / "log").as_uri()
    with LogWriter(url, LogWriterOptions(filter_column="b")) as w:
        w.append(pa.table({"b": [b"\x00" * 5, b"x"]}))
    reader = LogReader(url)
    for bad in (5, None, 1.5, ["x"], True):
        with pytest.raises(FilterError, match="for the binary column 'b' is not bytes or a string"):
            reader.read_table(filter_column="b", filter_values=[bad])
    for good in (b"x", bytearray(b"x"), memoryview(b"x"), "x"):
        assert reader.read_table(filter_column="b", filter_values=[good])["b"].to_pylist() == [b"x"]
    with pytest.raises(FilterError, match="is not bytes or a string"):
        reader.read_table(filter_column="b", filter_values=5)  # one value, not an iterable of them
    assert reader.read_table(filter_column="b", filter_values=b"x").num_rows == 1
