"""The shuffle buffer of ``shuffle_batch`` and ``shuffle_batch_join`` (B10, B11, X12).

TF1 batched straight out of a RandomShuffleQueue, so the order depended on
when consumers dequeued. feedq's shuffling batchers put every element into a
:class:`ShuffleBuffer` that only their runner threads touch: each insert is
followed by draws of ``batch_size`` elements while the buffer holds at least
``min_after_dequeue + batch_size``, and the drawn blocks go to the stage's
FIFO queue. With a seed and one runner thread the order is reproducible,
whatever the consumer does (X12).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedq._resume import snapshot_log as _snapshot_log
from feedq._resume.ledger import Ledger, Snapshot
from feedq._resume.snapshot_log import SnapshotLog
from feedq.errors import DeadlineExceededError, InvalidArgumentError, OutOfRangeError
from feedq.queues import FIFOQueue, QueueBase, RandomShuffleQueue

__all__ = ["ShuffleBuffer"]


class ShuffleBuffer:
    """Random draws between a batcher's runner threads and its output queue.

    The buffer is an unbounded RandomShuffleQueue, but every insert is
    followed by draining it below ``min_after_dequeue + batch_size``, so it
    never holds more than that plus one inserted block. It is read only with
    ``timeout=0``, so nothing ever blocks on it and it needs no cancel op:
    blocking happens on ``out``, which the runner cancels.

    Args:
        out: the queue the drawn blocks go to.
        batch_size: elements per draw.
        min_after_dequeue: elements kept in the buffer after a draw (B10).
        seed: the buffer's seed (``None``: nondeterministic).
        writers: runner threads that put into the buffer; the last one to
            call :meth:`writer_done` empties it.
        dtypes, shapes: the element spec (as for ``out``).
        name: the stage's name (the buffer is ``<name>/random_shuffle_queue``).
    """

    def __init__(
        self,
        out: QueueBase,
        *,
        batch_size: int,
        min_after_dequeue: int,
        seed: int | None,
        writers: int,
        dtypes: list[np.dtype[Any]],
        shapes: list[list[int | None] | None],
        name: str,
    ) -> None:
        self._out = out
        self._batch_size = int(batch_size)
        self._min_after = int(min_after_dequeue)
        self._buf = RandomShuffleQueue(-1, min_after_dequeue, dtypes, shapes, seed=seed,
                                       name=f"{name}/random_shuffle_queue")
        self._lock = threading.Lock()
        self._writers = writers  # guarded by self._lock
        self._fed = 0  # rows put by put(many=True) so far; guarded by self._lock
        # Exact resumption (a resumable pipeline; the last column holds
        # positions): what the buffer does is logged for the ledger's
        # snapshots (see feedq._resume.snapshot_log).
        self._log: SnapshotLog | None = None
        self._draws = 0
        self._last: int | None = None  # position of the last row put
        self._pool: list[list[Any]] | None = None  # rows re-read for a restore
        self._restore: Snapshot | None = None
        # Draws handed to the output queue without a copy: a plain FIFOQueue
        # of the buffer's own spec, every component dense and numeric (so a
        # draw's columns are already the queue's columns: no codec between).
        self._owned = (
            type(out) is FIFOQueue
            and len(out.dtypes) == len(dtypes)
            and all(np.dtype(a) == np.dtype(b) and np.dtype(b).kind in "biufc"
                    for a, b in zip(out.dtypes, dtypes))
            and all(sh is not None and all(d is not None for d in sh) for sh in shapes)
            and [tuple(s) for s in out.shapes] == [tuple(s) for s in shapes]  # type: ignore[arg-type]
        )

    def track(self, ledger: Ledger) -> None:
        """Keep the buffer's snapshots by draw for ``ledger`` (one writer only)."""
        self._log = SnapshotLog(self._batch_size, self._min_after)
        ledger.snapshots = self._log
        self._log.checkpoint(-1, self._snapshot())

    def restore(self, snap: Snapshot) -> None:
        """Before anything is put: the first ``len(snap.buffer)`` rows put
        are the buffer's saved contents; they are placed in the saved storage
        order, without a draw, and the generator gets its saved state."""
        self._restore = snap
        self._pool = []
        if self._log is not None:
            self._log.checkpoint(-1, snap)
        if snap.buffer.shape[0] == 0:
            self._finish_restore()

    def _snapshot(self) -> Snapshot:
        positions, rng = self._buf._snapshot(-1)
        return Snapshot(positions.astype(np.int64, copy=False), rng, self._fed, self._last)

    def _finish_restore(self) -> None:
        snap, pool = self._restore, self._pool
        assert snap is not None and pool is not None
        self._restore = self._pool = None
        if pool:
            cols = [np.concatenate([np.asarray(p[i]) for p in pool]) for i in range(len(pool[0]))]
            positions = cols[-1].astype(np.int64)
            order = np.argsort(positions, kind="stable")
            pos = np.searchsorted(positions[order], snap.buffer)
            pos = np.minimum(pos, positions.shape[0] - 1)
            if positions.shape[0] != snap.buffer.shape[0] or not np.array_equal(positions[order][pos], snap.buffer):
                raise InvalidArgumentError(
                    "resume: the records re-read for the shuffle buffer are not the saved ones "
                    "(the input files changed?)"
                )
            take = order[pos]
            self._buf.enqueue_many([c[take] for c in cols])
        self._buf._set_generator_state(snap.rng)
        self._fed = snap.fed
        self._last = snap.last

    def _fill_pool(self, values: list[Any], many: bool) -> tuple[list[Any], bool] | None:
        """Restoring: put rows into the pool; what is left after it is full."""
        assert self._pool is not None and self._restore is not None
        need = self._restore.buffer.shape[0] - sum(len(p[-1]) for p in self._pool)
        if not many:
            self._pool.append([np.asarray(v)[None] for v in values])
            rest = None
        else:
            n = len(values[-1])
            self._pool.append([np.asarray(v)[:need] for v in values])
            rest = [np.asarray(v)[need:] for v in values] if n > need else None
        if sum(len(p[-1]) for p in self._pool) >= self._restore.buffer.shape[0]:
            self._finish_restore()
        return None if rest is None else (rest, True)

    @property
    def output(self) -> QueueBase:
        """The queue the drawn blocks go to."""
        return self._out

    @property
    def batch_size(self) -> int:
        """Elements per draw."""
        return self._batch_size

    @property
    def min_after_dequeue(self) -> int:
        """Elements kept in the buffer after a draw."""
        return self._min_after

    @property
    def queue(self) -> RandomShuffleQueue:
        """The RandomShuffleQueue holding the elements not yet drawn."""
        return self._buf

    def put(self, values: list[Any], many: bool) -> None:
        """Insert one element (``many=False``) or a block of rows, drawing
        full batches into ``out`` as the buffer allows."""
        buf, batch_size = self._buf, self._batch_size
        if self._pool is not None:
            rest = self._fill_pool(values, many)
            if rest is None:
                return
            values, many = rest
        log = self._log
        if not many:
            buf.enqueue(values)
            if log is not None:
                self._last = last = int(values[-1])
                log.put(last)
            self._drain(final=False)
            return
        # Insert in pieces that end at multiples of batch_size counted over
        # the whole stream, draining after each: the buffer sees the same
        # operations however the rows were blocked upstream, so a seeded
        # single-thread run is reproducible (X12).
        n = len(values[0])
        start = 0
        while start < n:
            with self._lock:
                take = min(batch_size - self._fed % batch_size, n - start)
                self._fed += take
                aligned = self._fed % batch_size == 0
            chunk = [np.asarray(v)[start : start + take] for v in values]
            buf.enqueue_many(chunk)
            if log is not None:
                positions = chunk[-1]
                self._last = int(positions[-1])
                log.put(positions)
            start += take
            if aligned:
                self._drain(final=False)

    def writer_done(self) -> None:
        """A runner thread saw the end of its input. The last one empties the
        buffer into ``out`` (in random order) before the runner closes ``out``."""
        with self._lock:
            self._writers -= 1
            last = self._writers == 0
        if last:
            if self._pool is not None:
                raise InvalidArgumentError(
                    "resume: the input ended before the shuffle buffer's saved records were "
                    "re-read (the input files changed?)"
                )
            self._buf.close()
            if self._log is not None:
                self._log.close()
            self._drain(final=True)

    def _drain(self, final: bool) -> None:
        buf, batch_size = self._buf, self._batch_size
        while True:
            try:
                if final:
                    blk = buf.dequeue_up_to(batch_size, timeout=0)
                elif buf.size() >= self._min_after + batch_size:
                    blk = buf.dequeue_many(batch_size, timeout=0)
                else:
                    return
            except (DeadlineExceededError, OutOfRangeError):
                return
            log = self._log
            if log is not None:
                # Before the batch can be taken: state_dict() may ask for it.
                draw = self._draws
                self._draws = draw + 1
                if draw % _snapshot_log.CHECKPOINT_EVERY == 0:
                    log.checkpoint(draw, self._snapshot())
                else:
                    log.draw(draw, self._fed, self._last, final)
            cols = blk if isinstance(blk, list) else [blk]
            n = len(cols[0]) if cols else 0
            if self._owned and n:
                # The draw's arrays are new and nobody else holds them: the
                # output FIFO keeps them as a block without copying them, and
                # hands that block out as the consumer's batch (one copy of
                # each row, into the draw, instead of two).
                self._out._enqueue_owned(cols)  # type: ignore[attr-defined]
            else:
                self._out.enqueue_many(blk)
