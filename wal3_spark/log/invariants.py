"""The rules an append must satisfy, checked by the committer against the very manifest it
compare-and-swaps (docs/design/20-committing.md and docs/design/32-orphan-horizon.md).

Each rule is one function named after what it guarantees, raising the error that tells the
caller what to do; the committer calls them in the order they are listed here. They are kept
together, apart from the compare-and-swap machinery, so the protocol's promises about an append
can be read (and tested) one by one. Most are pure checks of the manifest and the fragments;
`check_not_collected` reads the pending garbage and looks for files, because only storage can
tell a collected fragment from one never committed.

Design: docs/design/17-incarnations.md, docs/design/20-committing.md,
docs/design/32-orphan-horizon.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from wal3_spark.clock import utc_text
from wal3_spark.errors import (
    AlreadyCollected,
    AppendsUnsupported,
    CommitFailed,
    CorruptLog,
    InvalidOption,
    LogSealed,
    PastOrphanHorizon,
    SchemaMismatch,
)
from wal3_spark.format.garbage import load_garbage
from wal3_spark.format.incarnation import UNPINNED, UNRECORDED, describe
from wal3_spark.format.layout import FIRST_OFFSET, GARBAGE_KEY, MANIFEST_KEY, FragmentRef, is_u64
from wal3_spark.format.manifest import Manifest, NewFragment
from wal3_spark.format.schema import reconcile
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.replaced import REPLACED_PREFIX, may_be_compacted, replaced_paths
from wal3_spark.storage.base import ObjectStore


def check_txn(app_id: object, version: object) -> None:
    """An idempotent writer's id is a non-empty string and its version an integer within
    [0, 2**64) (`InvalidOption`, before anything is written): the rule readers apply to the
    manifest's `txns` (`Txn.check`), so a commit cannot write a version every later read and
    write of the log would refuse ("7", 1.5, True, nan, -1, 10**40)."""
    if not isinstance(app_id, str) or not app_id:
        raise InvalidOption(f"app_id={app_id!r}: give the writer id as a non-empty string")
    if not is_u64(version):
        raise InvalidOption(f"version={version!r}: give an integer within [0, 2**64), as "
                            "readers take it (a Spark batch id is one), not a string, float or bool")


def check_new_fragments(fragments: Sequence[NewFragment]) -> None:
    """Each fragment to commit holds at least one record, has a size and a setsum, and a path
    its UUID names (`InvalidOption`, before anything is written): what readers check of every
    pointer (`FragmentRef.check`). `write_fragments` makes such fragments; a caller building
    its own could otherwise write a manifest no reader accepts."""
    for frag in fragments:
        records, num_bytes = getattr(frag, "records", None), getattr(frag, "num_bytes", None)
        problem = (
            f"records={records!r}: give an integer >= 1" if not (is_u64(records) and records >= 1)
            else f"num_bytes={num_bytes!r}: give an integer within [0, 2**64)" if not is_u64(num_bytes)
            else f"setsum={frag.setsum!r}: give a Setsum" if not isinstance(frag.setsum, Setsum)
            else None
        )
        if problem is None:
            try:
                FragmentRef(frag.path, frag.uuid, FIRST_OFFSET, FIRST_OFFSET + frag.records,
                            frag.num_bytes, frag.setsum).check(MANIFEST_KEY)
            except CorruptLog as exc:
                problem = exc.problem
        if problem is not None:
            raise InvalidOption(f"fragment {getattr(frag, 'path', frag)!r}: {problem}; nothing was "
                                "committed (write fragments with write_fragments)")


def check_same_log(current: Manifest | None, incarnation: object, url: str) -> None:
    """Fragments commit only into the log they were written for (`CommitFailed`): deleting a
    log (its whole prefix) takes the fragments written for it with it, so committing them into
    the log created again under the name would acknowledge records that are not there
    (docs/design/17-incarnations.md). `incarnation` is the one the writer saw when it decided where
    the fragments go: the commit needs exactly that one (None: a log created before
    incarnations). `UNPINNED` is `check_still_there`'s; `UNRECORDED` checks nothing (a caller
    that does not say). Checked first: nothing else about another log matters."""
    if incarnation is UNRECORDED or incarnation is UNPINNED:
        return
    if current is None or current.incarnation != incarnation:
        now = describe(current.incarnation) if current is not None else "no log"
        raise CommitFailed(
            f"{url} was deleted since these fragments were written for its incarnation "
            f"{describe(incarnation)} (now: {now}): nothing was committed; append the records again"
        )


def check_still_there(
    store: ObjectStore, current: Manifest | None, incarnation: object, fragments: Sequence[NewFragment], url: str,
) -> None:
    """Fragments written for no one incarnation (`UNPINNED`: the log did not exist, or the tasks
    of one job saw different ones) commit into whichever log the commit finds, or none, once
    every one of them is found still there (`CommitFailed` otherwise): a log created by another
    writer meanwhile took nothing, a log deleted since took them. One HEAD per fragment, on
    every manifest the commit decides on: the compare-and-swap is conditioned on that manifest,
    so a deletion after the check fails it and the next decision checks again. Checked last:
    `check_not_collected` tells fragments collected after an earlier commit of them, and
    `check_orphan_horizon` fragments swept as orphans (prefix GC's fence of a name with no log)."""
    if incarnation is not UNPINNED:
        return
    gone = next((f.path for f in fragments if not store.exists(f.path)), None)
    if gone is not None:
        now = describe(current.incarnation) if current is not None else "none: no log"
        raise CommitFailed(
            f"{gone}, written for {url} when it did not exist yet, is gone: the log was deleted "
            f"since (it now has incarnation {now}). Nothing was committed; append the records again"
        )


def check_not_sealed(manifest: Manifest, url: str) -> None:
    """A sealed log takes no more appends (`LogSealed`); readers keep working. Sealing is how
    a log is retired or handed over (`wal3 seal`, `copy_log`): an append after it would be lost
    to whoever took over."""
    if manifest.sealed:
        raise LogSealed(url)


def check_appends_supported(manifest: Manifest, url: str) -> None:
    """A log whose fragments are numbered by sequence number (Chroma's S3 layout) is not
    appended to (`AppendsUnsupported`): this writer names fragments by UUIDv7, and one log
    mixing both would have two orders for its fragments."""
    if manifest.uses_seq_nos:
        raise AppendsUnsupported(url)


#: why fragments past the orphan horizon are gone when a compaction may have replaced them: the
#: commit deciding this found no compaction record of them (it would have resolved the commit as
#: already placed), but records are deleted after the orphan grace, with the replaced fragments
_SWEPT_OR_COMPACTED = (
    "garbage collection may have deleted them as orphans (then nothing was committed: rerun the "
    "append), or an earlier commit of them succeeded and a compaction of the log since replaced "
    "them by a merged fragment, after which garbage collection deleted them and the compaction's "
    "record after the orphan grace (then they are already committed: do not rerun, the records "
    "would be delivered twice). The log's compactions reach past their write time, so which "
    "happened cannot be told. Nothing was committed now; look for the records with `wal3 cat` "
    "before rerunning"
)


def check_orphan_horizon(manifest: Manifest, fragments: Sequence[NewFragment], url: str) -> None:
    """Refuse fragments that garbage collection may have deleted as orphans (`PastOrphanHorizon`).

    GC raises the manifest's orphan horizon (by compare-and-swap) before it deletes any
    unreferenced fragment created before it; a commit checks the horizon of the very manifest
    it compare-and-swaps against, so either GC saw the fragments referenced, or the commit sees
    the horizon and refuses (docs/design/32-orphan-horizon.md). A fragment whose age is unknown (not a
    UUIDv7) counts as older than any horizon.
    """
    horizon = manifest.orphan_horizon_us
    if horizon is None:
        return
    old = [f for f in fragments if (uuid7_timestamp_us(f.uuid) or 0) < horizon]
    if not old:
        return
    prefix = (f"{len(old)} of this commit's fragments (e.g. {old[0].path}) were written before "
              f"{utc_text(horizon / 1e6)}, the orphan horizon of {url}: ")
    if may_be_compacted(manifest, old):
        raise PastOrphanHorizon(prefix + _SWEPT_OR_COMPACTED)
    raise PastOrphanHorizon(
        prefix + "garbage collection may have deleted them as orphans. Nothing was committed; rerun "
        "the append. If appends take longer than that, give `wal3 gc --grace` more time than your "
        "longest append job"
    )



def target_schema(manifest: Manifest, schema: pa.Schema | None, merge: bool, url: str) -> pa.Schema | None:
    """The schema the log has after appending records written in `schema` (None: raw `body`
    records), or `SchemaMismatch`. Every fragment of a structured log decodes to the manifest's
    schema, so a reader never meets a column it cannot type: raw records never enter a
    structured log, a raw log that holds records turns structured only through `reconcile`'s
    raw-log rule, an empty raw log takes the first structured append's schema, and a structured
    log changes only as `reconcile` allows (added columns with `merge`, safe widenings)."""
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


def check_item_hash(fragments: Sequence[NewFragment], expected: str | None, url: str) -> None:
    """Writers never change a log's `item_hash` (`CommitFailed`): the setsum of fragments
    whose chunk items were hashed otherwise would never verify against the manifest's."""
    wrong = [f.path for f in fragments if f.item_hash != expected]
    if wrong:
        raise CommitFailed(
            f"{len(wrong)} fragment(s) (e.g. {wrong[0]}) hash their setsum items otherwise than "
            f"{url} does (item_hash {expected!r}); nothing was committed. Write them with the "
            "item hash the log's manifest names (Manifest.append_item_hash) and append again"
        )


def check_not_collected(store: ObjectStore, manifest: Manifest, fragments: Sequence[NewFragment]) -> None:
    """Refuse fragments that an earlier commit placed and garbage collection has since collected
    (`AlreadyCollected`), given that `manifest`, which this commit compare-and-swaps against,
    does not hold them: the pending garbage lists them, or their files are gone. Appending them
    again would deliver their records twice.

    Sound because of the order of GC's steps (docs/design/20-committing.md): the garbage listing a
    fragment is written before the apply step removes it from the manifest, and reset only after
    the delete step deleted it. A fragment that `manifest` no longer holds because of an apply
    was listed before `manifest` was read (or, with a remembered manifest, before this commit's
    write, conditioned on it, can land); the garbage is read here, after that, and the file
    looked for after the garbage: not listed means the garbage was reset, so the file is gone.
    Only fragments at or below the collected bound are looked for (`may_be_collected`): the
    common commit, of fragments written after the newest one GC collected, makes no request.
    A gone fragment older than the orphan horizon may instead have been swept as an orphan:
    then which happened cannot be told (`PastOrphanHorizon`, saying so)."""
    suspects = may_be_collected(manifest, fragments)
    if not suspects:
        return
    listed, missing = pending_or_gone(store, suspects)
    if listed:
        raise AlreadyCollected(
            f"{len(listed)} of this commit's fragments (e.g. {listed[0]}) were already committed to "
            f"{store.url} and since collected: the pending garbage ({GARBAGE_KEY}) lists them, so "
            "a cursor had moved past their records (their offsets are no longer known). Nothing "
            "was written; do not rerun the append (the records would be delivered twice) and do "
            "not delete the fragments (garbage collection deletes them after its grace interval)",
            pending=True,
        )
    if not missing:
        return
    swept = maybe_swept(store, missing)
    if swept:
        swept_paths = set(swept[0])
        proven = sorted(replaced_paths(store, swept_paths))
        if proven:
            raise PastOrphanHorizon(
                f"{len(proven)} of this commit's fragments (e.g. {proven[0]}) were already committed "
                f"to {store.url}: a compaction record ({REPLACED_PREFIX}) lists them as replaced by a "
                "merged fragment, and garbage collection has since deleted them. Nothing was "
                "committed now; do not rerun the append (the records would be delivered twice)"
            )
        if may_be_compacted(manifest, [f for f in missing if f.path in swept_paths]):
            raise PastOrphanHorizon(
                f"{len(swept[0])} of this commit's fragments (e.g. {swept[0][0]}) are no longer in "
                f"{store.url}, and were written before {utc_text(swept[1] / 1e6)}, its orphan horizon: "
                + _SWEPT_OR_COMPACTED + " (a cursor may also have moved past an earlier commit of them)"
            )
        raise PastOrphanHorizon(
            f"{len(swept[0])} of this commit's fragments (e.g. {swept[0][0]}) are no longer in "
            f"{store.url}, and were written before {utc_text(swept[1] / 1e6)}, its orphan horizon: garbage "
            "collection deleted them, as orphans (then nothing was committed: rerun the append) "
            "or after an earlier commit of them that a cursor had moved past (then they were "
            "already committed and since collected, their offsets no longer known: do not rerun "
            "it). Nothing was committed now. If this commit retries one whose outcome was "
            "unknown, check the records with `wal3 cat` before rerunning"
        )
    raise AlreadyCollected(
        f"{len(missing)} of this commit's fragments (e.g. {missing[0].path}) were already "
        f"committed to {store.url} and since collected: their files were deleted by garbage "
        "collection's delete step after a cursor had moved past their records (not as orphans: "
        "they are younger than the orphan horizon), and their offsets are no longer known. "
        "Nothing was written; do not rerun the append (the records would be delivered twice)",
        pending=False,
    )


def may_be_collected(manifest: Manifest, fragments: Sequence[NewFragment]) -> list[NewFragment]:
    """The fragments an earlier commit may have placed and garbage collection since collected
    (docs/design/20-committing.md): those written (UUIDv7 time; 0 when unknown) at or before the
    newest write time of any fragment GC ever collected (`collected_written_us`); a fragment is
    committed after it is written and collected after it is committed, so the fragments written
    after the bound cannot be among them. All of them when the bound is not known: a log
    collected before the field (`collected` non-empty) until its next collection records one."""
    bound = manifest.collected_written_us
    if bound is None:
        return list(fragments) if manifest.collected != Setsum() else []
    return [f for f in fragments if (uuid7_timestamp_us(f.uuid) or 0) <= bound]


def pending_or_gone(
    store: ObjectStore, fragments: Sequence[NewFragment]
) -> tuple[list[str], list[NewFragment]]:
    """The paths of `fragments` the pending garbage lists, and the others whose files are gone:
    the garbage is read first, then the files looked for (`check_not_collected` says why)."""
    pending = set(load_garbage(store)[0].fragment_paths())
    listed = [f.path for f in fragments if f.path in pending]
    return listed, [f for f in fragments if f.path not in pending and not store.exists(f.path)]


def maybe_swept(store: ObjectStore, gone: Sequence[NewFragment]) -> tuple[list[str], int] | None:
    """Of fragments found gone, those the orphan sweep may have deleted (never committed), with
    the orphan horizon; None when none. A gone fragment was deleted by a collection's delete
    step, or by the sweep, which raises the horizon past a fragment before it deletes it: a
    manifest read now, after it was found gone, tells them apart unless the fragment is older
    than that horizon; then either may have happened."""
    if not gone:
        return None
    horizon = Manifest.from_bytes(store.get(MANIFEST_KEY).data).orphan_horizon_us
    if horizon is None:
        return None
    swept = [f.path for f in gone if (uuid7_timestamp_us(f.uuid) or 0) < horizon]
    return (swept, horizon) if swept else None
