"""HedgedStore: slow idempotent requests get one more copy, within a budget of hedges per second
and a bound on outstanding requests; conditional updates are never hedged; a hedged
create-if-absent resolves the copy that lost (412) by what the store holds.

Slowness is a request blocked until the test releases it; time (latencies and the budget) is an
injected clock that the test moves, so every count below is exact."""

from __future__ import annotations

import itertools
import pickle
import threading

import pytest

from wal3_spark.clock import ManualClock
from wal3_spark.errors import AmbiguousWrite, InvalidOption, PreconditionFailed
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.storage import open_store
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.storage.hedged import HedgedStore, HedgePolicy

_names = itertools.count()


class Scripted(ForwardingStore):
    """Requests to keys starting with `slow/` or `log/` follow a script per key: the n-th call
    of a key waits for `gates[key][n]` (if any), then runs `actions[key][n]` (if any) instead of
    the plain call. `calls[key]` counts the calls that reached this store."""

    def __init__(self, inner):
        super().__init__(inner)
        self.gates: dict[str, list[threading.Event | None]] = {}
        self.entered: dict[str, list[threading.Event]] = {}
        self.actions: dict[str, list] = {}
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def block(self, key, copies=1):
        """The first `copies` calls of `key` wait for their gate; returns the gates."""
        gates = [threading.Event() for _ in range(copies)]
        self.gates[key] = list(gates)
        self.entered[key] = [threading.Event() for _ in range(copies + 1)]
        return gates

    def _step(self, key, plain):
        with self._lock:
            n = self.calls.get(key, 0)
            self.calls[key] = n + 1
        entered = self.entered.get(key, [])
        if n < len(entered):
            entered[n].set()
        gates = self.gates.get(key, [])
        if n < len(gates) and gates[n] is not None:
            gates[n].wait()
        actions = self.actions.get(key, [])
        if n < len(actions) and actions[n] is not None:
            return actions[n]()
        return plain()

    def get(self, key):
        return self._step(key, lambda: self.inner.get(key))

    def put_if_absent(self, key, data):
        return self._step(key, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key, data, etag):
        return self._step(key, lambda: self.inner.put_if_match(key, data, etag))

    def delete(self, key):
        return self._step(key, lambda: self.inner.delete(key))


@pytest.fixture
def memory():
    store = open_store(f"memory://hedging-{next(_names)}")
    for i in range(4):
        store.put_if_absent(f"fast/{i}", b"fast")
    return store


def hedged(inner, clock, **policy):
    defaults = dict(min_samples=4, window=4, min_threshold_s=0.001, hedges_per_s=10.0)
    store = HedgedStore(inner, HedgePolicy(**{**defaults, **policy}), create_prefixes=("log/",),
                        clock=clock)
    for i in range(4):  # latency samples (0 s on the frozen clock): thresholds = 1 ms
        store.get(f"fast/{i}")
        store.put_if_absent(f"log/warm-up-{i}", b"w")
    return store


def in_thread(fn, *args):
    result: dict = {}

    def run():
        try:
            result["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_00_a_slow_read_is_hedged_and_the_first_answer_wins(memory):
    memory.put_if_absent("slow/a", b"payload")
    inner = Scripted(memory)
    [first_gate] = inner.block("slow/a")
    store = hedged(inner, ManualClock())
    assert store.threshold("get") == 0.001
    assert store.get("slow/a").data == b"payload"  # the hedge answered; the first copy waits
    assert inner.calls["slow/a"] == 2
    assert store.stats.hedged == 1 and store.stats.hedge_won == 1
    first_gate.set()


def test_01_hedges_never_exceed_one_per_budget_interval(memory):
    """Bursts of slow reads while the clock moves: hedges <= 1 + hedges_per_s x elapsed."""
    clock = ManualClock()
    inner = Scripted(memory)
    store = hedged(inner, clock, hedges_per_s=10.0)  # one hedge per 0.1 s
    gates, threads = [], []
    for burst_at, burst in [(0.0, 8), (0.05, 4), (0.1, 4), (0.15, 4), (0.35, 6)]:
        clock.advance(burst_at - clock.monotonic())
        for _ in range(burst):
            key = f"slow/{len(threads)}"
            memory.put_if_absent(key, b"x")
            gates += inner.block(key)
            threads.append(in_thread(store.get, key)[0])
        assert store.wait_for(lambda s: s.hedged + s.over_budget == len(threads), timeout=60)
        assert store.stats.hedged <= 1 + 10.0 * burst_at
    assert store.stats.hedged == 3  # at 0.0, 0.1 and 0.35; 0.05 and 0.15 are too soon
    assert store.stats.over_budget == len(threads) - 3
    for gate in gates:
        gate.set()
    for thread in threads:
        thread.join()


def test_02_no_hedge_while_max_outstanding_requests_are_in_flight(memory):
    memory.put_if_absent("slow/a", b"x")
    inner = Scripted(memory)
    [gate] = inner.block("slow/a")
    store = hedged(inner, ManualClock(), max_outstanding=1)
    thread, result = in_thread(store.get, "slow/a")
    assert store.wait_for(lambda s: s.over_outstanding == 1, timeout=60)
    assert store.stats.hedged == 0 and inner.calls["slow/a"] == 1
    gate.set()
    thread.join()
    assert result["value"].data == b"x"


def test_03_conditional_writes_lists_deletes_and_other_creates_are_never_hedged(memory):
    """Each slow call starts before a slow read that does get hedged (same threshold, unlimited
    budget): had they been hedged, their second copy would have reached the store first."""
    etag = memory.put_if_absent("slow/manifest", b"v1")
    memory.put_if_absent("slow/read", b"x")
    inner = Scripted(memory)
    calls = {
        "slow/manifest": lambda s: s.put_if_match("slow/manifest", b"v2", etag),
        "slow/cursor": lambda s: s.put_if_absent("slow/cursor", b"c"),  # not under create_prefixes
        "slow/gone": lambda s: s.delete("slow/gone"),
    }
    gates = [inner.block(key)[0] for key in calls]
    [read_gate] = inner.block("slow/read")
    store = hedged(inner, ManualClock(), hedges_per_s=1e9)
    threads = []
    for key, call in calls.items():
        threads.append(in_thread(call, store)[0])
        assert inner.entered[key][0].wait(timeout=60)
    assert store.get("slow/read").data == b"x"  # hedged
    assert store.stats.hedged == 1
    for gate in gates + [read_gate]:
        gate.set()
    for thread in threads:
        thread.join()
    assert all(inner.calls[key] == 1 for key in calls)
    assert memory.get("slow/manifest").data == b"v2"


def test_04_a_hedged_create_succeeds_when_the_hedge_creates_and_the_slow_copy_sees_412(memory):
    inner = Scripted(memory)
    [first_gate] = inner.block("log/fragment")
    store = hedged(inner, ManualClock())
    etag = store.put_if_absent("log/fragment", b"ours")
    assert etag == memory.get("log/fragment").etag and store.stats.hedge_won == 1
    first_gate.set()  # the slow copy now loses with 412: nobody sees it


def test_05_a_hedged_create_whose_slow_copy_wrote_and_timed_out_reads_back_its_bytes(memory):
    """First copy: lands, then its response is lost (AmbiguousWrite); the hedge, sent before it
    landed, sees 412. The object holds our bytes, so the create succeeded."""
    inner = Scripted(memory)
    first_gate, hedge_gate = inner.block("log/fragment", copies=2)

    first_done = threading.Event()

    def write_then_time_out():
        memory.put_if_absent("log/fragment", b"ours")
        first_done.set()
        raise AmbiguousWrite("log/fragment", "injected timeout after the write")

    inner.actions["log/fragment"] = [write_then_time_out, None]
    store = hedged(inner, ManualClock())
    thread, result = in_thread(store.put_if_absent, "log/fragment", b"ours")
    assert inner.entered["log/fragment"][1].wait(timeout=60)  # the hedge was sent
    first_gate.set()
    assert first_done.wait(timeout=60)
    hedge_gate.set()
    thread.join()
    assert result.get("value") == memory.get("log/fragment").etag, result


def test_06_a_hedged_create_of_a_key_someone_else_wrote_fails(memory):
    inner = Scripted(memory)
    first_gate, hedge_gate = inner.block("log/fragment", copies=2)

    first_done = threading.Event()

    def someone_else_then_time_out():
        memory.put_if_absent("log/fragment", b"theirs")
        first_done.set()
        raise AmbiguousWrite("log/fragment", "injected 5xx")

    inner.actions["log/fragment"] = [someone_else_then_time_out, None]
    store = hedged(inner, ManualClock())
    thread, result = in_thread(store.put_if_absent, "log/fragment", b"ours")
    assert inner.entered["log/fragment"][1].wait(timeout=60)
    first_gate.set()
    assert first_done.wait(timeout=60)
    hedge_gate.set()
    thread.join()
    assert isinstance(result.get("error"), PreconditionFailed), result


def test_07_the_threshold_follows_recent_latencies(memory):
    clock = ManualClock()

    class Timed(ForwardingStore):
        latency = 0.1

        def get(self, key):
            clock.advance(self.latency)
            return self.inner.get(key)

    store = HedgedStore(Timed(memory), HedgePolicy(window=10, min_samples=5, quantile=0.5, factor=2),
                        clock=clock)
    for _ in range(4):
        store.get("fast/0")
    assert store.threshold("get") is None  # too few samples: no hedging yet
    store.get("fast/0")
    assert store.threshold("get") == pytest.approx(0.2)
    Timed.latency = 0.4
    for _ in range(10):
        store.get("fast/0")
    assert store.threshold("get") == pytest.approx(0.8)  # the window forgot the fast ones


def test_08_bad_policies_are_refused_with_the_rule(memory):
    with pytest.raises(InvalidOption, match="hedges_per_s must be > 0"):
        HedgePolicy(hedges_per_s=0)
    with pytest.raises(InvalidOption, match="quantile"):
        HedgePolicy(quantile=1.5)


def test_09_a_hedged_store_pickles_without_its_threads(memory):
    store = pickle.loads(pickle.dumps(HedgedStore(memory, HedgePolicy(hedges_per_s=3))))
    assert store.policy.hedges_per_s == 3 and store.get("fast/0").data == b"fast"


def test_10_a_log_writer_with_hedging_appends_through_it(memory):
    with LogWriter(memory, LogWriterOptions(hedge=HedgePolicy(hedges_per_s=5))) as writer:
        assert isinstance(writer.store, HedgedStore)
        assert writer.submit(b"a").result(timeout=60).start == 1
        assert writer.append([b"b", b"c"]).limit == 4
    with LogWriter(memory, LogWriterOptions(hedge=True)) as writer:
        assert writer.store.policy == HedgePolicy()
