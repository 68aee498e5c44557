"""Reading a process stage's workers: their control messages (batches,
ends of epochs, errors, state replies) and their deaths, sorted into each
worker's inbox for the consumer's take.

Everything runs in the consumer's thread: ``multiprocessing.connection.wait``
on the workers' pipes and process sentinels, so a dead worker is seen the
moment it dies.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection as mp_connection
import pickle
import time
from collections import deque
from typing import Any

from feedq.errors import DataLossError
from feedq.process._launch import WorkerHandle, describe_exit
from feedq.process._shm import Segment, unlink

__all__ = ["WAIT_SLICE_SECS", "MessagesMixin"]

# The consumer's waits are sliced this finely, to notice close() from
# another thread and a pipeline stop.
WAIT_SLICE_SECS = 0.1


class MessagesMixin:
    """The message-reading methods of :class:`ProcessStage`."""

    # Set by ProcessStage.__init__ (see there).
    _handles: list[WorkerHandle]
    _order: str
    _rotation: list[int]
    _turn: int
    _arrivals: deque[int]
    _closing: bool
    _closed: bool

    def _pump(self, timeout: float) -> None:
        """Read what the workers sent; wait up to ``timeout`` for something."""
        waitables: list[Any] = []
        for h in self._handles:
            if h.conn_open:
                waitables.append(h.conn)
            if not h.exited:
                waitables.append(h.process.sentinel)
        if not waitables:
            if timeout > 0:
                time.sleep(min(timeout, WAIT_SLICE_SECS))
            return
        ready = mp_connection.wait(waitables, timeout)
        if not ready:
            return
        for h in self._handles:
            if h.conn_open and h.conn in ready:
                self._drain(h)
            if not h.exited and h.process.sentinel in ready:
                self._drain(h)  # everything it sent before it ended
                self._on_exit(h)

    def _poll_fast(self) -> None:
        """Read what came without waiting: the worker whose turn it is (one
        ``poll``), or everyone (first-ready)."""
        if self._order == "deterministic" and self._rotation:
            h = self._handles[self._rotation[self._turn % len(self._rotation)]]
            if h.conn_open and h.conn.poll():
                self._drain(h)
                return
        self._pump(0.0)

    def _drain(self, h: WorkerHandle) -> None:
        while h.conn_open:
            try:
                if not h.conn.poll():
                    return
                msg = pickle.loads(h.conn.recv_bytes())
            except (EOFError, OSError):
                h.conn_open = False
                return
            self._on_message(h, msg)

    def _on_message(self, h: WorkerHandle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "batch":
            _, epoch, slot, name, gen, nbytes, tree, descs = msg
            if tree is None:
                tree, descs = h.layout  # as the previous batch
            else:
                h.layout = (tree, descs)
            seg = h.slot_seg.get(slot)
            if seg is None or seg.name != name:
                if seg is not None:
                    self._detach(seg)
                try:
                    seg = Segment.open(name)
                except OSError as exc:
                    raise DataLossError(
                        f"process stage worker {h.index} (pid {h.pid}): cannot map its shared "
                        f"memory segment {name!r}: {exc}"
                    ) from None
                with contextlib.suppress(OSError):
                    unlink(name)  # both sides have it mapped: it needs no name any more
                h.slot_seg[slot] = seg
            h.inbox.append(("batch", epoch, slot, seg, gen, nbytes, tree, descs))
        elif kind in ("end", "error"):
            if kind == "error":
                h.failed = True
            h.inbox.append(msg)
        elif kind == "seg":
            h.announced.append(msg[1])
            return
        elif kind == "hello":
            h.hello = True
            return
        elif kind == "slots":
            h.slots = msg[1]
            return
        elif kind == "done":
            h.done = True
            return
        elif kind == "state":
            h.replies[msg[1]] = msg
            return
        else:  # pragma: no cover - a protocol error
            raise DataLossError(f"process stage worker {h.index}: unexpected message {kind!r}")
        if self._order == "first_ready":
            self._arrivals.append(h.index)

    def _on_exit(self, h: WorkerHandle) -> None:
        h.exited = True
        h.conn_open = False
        h.process.join(1.0)
        if h.done or h.failed or self._closing or self._closed:
            return
        code = h.process.exitcode
        how = describe_exit(code)
        if not h.hello:
            how += (" before it started (see its stderr; with start_method='spawn' or "
                    "'forkserver' the build function must be importable by the worker)")
        h.inbox.append(("dead", code, how))
        if self._order == "first_ready":
            self._arrivals.append(h.index)

    def _detach(self, seg: Segment) -> None:
        """The worker replaced ``seg``: close it once no batch uses it."""
        if seg.users == 0:
            seg.close()
        else:
            seg.detached = True
