"""Automatic compaction (wal3_spark.log.auto_compaction): a LogWriter with `auto_compact` keeps
its log's fragment count bounded while it appends, every record once and the setsum balanced;
failures of the background compaction never reach the appends; writers in two processes
compacting the same log lose and duplicate nothing; bad options are refused."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from tests.support.fakes import FailingStore
from wal3_spark.errors import InvalidOption, StorageError
from wal3_spark.log import auto_compaction
from wal3_spark.log.auto_compaction import AutoCompactOptions, tiers
from wal3_spark.log.reader import LogReader
from wal3_spark.log.replaced import REPLACED_PREFIX
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

AUTO = LogWriterOptions(auto_compact=AutoCompactOptions(fragments=4))


def table(first: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64())})


def ids(url: str) -> list[int]:
    return LogReader(url).read_table().column("id").to_pylist()


def fragments(url: str) -> int:
    return len(LogReader(url).manifest().fragments)


def test_00_a_writer_with_auto_compact_keeps_the_fragment_count_bounded(tmp_path):
    url = f"file://{tmp_path}/log"
    appends, counts = 120, []
    with LogWriter(url, AUTO) as writer:
        for i in range(appends):
            writer.append(table(i * 5, 5))
            counts.append(len(writer.committer.last_seen.fragments))
    auto_compaction.wait(url)
    assert min(counts[60:]) < 60  # compactions ran while the appends went on
    # tiers of fewer than 4 fragments each: 120 fragments of one append are 3 tiers deep
    assert fragments(url) <= 3 * 4
    assert ids(url) == list(range(appends * 5))  # every record once, in order
    assert verify(url).ok  # the setsum balances over the recomputed fragments


def test_01_without_it_nothing_is_compacted(tmp_path):
    url = f"file://{tmp_path}/log"
    with LogWriter(url) as writer:
        for i in range(20):
            writer.append(table(i, 1))
    auto_compaction.wait(url)
    assert fragments(url) == 20


def test_02_submitted_appends_trigger_it_too(tmp_path):
    url = f"file://{tmp_path}/log"
    with LogWriter(url, LogWriterOptions(batch_interval_s=0, auto_compact=AutoCompactOptions(fragments=4))) as writer:
        for i in range(40):
            writer.submit(table(i * 2, 2)).result()
    auto_compaction.wait(url)
    assert fragments(url) < 40 and ids(url) == list(range(80))


def test_03_a_failing_background_compaction_never_fails_an_append(tmp_path, caplog):
    url = f"file://{tmp_path}/log"
    failing = FailingStore(open_store(url), lambda key: key.startswith(REPLACED_PREFIX),
                           lambda key: StorageError(f"refused {key}"), ops=("put_if_absent",))
    with caplog.at_level(logging.WARNING, logger="wal3_spark.log.auto_compaction"):
        with LogWriter(failing, AUTO) as writer:
            for i in range(12):
                writer.append(table(i, 1))
                auto_compaction.wait(url)
    assert failing.failed >= 1 and "auto-compaction failed" in caplog.text
    assert fragments(url) == 12 and ids(url) == list(range(12)) and verify(url).ok


SECOND_WRITER = """
import sys
import pyarrow as pa
from wal3_spark.log import auto_compaction
from wal3_spark.log.auto_compaction import AutoCompactOptions
from wal3_spark.log.writer import LogWriter, LogWriterOptions
url = sys.argv[1]
with LogWriter(url, LogWriterOptions(auto_compact=AutoCompactOptions(fragments=4))) as writer:
    for i in range(60):
        writer.append(pa.table({"id": pa.array([100000 + i], pa.int64())}))
auto_compaction.wait(url)
"""


def test_04_two_writers_in_two_processes_compacting_one_log(tmp_path):
    url = f"file://{tmp_path}/log"
    LogWriter(url).append(table(0, 1))
    other = subprocess.Popen([sys.executable, "-c", SECOND_WRITER, url], stderr=subprocess.PIPE, text=True)
    try:
        with LogWriter(url, AUTO) as writer:
            for i in range(1, 61):
                writer.append(table(i, 1))
    finally:
        _, err = other.communicate(timeout=300)
    assert other.returncode == 0, err
    auto_compaction.wait(url)
    got = ids(url)
    assert sorted(got) == list(range(61)) + [100000 + i for i in range(60)]  # each once
    assert [i for i in got if i < 100000] == list(range(61))  # each writer's in its order
    assert [i for i in got if i >= 100000] == [100000 + i for i in range(60)]
    assert fragments(url) < 121 and verify(url).ok


def test_05_threads_of_one_process_share_one_compaction_per_log(tmp_path):
    url = f"file://{tmp_path}/log"
    LogWriter(url).append(table(0, 1))

    def append(base: int) -> None:
        with LogWriter(url, AUTO) as writer:
            for i in range(30):
                writer.append(table(base + i, 1))

    threads = [threading.Thread(target=append, args=(base,)) for base in (1000, 2000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    auto_compaction.wait(url)
    assert sorted(ids(url)) == [0] + list(range(1000, 1030)) + list(range(2000, 2030))
    assert fragments(url) < 61 and verify(url).ok


@pytest.mark.parametrize("bad", [{"fragments": 1}, {"fragments": "8"}, {"target_bytes": 0},
                                 {"target_bytes": True}])
def test_06_bad_options_are_refused(bad):
    with pytest.raises(InvalidOption):
        AutoCompactOptions(**bad)


def test_07_a_raw_log_is_not_compacted_without_the_chroma_opt_in(tmp_path):
    url = f"file://{tmp_path}/log"
    with LogWriter(url, AUTO) as writer:
        for i in range(12):
            writer.append([f"b{i}".encode()])
    auto_compaction.wait(url)
    assert fragments(url) == 12
    opted = LogWriterOptions(auto_compact=AutoCompactOptions(fragments=4, allow_chroma_incompatible=True))
    with LogWriter(url, opted) as writer:
        writer.append([b"last"])
    auto_compaction.wait(url)
    assert fragments(url) < 13 and len(LogReader(url).read_table()) == 13


def test_08_tiers_merge_similar_sizes_and_leave_the_larger_ones(tmp_path):
    url = f"file://{tmp_path}/log"
    with LogWriter(url) as writer:
        writer.append(table(0, 5000))  # one large fragment, then small ones
        for i in range(6):
            writer.append(table(5000 + i, 1))
    manifest = LogReader(url).manifest()
    assert tiers(manifest.fragments, AutoCompactOptions(fragments=4)) == [(1, 7)]
    assert tiers(manifest.fragments, AutoCompactOptions(fragments=7)) == []
