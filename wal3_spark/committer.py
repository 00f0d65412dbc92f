"""The commit protocol (FORMAT.md section 6): fragments written anywhere become part of the log
in one compare-and-swap of the manifest.

A `Committer` is what a Spark driver (or `LogWriter`) holds: it creates the log, checks schemas
before any data is written, and places already-written fragments at the tail, atomically,
rebasing on conflicts and resolving ambiguous writes by looking at what landed. Every manifest it
writes is scrubbed first, so a bug here cannot publish a manifest that does not balance.
"""

from __future__ import annotations

import logging
import time
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from wal3_spark.errors import (
    AmbiguousWrite,
    CommitFailed,
    LogNotFound,
    LogSealed,
    ObjectNotFound,
    PreconditionFailed,
    SchemaMismatch,
    TransientError,
    Wal3Error,
)
from wal3_spark.format import MANIFEST_KEY
from wal3_spark.manifest import Manifest, NewFragment, Snapshot, SnapshotOptions, Txn
from wal3_spark.schema import reconcile
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.retry import backoff_delays, retry
from wal3_spark.uuid7 import uuid7_timestamp_us

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    """Where a commit's records landed: offsets [start, limit)."""

    start: int
    limit: int
    manifest: Manifest
    #: True when an idempotent writer's version was already committed (nothing was written)
    duplicate: bool = False
    attempts: int = 1
    conflicts: int = 0


def now_us() -> int:
    return time.time_ns() // 1000


class Committer:
    """Reads and compare-and-swaps one log's manifest. Not thread-safe; cheap to create."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        writer: str = "wal3-spark",
        snapshot_options: SnapshotOptions | None = None,
        max_attempts: int = 200,
        deadline_s: float = 300.0,
        backoff_base_s: float = 0.002,
        backoff_cap_s: float = 0.1,
        check_fragments_older_than_s: float = 300.0,
    ) -> None:
        self.store = store
        self.writer = writer
        self.snapshot_options = snapshot_options or SnapshotOptions()
        self.max_attempts = max_attempts
        self.deadline_s = deadline_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.check_fragments_older_than_s = check_fragments_older_than_s
        #: the last manifest seen and its ETag; a fresh ETag lets a commit skip the GET
        self._cached: tuple[Manifest, str] | None = None
        self.requests = {"get": 0, "put": 0}

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def last_seen(self) -> Manifest | None:
        """The newest manifest this committer read or wrote (no I/O)."""
        return self._cached[0] if self._cached else None

    def _delays(self) -> Iterator[float]:
        """Full-jitter backoff between attempts: racing committers spread out, and a lost race
        (cheap: the loser only re-reads) is retried quickly."""
        return itertools.chain(
            backoff_delays(self.max_attempts, self.backoff_base_s, self.backoff_cap_s, jitter=1.0),
            itertools.repeat(self.backoff_cap_s),
        )

    # -- reading ------------------------------------------------------------------------

    def load(self) -> tuple[Manifest, str] | None:
        """The current manifest and its ETag, or None if the log does not exist."""
        self.requests["get"] += 1
        try:
            blob = self.store.get(MANIFEST_KEY)
        except ObjectNotFound:
            self._cached = None
            return None
        manifest = Manifest.from_json(blob.data)
        self._cached = (manifest, blob.etag)
        return self._cached

    def manifest(self) -> Manifest:
        loaded = self.load()
        if loaded is None:
            raise LogNotFound(self.url)
        return loaded[0]

    # -- creating -----------------------------------------------------------------------

    def create(self, schema: pa.Schema | None = None) -> tuple[Manifest, str]:
        """Create the log if absent (safe when many processes race); return its manifest.

        An existing log is returned as is: callers check its schema with `prepare`.
        """
        manifest = Manifest.empty(self.writer, schema)
        delays = self._delays()
        for _ in range(self.max_attempts):
            try:
                self.requests["put"] += 1
                etag = self.store.put_if_absent(MANIFEST_KEY, manifest.to_json())
                self._cached = (manifest, etag)
                log.info("created log %s", self.url)
                return self._cached
            except (PreconditionFailed, AmbiguousWrite, TransientError) as exc:
                loaded = self.load()
                if loaded is not None:
                    return loaded
                if isinstance(exc, PreconditionFailed):
                    raise CommitFailed(f"{self.url}: manifest exists but cannot be read") from exc
                time.sleep(next(delays))
        raise CommitFailed(f"could not create the log at {self.url}")

    def prepare(
        self, schema: pa.Schema | None, *, merge_schema: bool = False, create: bool = True
    ) -> pa.Schema | None:
        """Check, before any data is written, that `schema` may append; return the schema the
        fragments must be written in (None for a raw log). Creates the log when allowed."""
        raw = schema is None
        loaded = self.load()
        if loaded is None:
            if not create:
                raise LogNotFound(self.url)
            target = None if raw else reconcile(None, schema, merge=merge_schema, raw_log=False)
            loaded = self.create(target)
        manifest = loaded[0]
        if manifest.sealed:
            raise LogSealed(self.url)
        return _target_schema(manifest, schema, merge_schema, self.url)

    # -- committing ---------------------------------------------------------------------

    def commit(
        self,
        fragments: Sequence[NewFragment],
        *,
        schema: pa.Schema | None = None,
        merge_schema: bool = False,
        app_id: str | None = None,
        version: int | None = None,
        create: bool = True,
    ) -> CommitResult:
        """Make `fragments` (already written, in this order) the next records of the log.

        `schema` is the schema the fragments were written in (None: raw). With `app_id` and
        `version` the commit is idempotent: it is skipped when that writer already committed
        `version` or later, and the version is recorded in the same manifest write.
        """
        if (app_id is None) != (version is None):
            raise ValueError("app_id and version go together")
        self._check_old_fragments_exist(fragments)
        paths = {f.path for f in fragments}
        placed: dict[str, int] = {}

        def decide(manifest: Manifest) -> Manifest | None:
            if manifest.sealed:
                raise LogSealed(self.url)
            if app_id is not None:
                txn = manifest.txns.get(app_id)
                if txn is not None and txn.version >= version:
                    return None
            if manifest.uses_seq_nos:
                raise Wal3Error(
                    f"{self.url} was written by Chroma's S3 backend (sequence-numbered fragments); "
                    "wal3-spark can read and verify it but appends only to UUID-fragment logs. "
                    "Copy it to a new log (`wal3 copy`) and append there"
                )
            new_schema = _target_schema(manifest, schema, merge_schema, self.url)
            placed["start"] = manifest.next_offset
            txn_entry = (app_id, Txn(version, now_us())) if app_id is not None else None
            changed = new_schema is not None and new_schema != manifest.arrow_schema()
            return manifest.with_fragments(
                fragments, self.writer, txn=txn_entry, schema=new_schema if changed else None
            )

        def landed(manifest: Manifest, since: int) -> bool:
            return bool(paths) and _contains_paths(self.store, manifest, paths, since)

        result, attempts, conflicts = self._update(decide, landed, create=create, schema=schema)
        records = sum(f.records for f in fragments)
        if result is None:
            log.info("%s: txn %s version %s already committed; skipped", self.url, app_id, version)
            manifest = self._cached[0] if self._cached else self.manifest()
            return CommitResult(0, 0, manifest, duplicate=True, attempts=attempts, conflicts=conflicts)
        # The last `decide` call placed the fragments that landed (an ambiguous write that
        # landed returns without deciding again).
        start = placed["start"]
        return CommitResult(start, start + records, result, attempts=attempts, conflicts=conflicts)

    def _check_old_fragments_exist(self, fragments: Sequence[NewFragment]) -> None:
        """Refuse to reference fragments that garbage collection may already have deleted.

        GC deletes unreferenced fragments older than its grace interval (an hour by default),
        so a commit of fragments written long ago (a long Spark job) first checks that they are
        still there: failing loudly beats publishing a manifest that points at nothing.
        """
        horizon_us = now_us() - int(self.check_fragments_older_than_s * 1e6)
        old = [f for f in fragments if (uuid7_timestamp_us(f.uuid) or 0) < horizon_us]
        missing = [f.path for f in old if not self.store.exists(f.path)]
        if missing:
            raise CommitFailed(
                f"{len(missing)} of this commit's fragments no longer exist (e.g. {missing[0]}): "
                "they were written before the garbage-collection grace interval and collected as "
                "orphans. Nothing was committed; rerun the append, and give `wal3 gc --grace` more "
                "time than your longest append job"
            )

    def update(self, decide: Callable[[Manifest], Manifest | None]) -> Manifest | None:
        """Apply `decide` to the current manifest with compare-and-swap (seal, GC, txn pruning).

        `decide` returns the new manifest, or None when there is nothing to do; it is called
        again on the fresh manifest after every lost race, so it must be a pure function of it.
        """
        def landed(manifest: Manifest, since: int) -> bool:
            return decide(manifest) is None

        return self._update(decide, landed, create=False, schema=None)[0]

    def _update(
        self,
        decide: Callable[[Manifest], Manifest | None],
        landed: Callable[[Manifest, int], bool],
        *,
        create: bool,
        schema: pa.Schema | None,
    ) -> tuple[Manifest | None, int, int]:
        deadline = time.monotonic() + self.deadline_s
        delays = self._delays()
        conflicts = 0
        current = self._cached or self.load()
        for attempt in range(1, self.max_attempts + 1):
            if current is None:
                if not create:
                    raise LogNotFound(self.url)
                current = self.create(schema if schema is not None else None)
            manifest, etag = current
            new = decide(manifest)
            if new is None:
                return None, attempt, conflicts
            new = self._roll_snapshots(new)
            new.scrub()
            try:
                self.requests["put"] += 1
                new_etag = self.store.put_if_match(MANIFEST_KEY, new.to_json(), etag)
                self._cached = (new, new_etag)
                return new, attempt, conflicts
            except PreconditionFailed:
                conflicts += 1
                log.debug("%s: manifest changed under us (attempt %d); rebasing", self.url, attempt)
            except AmbiguousWrite as exc:
                log.warning("%s: %s; checking whether it landed", self.url, exc)
                current = self._reload_after_ambiguity(deadline)
                if current is not None and landed(current[0], manifest.next_offset):
                    return current[0], attempt, conflicts
                continue
            except TransientError as exc:
                log.warning("%s: transient error writing the manifest: %s", self.url, exc)
            if time.monotonic() > deadline:
                break
            time.sleep(next(delays))
            current = self.load()
        raise CommitFailed(
            f"gave up committing to {self.url} after {attempt} attempts ({conflicts} conflicts); "
            "nothing was committed. Too many concurrent writers, or the store is failing: retry"
        )

    def _reload_after_ambiguity(self, deadline: float) -> tuple[Manifest, str] | None:
        delays = self._delays()
        while True:
            try:
                return self.load()
            except TransientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(next(delays))

    def _roll_snapshots(self, manifest: Manifest) -> Manifest:
        """Write the snapshots the manifest needs before it is published (FORMAT.md section 5)."""
        while (snapshot := manifest.generate_snapshot(self.snapshot_options, self.writer)) is not None:
            write_snapshot(self.store, snapshot)
            manifest = manifest.apply_snapshot(snapshot)
        return manifest

    # -- sealing ------------------------------------------------------------------------

    def seal(self) -> Manifest:
        """Seal the log: every later append fails, readers keep working."""
        result = self.update(lambda m: None if m.sealed else m.sealed_by(self.writer))
        return result if result is not None else self.manifest()


def write_snapshot(store: ObjectStore, snapshot: Snapshot) -> None:
    """Snapshots are content-addressed, so one that already exists is the one we meant."""
    snapshot.scrub()
    data = snapshot.to_json()

    def attempt() -> None:
        try:
            store.put_if_absent(snapshot.path, data)
        except PreconditionFailed:
            pass
        except AmbiguousWrite as exc:
            if not store.exists(snapshot.path):
                raise TransientError(str(exc)) from exc

    retry(attempt, what=f"write {snapshot.path}")


def _target_schema(
    manifest: Manifest, schema: pa.Schema | None, merge: bool, url: str
) -> pa.Schema | None:
    if schema is None:
        if not manifest.is_raw:
            raise SchemaMismatch(
                f"{url} is a structured log ({manifest.arrow_schema()}); raw `body` records "
                "cannot be appended to it"
            )
        return None
    if manifest.is_raw and manifest.acc_bytes > 0:
        return reconcile(None, schema, merge=merge, raw_log=True)
    if manifest.is_raw:
        # An empty raw log created without a schema: the first structured append defines it.
        return reconcile(None, schema, merge=merge, raw_log=False)
    return reconcile(manifest.arrow_schema(), schema, merge=merge, raw_log=False)


def _contains_paths(store: ObjectStore, manifest: Manifest, paths: set[str], since: int) -> bool:
    """Whether the manifest holds any of `paths` at or after offset `since` (fragments rolled
    into a snapshot in the meantime are found through the snapshot tree)."""
    from wal3_spark.reader import iter_fragments

    return any(ref.path in paths for ref in iter_fragments(store, manifest, since))
