"""A feeder's source: a feedq queue read in batches, a batcher stage read as
one, or an iterable of batches.

A queue with fixed shapes is dequeued straight into a staging slot
(``dequeue_many(n, out=slot)``: the only host copy); so is a batcher
:class:`~feedq.Stage` (``stage.dequeue_many(batch_size, out=slot)``, which
strips its hidden position column and files its resumption ledger as
iterating it would). A padding queue's batches
change shape from batch to batch, and an iterable's batches are already
arrays somewhere in memory: both are copied into the slot (:func:`stage`),
the one host copy there too. Unstaged, the batch is used as it came.

Stopping: the feeder owns a :class:`~feedq.CancelToken` and fires it on
``close()`` and on a coordinator stop. A queue's dequeue waits with no
timeout and ``cancel=token``, so the token wakes it at once and the rows it
had collected go back to the front of the queue in order (T3): no periodic
wake-up, no partial batch put back and taken again while the queue is short.
A queue-like object whose calls take no ``cancel=`` (a remote queue) is read
in waits of at most :data:`UNCANCELLABLE_WAIT_S`, the token checked between
them. An iterable is asked for its next batch only while the token has not
fired; a call into it cannot be interrupted (``close()`` reports a thread
still inside it after its timeout).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from feedq._devices.engines import Slot
from feedq._devices.structure import Structure
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.input import Stage
from feedq.queues import CancelToken

__all__ = ["UNCANCELLABLE_WAIT_S", "BatchSource", "is_queue", "stage"]

#: The longest single wait on a queue-like source whose blocking calls take no
#: ``cancel=`` token: ``close()`` or a stop is noticed within this time there.
#: (feedq's own queues take the token and are never polled.)
UNCANCELLABLE_WAIT_S = 0.25


def is_queue(source: Any) -> bool:
    """Whether ``source`` is a queue (``dequeue_many`` and ``dtypes``), not a
    :class:`~feedq.Stage` (which has both, and positions)."""
    return (hasattr(source, "dequeue_many") and hasattr(source, "dtypes")
            and not isinstance(source, Stage))


def _takes_cancel(method: Any) -> bool:
    """Whether ``method`` accepts a ``cancel=`` keyword (feedq queues do)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume it does not
        return False
    return any((p.name == "cancel" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
               or p.kind is p.VAR_KEYWORD for p in params)


class BatchSource:
    """Where a feeder's batches come from.

    Attributes:
        queue: the feedq queue or batcher stage, or ``None`` for an iterable.
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
        self._cancellable = False  # the queue's dequeue calls take cancel=
        self._iter: Iterator[Any] | None = None
        # A batcher stage: read like a queue, one batch per dequeue_many; a
        # clean stop of its pipeline ends the data, as iterating it does.
        self._stage = isinstance(source, Stage) and source.batch_size is not None
        if self._stage:
            if batch_size is not None:
                raise ValueError("batch_size is for queue sources; an iterable yields batches")
            self._batch_size = source.batch_size
            self._up_to = False  # the stage's own choice (allow_smaller_final_batch)
            self.dense = all(s is not None and all(d is not None for d in s)
                             for s in source.shapes)
            self.queue = source
            self._cancellable = True
        elif is_queue(source):
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
            op = source.dequeue_up_to if up_to else source.dequeue_many
            self._cancellable = _takes_cancel(op)
        else:
            if batch_size is not None:
                raise ValueError("batch_size is for queue sources; an iterable yields batches")
            if not isinstance(source, Iterable):
                raise TypeError(f"source must be a feedq queue or an iterable of batches, "
                                f"got {type(source).__name__}")
            self._iter = iter(source)

    def read_queue(self, structure: Structure, slot: Slot | None, engine: Any,
                   cancel: CancelToken) -> list[np.ndarray[Any, Any]] | None:
        """The queue's next batch, in ``slot`` when given; None at the end.

        Waits for the batch without a timeout (the process default does not
        apply: the feeder waits for data as long as it runs) until ``cancel``
        fires.

        Raises:
            BaseException: ``cancel``'s error once it fired (the cause it was
                fired with, or ``CancelledError``); the rows the dequeue had
                collected are back in the queue. Whatever the queue raised.
        """
        into = slot if self.dense else None
        out = None if into is None else structure.pack(self._slot_buffers(into, engine))
        op = self.queue.dequeue_up_to if self._up_to else self.queue.dequeue_many
        try:
            if self._cancellable:
                batch = op(self._batch_size, timeout=math.inf, out=out, cancel=cancel)
            else:
                batch = self._read_in_slices(op, out, cancel)
        except OutOfRangeError:
            return None
        except CancelledError as exc:
            if self._stage and exc.__cause__ is None and not cancel.fired:
                return None  # the stage's pipeline stopped cleanly: its iteration would end
            raise
        arrays = structure.flatten(batch, self._name)
        return arrays if slot is None or into is not None else stage(arrays, slot, engine)

    def _read_in_slices(self, op: Any, out: Any, cancel: CancelToken) -> Any:
        """A queue without ``cancel=``: bounded waits, the token checked between."""
        while True:
            if cancel.fired:
                raise cancel.error()
            try:
                return op(self._batch_size, timeout=UNCANCELLABLE_WAIT_S, out=out)
            except DeadlineExceededError:
                continue  # nothing lost: the queue puts a partial batch back (T3)

    def next_item(self, cancel: CancelToken) -> tuple[bool, Any]:
        """The iterable's next batch as it came: ``(True, batch)``, ``(False, None)`` at the end.

        Raises:
            BaseException: ``cancel``'s error, when it fired before the call.
        """
        if self._iter is None:
            raise RuntimeError("feeder has neither a queue nor an iterator")
        if cancel.fired:
            raise cancel.error()
        try:
            return True, next(self._iter)
        except StopIteration:
            return False, None

    def _slot_buffers(self, slot: Slot, engine: Any) -> list[np.ndarray[Any, Any]]:
        assert self._batch_size is not None
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
