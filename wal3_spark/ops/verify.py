"""Scrubbing a whole log: every invariant, every fragment's setsum recomputed from its bytes.

`verify` keeps going after the first problem so that one run tells an operator everything that
is wrong: invariants that do not hold, objects that are missing or corrupt, objects the store
would not give (permission refused, a failure that outlasted the store's retries), and objects
nobody references (left by failed appends or pending garbage collection: reported, but not
failures). Problems are classified by the exception's type and attributes, never its text.

Garbage collection may delete objects of the manifest verify read while it runs; the reader
then reports them as garbage-collected (`DataLost`), not missing. Verify starts over with the
current manifest when that happens, a few times, before reporting them as `collected`.

Design: docs/design/30-unreferenced-files-are-garbage.md.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace

import pyarrow as pa

from wal3_spark.errors import (
    BranchError,
    CorruptLog,
    DataLost,
    LogNotFound,
    ObjectNotFound,
    StorageError,
)
from wal3_spark.format.layout import (
    FRAGMENT_PREFIX,
    MANIFEST_KEY,
    SNAPSHOT_PREFIX,
    FragmentRef,
    SnapshotPointer,
)
from wal3_spark.format.lineage import pin_key
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.fragment_io import MISSING_FRAGMENT, MISSING_SNAPSHOT, check_columns_known, load_fragment
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import iter_ranges, parent_manifest
from wal3_spark.log.snapshots import load_snapshot
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: problem kinds that make a log fail verification; "extra" objects are reported only
FAILING = frozenset({"invariant", "missing", "corrupt", "unreadable", "collected"})

#: runs of verify before objects garbage-collected during the run are reported as problems
ATTEMPTS = 3

#: checks fragments somewhere (threads here, Spark executors in `wal3_spark.spark.distributed_verify`):
#: (store, refs, payload schema (None: raw), item_hash) -> one `check_fragment` result per ref,
#: in any order
FragmentChecker = Callable[
    [ObjectStore, list[FragmentRef], pa.Schema | None, str | None], Iterable["Problem | None"]
]


@dataclass(frozen=True)
class Problem:
    kind: str  # "invariant" | "missing" | "corrupt" | "unreadable" | "collected" | "extra" | "rewritten"
    obj: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.obj}: {self.detail}"


@dataclass
class VerifyReport:
    url: str
    setsum: str = ""
    oldest_offset: int = 0
    next_offset: int = 0
    fragments: int = 0
    snapshots: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: a branch's parent (its manifest's `parent` field), whose range was checked with it
    parent: dict | None = None

    @property
    def ok(self) -> bool:
        return not any(p.kind in FAILING for p in self.problems)

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["ok"] = self.ok
        return doc


def verify(
    log: StoreLike,
    *,
    options: Mapping[str, str] | None = None,
    check_fragments: bool = True,
    parallelism: int = 8,
    progress: Callable[[int, int], None] | None = None,
    checker: FragmentChecker | None = None,
) -> VerifyReport:
    """Check the log at `log`; `progress(done, total)` is called as fragments are checked
    by the default checker (`parallelism` threads in this process)."""
    store = resolve_store(log, options)
    check = checker or _threads(parallelism, progress)
    attempt = 1
    report = _verify_once(store, check if check_fragments else None)
    while any(p.kind == "collected" for p in report.problems):
        logger.info("%s: garbage collection deleted objects verify was checking (attempt %d of %d)",
                    store.url, attempt, ATTEMPTS)
        if attempt == ATTEMPTS:
            break
        attempt += 1
        report = _verify_once(store, check if check_fragments else None)
    return report


def _no_manifest(store: ObjectStore) -> str:
    """What a missing manifest means: nothing stored is a wrong path; objects without a manifest
    are a log whose root was deleted, or a URL inside a log or above one."""
    stored = next(iter(store.list()), None)
    if stored is None:
        return "no manifest and nothing stored under this URL: this is not a wal3 log (check the path)"
    return (f"no manifest, yet objects are stored under this URL ({stored.key}, ...): the log's "
            "manifest was deleted, or the URL is not a log's root (give the log's own URL)")


def _verify_once(store: ObjectStore, check: FragmentChecker | None) -> VerifyReport:
    report = VerifyReport(store.url)
    try:
        manifest = Manifest.from_bytes(store.get(MANIFEST_KEY).data, check=False)  # reported below
    except ObjectNotFound:
        report.problems.append(Problem("missing", MANIFEST_KEY, _no_manifest(store)))
        return report
    except CorruptLog as exc:
        report.problems.append(Problem("corrupt", exc.obj, exc.problem))
        return report
    except StorageError as exc:
        report.problems.append(Problem("unreadable", MANIFEST_KEY, str(exc)))
        return report
    report.setsum = manifest.setsum.hexdigest()
    report.oldest_offset, report.next_offset = manifest.oldest_offset, manifest.next_offset
    if not _check(report, "corrupt", manifest.check_values):  # e.g. a schema that does not decode:
        return report  # its fragments cannot be checked either
    _check(report, "invariant", manifest.check_structure)

    snapshot_paths: set[str] = set()
    before = len(report.problems)
    refs = [ref for pointer in manifest.snapshots for ref in _walk(store, pointer, report, snapshot_paths)]
    refs.extend(manifest.fragments)
    report.snapshots = len(snapshot_paths)
    report.fragments = len(refs)
    report.records = sum(r.records for r in refs)
    report.bytes = sum(r.num_bytes for r in refs)
    # order, balance and what is unreferenced can only be judged from the whole tree
    whole_tree = len(report.problems) == before
    if whole_tree:
        _check_order(report, refs, manifest)
    if check is None:  # without the data, each stream filter's check digest at least
        for ref in refs:
            if ref.filter is not None:
                _check(report, "corrupt", functools.partial(ref.filter.checked, ref.setsum.hexdigest(), ref.path))

    if check is not None:
        problems = check(store, refs, manifest.arrow_schema(), manifest.item_hash)
        report.problems.extend(p for p in problems if p is not None)
    if whole_tree:
        _report_extras(store, report, {r.path for r in refs}, snapshot_paths)
    _check_parent(store, manifest, report, check)
    return report


def _check_parent(store: ObjectStore, manifest: Manifest, report: VerifyReport,
                  check: FragmentChecker | None) -> None:
    """A branch's parent range: the parent is the log branched from, the pin that keeps the
    range is there, the fragments holding it are contiguous over it and sum to the setsum the
    branch recorded, and (with `check`) each holds what its parent's manifest says."""
    parent = manifest.parent
    if parent is None:
        return
    report.parent = parent.to_dict()
    if not manifest.reads_parent:
        return
    where = f"{parent.log} (parent)"
    try:
        parent_manifest(store, manifest)
        parts = list(iter_ranges(store, manifest, parent.start, parent.offset))
    except (BranchError, DataLost, CorruptLog, StorageError) as exc:
        report.problems.append(Problem("missing", where, str(exc)))
        return
    up = parent_store(store, parent.log)
    if not up.exists(pin_key(parent.pin)):
        report.problems.append(Problem(
            "invariant", f"{parent.log}/{pin_key(parent.pin)}",
            "the pin this branch holds in its parent is missing: the parent's garbage collection "
            f"may remove records the branch reads; checkpoint the branch (`wal3 checkpoint {store.url}`)"))
    covered = [parent.start] + [x for p in parts for x in (p.start, p.limit)] + [parent.offset]
    if any(a != b for a, b in zip(covered[::2], covered[1::2], strict=True)):
        report.problems.append(Problem("invariant", where, f"the parent's fragments do not cover "
                                       f"[{parent.start}, {parent.offset}) contiguously"))
    total = Setsum.sum(p.ref.setsum for p in parts)
    if total != parent.setsum:
        # a checkpoint of the parent rewrote the fragment its own branch point cut (the records
        # are the same, the fragment's setsum is not); each fragment is still checked below
        report.problems.append(Problem(
            "rewritten", where, f"the parent's fragments holding [{parent.start}, {parent.offset}) sum "
            f"to {total.hexdigest()}, the branch recorded {parent.setsum.hexdigest()} (the parent "
            "was checkpointed since, which rewrites the fragment its branch point cuts)"))
    report.records += parent.offset - parent.start
    if check is None:
        return
    by_root: dict[str, list[FragmentRef]] = {}
    for part in parts:
        by_root.setdefault(part.root or store.url, []).append(part.ref)
    for root, refs in by_root.items():
        problems = check(parent_store(store, root), refs, manifest.arrow_schema(), manifest.item_hash)
        report.problems.extend(replace(p, obj=f"{root}/{p.obj}") for p in problems if p is not None)


def _threads(parallelism: int, progress: Callable[[int, int], None] | None) -> FragmentChecker:
    def check(
        store: ObjectStore, refs: list[FragmentRef], payload: pa.Schema | None, item_hash: str | None
    ) -> Iterator[Problem | None]:
        def one(ref: FragmentRef) -> Problem | None:
            return check_fragment(store, ref, payload, item_hash)

        with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
            for done, problem in enumerate(pool.map(one, refs), 1):
                if progress is not None:
                    progress(done, len(refs))
                yield problem

    return check


def _check(report: VerifyReport, kind: str, fn: Callable[[], object]) -> bool:
    try:
        fn()
    except CorruptLog as exc:
        report.problems.append(Problem(kind, exc.obj, exc.problem))
        return False
    return True


def _walk(
    store: ObjectStore, pointer: SnapshotPointer, report: VerifyReport, seen: set[str]
) -> Iterator[FragmentRef]:
    seen.add(pointer.path_to_snapshot)
    try:
        snapshot = load_snapshot(store, pointer)
    except (CorruptLog, DataLost, LogNotFound, StorageError) as exc:
        report.problems.append(_problem(pointer.path_to_snapshot, exc))
        return
    for child in snapshot.snapshots:
        yield from _walk(store, child, report, seen)
    yield from snapshot.fragments


def _check_order(report: VerifyReport, refs: list[FragmentRef], manifest: Manifest) -> None:
    """The whole tree, flattened, is one contiguous run of fragments ending at the tail."""
    for lhs, rhs in itertools.pairwise(refs):
        if lhs.limit != rhs.start:
            report.problems.append(
                Problem("invariant", MANIFEST_KEY, f"fragments are not contiguous: {lhs.path} ends at "
                        f"{lhs.limit}, {rhs.path} starts at {rhs.start}")
            )
    counts = Counter(r.path for r in refs)
    for path in sorted(p for p, n in counts.items() if n > 1):
        where = ", ".join(f"[{r.start}, {r.limit})" for r in refs if r.path == path)
        report.problems.append(Problem(
            "invariant", MANIFEST_KEY,
            f"fragment {path} is referenced twice (at {where}: its records are in the log twice)",
        ))
    total = Setsum.sum(r.setsum for r in refs) + manifest.collected
    if total != manifest.setsum:
        report.problems.append(
            Problem("invariant", MANIFEST_KEY, f"setsum of all fragments + collected "
                    f"{total.hexdigest()} != manifest setsum {manifest.setsum.hexdigest()}")
        )


def check_fragment(
    store: ObjectStore, ref: FragmentRef, payload: pa.Schema | None, item_hash: str | None = None
) -> Problem | None:
    """Check one fragment as a verifying read does (`fragment_io.load_fragment`, and its columns
    against the manifest's schema `payload`, None for a raw log), its setsum recomputed from
    every record whether or not its digest matched (a scrub proves the records, not only the
    bytes), and its stream filter against its column (docs/format.md section 4, "Stream
    filters"), as a Problem."""
    try:
        decoded = load_fragment(store, ref, payload is None, records=True, item_hash=item_hash)
        check_columns_known(ref.path, decoded.payload.schema.names, payload)
        if ref.filter is not None:
            data = decoded.payload
            column = data.column(ref.filter.column) if ref.filter.column in data.column_names else None
            ref.filter.check_against(column, ref.setsum.hexdigest(), ref.path)
    except (CorruptLog, DataLost, LogNotFound, StorageError) as exc:
        return _problem(ref.path, exc)
    return None


def _problem(obj: str, exc: CorruptLog | DataLost | LogNotFound | StorageError) -> Problem:
    """What reading `obj` failing with `exc` says about the log, by the exception's type."""
    if isinstance(exc, DataLost):
        return Problem("collected", obj, f"garbage collection deleted it while verify ran (the "
                       f"log's oldest offset is now {exc.oldest}); run verify again")
    if isinstance(exc, LogNotFound):
        return Problem("missing", MANIFEST_KEY, f"the log was deleted while verify ran: {exc}")
    if isinstance(exc, StorageError):
        return Problem("unreadable", obj, f"cannot be read: {exc}")
    kind = "missing" if exc.invariant in (MISSING_FRAGMENT, MISSING_SNAPSHOT) else "corrupt"
    return Problem(kind, exc.obj, exc.problem)


def _report_extras(store: ObjectStore, report: VerifyReport, fragments: set[str], snapshots: set[str]) -> None:
    for prefix, known in ((FRAGMENT_PREFIX, fragments), (SNAPSHOT_PREFIX, snapshots)):
        try:
            listed = list(store.list(prefix))
        except StorageError as exc:
            report.problems.append(Problem("unreadable", prefix, f"cannot be listed: {exc}"))
            continue
        for meta in listed:
            if meta.key not in known:
                report.problems.append(
                    Problem("extra", meta.key, "not referenced by the manifest (a failed or aborted "
                            "append, or garbage awaiting collection; `wal3 gc` removes it after the grace period)")
                )
