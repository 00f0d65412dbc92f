"""`wal3 retention` through the real entry point: the policy set, shown and applied by `wal3 gc`
below a cursor, and every bad input refused with exit status 2 (1 for a missing log), changing
nothing."""

from __future__ import annotations

import json

from tests.cli.test_00_cli import fails, ok
from wal3_spark.cli.output import JSON_SHAPES
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import open_store


def test_00_a_policy_is_set_shown_and_applied_by_gc_below_a_cursor(tmp_path):
    url = str(tmp_path / "log")
    store = open_store(url)
    with LogWriter(store) as writer:
        for i in range(6):
            writer.append([b"%04d" % (i * 3 + j) for j in range(3)])  # [1,4) [4,7) ... [16,19)
    CursorStore(store).advance("slow", 4)
    size = max(f.num_bytes for f in LogReader(store).manifest().fragments)

    report = json.loads(ok("retention", url, "--max-age", "7d", "--max-bytes", str(2 * size), "--json"))
    assert tuple(report) == JSON_SHAPES["retention"].keys
    assert report["retention"] == {"max_age_ms": 604_800_000, "max_bytes": 2 * size}
    assert report["changed"] and report["previous"] is None
    info = json.loads(ok("info", url, "--json"))
    assert info["retention"] == report["retention"] and tuple(info) == JSON_SHAPES["info"].keys
    assert f"retention      max-age 1w, max-bytes {2 * size} bytes" in ok("info", url)

    gc = json.loads(ok("gc", url, "--grace", "0", "--json"))
    assert tuple(gc) == JSON_SHAPES["gc"].keys
    assert gc["first_to_keep"] == 13  # the newest two fragments fit
    assert gc["cursors_overtaken"] == {"slow": 4}
    assert gc["retention_removed"] == {"start": 4, "limit": 13, "records": 9}
    assert LogReader(store).manifest().oldest_offset == 13

    cleared = json.loads(ok("retention", url, "--clear", "--json"))
    assert cleared["retention"] is None and cleared["previous"] == report["retention"]
    assert "retention      none" in ok("info", url)


def test_01_bad_input_is_a_usage_error_and_changes_nothing(tmp_path):
    url = str(tmp_path / "log")
    store = open_store(url)
    with LogWriter(store) as writer:
        writer.append([b"x" * 100])
    before = store.get(MANIFEST_KEY).data
    for args, problem in [
        (["--max-age", "0s"], "not a retention age"),
        (["--max-age=-1d"], "not a retention age"),
        (["--max-age", "7"], "not a retention age"),
        (["--max-age", "soon"], "not a retention age"),
        (["--max-bytes", "0"], "greater than 0"),
        (["--max-bytes", "lots"], "not a size"),
        (["--clear", "--max-age", "1d"], "--clear removes the policy"),
        ([], "give --max-age"),
        (["--max-bytes", "10"], "cannot hold the log's largest fragment"),
    ]:
        fails("retention", url, *args, code=2, match=problem)
    assert store.get(MANIFEST_KEY).data == before
    fails("retention", str(tmp_path / "none"), "--max-age", "1d", code=1, match="no wal3 log")
    assert not (tmp_path / "none").exists()
