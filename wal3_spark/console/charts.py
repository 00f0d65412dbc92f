"""The console's two charts as plain SVG geometry, computed here and drawn by the templates.

Inline SVG needs no JavaScript and no charting library: the pages render in any browser, print,
and stay readable with scripts off; a chart is a few hundred shapes at most (the timeline shows
the newest `MAX_POINTS` fragments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wal3_spark.clock import utc_text
from wal3_spark.console.figures import FragmentPoint

#: fragments the timeline draws at most (the newest ones)
MAX_POINTS = 2000
WIDTH, HEIGHT, MARGIN = 720, 240, 48


@dataclass(frozen=True)
class Chart:
    """Shapes in an SVG `viewBox` of WIDTH x HEIGHT: `marks` are (x, y, width, height, title),
    `x_labels` (x, text, SVG text-anchor), `y_labels` (y, text)."""

    marks: list[tuple[float, float, float, float, str]]
    x_labels: list[tuple[float, str, str]]
    y_labels: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    margin: int = MARGIN


def _scale(value: float, low: float, high: float, out_low: float, out_high: float) -> float:
    if high <= low:
        return (out_low + out_high) / 2
    return out_low + (value - low) * (out_high - out_low) / (high - low)


def timeline(points: Sequence[FragmentPoint]) -> Chart:
    """Each fragment as a bar from its start offset to its limit at its write time."""
    timed = [(p, p.written_us) for p in points if p.written_us is not None][-MAX_POINTS:]
    if not timed:
        return Chart([], [], [])
    t0, t1 = min(w for _, w in timed), max(w for _, w in timed)
    o0, o1 = min(p.start for p, _ in timed), max(p.limit for p, _ in timed)
    left, right, top, bottom = MARGIN, WIDTH - 8, 8, HEIGHT - 24
    marks = []
    for p, written_us in timed:
        x = _scale(written_us, t0, t1, left, right)
        y_top, y_bottom = _scale(p.limit, o0, o1, bottom, top), _scale(p.start, o0, o1, bottom, top)
        marks.append((round(x - 1, 1), round(y_top, 1), 2.0, round(max(1.0, y_bottom - y_top), 1),
                      f"[{p.start}, {p.limit}) written {utc_text(written_us / 1e6)}"))
    x_labels: list[tuple[float, str, str]] = [(left, utc_text(t0 / 1e6), "start"), (right, utc_text(t1 / 1e6), "end")]
    y_labels: list[tuple[float, str]] = [(bottom, str(o0)), (top + 8, str(o1))]
    return Chart(marks, x_labels, y_labels)


def bars(values: Sequence[float], labels: Sequence[str]) -> Chart:
    """A bar per value (the append rate per minute), labelled below."""
    left, right, top, bottom = MARGIN, WIDTH - 8, 8, HEIGHT - 24
    high = max(values, default=0) or 1
    slot = (right - left) / max(1, len(values))
    marks = []
    for i, (value, label) in enumerate(zip(values, labels, strict=True)):
        y = _scale(value, 0, high, bottom, top)
        marks.append((round(left + i * slot + 2, 1), round(y, 1), round(slot - 4, 1), round(bottom - y, 1),
                      f"{label}: {value:g}"))
    x_labels = [(round(left + i * slot + slot / 2, 1), label, "middle") for i, label in enumerate(labels)]
    y_labels: list[tuple[float, str]] = [(bottom, "0"), (top + 8, f"{high:g}")]
    return Chart(marks, x_labels, y_labels)
