"""The `wal3` command line through its real entry point (`python -m wal3_spark.cli.main`)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.seaweed import _free_ports
from tests.support.unprivileged import shared_tmp_dir, unprivileged
from wal3_spark.cli.main import main
from wal3_spark.errors import LogSealed
from wal3_spark.format.fragment import encode_raw
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import S3Store, open_store

ROOT = Path(__file__).resolve().parents[2]


def wal3(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "wal3_spark.cli.main", *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120,
    )


def ok(*args: str, **kw) -> str:
    proc = wal3(*args, **kw)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc.stdout


def fails(*args: str, code: int = 1, match: str = "", **kw) -> str:
    proc = wal3(*args, **kw)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert match.lower() in proc.stderr.lower(), proc.stderr
    return proc.stderr


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def listed_cursors(url: str) -> dict[str, int]:
    return {c["name"]: c["offset"] for c in json.loads(ok("cursor", "list", url, "--json"))["cursors"]}


@pytest.fixture
def url(tmp_path) -> str:
    return str(tmp_path / "log")


@pytest.mark.slow
def test_00_init_info_and_usage_errors(url, tmp_path):
    assert "created raw log" in ok("init", url)
    assert "already exists" in ok("init", url)
    info = json.loads(ok("info", url, "--json"))
    assert (info["oldest_offset"], info["next_offset"], info["fragments"]) == (1, 1, 0)
    assert info["raw"] and not info["sealed"] and info["balanced"] and info["pending_garbage"] is None
    structured = str(tmp_path / "structured")
    ok("init", structured, "--schema", "id: int64 not null, name: string")
    info = json.loads(ok("info", structured, "--json"))
    assert info["schema"] == ["id: int64 not null", "name: string"]
    fails("init", structured, "--schema", "id: int32", match="another schema")
    fails("info", str(tmp_path / "missing"), match="no wal3 log")
    fails("frobnicate", url, code=2)
    text = ok("info", url)
    assert "offsets        [1, 1)" in text and "sealed         no" in text


@pytest.mark.slow
def test_01_tail_and_cat_print_json_lines(url, tmp_path):
    writer = LogWriter(open_store(url))
    writer.append([b"hello", "h\u00e9llo".encode(), b"\xff\xfe"])
    writer.append([b"four", b"five"])
    assert [r["_offset"] for r in lines(ok("tail", url, "-n", "2"))] == [4, 5]
    records = lines(ok("cat", url))
    assert [r["_offset"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["body"] == "hello" and records[1]["body"] == "h\u00e9llo"
    assert records[2] == {**records[2], "body_base64": "//4="} and "body" not in records[2]
    assert records[0]["_timestamp"].endswith("+00:00")
    assert [r["_offset"] for r in lines(ok("cat", url, "--from", "2", "--to", "4"))] == [2, 3]
    # structured rows through Arrow's to_pylist
    structured = str(tmp_path / "s")
    LogWriter(open_store(structured)).append(
        pa.table({"id": [7, 8], "blob": [b"\x00", None], "name": ["a", "b"]})
    )
    rows = lines(ok("cat", structured))
    assert rows[0]["id"] == 7 and rows[0]["blob"] == "AA==" and rows[1]["blob"] is None
    assert rows[1]["name"] == "b" and rows[1]["_offset"] == 2


@pytest.mark.slow
def test_02_verify_exit_status(url, tmp_path):
    store = open_store(url)
    LogWriter(store).append([b"a", b"b"])
    assert "OK" in ok("verify", url)
    assert json.loads(ok("verify", url, "--json"))["ok"] is True
    ref = LogReader(store).manifest().fragments[0]
    (Path(url) / ref.path).write_bytes(encode_raw([b"a", b"c"], 1).data)
    proc = wal3("verify", url)
    assert proc.returncode == 1 and "FAILED" in proc.stdout and ref.path in proc.stdout
    proc = wal3("verify", url, "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["ok"] is False and doc["problems"][0]["kind"] == "corrupt"
    fails("verify", str(tmp_path / "none"), match="no wal3 log")  # a wrong path, not a damaged log


@pytest.mark.slow
def test_03_cursor_commands(url):
    LogWriter(open_store(url)).append([b"r"] * 9)  # offsets [1, 10)
    ok("cursor", "set", url, "reader", "5")
    ok("cursor", "set", url, "other", "9")
    assert ok("cursor", "get", url, "reader") == "5\n"
    assert listed_cursors(url) == {"other": 9, "reader": 5}
    fails("cursor", "set", url, "reader", "3", match="refusing to move it back")
    ok("cursor", "set", url, "reader", "3", "--force")
    assert ok("cursor", "get", url, "reader") == "3\n"
    ok("cursor", "delete", url, "reader")
    fails("cursor", "get", url, "reader", match="no cursor")
    fails("cursor", "set", url, "bad-name!", "3", code=2, match="invalid cursor name")
    assert listed_cursors(url) == {"other": 9}


def test_03b_cursor_usage_errors_change_nothing(url):
    """A missing NAME or OFFSET was an error of the log (exit 1), and what an action does not
    take (a NAME to list, an OFFSET or --force to get or delete) was ignored: `wal3 cursor delete
    URL c 5` deleted c. Each is a usage error (exit 2) that changes nothing."""
    LogWriter(open_store(url)).append([b"r"] * 9)
    assert run_main("cursor", "set", url, "c", "5")[0] == 0
    for argv, match in ((("set", url, "c"), "needs an OFFSET"), (("set", url), "needs a cursor NAME"),
                        (("get", url), "needs a cursor NAME"), (("delete", url), "needs a cursor NAME"),
                        (("delete", url, "c", "5"), "takes no OFFSET or --force (5)"),
                        (("delete", url, "c", "--force"), "takes no OFFSET or --force (--force)"),
                        (("get", url, "c", "3"), "takes no OFFSET"), (("list", url, "c"), "takes no NAME"),
                        (("list", url, "--force"), "takes no NAME, OFFSET or --force")):
        usage_error("cursor", *argv, match=match)
    assert CursorStore(open_store(url)).get("c").cursor.offset == 5


@pytest.mark.slow
def test_04_gc_dry_run_grace_and_refusal(url):
    store = open_store(url)
    writer = LogWriter(store)
    for i in range(6):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) ... [26,31)
    ok("cursor", "set", url, "c", "13")
    out = ok("gc", url, "--dry-run")
    assert "would drop 10 records" in out
    assert json.loads(ok("info", url, "--json"))["oldest_offset"] == 1
    # default grace: applied now, files deleted by a later run
    report = json.loads(ok("gc", url, "--json"))
    assert report["steps"] == ["compute", "apply", "mark"] and report["delete_after"]
    info = json.loads(ok("info", url, "--json"))
    assert info["oldest_offset"] == 11 and info["pending_garbage"]["first_to_keep"] == 11
    assert "pending below offset 11 (applied)" in ok("info", url)
    assert len(list(store.list("log/"))) == 6
    out = ok("gc", url, "--grace", "0")
    assert "delete, reset" in out
    assert len(list(store.list("log/"))) == 4
    assert json.loads(ok("info", url, "--json"))["pending_garbage"] is None
    assert json.loads(ok("verify", url, "--json"))["problems"] == []
    ok("cursor", "set", url, "c", "31")
    fails("gc", url, "--grace", "0", match="--force")
    ok("gc", url, "--grace", "0", "--force")
    assert json.loads(ok("info", url, "--json"))["oldest_offset"] == 31


@pytest.mark.slow
def test_05_seal_and_copy(url, tmp_path):
    store = open_store(url)
    LogWriter(store).append([b"a", b"b", b"c"])
    CursorStore(store).create("c", 2)
    assert "sealed at offset 4" in ok("seal", url)
    assert json.loads(ok("info", url, "--json"))["sealed"] is True
    with pytest.raises(LogSealed):
        LogWriter(store).append([b"d"])
    dst = str(tmp_path / "copy")
    out = ok("copy", url, dst)
    assert "copied offsets [1, 4)" in out and "verified" in out
    assert "OK" in ok("verify", dst)
    assert [r["body"] for r in lines(ok("cat", dst))] == ["a", "b", "c"]
    assert ok("cursor", "get", dst, "c") == "2\n"
    fails("copy", url, dst, match="already holds a log")
    suffix = str(tmp_path / "suffix")
    ok("copy", url, suffix, "--from", "3", "--no-cursors")
    assert ok("cursor", "list", suffix) == ""
    fails("seal", str(tmp_path / "none"), match="no wal3 log")


@pytest.mark.slow
def test_06_s3_through_environment_and_endpoint_flag(seaweed):
    url = seaweed.new_url("cli")
    env = dict(seaweed.env)
    endpoint = env.pop("AWS_ENDPOINT_URL_S3")
    ok("--endpoint", endpoint, "init", url, env=env)
    ok("info", url, "--endpoint", endpoint, env=env)
    store = open_store(url, seaweed.options)
    LogWriter(store).append([b"x"] * 4)
    LogWriter(store).append([b"y"] * 4)
    ok("cursor", "set", url, "c", "6", env=seaweed.env)
    assert "delete, reset" in ok("gc", url, "--grace", "0", env=seaweed.env)
    assert json.loads(ok("verify", url, "--json", env=seaweed.env))["ok"] is True
    assert [r["_offset"] for r in lines(ok("tail", url, "-n", "3", env=seaweed.env))] == [6, 7, 8]


def test_07_schema_parsing_and_record_encoding_in_process():
    from wal3_spark.cli.output import record_json
    from wal3_spark.errors import Wal3Error
    from wal3_spark.format.schema import parse_schema

    assert parse_schema("a: int64 not null, b: timestamp[us, tz=UTC]") == pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.timestamp("us", tz="UTC"))]
    )
    # Spark SQL DDL (a SQL table's schema option) gives the types a Spark DataFrame appends
    assert parse_schema("id BIGINT NOT NULL, `full name` String, d DECIMAL(10, 2), ts timestamp, "
                        "day DATE, c VARCHAR(3), f FLOAT") == pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("full name", pa.string()),
         ("d", pa.decimal128(10, 2)), ("ts", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
         ("c", pa.string()), ("f", pa.float32())]
    )
    with pytest.raises(Wal3Error, match="unknown type 'nosuchtype' for column 'id'"):
        parse_schema("id: nosuchtype")
    with pytest.raises(Wal3Error, match="NAME: TYPE"):
        parse_schema("id")
    with pytest.raises(Wal3Error, match="reserved by wal3"):
        parse_schema("_offset BIGINT")
    import datetime as dt
    import decimal

    row = {"_offset": 3, "_timestamp": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc),
           "d": decimal.Decimal("1.50"), "day": dt.date(2024, 1, 2), "l": [b"\x01"], "m": {"k": 1.0}}
    assert record_json(row, raw=False) == {
        "_offset": 3, "_timestamp": "2024-01-02T00:00:00+00:00", "d": "1.50", "day": "2024-01-02",
        "l": ["AQ=="], "m": {"k": 1.0},
    }


def run_main(*argv: str) -> tuple[int, str, str]:
    """`wal3 ARGV` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def usage_error(*argv: str, match: str) -> str:
    code, _, err = run_main(*argv)
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err and match in err, (argv, err)
    return err


def test_08_every_argument_is_checked_and_a_bad_one_named_with_its_range(url, tmp_path):
    LogWriter(open_store(url)).append([b"r"] * 5)  # offsets [1, 6)
    for grace in ("-5", "nan", "inf", "soon", "101y", "1e3", "5300000w"):
        usage_error("gc", url, "--grace", grace, match="is not a duration: give seconds")
    usage_error("gc", url, "--grace=-inf", match="is not a duration: give seconds")
    assert json.loads(run_main("gc", url, "--grace", "1.5h", "--dry-run", "--json")[1])["dry_run"] is True
    for share in ("5", "-1", "nan", "1.01", "most"):
        usage_error("gc", url, "--max-drop-share", share, match="within [0, 1]")
    for offset_args in (("gc", url, "--keep-from"), ("cat", url, "--from"), ("cat", url, "--to"),
                        ("copy", url, str(tmp_path / "c"), "--from"), ("cursor", "set", url, "c")):
        for bad in ("-1", "0", "1.5", "x"):
            usage_error(*offset_args, bad, match="integer >= 1")
    usage_error("tail", url, "-n", "-1", match="integer >= 0")
    usage_error("cat", url, "--from", "4", "--to", "2", match="--to >= --from")
    usage_error("cat", url, "--from", "7", match="holds offsets [1, 6); give --from within [1, 6]")
    for schema, match in (("", "names no columns"), ("id", "NAME: TYPE"), ("id: nosuch", "unknown type"),
                          ("_offset: int64", "reserved"), ("a: int64, a: string", "duplicate")):
        usage_error("init", str(tmp_path / "new"), "--schema", schema, match=match)
    for bad_url, match in (("memory://x", "lives inside one process"), ("", "non-empty"),
                           ("http://host/x", "unsupported store URL"), ("s3://", "names no bucket")):
        usage_error("info", bad_url, match=match)
    usage_error("copy", url, "memory://x", match="lives inside one process")
    usage_error("--endpoint", "ftp://x", "info", url, match="http:// or https://")
    usage_error("info", url, "--endpoint", "localhost:8333", match="http:// or https://")
    assert not (tmp_path / "new").exists() and not (tmp_path / "c").exists()
    # within range: --to past the tail reads up to it, --from at the tail reads nothing
    assert [r["_offset"] for r in lines(ok("cat", url, "--from", "4", "--to", "99"))] == [4, 5]
    assert ok("cat", url, "--from", "6") == ""
    # and through the real entry point
    fails("gc", url, "--grace", "-5", code=2, match="'-5' is not a duration")
    fails("cursor", "set", url, "c", "-3", code=2, match="'-3' is not an offset")
    # the jobs' counts too, before any Spark session starts
    jobs = Path(__file__).resolve().parents[2] / "jobs"
    for job, option in (("verify.py", "--partitions"), ("tail.py", "--max-records-per-trigger"),
                        ("pipeline.py", "--max-records-per-trigger"), ("quickstart.py", "--rows"),
                        ("quickstart.py", "--partitions")):
        proc = subprocess.run([sys.executable, str(jobs / job), option, "0"], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and "integer >= 1" in proc.stderr, (job, proc.stderr)
        assert "Traceback" not in proc.stderr, (job, proc.stderr)


def test_09_storage_errors_are_reported_as_what_they_are(url, monkeypatch):
    # missing: a fragment deleted by hand (not by GC)
    store = open_store(url)
    LogWriter(store).append([b"a"])
    LogWriter(store).append([b"b"])
    victim = LogReader(store).manifest().fragments[0].path
    store.delete(victim)
    code, _, err = run_main("cat", url)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{victim}: is missing, and the manifest still references it" in err
    # transient: the store cannot be reached, through every retry
    monkeypatch.setattr(S3Store, "retry_base_s", 0.001)
    monkeypatch.setattr(S3Store, "retry_cap_s", 0.001)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    endpoint = f"http://127.0.0.1:{_free_ports(1)[0]}"
    code, _, err = run_main("info", "s3://bucket/log", "--endpoint", endpoint)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "s3://bucket/log/manifest/MANIFEST" in err and "temporary failure" in err, err
    # refused: no credentials anywhere
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = run_main("info", "s3://bucket/log", "--endpoint", endpoint)
    assert code == 1 and err.count("\n") == 1 and "no S3 credentials" in err, err


def test_10_permission_denied_is_reported_naming_the_file():
    # verify, cat and info as a user who may not read one fragment, then the manifest
    root = shared_tmp_dir()
    try:
        url = os.path.join(root, "log")
        store = open_store(url)
        LogWriter(store).append([b"a"])
        LogWriter(store).append([b"b"])
        secret = LogReader(store).manifest().fragments[1].path
        os.chmod(os.path.join(url, secret), 0)
        verify_run, cat_run = unprivileged(lambda: (run_main("verify", url), run_main("cat", url)))
        code, out, err = verify_run
        assert code == 1 and "Traceback" not in err, err
        assert f"unreadable: {secret}: cannot be read:" in out and "permission denied" in out, out
        code, out, err = cat_run
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert secret in err and "permission denied on " + os.path.join(url, secret) in err
        os.chmod(os.path.join(url, "manifest", "MANIFEST"), 0)
        code, _, err = unprivileged(lambda: run_main("info", url))
        assert code == 1 and err.count("\n") == 1, err
        assert "'manifest/MANIFEST'" in err and "permission denied" in err
    finally:
        for dirpath, _, filenames in os.walk(root):
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
        shutil.rmtree(root)


HUGE = "9" * 400
MAX_U64 = 2**64 - 1


def test_11_every_integer_argument_is_bounded_and_a_huge_one_refused_in_one_line(url, tmp_path):
    """A 400-digit number (or one past the bound) is a usage error naming the argument and the
    range, never an OverflowError; the bound itself is accepted."""
    LogWriter(open_store(url)).append([b"r"] * 5)  # offsets [1, 6)
    offset_args = [("cat", url, "--from"), ("cat", url, "--to"), ("gc", url, "--dry-run", "--keep-from"),
                   ("copy", url, str(tmp_path / "c"), "--from"), ("cursor", "set", url, "c")]
    cases = [(*args, value, args[-1] if args[-1].startswith("-") else "offset", f"<= {MAX_U64}")
             for args in offset_args for value in (HUGE, str(MAX_U64 + 1))]
    cases += [("tail", url, "-n", value, "-n", f"<= {2**63 - 1}") for value in (HUGE, str(2**63))]
    cases += [("stress", "--writers", HUGE, "--writers", "<= 1000"), ("stress", "--seed", HUGE, "--seed", "<= ")]
    cases += [("gc", url, "--grace", grace, "--grace", "at most 100 years") for grace in (HUGE, "1e300", "3155760001")]
    for *argv, argument, bound in cases:
        err = usage_error(*argv, match=f"argument {argument}: ")
        error_lines = [line for line in err.splitlines() if "error:" in line]
        assert len(error_lines) == 1 and bound in error_lines[0] and len(error_lines[0]) < 200, (argv, err)
    assert "(400 characters)" in usage_error("cat", url, "--from", HUGE, match="is not an offset")
    # the bounds themselves are values, judged by the log as any other
    assert [r["_offset"] for r in lines(ok("cat", url, "--to", str(MAX_U64)))] == [1, 2, 3, 4, 5]
    assert len(lines(ok("tail", url, "-n", str(2**63 - 1)))) == 5
    usage_error("cat", url, "--from", str(MAX_U64), match="past the log's tail")
    code, _, err = run_main("cursor", "set", url, "c", str(MAX_U64))
    assert code == 1 and "beyond the tail" in err and "Traceback" not in err
    # only plain ASCII digits: what a script passes is compared as typed
    for odd in ("1_0", "\u0663", " 3", "+3"):
        usage_error("cat", url, "--from", odd, match="is not an offset")
    # the jobs share the arguments' types and bounds
    jobs = Path(__file__).resolve().parents[2] / "jobs"
    for job, option, value, bound in (("quickstart.py", "--rows", HUGE, "<= 9223372036854775807"),
                                      ("verify.py", "--partitions", str(2**31), "<= 2147483647")):
        proc = subprocess.run([sys.executable, str(jobs / job), option, value], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and f"argument {option}: " in proc.stderr and bound in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr, (job, proc.stderr)


def test_12_every_report_prints_the_json_its_help_documents(url, tmp_path):
    """`--json` on every command that reports, with the keys `--help` names."""
    from wal3_spark.cli.output import JSON_SHAPES

    def report(shape: str, *argv: str, code: int = 0):
        got, out, err = run_main(*argv, "--json")
        assert got == code, (argv, got, err)
        doc = json.loads(out)
        for item in doc if isinstance(doc, list) else [doc]:
            assert tuple(item) == JSON_SHAPES[shape].keys, (shape, list(item))
        return doc

    log_url = open_store(url).url  # every report names the log as its store does: file:///...
    assert report("init", "init", url) == {"url": log_url, "created": True, "raw": True, "schema": None,
                                           "next_offset": 1}
    assert report("init", "init", url)["created"] is False
    structured = str(tmp_path / "structured")
    assert report("init", "init", structured, "--schema", "id: int64")["schema"] == ["id: int64"]
    LogWriter(open_store(url)).append([b"a", b"b", b"c"])
    assert report("cursor set", "cursor", "set", url, "c", "2")["offset"] == 2
    cursor = report("cursor get", "cursor", "get", url, "c")
    assert (cursor["name"], cursor["offset"], cursor["writer"]) == ("c", 2, "wal3 cli")
    assert report("cursor list", "cursor", "list", url)["cursors"][0]["records_behind"] == 2
    assert report("info", "info", url)["next_offset"] == 4
    assert report("verify", "verify", url)["ok"] is True
    assert report("verify PREFIX", "verify", str(tmp_path))["ok"] is True
    assert report("gc", "gc", url, "--dry-run")["dry_run"] is True
    assert report("copy", "copy", url, str(tmp_path / "copy"))["records"] == 3
    assert report("cursor delete", "cursor", "delete", url, "c") == {"url": log_url, "name": "c", "deleted": True}
    assert report("seal", "seal", url) == {"url": log_url, "sealed": True, "next_offset": 4}
    prefix = str(tmp_path)  # holds the logs `log`, `structured` and `copy`
    assert [log["name"] for log in report("ls", "ls", prefix)] == ["copy", "log", "structured"]
    assert report("info PREFIX", "info", prefix)["logs"] == 3
    # each command's --help documents its shapes
    for command, shapes in (("init", ["init"]), ("info", ["info", "info PREFIX"]), ("ls", ["ls"]),
                            ("verify", ["verify", "verify PREFIX"]), ("gc", ["gc"]), ("seal", ["seal"]),
                            ("copy", ["copy"]),
                            ("cursor", ["cursor list", "cursor get", "cursor set", "cursor delete"])):
        _, out, _ = run_main(command, "--help")
        text = " ".join(out.split())
        for shape in shapes:
            assert f"`wal3 {shape} --json` prints" in text and ", ".join(JSON_SHAPES[shape].keys) in text, (shape, out)


def test_13_version_from_the_package_metadata_and_in_a_checkout():
    import tomllib

    import wal3_spark

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert wal3_spark.__version__ == version
    assert ok("--version") == f"wal3 {version}\n"
    script = Path(sys.executable).parent / "wal3"  # the console script ./dev installs
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert proc.stdout == f"wal3 {version}\n", proc
    proc = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout == f"wal3 {version}\n", proc
    # a checkout with nothing installed (no site-packages, so no distribution metadata)
    proc = subprocess.run([sys.executable, "-S", "-c", "import wal3_spark; print(wal3_spark.__version__)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout == f"{version}\n", proc


# Commands that print no report: records as JSON lines whatever the output (`tail`, `cat`), or a
# server that runs until stopped (`console`, `exporter`).
NOT_REPORTS = {"tail", "cat", "console", "exporter"}


def test_14_every_command_that_reports_takes_json_and_fails_in_json():
    """Every command but those of NOT_REPORTS takes --json (a new command must choose); with
    --json a failure prints `{"error": {command, type, message}}` on stdout too."""
    from wal3_spark.cli.main import build_parser
    from wal3_spark.cli.output import ERROR_SHAPE

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        takes_json = any("--json" in action.option_strings for action in parser._actions)
        assert takes_json == (name not in NOT_REPORTS), name
    for argv, code, kind in ((("seal", "/nonexistent/log"), 1, "LogNotFound"),
                             (("cursor", "get", "/nonexistent/log", "c"), 1, "CursorError"),
                             (("ls", "s3://bucket/p", "--endpoint", "http://127.0.0.1:9", "--logs", "bad/name"), 2,
                              "InvalidLogName")):
        got, out, err = run_main(*argv, "--json")
        assert got == code and f"wal3 {argv[0]}: error:" in err, (argv, got, err)
        doc = json.loads(out)["error"]
        assert tuple(doc) == ERROR_SHAPE.keys and doc["command"] == argv[0] and doc["type"] == kind, doc
        assert doc["message"] in err
        # without --json, stdout stays empty
        assert run_main(*argv)[1] == ""


def test_15_stress_prints_its_summary_as_json(tmp_path):
    """A short log-set stress run: with --json, stdout is the summary alone (the tables went to
    stderr)."""
    from wal3_spark.cli.output import JSON_SHAPES

    proc = wal3("stress", str(tmp_path / "logs"), "--logs", "2", "--writers", "1", "--duration", "1",
                "--run-dir", str(tmp_path / "run"), "--json")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    summary = json.loads(proc.stdout)
    assert tuple(summary) == JSON_SHAPES["stress --logs"].keys
    assert summary["ok"] is True and summary["acknowledged"] > 0 and summary["lost"] == 0


def test_16_verify_of_a_prefix_verifies_each_log_and_names_the_damaged_one(tmp_path):
    for name in ("a", "b", "c"):
        LogWriter(open_store(str(tmp_path / "set" / name))).append([b"x", b"y"])
    prefix = str(tmp_path / "set")
    code, out, _ = run_main("verify", prefix)
    assert code == 0 and out.count(": OK: ") == 3 and "3 logs, all OK" in out
    store = open_store(str(tmp_path / "set" / "b"))
    ref = LogReader(store).manifest().fragments[0]
    (tmp_path / "set" / "b" / ref.path).write_bytes(encode_raw([b"x", b"z"], 1).data)
    code, out, _ = run_main("verify", prefix, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["failed"] == ["b"] and doc["ok"] is False
    assert doc["logs"]["b"]["problems"][0]["obj"] == ref.path and doc["logs"]["a"]["ok"] is True
    assert run_main("verify", prefix, "--logs", "a,c")[0] == 0  # the selection skips the damaged one
    # objects but no manifest (a deleted manifest, or a URL inside a log): FAILED, saying which
    (tmp_path / "set" / "c" / "manifest" / "MANIFEST").unlink()
    code, out, _ = run_main("verify", str(tmp_path / "set" / "c"))
    assert code == 1 and "FAILED" in out and "objects are stored under this URL" in out

