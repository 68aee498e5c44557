"""Live progress for ``feedq bench --progress`` and ``feedq demo``, on stderr.

On a terminal: the running figures and one fill bar per queue of the
pipeline (how full each stage's output queue is), redrawn in place. Not on a
terminal (``--progress`` into a file or a pipe): one plain line every few
seconds, no escape codes. Nothing is ever written to stdout, so ``--json``
output stays clean.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["LiveProgress", "bar"]

BAR_WIDTH = 24


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########.......]``: ``fraction`` (clamped to 0..1) of ``width`` cells."""
    f = min(1.0, max(0.0, fraction))
    full = round(f * width)
    return "[" + "#" * full + "." * (width - full) + "]"


def _fill(q: Any) -> float:
    cap = int(getattr(q, "capacity", 0))
    return int(getattr(q, "size", 0)) / cap if cap > 0 else 0.0


class LiveProgress:
    """``progress(result, queues)``: show a bench result's running figures and
    its queues' fills (objects with ``name``, ``size`` and ``capacity``).

    Args:
        stream: where to write (default: stderr).
        tty: draw bars in place (default: whether ``stream`` is a terminal).
        every: seconds between plain lines when not drawing in place.
    """

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None,
                 every: float = 2.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if isatty is not None else False
        self.tty = tty
        self.every = every
        self._drawn = 0  # lines of the last drawing (tty)
        self._last_line: float | None = None  # when the last plain line was written
        self.title = ""

    def __call__(self, result: Any, queues: Sequence[Any]) -> None:
        head = (f"{self.title}{result.records:>12,} records  {result.records_per_s:>12,.0f} rec/s  "
                f"{result.mb_per_s:>8,.1f} MB/s  {result.seconds:6.1f} s")
        if self.tty:
            width = max([len(str(q.name)) for q in queues] + [5])
            lines = [head] + [f"  {str(q.name).ljust(width)}  {bar(_fill(q))} "
                              f"{100 * _fill(q):3.0f}%  {q.size:,}/{q.capacity:,}" for q in queues]
            self._draw(lines)
            return
        now = time.monotonic()
        if self._last_line is not None and now - self._last_line < self.every:
            return
        self._last_line = now
        fills = ", ".join(f"{q.name} {100 * _fill(q):.0f}%" for q in queues)
        self._write(f"{head.strip()}" + (f"  queues: {fills}" if fills else "") + "\n")

    def message(self, text: str) -> None:
        """A line of its own (below the bars on a terminal)."""
        self.finish()
        self._write(text + "\n")

    def finish(self) -> None:
        """Leave the last drawing in place; the next one starts below it."""
        self._drawn = 0

    def _draw(self, lines: list[str]) -> None:
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        self._write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self._drawn = len(lines)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed: progress is not worth failing for
            pass
