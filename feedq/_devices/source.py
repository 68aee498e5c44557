"""A feeder's source: a feedq queue read in batches, or an iterable of batches.

A queue with fixed shapes is dequeued straight into a staging slot
(``dequeue_many(n, out=slot)``: the only host copy). A padding queue's batches
change shape from batch to batch, and an iterable's batches are already
arrays somewhere in memory: both are copied into the slot (:func:`stage`),
the one host copy there too. Unstaged, the batch is used as it came.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from feedq.errors import DeadlineExceededError, InvalidArgumentError, OutOfRangeError

from .engines import Slot
from .structure import Structure

__all__ = ["BatchSource", "stage"]

# How long one dequeue blocks before the feeder thread looks at its stop flag
# again: close() is never slower than this.
# TODO: replace this re-check with a cancel token from the queue engine, so
# close() cancels the blocked dequeue at once (the queues' cancellation step).
POLL_S = 0.05


class BatchSource:
    """Where a feeder's batches come from.

    Attributes:
        queue: the feedq queue, or ``None`` for an iterable.
        dense: True when the queue's batches have one fixed shape (they can be
            dequeued straight into a slot); always True for an iterable.
    """

    def __init__(self, source: Any, batch_size: int | None, up_to: bool, name: str) -> None:
        """Checks the source and its batch size.

        Raises:
            ValueError: a queue without ``batch_size >= 1``, or an iterable with one.
            InvalidArgumentError: a queue whose components have no shapes (Q6).
            TypeError: neither a queue nor an iterable.
        """
        self._name = name
        self._batch_size = batch_size
        self._up_to = up_to
        self.dense = True
        self.queue: Any = None
        self._iter: Iterator[Any] | None = None
        if hasattr(source, "dequeue_many") and hasattr(source, "dtypes"):
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ValueError(f"a queue source needs batch_size >= 1, got {batch_size!r}")
            shapes = source.shapes
            if any(s is None for s in shapes):
                raise InvalidArgumentError(
                    f"{name}: the queue's components need shapes to be dequeued in "
                    f"batches (Q6), got {shapes}")
            # A padding queue's batches change shape: they cannot be dequeued into
            # fixed slots, so they are staged like an iterable's (one more copy).
            self.dense = all(d is not None for s in shapes for d in s)
            self.queue = source
        else:
            if batch_size is not None:
                raise ValueError("batch_size is for queue sources; an iterable yields batches")
            if not isinstance(source, Iterable):
                raise TypeError(f"source must be a feedq queue or an iterable of batches, "
                                f"got {type(source).__name__}")
            self._iter = iter(source)

    def read_queue(self, structure: Structure, slot: Slot | None, engine: Any,
                   stop: threading.Event) -> list[np.ndarray[Any, Any]] | None:
        """The queue's next batch, in ``slot`` when given; None at the end or on stop."""
        into = slot if self.dense else None
        out = None if into is None else structure.pack(self._slot_buffers(into, engine))
        op = self.queue.dequeue_up_to if self._up_to else self.queue.dequeue_many
        while not stop.is_set():
            try:
                batch = op(self._batch_size, timeout=POLL_S, out=out)
            except DeadlineExceededError:
                continue  # nothing lost: the queue puts a partial batch back
            except OutOfRangeError:
                return None
            arrays = structure.flatten(batch, self._name)
            return arrays if slot is None or into is not None else stage(arrays, slot, engine)
        return None

    def next_item(self) -> tuple[bool, Any]:
        """The iterable's next batch as it came: ``(True, batch)``, ``(False, None)`` at the end."""
        if self._iter is None:
            raise RuntimeError("feeder has neither a queue nor an iterator")
        try:
            return True, next(self._iter)
        except StopIteration:
            return False, None

    def _slot_buffers(self, slot: Slot, engine: Any) -> list[np.ndarray[Any, Any]]:
        buffers = []
        for c, (dtype, shape) in enumerate(zip(self.queue.dtypes, self.queue.shapes)):
            host = slot.host[c]
            if host is None:
                host, slot.pinned[c] = engine.alloc((self._batch_size, *shape), np.dtype(dtype))
                slot.host[c] = host
            buffers.append(host)
        return buffers


def stage(arrays: list[np.ndarray[Any, Any]], slot: Slot,
          engine: Any) -> list[np.ndarray[Any, Any]]:
    """Copies a batch into ``slot`` (it is not in staging memory yet), resizing
    the slot's buffers when the batch does not fit them."""
    views = []
    for c, array in enumerate(arrays):
        host = slot.host[c]
        if (host is None or host.dtype != array.dtype or host.shape[1:] != array.shape[1:]
                or host.shape[0] < array.shape[0]):
            host, slot.pinned[c] = engine.alloc(array.shape, array.dtype)
            slot.host[c] = host
        view = host[: array.shape[0]]
        np.copyto(view, array)
        views.append(view)
    return views
