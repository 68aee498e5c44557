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

from ..errors import DeadlineExceededError, OutOfRangeError
from ..queues import QueueBase, RandomShuffleQueue

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

    @property
    def queue(self) -> RandomShuffleQueue:
        """The RandomShuffleQueue holding the elements not yet drawn."""
        return self._buf

    def put(self, values: list[Any], many: bool) -> None:
        """Insert one element (``many=False``) or a block of rows, drawing
        full batches into ``out`` as the buffer allows."""
        buf, batch_size = self._buf, self._batch_size
        if not many:
            buf.enqueue(values)
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
            buf.enqueue_many([np.asarray(v)[start : start + take] for v in values])
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
            self._buf.close()
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
            self._out.enqueue_many(blk)
