"""The compare-and-swap primitive on its own (`wal3_spark.log.cas`), with a toy object: a JSON list
of tokens, where each update appends one unique token (as a commit appends unique fragments).
Every write fault a store can show, including writes that land late, must leave each token that
was acknowledged exactly once, and each token whose outcome was unknown at most once."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter

import pytest

from wal3_spark.errors import AmbiguousWrite, CommitFailed, TransientError
from wal3_spark.log.cas import CasObject, CasPolicy, Outcome
from wal3_spark.storage import MemoryStore
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing import FaultyStore, LateLandingStore

KEY = "tokens"


def tokens_object(store, **policy) -> CasObject[list[str]]:
    return CasObject(
        store, KEY, parse=json.loads, serialise=lambda v: json.dumps(v).encode(),
        policy=CasPolicy(**{"backoff_base_s": 0.0005, "backoff_cap_s": 0.002, **policy}),
    )


def append(obj: CasObject[list[str]], token: str):
    return obj.apply(
        lambda v: (v or []) + [token] if token not in (v or []) else None,
        landed=lambda v: token in (v or []),
    )


def stored(inner) -> list[str]:
    return json.loads(inner.get(KEY).data)


@pytest.fixture
def inner():
    return MemoryStore(uuid.uuid4().hex)


def test_00_create_update_and_nothing_to_do(inner):
    obj = tokens_object(inner)
    assert append(obj, "a").outcome is Outcome.WRITTEN  # create-if-absent
    assert append(obj, "b").outcome is Outcome.WRITTEN
    assert obj.requests == {"get": 1, "put": 2}  # warm: no read before the second write
    assert append(obj, "b").outcome is Outcome.NOTHING_TO_DO
    assert stored(inner) == ["a", "b"]


@pytest.mark.parametrize("land", ["after_get", "after_requests"])
def test_01_a_write_landing_late_is_found_and_not_repeated(inner, land):
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land=land, after_requests=2)
    result = append(tokens_object(late), "a")
    assert result.outcome is Outcome.WRITTEN
    assert late.counts["held"] == 1 and late.pending == 0
    assert stored(inner) == ["a"]


def test_02_a_late_create_is_found_too(inner):
    late = LateLandingStore(inner, keys=[KEY], writes=[1], methods=["put_if_absent"])
    assert append(tokens_object(late), "a").outcome is Outcome.WRITTEN
    assert late.counts["landed"] == 1 and stored(inner) == ["a"]


def test_03_writes_that_may_still_land_end_in_unknown_not_in_failure(inner):
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], probability=1.0, land="manual")
    result = append(tokens_object(late, max_attempts=3), "a")
    assert result.outcome is Outcome.UNKNOWN and result.attempts == 3
    late.land_all()
    assert stored(inner) == ["a"]  # it did land, once: the other two lost their condition
    assert late.counts == {"held": 3, "landed": 1, "condition_lost": 2, "failed": 0}


class RivalWritesFirst(LateLandingStore):
    """Holds the chosen write back, and meanwhile another writer moves the object on."""

    def put_if_match(self, key, data, etag):
        try:
            return super().put_if_match(key, data, etag)
        except AmbiguousWrite:
            self.inner.put_if_match(key, b'["rival"]', etag)
            raise


def test_04_a_lost_write_whose_condition_is_gone_makes_the_failure_definite(inner):
    """Once another write moved the object on, a lost write can never land: giving up then is
    a definite failure, which lets callers clean up."""
    inner.put_if_absent(KEY, b"[]")
    rival = RivalWritesFirst(inner, keys=[KEY], writes=[1], land="manual")
    with pytest.raises(CommitFailed, match="nothing was written"):
        append(tokens_object(rival, max_attempts=1), "a")
    rival.land_all()
    assert rival.counts["condition_lost"] == 1 and stored(inner) == ["rival"]


class Flaky(LateLandingStore):
    readable = True

    def get(self, key):
        if not self.readable:
            raise TransientError("injected: the store is down")
        return super().get(key)


def test_05_an_unreadable_store_fails_definitely_unless_a_write_may_still_land(inner):
    inner.put_if_absent(KEY, b"[]")
    flaky = Flaky(inner, keys=[KEY], writes=[1], land="manual")
    obj = tokens_object(flaky, deadline_s=0.05)
    flaky.readable = False
    with pytest.raises(TransientError):  # nothing was sent: the read error is definite
        append(obj, "a")
    flaky.readable = True
    obj.load()
    flaky.readable = False
    assert append(obj, "a").outcome is Outcome.UNKNOWN  # sent, lost, and cannot look
    flaky.land_all()
    assert stored(inner) == ["a"]


def test_06_landed_may_say_it_cannot_tell(inner):
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land="manual")
    result = tokens_object(late).apply(lambda v: v + ["a"], landed=lambda v: None)
    assert result.outcome is Outcome.UNKNOWN


def test_07_racing_threads_through_every_fault_append_each_token_at_most_once(inner):
    inner.put_if_absent(KEY, b"[]")
    faulty = FaultyStore(inner, seed=3, drop=0.05, error_5xx=0.05, timeout_after_write=0.05,
                         precondition_storm=0.05, delay=0.2, max_delay_s=0.001)
    late = LateLandingStore(faulty, keys=[KEY], probability=0.1, land="random", after_requests=6)
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()

    def worker(w: int) -> None:
        obj = tokens_object(late, max_attempts=400)
        for i in range(25):
            token = f"{w}/{i}"
            result = append(obj, token)
            with lock:
                outcomes[token] = result.outcome

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    late.land_all()
    got = Counter(stored(inner))
    assert max(got.values()) == 1, [t for t, n in got.items() if n > 1]
    written = {t for t, o in outcomes.items() if o is Outcome.WRITTEN}
    assert written <= set(got), written - set(got)
    assert set(got) <= set(outcomes)
    assert late.counts["landed"] > 0 and late.counts["condition_lost"] > 0, late.counts
    assert faulty.counts["timeout_after_write"] > 0 and faulty.counts["error_5xx"] > 0


def test_08_a_transient_error_after_an_ambiguous_write_ends_in_unknown_not_in_that_error(inner):
    """After a write that may still land, a TransientError (here from `prepare`, as when the retry's
    snapshot write fails) means "nothing changed" to the caller, who retries: the change would be
    applied twice. The loop must end in UNKNOWN."""
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land="manual")
    calls = []

    def prepare(value):
        calls.append(value)
        if len(calls) > 1:  # every attempt after the lost one
            raise TransientError("injected: the store drops writes")
        return value

    result = tokens_object(late, max_attempts=3).apply(
        lambda v: v + ["a"] if "a" not in v else None, landed=lambda v: "a" in (v or []), prepare=prepare
    )
    assert result.outcome is Outcome.UNKNOWN and isinstance(result.cause, TransientError)
    late.land_all()
    assert stored(inner) == ["a"]


def test_09_a_check_that_fails_transiently_is_repeated_on_a_fresh_read(inner):
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land="after_get")
    checks = []

    def landed(value):
        checks.append(value)
        if len(checks) <= 2:
            raise TransientError("injected: what the check reads is unavailable")
        return "a" in (value or [])

    result = tokens_object(late).apply(lambda v: v + ["a"] if "a" not in v else None, landed=landed)
    assert result.outcome is Outcome.WRITTEN and result.attempts == 1  # found, never written twice
    assert len(checks) == 3 and stored(inner) == ["a"]


def test_10_a_refusal_after_an_ambiguous_write_that_may_land_is_unknown(inner):
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land="manual")
    decisions = []

    def decide(value):
        decisions.append(value)
        if len(decisions) > 1:
            raise ValueError("injected: a refusal")
        return value + ["a"]

    result = tokens_object(late).apply(decide, landed=lambda v: "a" in (v or []))
    assert result.outcome is Outcome.UNKNOWN and isinstance(result.cause, ValueError)


class BytesRepeat(ForwardingStore):
    """The object goes A -> B -> A (the same bytes, so the same ETag) around a lost write
    conditioned on A, which then lands: its condition came back."""

    def __init__(self, late: LateLandingStore, inner) -> None:
        super().__init__(late)
        self.late, self.base, self.step = late, inner, 0

    def get(self, key):
        if self.step == 0 and self.late.pending:
            self.step = 1
            self.base.put_if_match(key, b'["rival"]', self.base.head(key).etag)  # A -> B
        return self.inner.get(key)

    def put_if_match(self, key, data, etag):
        if self.step == 1:
            self.step = 2
            self.base.put_if_match(key, b"[]", self.base.head(key).etag)  # B -> A
            self.late.land_all()  # the lost write lands on A
        return self.inner.put_if_match(key, data, etag)


def test_11_a_lost_write_is_looked_for_on_every_read_even_after_its_condition_went_away(inner):
    """"Another version was read, so the lost write can never land" is false when the bytes come
    back. A decision that does not itself look for the change (a commit places its fragments at the
    tail) must not be taken on a version holding it."""
    inner.put_if_absent(KEY, b"[]")
    late = LateLandingStore(inner, keys=[KEY], writes=[1], land="manual")
    store = BytesRepeat(late, inner)
    result = tokens_object(store).apply(lambda v: v + ["a"], landed=lambda v: "a" in (v or []))
    assert store.step == 2 and late.counts["landed"] == 1, late.counts  # the scenario happened
    assert result.outcome is Outcome.WRITTEN
    assert stored(inner) == ["a"]


def test_12_an_ambiguous_write_while_preparing_is_not_taken_for_this_objects_own(inner):
    """`prepare` writes what the new value needs (snapshots); an AmbiguousWrite it lets through is
    about that write, sent before any of this object's bytes: it goes to the caller, and is not
    looked for as a write of this object (there were no bytes of it to look for)."""

    def prepare(value):
        raise AmbiguousWrite("snapshot/x", "injected: the snapshot write timed out")

    with pytest.raises(AmbiguousWrite, match="snapshot/x"):
        tokens_object(inner).apply(lambda v: (v or []) + ["a"], prepare=prepare)
    assert not inner.exists(KEY)
