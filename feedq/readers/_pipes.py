"""Pipes and devices: non-blocking opens and reads bounded by a reader's waits.

A named pipe, a character device or a ``/proc``-style file is read through
:class:`_PollFile`: opened with ``O_NONBLOCK`` (opening a FIFO with no writer
would otherwise hang in ``open``) and read after ``poll`` says it is
readable, in slices that check the reader's :class:`Waiter` -- the deadline
of the call in progress and the reader's ``close()``.
"""

from __future__ import annotations

import math
import os
import select
import threading
import time
from typing import Any

from feedq.errors import CancelledError, DeadlineExceededError

__all__ = ["INTERRUPTS", "POLL_SLICE", "Waiter"]

#: Longest single wait for a pipe to become readable: a close() or a passed
#: deadline is noticed within this many seconds.
POLL_SLICE = 0.05

#: The exceptions that interrupt a wait for a pipe; the stream stays usable.
INTERRUPTS = (DeadlineExceededError, CancelledError)


class Waiter:
    """What bounds one reader's waits for a pipe: a deadline and ``cancel()``.

    The reader sets ``deadline`` (a ``time.monotonic()`` value, or None for
    no limit) at the start of each call, and calls :meth:`cancel` from
    ``close()`` -- on any thread, without the reader's lock -- to wake a call
    waiting for a pipe. Regular files never wait here.
    """

    def __init__(self) -> None:
        self.deadline: float | None = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Make every wait raise ``CancelledError`` until :meth:`reset`."""
        self._cancelled.set()

    def reset(self) -> None:
        """Undo :meth:`cancel` (the reader is usable again after ``close()``)."""
        self._cancelled.clear()

    def wait_readable(self, poll: Any, name: str) -> None:
        """Wait until ``poll`` (a ``select.poll`` object or an fd) reports data or EOF.

        Raises:
            DeadlineExceededError: the deadline passed first.
            CancelledError: :meth:`cancel` was called.
        """
        while True:
            if self._cancelled.is_set():
                raise CancelledError(f"{name}: the reader was closed while waiting for data")
            wait = POLL_SLICE
            deadline = self.deadline
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            if isinstance(poll, int):  # no select.poll on this platform
                ready = bool(select.select([poll], [], [], wait)[0])
            else:
                ready = bool(poll.poll(math.ceil(wait * 1000)))
            if ready:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceededError(
                    f"{name}: no data within the timeout (a pipe with no writer?)"
                )


class _PollFile:
    """A pipe or device opened non-blocking, read after ``poll`` says it is ready.

    ``read(n)`` waits (bounded by the waiter) until some bytes are there,
    then returns what is there without waiting again: 1..n bytes, ``b""``
    at the end of the data (the last writer closed). An interrupted wait
    raises what the waiter raises, having consumed nothing.
    """

    def __init__(self, raw: Any, name: str, waiter: Waiter) -> None:
        self._raw = raw  # the file object that owns the descriptor
        self._fd: int = raw.fileno()
        self._name = name
        self._waiter = waiter
        self._poll: Any
        if hasattr(select, "poll"):
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN | select.POLLPRI)
        else:  # pragma: no cover - Windows has no FIFOs to open
            self._poll = self._fd
        self._eof = False  # the end was seen after bytes a read returned

    def read(self, n: int) -> bytes:
        if self._eof or n <= 0:
            return b""
        while True:
            self._waiter.wait_readable(self._poll, self._name)
            try:
                first = os.read(self._fd, n)
                break
            except BlockingIOError:  # readable, then drained by someone else
                continue
        if not first or len(first) == n:
            return first
        # Take what else is there now (a fast writer refills the pipe's
        # 64 KiB as we read), without waiting for more.
        parts, got = [first], len(first)
        while got < n:
            try:
                more = os.read(self._fd, n - got)
            except BlockingIOError:
                break
            if not more:
                self._eof = True
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        self._raw.close()



def _open_nonblocking(path: str, flags: int) -> int:
    # Opening a FIFO that has no writer yet must not block (it would ignore
    # every timeout); regular files are unaffected by O_NONBLOCK.
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
