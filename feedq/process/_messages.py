"""Reading a process stage's workers: the :class:`WorkerChannel` a
:class:`~feedq.process.ProcessStage` owns holds the consumer's handle on
each worker and sorts what they send (batches, ends of epochs, errors,
state replies) and their deaths into each worker's inbox for the
consumer's take.

Everything runs in the consumer's thread: ``multiprocessing.connection.wait``
on the workers' pipes and process sentinels, so a dead worker is seen the
moment it dies.
"""

from __future__ import annotations

import multiprocessing.connection as mp_connection
import pickle
import time
from collections import deque
from typing import Any

from feedq.errors import DataLossError
from feedq.process._launch import WorkerHandle, describe_exit, stop_workers
from feedq.process._slots import SlotRing

__all__ = ["WAIT_SLICE_SECS", "WorkerChannel"]

# The consumer's waits are sliced this finely, to notice close() from
# another thread and a pipeline stop.
WAIT_SLICE_SECS = 0.1


class WorkerChannel:
    """The consumer's line to its workers: their handles, pipes and sentinels.

    Invariants: everything a worker sent before it ended is in its inbox
    before its end is noted; a worker's death is an inbox event (``"dead"``)
    unless it had said it was done, had failed, or the stage is
    :attr:`closing`; with ``first_ready`` order, :attr:`arrivals` names a
    worker once per event in its inbox, in the order they came. Batch
    messages map their segment at once (:meth:`SlotRing.map`), so that a
    segment's name is unlinked as soon as both sides have it mapped.
    """

    def __init__(self, order: str, ring: SlotRing) -> None:
        self.handles: list[WorkerHandle] = []
        self.arrivals: deque[int] = deque()
        #: Set when the stage closes or stops its workers: exits are expected
        #: (no "dead" events) and waits for the workers end.
        self.closing = False
        self._first_ready = order == "first_ready"
        self._ring = ring

    def send_all(self, msg: tuple[Any, ...]) -> None:
        """Send ``msg`` to every worker still listening."""
        for h in self.handles:
            h.send(msg)

    def stop(self, grace: float) -> None:
        """Stop every worker not stopped yet (ask, wait ``grace`` s, SIGTERM,
        SIGKILL), unlink the segment names they announced, and forget what
        they had sent."""
        self.closing = True
        stop_workers([h for h in self.handles if not h.stopped], grace)
        self.arrivals.clear()

    def pump(self, timeout: float) -> None:
        """Read what the workers sent; wait up to ``timeout`` for something."""
        waitables: list[Any] = []
        for h in self.handles:
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
        for h in self.handles:
            if h.conn_open and h.conn in ready:
                self._drain(h)
            if not h.exited and h.process.sentinel in ready:
                self._drain(h)  # everything it sent before it ended
                self._on_exit(h)

    def poll_fast(self, worker: int | None) -> None:
        """Read what came without waiting: from ``worker`` (the one whose
        turn it is: one ``poll``) if it sent something, else from everyone."""
        if worker is not None:
            h = self.handles[worker]
            if h.conn_open and h.conn.poll():
                self._drain(h)
                return
        self.pump(0.0)

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
            seg = self._ring.map(h, slot, name)
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
        elif kind == "storage":
            h.storage = msg[1]  # its remote reads since it started, in all
            return
        else:  # pragma: no cover - a protocol error
            raise DataLossError(f"process stage worker {h.index}: unexpected message {kind!r}")
        if self._first_ready:
            self.arrivals.append(h.index)

    def _on_exit(self, h: WorkerHandle) -> None:
        h.exited = True
        h.conn_open = False
        h.process.join(1.0)
        if h.done or h.failed or self.closing:
            return
        code = h.process.exitcode
        how = describe_exit(code)
        if not h.hello:
            how += (" before it started (see its stderr; with start_method='spawn' or "
                    "'forkserver' the build function must be importable by the worker)")
        h.inbox.append(("dead", code, how))
        if self._first_ready:
            self.arrivals.append(h.index)
