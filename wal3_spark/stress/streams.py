"""The stress test's logical streams, multiplexed onto one raw log (Chroma's wal3 design,
"End-to-End Verification Stress Test").

Every stream has its own seed. The `seq`-th message a writer incarnation sends on a stream is a
pure function of the stream's seed, the incarnation and `seq` (a counter-mode generator: SHAKE
over those three), so a reader regenerates any message from its stream's seed without replaying
the stream, and a prefix removed by garbage collection costs the reader nothing to skip.

A record's body is an ASCII header naming where it belongs, then the generated payload:

    b"<stream> <writer> <seq> <append> <index>|" + payload

`append` and `index` say which journaled append carried it and where in that append, which is
what lets a reader match each record to the writer's acknowledgement (`wal3_spark.stress.ledger`).
Payload sizes are skewed (most messages are tens of bytes, a few are kilobytes), and streams are
chosen with Zipf weights, so a few streams are hot and most are rare.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

#: payload sizes run from MIN to MAX bytes; the cube of a uniform draw skews them small
MIN_PAYLOAD = 8
MAX_PAYLOAD = 16384


class MessageMismatch(ValueError):
    """A record is not a message the streams could have produced."""


@dataclass(frozen=True)
class Message:
    """Where one record belongs."""

    stream: int
    #: the writer incarnation that sent it (unique per process start, e.g. "w2.5")
    writer: str
    #: its position in the stream as sent by that incarnation (0, 1, ...)
    seq: int
    #: the journaled append (numbered per incarnation) that carried it
    append: int
    #: its position within that append
    index: int


def stream_seed(seed: int, stream: int) -> bytes:
    return f"wal3-stress/{seed}/stream/{stream}".encode()


def payload(seed: int, stream: int, writer: str, seq: int) -> bytes:
    """The message `writer` sends as the `seq`-th of `stream`: its size and bytes both come from
    the stream's generator."""
    key = b"%s/%s/%d" % (stream_seed(seed, stream), writer.encode(), seq)
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") / 2**32
    size = int(MIN_PAYLOAD * (MAX_PAYLOAD / MIN_PAYLOAD) ** (draw**3))
    return hashlib.shake_128(key).digest(size)


def encode(seed: int, message: Message) -> bytes:
    m = message
    header = b"%d %s %d %d %d|" % (m.stream, m.writer.encode(), m.seq, m.append, m.index)
    return header + payload(seed, m.stream, m.writer, m.seq)


def decode(seed: int, body: bytes) -> Message:
    """The message `body` claims to be, checked against its stream's generator."""
    header, bar, rest = bytes(body).partition(b"|")
    fields = header.split(b" ")
    if not bar or len(fields) != 5:
        raise MessageMismatch(f"not a stress record: {bytes(body[:60])!r}")
    try:
        stream, seq, append, index = (int(fields[i]) for i in (0, 2, 3, 4))
        writer = fields[1].decode("ascii")
    except (ValueError, UnicodeDecodeError):
        raise MessageMismatch(f"malformed stress header {header[:60]!r}") from None
    message = Message(stream, writer, seq, append, index)
    if rest != payload(seed, stream, writer, seq):
        raise MessageMismatch(
            f"stream {stream} message {seq} of writer {writer} differs from what the stream's "
            f"generator makes ({len(rest)} bytes)"
        )
    return message


def zipf_cum_weights(streams: int, skew: float) -> list[float]:
    """Cumulative Zipf weights: stream k is chosen in proportion to 1 / (k + 1) ** skew."""
    if streams < 1:
        raise ValueError(f"streams must be >= 1, got {streams}")
    return list(itertools.accumulate(1.0 / (k + 1) ** skew for k in range(streams)))


class StreamPicker:
    """One writer incarnation's view of the streams: which stream comes next (skewed), and the
    next `seq` of each stream for this incarnation."""

    def __init__(self, rng: random.Random, streams: int, skew: float) -> None:
        self.rng = rng
        self.cum_weights = zipf_cum_weights(streams, skew)
        self.next_seq = [0] * streams

    def take(self) -> tuple[int, int]:
        """(stream, seq) of the next message."""
        stream = self.rng.choices(range(len(self.cum_weights)), cum_weights=self.cum_weights)[0]
        seq = self.next_seq[stream]
        self.next_seq[stream] = seq + 1
        return stream, seq
