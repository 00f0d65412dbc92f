"""What `wal3 info` shows of one log, as one dict: the manifest's figures, the cursors and their
lag, the pending garbage, the branch's parent, pins and tags. The `wal3 info` command prints it
and the console's log page shows it; both read it from here.
"""

from __future__ import annotations

from typing import Any

from wal3_spark.errors import CorruptLog
from wal3_spark.format.garbage import load_garbage
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.cursor_lag import cursor_lags
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import list_pins
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.tags import TagStore
from wal3_spark.ops.garbage_collector import referenced
from wal3_spark.storage.base import ObjectStore


def schema_lines(manifest: Manifest) -> list[str] | None:
    """A structured log's columns as `name: type [not null]`; None for a raw log."""
    schema = manifest.arrow_schema()
    if schema is None:
        return None
    return [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema]


def log_info(store: ObjectStore) -> dict[str, Any]:
    """What `wal3 info` shows of a log."""
    manifest = LogReader(store).manifest()
    cursors, broken = CursorStore(store).list_all()
    refs = list(iter_fragments(store, manifest, 0))
    try:
        manifest.scrub()
        balance = None
    except CorruptLog as exc:
        balance = str(exc)
    tree = referenced(store, manifest)
    garbage, _ = load_garbage(store)
    return {
        "url": store.url,
        "oldest_offset": manifest.oldest_offset,
        "next_offset": manifest.next_offset,
        "records": manifest.next_offset - manifest.oldest_offset,
        "fragments": len(refs),
        "snapshots": len(tree.snapshots),
        "bytes": sum(r.num_bytes for r in refs),
        "acc_bytes": manifest.acc_bytes,
        "setsum": manifest.setsum.hexdigest(),
        "collected": manifest.collected.hexdigest(),
        "balanced": balance is None,
        "balance_problem": balance,
        "schema": schema_lines(manifest),
        "raw": manifest.is_raw,
        "sealed": manifest.sealed,
        "retention": manifest.retention.to_dict() if manifest.retention is not None else None,
        "retention_described": manifest.retention.describe() if manifest.retention is not None else None,
        "cursors": {c.name: c.cursor.offset for c in cursors},
        "broken_cursors": {b.name: b.problem for b in broken},
        "stale_cursors": sorted(b.name for b in broken if b.stale),
        "incarnation": manifest.incarnation,
        "lag": {lag.name: lag.to_dict() for lag in cursor_lags(store, manifest, cursors)},
        "pending_garbage": None if garbage.is_empty() else garbage.summary(),
        "txns": {app: t.version for app, t in manifest.txns.items()},
        "writer": manifest.writer,
        "parent": manifest.parent.to_dict() if manifest.parent is not None else None,
        "pins": [{"name": name, "branch": pin.branch, "start": pin.start, "offset": pin.offset}
                 for name, (pin, _) in sorted(list_pins(store).items())],
        "tags": {t.name: {"offset": t.tag.offset, "start": t.tag.start, "hold": t.tag.hold}
                 for t in TagStore(store).list()},
    }
