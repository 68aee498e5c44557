"""The shuffle buffer's state after each draw, for exact resumption, cheaply.

Exact mode saves the shuffle buffer as of a ticket: the positions it holds in
storage order and its generator's state (``feedq._resume.ledger.Snapshot``). Copying the
buffer's position column after every draw costs a copy of the whole buffer
per batch; a :class:`SnapshotLog` instead keeps a full snapshot every
:data:`CHECKPOINT_EVERY` draws (a *checkpoint*) and, between them, a log of
what the buffer did: the positions put (references to the arrays the runner
already made, no copy), each draw (with the rows fed so far and the last
position fed), and the close that starts the final draining. A snapshot for
a draw between checkpoints is rebuilt at ``state_dict()`` time by replaying
the log from the checkpoint on a one-column :class:`RandomShuffleQueue` with
the checkpoint's contents and generator state: the same queue code makes the
same draws, so the rebuilt snapshot is the one a copy would have held.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedq._resume.ledger import Snapshot
from feedq.errors import DeadlineExceededError, OutOfRangeError
from feedq.queues import RandomShuffleQueue

__all__: list[str] = []

#: A full copy of the buffer is kept every this many draws.
CHECKPOINT_EVERY = 32

# Log entries: ("put", positions) | ("close",) | ("draw", draw, fed, last, final).
_Op = tuple[Any, ...]


class _Segment:
    """A checkpoint (the snapshot after draw ``draw``; ``closed``: the buffer
    was closed by then) and what followed it."""

    __slots__ = ("draw", "snap", "closed", "ops")

    def __init__(self, draw: int, snap: Snapshot, closed: bool) -> None:
        self.draw = draw
        self.snap = snap
        self.closed = closed
        self.ops: list[_Op] = []


class SnapshotLog:
    """Shuffle-buffer snapshots by draw: checkpoints and a replay log.

    The runner thread (exact mode has one) calls :meth:`checkpoint`,
    :meth:`put`, :meth:`close` and :meth:`draw` in the order it acts on the
    buffer; the consumer side calls :meth:`get` and :meth:`prune`.

    Args:
        batch_size: rows per draw.
        min_after_dequeue: the buffer's ``min_after_dequeue``.
    """

    def __init__(self, batch_size: int, min_after_dequeue: int) -> None:
        self._batch_size = batch_size
        self._min_after = min_after_dequeue
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []  # oldest first; guarded by self._lock
        self._ops: list[_Op] | None = None  # the newest segment's log
        self._closed = False  # runner side only

    # -- runner side --------------------------------------------------------------

    def checkpoint(self, draw: int, snap: Snapshot) -> None:
        """The buffer right after draw ``draw`` (-1: before the first), in full."""
        if draw < 0:
            self._closed = False
        seg = _Segment(draw, snap, self._closed)
        with self._lock:
            if draw < 0:
                self._segments = []
            self._segments.append(seg)
            self._ops = seg.ops

    def put(self, positions: Any) -> None:
        """Rows with these positions (an int64 array, or one int) were put."""
        ops = self._ops
        if ops is not None:
            ops.append(("put", positions))

    def close(self) -> None:
        """The buffer was closed: draws from now on drain it."""
        self._closed = True
        ops = self._ops
        if ops is not None:
            ops.append(("close",))

    def draw(self, draw: int, fed: int, last: int | None, final: bool) -> None:
        """Draw ``draw`` took a batch (``final``: after the close)."""
        ops = self._ops
        if ops is not None:
            ops.append(("draw", draw, fed, last, final))

    # -- consumer side ------------------------------------------------------------

    def get(self, draw: int) -> Snapshot | None:
        """The snapshot after draw ``draw``, or None if no longer kept."""
        with self._lock:
            seg = None
            for s in reversed(self._segments):
                if s.draw <= draw:
                    seg = s
                    break
            if seg is None:
                return None
            ops = list(seg.ops)  # the runner may append meanwhile
        if seg.draw == draw:
            return seg.snap
        return self._replay(seg, ops, draw)

    def prune(self, oldest: int) -> None:
        """Forget what only draws before ``oldest`` need."""
        with self._lock:
            segs = self._segments
            keep = 0
            for i, s in enumerate(segs):
                if s.draw <= oldest:
                    keep = i
            if keep:
                del segs[:keep]

    def _replay(self, seg: _Segment, ops: list[_Op], target: int) -> Snapshot | None:
        """The snapshot after draw ``target``: ``seg``'s checkpoint, then ``ops``
        replayed on a one-column buffer (the same queue code, the same draws)."""
        snap = seg.snap
        buf = RandomShuffleQueue(-1, self._min_after, [np.int64], [[]])
        if snap.buffer.shape[0]:
            buf.enqueue_many([snap.buffer])
        buf._set_generator_state(snap.rng)
        if seg.closed:
            buf.close()
        for op in ops:
            kind = op[0]
            if kind == "put":
                if isinstance(op[1], np.ndarray):
                    buf.enqueue_many([op[1]])
                else:
                    buf.enqueue([op[1]])
            elif kind == "close":
                buf.close()
            else:
                _, draw, fed, last, final = op
                try:
                    if final:
                        buf.dequeue_up_to(self._batch_size, timeout=0)
                    else:
                        buf.dequeue_many(self._batch_size, timeout=0)
                except (DeadlineExceededError, OutOfRangeError):  # pragma: no cover - a bug
                    return None
                if draw == target:
                    positions, rng = buf._snapshot(-1)
                    return Snapshot(positions.astype(np.int64, copy=False), rng, fed, last)
        return None
