"""Time has one owner: `wal3_spark/clock.py`. No other module of the package reads the time or
sleeps; every component is given a `Clock`, so a test moves time with a `ManualClock` instead
of waiting for it."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from tests.support.fakes import FailingStore
from wal3_spark.clock import SYSTEM, ManualClock, SystemClock, micros, utc_text
from wal3_spark.errors import CommitFailed, PreconditionFailed, TransientError
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.committer import Committer
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import open_store
from wal3_spark.storage.retry import retry

PACKAGE = Path(__file__).resolve().parents[2] / "wal3_spark"
OWNER = PACKAGE / "clock.py"
#: what datetime's classes answer with the current time
DATETIME_NOW = {"now", "utcnow", "today"}

_names = itertools.count()


def time_readers(source: str) -> list[str]:
    """Where `source` reads the time or sleeps without a clock: any import of the `time` module
    (time.time, monotonic, perf_counter, sleep and their _ns forms, gmtime()/localtime() of now:
    all of them live there), and datetime.now/utcnow/today or date.today, however imported.
    Each finding is `line: what`."""
    tree = ast.parse(source)
    found: list[str] = []
    datetime_modules: set[str] = set()  # names bound to the datetime module
    datetime_classes: set[str] = set()  # names bound to datetime.datetime or datetime.date
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "time":
                    found.append(f"{node.lineno}: import time")
                if alias.name == "datetime":
                    datetime_modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.module == "time":
                found.append(f"{node.lineno}: from time import ...")
            if node.module == "datetime":
                datetime_classes.update(a.asname or a.name for a in node.names if a.name in ("datetime", "date"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in DATETIME_NOW:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in datetime_classes:
                found.append(f"{node.lineno}: {owner.id}.{node.attr}")
            elif (isinstance(owner, ast.Attribute) and owner.attr in ("datetime", "date")
                  and isinstance(owner.value, ast.Name) and owner.value.id in datetime_modules):
                found.append(f"{node.lineno}: {owner.value.id}.{owner.attr}.{node.attr}")
    return found


def test_00_no_module_but_the_clock_reads_the_time_or_sleeps():
    offenders = {
        str(path.relative_to(PACKAGE.parent)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OWNER and (found := time_readers(path.read_text()))
    }
    assert offenders == {}, "read the time through wal3_spark.clock (a Clock), not directly"


@pytest.mark.parametrize("source", [
    "import time\nx = time.monotonic()",
    "from time import sleep as nap\nnap(1)",
    "import datetime as dt\nnow = dt.datetime.now()",
    "from datetime import date\nday = date.today()",
    "from datetime import datetime as D\nD.utcnow()",
])
def test_01_the_check_finds_each_way_of_reading_the_time(source):
    assert time_readers(source)
    assert time_readers(OWNER.read_text())  # the owner itself does, of course
    assert not time_readers("import datetime as dt\nwhen = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)")


def test_02_a_manual_clock_moves_only_when_told():
    clock = ManualClock(now=1000.0, monotonic=5.0)
    assert (clock.now(), clock.monotonic(), micros(clock)) == (1000.0, 5.0, 1_000_000_000)
    clock.sleep(2.5)
    clock.advance(0.5)
    assert (clock.now(), clock.monotonic(), clock.sleeps) == (1003.0, 8.0, [2.5])
    clock.set(10.0)  # wall time may go back; monotonic time never does
    assert (clock.now(), clock.monotonic()) == (10.0, 8.0)
    with pytest.raises(ValueError):
        clock.advance(-1)
    skewed = SystemClock(skew_s=3600)
    assert 3599 < skewed.now() - SYSTEM.now() < 3601
    assert utc_text(0) == "1970-01-01T00:00:00Z"


def test_03_backoff_sleeps_on_the_clock_it_is_given():
    clock = ManualClock()
    calls = iter([TransientError("a"), TransientError("b"), "done"])

    def flaky():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert retry(flaky, attempts=3, base=1.0, cap=1.0, jitter=0.0, clock=clock) == "done"
    assert clock.sleeps == [1.0, 1.0]


def test_04_a_commit_runs_out_its_deadline_on_the_clock_without_waiting_for_it():
    """A five-minute compare-and-swap deadline, backing off up to 100 ms between attempts: on
    a manual clock the commit gives up after the deadline's worth of backoff, in no real time."""
    store = open_store(f"memory://clock-{next(_names)}")
    Committer(store).create()
    clock = ManualClock()
    committer = Committer(FailingStore(store, lambda key: key == MANIFEST_KEY,
                                       lambda key: PreconditionFailed(key, "a rival wrote first"), ops=["put_if_match"]),
                          clock=clock, max_attempts=10**6, deadline_s=300.0)
    with pytest.raises(CommitFailed, match="nothing was written"):
        committer.commit([], app_id="job", version=1)
    assert clock.monotonic() > 300.0 and sum(clock.sleeps) > 300.0
    assert max(clock.sleeps) <= 0.1 and len(clock.sleeps) > 3000


def test_05_a_writer_stamps_fragments_and_txns_with_its_clock():
    store = open_store(f"memory://clock-{next(_names)}")
    clock = ManualClock(now=1_900_000_000.0)
    with LogWriter(store, clock=clock) as writer:
        writer.append(b"a")
    fragment = LogReader(store).manifest().fragments[0]
    assert uuid7_timestamp_us(fragment.seq_no, exact=True) == 1_900_000_000_000_000
    Committer(store, clock=clock).commit([], app_id="job", version=1)
    assert LogReader(store).manifest().txns["job"].epoch_us == 1_900_000_000_000_000
