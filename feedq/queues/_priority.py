"""PriorityQueue: the element with the smallest priority first (Q39–Q43)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.queues._queue import QueueBase
from feedq.queues._refs import clear_refs
from feedq.queues._spec import Component, normalize_dtypes, normalize_shapes

__all__ = ["PriorityQueue"]


class PriorityQueue(QueueBase):
    """A queue that hands out the element with the smallest priority (Q39–Q43).

    Every element has an implicit leading int64 scalar priority:
    ``dtypes == [int64] + types``; enqueue ``[priority, *values]``,
    ``enqueue_many`` a priority vector with the batches; dequeues return
    ``[priority, *values]``. ``dequeue_many(n)`` is all-or-nothing (Q42).

    feedq differs from TF1 where TF1 is hostile:

    * ties come out in insertion order (TF1: heap order, Q41);
    * ``shapes`` is optional (Q39); without it there is no ``dequeue_many``;
    * ``dequeue_many(n)`` with ``n > capacity`` is an InvalidArgumentError
      instead of a deadlock (Q42);
    * ``dequeue_up_to(n)`` on a closed queue returns the remaining elements
      sorted instead of discarding them (Q43).
    """

    _kind = "PriorityQueue"
    _default_name = "priority_queue"
    _all_or_nothing = True

    def __init__(
        self,
        capacity: int,
        types: Any,
        shapes: Any = None,
        names: Any = None,
        shared_name: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(capacity, types, shapes, names, shared_name, name)

    def _make_components(self, dtypes: Any, shapes: Any) -> list[Component]:
        types = normalize_dtypes(dtypes)
        shape_list = normalize_shapes(shapes, len(types), partial=False)
        comps = [Component(0, np.dtype(np.int64), ())]
        comps += [Component(i + 1, d, s) for i, (d, s) in enumerate(zip(types, shape_list))]
        return comps

    def _where(self, i: int) -> str:
        if i == 0 and self._names is None:
            return f"{self._kind} '{self._name}' priority"
        return super()._where(i)

    def _check_batch_feasible(self, n: int) -> None:
        if 0 <= self._capacity < n:
            raise InvalidArgumentError(
                f"{self._kind} '{self._name}': dequeue of {n} elements can never complete "
                f"with capacity {self._capacity} (a PriorityQueue batch is all-or-nothing)"
            )

    def _init_storage(self) -> None:
        # guarded by self._mutex
        self._heap: list[tuple[int, int, int]] = []  # (priority, seq, slot)
        self._free_slots: list[int] = []
        self._seq = 0
        self._low_seq = 0

    def _grow(self, alloc: int) -> None:
        new = [self._new_column(c, alloc) for c in self._components]
        old = self._alloc
        for dst, src in zip(new, self._cols):
            dst[:old] = src[:old]
        self._cols = new
        self._free_slots.extend(range(alloc - 1, old - 1, -1))
        self._alloc = alloc

    def _available(self) -> int:
        return self._engine.size

    def _store(self, cols: list[np.ndarray[Any, Any]], start: int, k: int, seqs: range) -> None:
        free = self._free_slots
        slots = free[len(free) - k :]
        del free[len(free) - k :]
        idx = np.asarray(slots, dtype=np.intp)
        for buf, src in zip(self._cols, cols):
            buf[idx] = src[start : start + k]
        prios = cols[0][start : start + k].tolist()
        heap = self._heap
        for p, q, s in zip(prios, seqs, slots):
            heapq.heappush(heap, (p, q, s))

    def _put(self, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        self._store(cols, start, k, range(self._seq, self._seq + k))
        self._seq += k

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        # Put-back elements came out before everything still queued: give them
        # the lowest sequence numbers so ties keep their order.
        k = chunk[0].shape[0]
        self._store(chunk, 0, k, range(self._low_seq - k, self._low_seq))
        self._low_seq -= k

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        heap = self._heap
        slots = [heapq.heappop(heap)[2] for _ in range(k)]
        idx = np.asarray(slots, dtype=np.intp)
        result = []
        for i, buf in enumerate(self._cols):
            if outs is not None:
                np.take(buf, idx, axis=0, out=outs[i][offset : offset + k])
            else:
                result.append(buf[idx])
            clear_refs(buf, idx)
        self._free_slots.extend(slots)
        return result
