"""Streams and logs deleted and created again under the same name (docs/design/17-incarnations.md).

A stream's offsets record, next to each log offset, the incarnation of the log it was read in
(`{"offset": 12, "incarnation": "0192…"}`; a log set's per log). Before an offset is used
against a manifest, `recorded_in_this_log` compares them: a log that was deleted and created again
fails the query naming it (`onRecreatedLog=fail`, the default), or is read again from its oldest
offset (`restart`). Offsets written before incarnations existed carry none (`UNRECORDED`) and
are trusted as they always were, unless they are beyond the tail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from wal3_spark.errors import LogRecreated
from wal3_spark.format.incarnation import UNRECORDED, describe, same_log
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.manifest_reader import incarnations_agree
from wal3_spark.spark.options import Wal3Options

logger = logging.getLogger(__name__)

INCARNATION = "incarnation"

FAIL_FIX = (
    "The earlier log's records this query had not read are gone with it. To read the new log "
    "from its oldest offset, set .option(\"onRecreatedLog\", \"restart\") and restart the query "
    "(or start a new query with a new checkpoint)"
)


def recorded(doc: Mapping, key: str = INCARNATION) -> object:
    """The incarnation an offset document records (`UNRECORDED` when it has no such key: a
    checkpoint written before incarnations)."""
    return doc.get(key, UNRECORDED)


def _confirm(manifest: Manifest, reread: Callable[[], Manifest] | None) -> None:
    """With `reread`, a second read of the manifest must agree (`incarnations_agree`); a
    disagreement fails the micro-batch, which is retried."""
    if reread is not None:
        incarnations_agree(manifest.incarnation, reread().incarnation, "the micro-batch is retried")


def _fail_unless_restart(options: Wal3Options, url: str, offset: int, incarnation: object,
                         manifest: Manifest) -> None:
    if options.on_recreated_log == "fail":
        raise LogRecreated(url, offset, describe(incarnation), describe(manifest.incarnation),
                           FAIL_FIX)


def recorded_in_this_log(options: Wal3Options, url: str, offset: int, incarnation: object,
                         manifest: Manifest, reread: Callable[[], Manifest] | None = None) -> bool:
    """Whether `offset`, recorded in `incarnation`, belongs to the log `manifest` heads. When
    it does not (and `reread`, a second read of the manifest, agrees): LogRecreated with
    `onRecreatedLog=fail`, else False, with a warning naming the log (the caller restarts it at
    its oldest offset)."""
    if same_log(incarnation, manifest.incarnation, offset, manifest.next_offset):
        return True
    _confirm(manifest, reread)
    _fail_unless_restart(options, url, offset, incarnation, manifest)
    logger.warning("%s was deleted and created again since offset %d was recorded in it "
                "(incarnation %s, now %s): reading the new log from its oldest offset %d "
                "(onRecreatedLog=restart)", url, offset, describe(incarnation),
                describe(manifest.incarnation), manifest.oldest_offset)
    return False


def stale_batch(options: Wal3Options, url: str, offset: int, incarnation: object,
                manifest: Manifest, reread: Callable[[], Manifest] | None = None) -> bool:
    """Whether a micro-batch ending at `offset` of `incarnation` can no longer be planned from
    `manifest` because the log was created again after the batch was decided (a restarted
    query replanning it): its records went with the earlier log. LogRecreated with
    `onRecreatedLog=fail`; True (plan nothing, warned) with `restart`."""
    if incarnation is UNRECORDED or incarnation == manifest.incarnation:
        return False
    _confirm(manifest, reread)
    _fail_unless_restart(options, url, offset, incarnation, manifest)
    logger.warning("%s was deleted and created again after a micro-batch up to offset %d was "
                "planned: its records went with the earlier log (incarnation %s); the batch reads "
                "nothing from it", url, offset, describe(incarnation))
    return True
