"""A progress counter for the long admin commands (`restore: 120/500 pods` on stderr), redrawn in
place with a carriage return and erased when the work ends: the terminal keeps only the
command's own output. Nothing is written when stderr is no terminal (a pipe, a file, CI) or the
output is meant for a program (`-o json`, `-o html`): the stream a script reads stays as it was.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

# Redrawing more often than this only costs the terminal time; the last count is always drawn.
MIN_REDRAW_SECONDS = 0.1
ERASE_LINE = "\r\x1b[K"


class Progress:
    """``label: done/total unit``, or ``label: done unit`` while the total is unknown."""

    def __init__(
        self,
        label: str,
        unit: str,
        stream: TextIO | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._label = label
        self._unit = unit
        self._clock = clock
        self._on = enabled and _is_terminal(self._stream)
        self._active = False  # between start() and finish()
        self._drawn = False
        self._last_draw = float("-inf")
        self.done = 0
        self.total: int | None = None

    @property
    def shown(self) -> bool:
        """Whether anything is drawn at all (a terminal, and output meant for a person)."""
        return self._on

    def start(self, total: int | None = None) -> None:
        self.total = total
        self.done = 0
        self._active = True
        self._draw(force=True)

    def update(self, done: int) -> None:
        self.done = done
        self._draw(force=self.total is not None and done >= self.total)

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def shrink(self, count: int) -> None:
        """Take ``count`` items out of the total: work that will not be done after all."""
        if self.total is not None:
            self.total = max(self.done, self.total - count)

    def clear(self) -> None:
        """Erase the counter, before other text goes to the same terminal; the next update redraws it."""
        if self._drawn:
            self._stream.write(ERASE_LINE)
            self._stream.flush()
            self._drawn = False
            self._last_draw = float("-inf")

    def redraw(self) -> None:
        """Draw the counter again after :meth:`clear` (other text was written meanwhile)."""
        self._draw(force=True)

    def say(self, line: str, stream: TextIO) -> None:
        """Write a line to `stream`, which may share the counter's terminal: erased, then drawn again."""
        self.clear()
        stream.write(line + "\n")
        stream.flush()
        self.redraw()

    def finish(self) -> None:
        """Erase the counter for good: the command's own output follows."""
        self.clear()
        self._active = False

    def text(self) -> str:
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        return f"{self._label}: {count} {self._unit}"

    def _draw(self, force: bool) -> None:
        if not (self._on and self._active):
            return
        now = self._clock()
        if not force and now - self._last_draw < MIN_REDRAW_SECONDS:
            return
        self._stream.write(ERASE_LINE + self.text())
        self._stream.flush()
        self._drawn = True
        self._last_draw = now


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stream-like object without a file behind it
        return False
