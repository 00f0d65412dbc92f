"""Pipelined manifest writes: the next commit is sent before the one in flight is answered.

Why: under object-store latency a commit thread that waits for each manifest write makes every
batch that lands meanwhile wait up to one more round trip (docs/benchmarks.md: p99 ~ batch
interval + two round trips + that wait). Where a store's ETag is the MD5 of the bytes written
(`ObjectStore.md5_etags`), the ETag of a write in flight is known before its answer: the next
manifest is built on the one in flight and sent conditioned on that predicted ETag. The store
applies the links in order when they arrive in order; each costs one round trip, and they
overlap.

Why it is safe, in short: a link lands only on the exact bytes of its predecessor (If-Match on
their MD5), and those bytes exist only if the predecessor landed, so **a link that succeeded
proves every link before it landed**, whatever those links answered; appends are acknowledged in
link order, once a link at or after theirs succeeded; once the oldest link failed, every answer
is awaited, and the links that did not land (or may not have) are resolved by the ordinary
compare-and-swap's rules, never appended twice. Each rule, and why it holds:
docs/design/21-pipelined-manifest-writes.md.

A chained link that reached the store before its predecessor was applied loses (412) though the
predecessor then lands as predicted. Instead of draining the chain, one write is sent: the bytes
of the last link sent, conditioned on the landed predecessor (`_Resend`). It lands only while
that version is current, the original links only if the lost one landed after all (which would
have replaced that version first): at most one of the two paths lands, and the resend's success
proves every link it carries. The links sent after it stay valid (they are chained on the bytes it
carries). Only if it fails does the chain drain.

A mispredicted ETag (a store that does not hash as it claims) costs one 412 and ends chaining
for this writer. Never more than one request per link is sent: manifest writes are never hedged.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa

from wal3_spark.errors import (
    AmbiguousWrite,
    CommitFailed,
    CommitOutcomeUnknown,
    CorruptLog,
    DataLost,
    PartlyCommitted,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest, NewFragment
from wal3_spark.format.schema import same_schema
from wal3_spark.log.cas import InFlight, Versioned
from wal3_spark.log.committer import CommitResult, Committer
from wal3_spark.storage.common import md5_etag

logger = logging.getLogger(__name__)

P = TypeVar("P")

#: commits `files` (in `schema`, written for the log's incarnation given last) by the ordinary
#: compare-and-swap, first looking for them from the offset a link placed them at (None: never
#: sent); with that link's write (in flight) resolves it instead of appending them a second time
#: (`Committer.commit(in_flight=, since=, incarnation=)`)
CommitFn = Callable[[Sequence[NewFragment], pa.Schema | None, InFlight | None, int | None, object], CommitResult]


@dataclass
class _Link(Generic[P]):
    """One manifest write of the chain: `files` placed at `start` in `value` (bytes `data`),
    sent conditioned on `on`; `payload` is the caller's (what to acknowledge)."""

    payload: P
    files: list[NewFragment]
    schema: pa.Schema | None
    incarnation: object
    start: int
    value: Manifest
    data: bytes
    on: str
    predicted: str
    answer: Future
    #: sent conditioned on the predicted ETag of a link still unresolved, not on a version known
    #: to be stored: only such a link can lose to a reordering (its predecessor not yet applied)
    chained: bool = False


@dataclass
class _Resend:
    """The one write sent instead of draining when the oldest unresolved link, `first`, lost
    (412, or "not sent") although the version it was conditioned on, `on`, had landed as
    predicted: the bytes of `last`, the last link sent at that moment, conditioned on `on`.
    `last`'s bytes place every link from `first` to `last` where the chain placed them; the
    links sent later are chained on those bytes. While `on` is current either this write lands
    or `first` does (if its 412 was false), never both: a success proves `first`..`last`."""

    first: _Link
    last: _Link
    on: str
    answer: Future


@dataclass(frozen=True)
class Resolved(Generic[P]):
    """A payload's outcome: its first offset, or the error that failed it."""

    payload: P
    start: int | None
    error: BaseException | None = None


class ManifestChain(Generic[P]):
    """Up to `depth` manifest writes in flight, each conditioned on the one before; see the
    module docstring. Used by one thread (a writer's commit thread); `notify` is called from
    the sending threads whenever an answer arrives, so that thread can wake up."""

    def __init__(
        self,
        committer: Committer,
        commit: CommitFn,
        *,
        depth: int,
        merge_schema: bool,
        notify: Callable[[], None],
    ) -> None:
        self.committer = committer
        self.store = committer.store
        self._commit = commit
        self._merge_schema = merge_schema
        self._notify = notify
        self._depth = depth if self.store.md5_etags else 1
        self._links: deque[_Link[P]] = deque()
        self._resolved: list[Resolved[P]] = []
        #: the write sent instead of draining, until its range is resolved (one at a time)
        self._resend: _Resend | None = None
        #: resends sent (each about one round trip on the links it carries, instead of a drain)
        self.resent = 0
        #: times the chain drained after a failed link: each a wait for the writes in flight and
        #: an ordinary commit, during which no new link is sent (what a benchmark reports)
        self.drained = 0
        # Room for a resend and the next links while the originals it replaces are still in
        # flight (their answers no longer matter, but they hold a thread until they come).
        self._pool = ThreadPoolExecutor(2 * max(1, depth) + 1, thread_name_prefix="wal3-manifest")

    def room(self) -> bool:
        return len(self._links) < self._depth

    def empty(self) -> bool:
        return not self._links

    def ready(self) -> bool:
        """Whether `settle` has something to do: the oldest link was answered (and the resend
        sent for it, if any), or a later one succeeded (which proves the ones before it landed)."""
        if not self._links:
            return False
        if self._proven() is not None:
            return True
        if not self._links[0].answer.done():
            return False
        return self._resend is None or self._resend.answer.done()

    def send(self, payload: P, files: list[NewFragment], schema: pa.Schema | None, incarnation: object) -> None:
        """Place `files` (written for the log's `incarnation`) after everything sent so far and
        send the manifest write. When the append cannot be decided on the version it would be
        conditioned on (a refusal such as a schema mismatch, a sealed log, a log created again
        since the fragments were written, a failed read or snapshot write), the chain is drained
        first and the ordinary commit decides on the store's version: it raises for real, or
        succeeds where the version known here was stale."""
        try:
            if not files:
                raise _Ordinary()
            base = self._tip()
            if base is None:
                raise _Ordinary()
            value, data = self.committer.appended(base.value, files, schema=schema, merge_schema=self._merge_schema,
                                                  incarnation=incarnation)
        except Exception as exc:  # noqa: BLE001 (the ordinary commit below raises it again, if real)
            if not isinstance(exc, _Ordinary):
                logger.debug("%s: deciding a pipelined commit failed (%s); committing in order", self.store.url, exc)
            self._drain()
            self._resolve_in_order([_Item(payload, files, schema, incarnation, None, None)])
            return
        chained = bool(self._links)
        answer = self._pool.submit(self.store.put_if_match, MANIFEST_KEY, data, base.etag)
        self._links.append(_Link(payload, files, schema, incarnation, base.value.next_offset, value,
                                 data, base.etag, md5_etag(data), answer, chained))
        answer.add_done_callback(lambda _: self._notify())

    def settle(self) -> list[Resolved[P]]:
        """Outcomes now known, in the order the payloads were sent. When the oldest link lost
        to a reordering, sends one resend (`_Resend`) and returns; blocks only when the oldest
        link failed otherwise, or its resend failed: then every answer of the chain is awaited
        (nothing is decided on a write still in flight, and a later success proves the failed
        link landed whatever it answered) and the rest is resolved in order."""
        while True:
            self._acknowledge_landed()
            if not (self._links and self._links[0].answer.done()):
                break
            if self._links[0].answer.exception() is None:
                continue  # answered with success since the scan: acknowledge it, no need to wait
            if self._resend is not None:
                if not self._resend.answer.done():
                    break  # decided when it is answered
                if self._resend.answer.exception() is None:
                    continue  # answered with success since the scan
            elif self._send_resend():
                break
            self._drain()  # the head did not succeed, nor did a resend for it
            break
        resolved, self._resolved = self._resolved, []
        return resolved

    def abandon(self) -> None:
        """Forget every link not yet resolved (after a bug in the caller, which fails their
        appends as of unknown outcome); the chain starts afresh from a read."""
        self._links.clear()
        self._resolved.clear()
        self._resend = None
        self.committer.forget()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    # ---------------------------------------------------------------------------- plumbing

    def _tip(self) -> Versioned[Manifest] | None:
        """The version the next link is conditioned on: the last link sent (its predicted
        ETag), else the version the committer knows."""
        if self._links:
            last = self._links[-1]
            return Versioned(last.value, last.predicted, last.data)
        return self.committer.current()

    def _proven(self) -> int | None:
        """The index of the last link that succeeded, which proves every link before it landed,
        whatever their own answers said (a 412 or "not sent" after a resent request, a refusal
        given after writing, a timeout): its condition, the MD5 of its predecessor's bytes,
        held only if the predecessor landed (docs/design/21-pipelined-manifest-writes.md)."""
        last = None
        for i, link in enumerate(self._links):
            if _succeeded(link) or self._resent_landed(link):
                last = i
        return last

    def _resent_landed(self, link: _Link[P]) -> bool:
        """Whether `link` is the last one a resend carried, and that resend succeeded."""
        resend = self._resend
        return resend is not None and resend.last is link and _succeeded(resend)

    def _acknowledge_landed(self) -> None:
        """Resolve every link up to the last one that succeeded (or whose bytes a resend landed):
        they all landed."""
        last = self._proven()
        if last is None:
            return
        resend = self._resend
        last_link = self._links[last]
        etag = last_link.answer.result() if _succeeded(last_link) else None
        landed = [self._links.popleft() for _ in range(last + 1)]
        # Links whose original writes never landed: the resend carried them.
        carried: list[_Link[P]] = []
        if resend is not None and any(link is resend.first for link in landed):
            # Either the resend landed, or an original link at or after `first` succeeded, which
            # proves `first` landed on the version the resend was conditioned on: the resend can
            # then never land (that version never returns). Its range is resolved either way.
            self._resend = None
            if _succeeded(resend) or not resend.answer.done():  # it landed, or may have
                carried = landed[:landed.index(resend.last) + 1]
            if etag is None:
                etag = resend.answer.result()
        assert etag is not None
        for link in landed:
            if link.answer.done() and not _succeeded(link) and not any(link is c for c in carried):
                logger.warning("%s: a pipelined manifest write was answered %r, but a write chained "
                            "on it landed, so it landed too", self.store.url, link.answer.exception())
            self._resolved.append(Resolved(link.payload, link.start))
        link = landed[-1]
        if etag != link.predicted and self._depth > 1:
            logger.warning("%s: the store's ETag for a manifest write is not the MD5 of its bytes "
                        "(%s, expected %s): pipelined manifest writes are off for this writer",
                        self.store.url, etag, link.predicted)
            self._depth = 1
        self.committer.landed(Versioned(link.value, etag, link.data))
        self.committer.record_dirty(link.value.next_offset)

    def _send_resend(self) -> bool:
        """The oldest link lost to a reordering (see `_Resend`): send the last link's bytes on
        the version it was conditioned on, instead of draining. Only when that loss can be a
        reordering: the link was chained on a link still in flight, and that link then landed
        with exactly the predicted ETag (the version the committer now knows). Returns whether
        it was sent."""
        head, last = self._links[0], self._links[-1]
        known = self.committer.known()
        if not (self._depth > 1 and head.chained and known is not None and known.etag == head.on
                and isinstance(head.answer.exception(), (PreconditionFailed, TransientError))
                and all(same_schema(link.schema, head.schema) and link.incarnation == head.incarnation
                        for link in self._links)):
            return False
        logger.debug("%s: a chained manifest write lost (%r) though its predecessor landed; sending "
                     "the last link's bytes on that version", self.store.url, head.answer.exception())
        answer = self._pool.submit(self.store.put_if_match, MANIFEST_KEY, last.data, head.on)
        self._resend = _Resend(head, last, head.on, answer)
        self.resent += 1
        answer.add_done_callback(lambda _: self._notify())
        return True

    def _drain(self) -> None:
        """Wait for every answer (a resend's included), acknowledge what a success proves,
        resolve the rest in order."""
        self.drained += 1
        pending = [link.answer for link in self._links]
        wait(pending + [self._resend.answer] if self._resend is not None else pending)
        self._acknowledge_landed()
        resend, self._resend = self._resend, None
        rest = [_Item(link.payload, link.files, link.schema, link.incarnation, link.start, link)
                for link in self._links]
        self._links.clear()
        # The committer now conditions on the last link that landed: right after a reordering
        # (the usual 412), one PUT; after another writer's commit, a 412 and a reload.
        if resend is None or isinstance(resend.answer.exception(), (PreconditionFailed, TransientError)):
            # No resend, or one that never landed and never will: as if it had not been sent.
            self._resolve_in_order(rest)
            return
        carried = next(i for i, item in enumerate(rest) if item.link is resend.last) + 1
        unknown = self._resolve_resent(rest[:carried], resend)
        if isinstance(unknown, _Originals):  # the first link landed: the resend never can; the answers decide
            self._resolve_in_order(rest)
        else:
            self._resolve_in_order(rest[carried:], unknown=unknown)

    def _resolve_resent(self, items: list[_Item[P]], resend: _Resend) -> CommitOutcomeUnknown | _Originals | None:
        """Resolve the links a resend carried (`items`, the oldest first) when its answer was
        neither a success nor a known loss (a timeout, a refusal), every other answer being in.
        The log is read first: the links are all there (by either path), some of them (the
        originals landed, the first despite its 412, so the resend never can: `_ORIGINALS`,
        and their own answers decide), or none. In the last case no original can land any more
        (the first one's answer came, and it is not there), so the resend alone may: the links
        are resolved as one ambiguous write of their fragments, conditioned on the version it
        was sent on (a real one: it landed), which the compare-and-swap finds or writes again
        only on that version. Returns the CommitOutcomeUnknown they ended with, if they did
        (the links chained on the resend's bytes end unknown too)."""
        first = items[0]
        assert first.start is not None
        files = [f for item in items for f in item.files]
        logger.warning("%s: the outcome of a resent pipelined manifest write is unknown (%r); resolving it",
                       self.store.url, resend.answer.exception())
        try:
            start = self.committer.find(files, first.start)
            if start is None:
                start = self._commit(files, first.schema, InFlight(resend.last.data, resend.on), first.start,
                                     first.incarnation).start
        except PartlyCommitted:
            return _ORIGINALS
        except (StorageError, CorruptLog, DataLost) as exc:  # the read failed: the resend may land
            unknown = CommitOutcomeUnknown(
                f"the append to {self.store.url} may or may not be in the log: a resent manifest write's "
                f"outcome is unknown and the log could not be read to find out ({exc}). Nothing was "
                f"deleted. To find out, run `wal3 verify {self.store.url}`")
            unknown.__cause__ = exc
            self._resolved.extend(Resolved(item.payload, None, unknown) for item in items)
            return unknown
        except CommitOutcomeUnknown as exc:
            self._resolved.extend(Resolved(item.payload, None, exc) for item in items)
            return exc
        except Exception as exc:  # noqa: BLE001 (fails exactly these payloads)
            self._resolved.extend(Resolved(item.payload, None, exc) for item in items)
            return None
        for item in items:
            self._resolved.append(Resolved(item.payload, start))
            start += sum(f.records for f in item.files)
        return None

    def _resolve_in_order(self, items: list[_Item[P]], *, unknown: CommitOutcomeUnknown | None = None) -> None:
        """Commit (or resolve) each item in order, no success among them (those were
        acknowledged). Rules (docs/design/21-pipelined-manifest-writes.md), walking the links in chain order:
        - a link known never to land (never sent, a 412, not sent), and every link after it
          (chained on bytes that never exist), is committed again by the ordinary
          compare-and-swap, consecutive ones together while they share a schema (one round trip
          for a run of 412s), looked for first from where the chain placed them (through the
          snapshot tree: a wrong answer, and a later commit rolled them);
        - an ambiguous link is resolved by the CAS primitive's ambiguity rules, conditioned on
          its predecessor's ETag, which is a real version only once the predecessor is resolved;
          so once a link's outcome stays unknown, every ambiguous link after it (up to a link
          known never to land) is unknown too: it lands if the unknown one does;
        - a refused link fails with its refusal, unless its fragments are found in the log.
        `unknown`: the outcome of the write the first item is chained on is unknown (a resend's)."""
        fresh: list[_Item[P]] = []
        dead = False  # a link before this one never landed and never will: neither can this one

        for item in items:
            error = None if item.link is None else item.link.answer.exception()
            if dead or item.link is None or isinstance(error, (PreconditionFailed, TransientError)):
                dead = True
                if fresh and not (same_schema(fresh[-1].schema, item.schema)
                                  and fresh[-1].incarnation == item.incarnation):
                    self._commit_fresh(fresh)
                fresh.append(item)
                continue
            self._commit_fresh(fresh)
            if error is not None and not isinstance(error, AmbiguousWrite):
                self._resolve_refused(item, error)
            elif unknown is not None:
                self._resolved.append(Resolved(item.payload, None, _unknown_after(self.store.url, unknown)))
            else:
                unknown = self._resolve_ambiguous(item, error)
        self._commit_fresh(fresh)

    def _commit_fresh(self, fresh: list[_Item[P]]) -> None:
        """Commit the items (known never to have landed by their answers) in one commit; should
        some of them be in the log after all (a wrong answer), one commit per item."""
        if not fresh:
            return
        items = list(fresh)
        fresh.clear()
        files = [f for item in items for f in item.files]
        try:
            start = self._commit(files, items[0].schema, None, items[0].start, items[0].incarnation).start
        except PartlyCommitted as exc:
            if len(items) == 1:
                self._resolved.append(Resolved(items[0].payload, None, exc))
                return
            logger.warning("%s: some of these pipelined writes landed despite their answers (%s); "
                        "committing them one at a time", self.store.url, exc)
            for item in items:
                self._commit_fresh([item])
            return
        except Exception as exc:  # noqa: BLE001 (fails exactly these payloads)
            self._resolved.extend(Resolved(item.payload, None, exc) for item in items)
            return
        for item in items:
            self._resolved.append(Resolved(item.payload, start))
            start += sum(f.records for f in item.files)

    def _resolve_refused(self, item: _Item[P], error: BaseException) -> None:
        """A refusal (e.g. access denied) normally means nothing was written; one given after
        writing (or an error the store could not classify) must not fail appends that are in
        the log, so the log is read once to look for the link's fragments."""
        assert item.start is not None
        try:
            found = self.committer.find(item.files, item.start)
        except Exception as exc:  # noqa: BLE001 (the refusal stands; say why it was not checked)
            logger.warning("%s: could not check whether a refused manifest write landed: %s", self.store.url, exc)
            found = None
        if found is None:  # a refusal wrote nothing: the outcome is CommitFailed, its cause said
            failed = CommitFailed.nothing_written(self.store.url, error) if isinstance(error, Exception) else error
            self._resolved.append(Resolved(item.payload, None, failed))
        else:
            logger.warning("%s: a manifest write answered %r had landed at %d", self.store.url, error, found)
            self._resolved.append(Resolved(item.payload, found))

    def _resolve_ambiguous(self, item: _Item[P], error: BaseException | None) -> CommitOutcomeUnknown | None:
        """Find the link, or write it again only on the version it was conditioned on; returns
        the CommitOutcomeUnknown it ended with, if it did."""
        assert item.link is not None and item.start is not None
        logger.warning("%s: a pipelined manifest write's outcome is unknown (%s); resolving it",
                    self.store.url, error or "a success no later write proved")
        try:
            start = self._commit(item.files, item.schema, InFlight(item.link.data, item.link.on), item.start,
                                 item.incarnation).start
        except CommitOutcomeUnknown as exc:
            self._resolved.append(Resolved(item.payload, None, exc))
            return exc
        except Exception as exc:  # noqa: BLE001 (fails exactly this payload)
            self._resolved.append(Resolved(item.payload, None, exc))
        else:
            self._resolved.append(Resolved(item.payload, start))
        return None


@dataclass
class _Item(Generic[P]):
    """A link to resolve: `link` None when it is known never to land (the chain broke before
    it); `start` is where the chain placed its files (None: never sent)."""

    payload: P
    files: list[NewFragment]
    schema: pa.Schema | None
    incarnation: object
    start: int | None
    link: _Link[P] | None


def _unknown_after(url: str, predecessor: CommitOutcomeUnknown) -> CommitOutcomeUnknown:
    """The outcome of a link chained on one whose outcome is unknown: it lands if that one does."""
    unknown = CommitOutcomeUnknown(
        f"the append to {url} may or may not be in the log: its manifest write was sent "
        "conditioned on an earlier one whose outcome is unknown, and lands if that one does. "
        f"Nothing was deleted. To find out, run `wal3 verify {url}`")
    unknown.__cause__ = predecessor
    return unknown


def _succeeded(write: _Link | _Resend) -> bool:
    return write.answer.done() and write.answer.exception() is None


class _Originals:
    """`_resolve_resent`'s answer when the original links, not the resend, decide."""


_ORIGINALS = _Originals()


class _Ordinary(Exception):
    """This append goes through the ordinary commit (nothing to pipeline)."""

