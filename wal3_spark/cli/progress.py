"""Progress bars for the long `wal3` commands (verify, gc, copy, cat), drawn by tqdm on stderr.

A bar is drawn only when stderr is a terminal (tqdm's `disable=None`): piped or redirected, as
under cron or CI, a command's output stays free of control characters. The core reports
progress through plain `progress(done, total)` callbacks and knows nothing of bars.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


class ProgressBar:
    """A `progress(done, total)` callback drawing one bar, made at the first report (so that it
    knows its total) and erased when closed (the command's summary follows it). `show=False`
    draws nothing, whatever the terminal."""

    def __init__(self, label: str, unit: str, *, show: bool = True, stream: TextIO | None = None) -> None:
        self.label, self.unit = label, unit
        self.stream = stream or sys.stderr
        # tqdm's own `disable=None` test, made here so that a command whose stderr is no
        # terminal never imports tqdm (~0.1 s of start-up, with importlib.metadata)
        self.show = show and self.stream.isatty()
        self._bar: tqdm | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.show:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                desc=self.label,
                total=total,
                unit=f" {self.unit}",
                file=self.stream,
                leave=False,
                dynamic_ncols=True,
            )
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
