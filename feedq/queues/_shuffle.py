"""RandomShuffleQueue: elements handed out in random order (Q29–Q33)."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq.queues._engine import QueueState
from feedq.queues._queue import QueueBase
from feedq.queues._refs import clear_refs
from feedq.queues._spec import Component

__all__ = ["RandomShuffleQueue"]


class RandomShuffleQueue(QueueBase):
    """A queue that hands out elements in random order (Q29–Q33).

    While the queue is open a dequeue never leaves fewer than
    ``min_after_dequeue`` elements behind (Q30); after close the rule is
    dropped and everything drains (Q32). Each element removed is drawn
    uniformly from those stored (Q31), with a NumPy Generator seeded by
    ``seed`` (Q33: an int gives the same order for the same sequence of
    calls; None is nondeterministic). ``dequeue_many(n)`` draws ``n``
    distinct slots and compacts the storage with vectorised moves: O(n).

    feedq: ``min_after_dequeue >= capacity`` is a ValueError here (TF1 failed
    at first use, Q29/X9).
    """

    _kind = "RandomShuffleQueue"
    _default_name = "random_shuffle_queue"
    _all_available = False  # min_after_dequeue (Q30)

    def __init__(
        self,
        capacity: int,
        min_after_dequeue: int,
        dtypes: Any,
        shapes: Any = None,
        names: Any = None,
        seed: int | None = None,
        shared_name: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            capacity, dtypes, shapes, names, shared_name, name,
            min_after_dequeue=min_after_dequeue, seed=seed,
        )

    @property
    def min_after_dequeue(self) -> int:
        """Elements kept back while the queue is open (Q30)."""
        return int(self._storage_args["min_after_dequeue"])

    def _validate_storage_args(
        self, capacity: int, components: list[Component], args: dict[str, Any]
    ) -> None:
        m = args.pop("min_after_dequeue")
        seed = args.pop("seed")
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
            raise ValueError(f"min_after_dequeue must be an int >= 0, got {m!r}")
        if capacity >= 0 and m >= capacity:
            raise ValueError(f"min_after_dequeue {m} must be < capacity {capacity}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        super()._validate_storage_args(capacity, components, args)
        args["min_after_dequeue"] = int(m)
        args["seed"] = None if seed is None else int(seed)

    def _init_storage(self) -> None:
        # guarded by self._mutex
        self._rng = np.random.default_rng(self._storage_args["seed"])

    def _grow(self, alloc: int) -> None:
        new = [self._new_column(c, alloc) for c in self._components]
        for dst, src in zip(new, self._cols):
            dst[: self._engine.size] = src[: self._engine.size]
        self._cols = new
        self._alloc = alloc

    def _snapshot(self, column: int) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """A copy of one column in storage order, and the generator's state
        (for exact resumption of a shuffling batcher; see feedq.input)."""
        with self._mutex:
            col = self._cols[column] if self._cols else np.zeros(0, dtype=np.int64)
            return np.array(col[: self._engine.size]), dict(self._rng.bit_generator.state)

    def _set_generator_state(self, state: dict[str, Any]) -> None:
        """Restore the generator to a state :meth:`_snapshot` returned."""
        with self._mutex:
            self._rng.bit_generator.state = dict(state)

    def _available(self) -> int:
        if self._engine.state is QueueState.OPEN:
            return max(0, self._engine.size - int(self._storage_args["min_after_dequeue"]))
        return self._engine.size

    def _put(self, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        size = self._engine.size
        for buf, src in zip(self._cols, cols):
            buf[size : size + k] = src[start : start + k]

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        self._put(chunk, 0, chunk[0].shape[0])

    def _put_one(self, value: Any) -> None:
        pos = self._engine.size
        if self._one_comp:
            self._cols[0][pos] = value
            return
        for buf, v in zip(self._cols, value):
            buf[pos] = v

    def _take_one(self) -> Any:
        last = self._engine.size - 1
        pos = int(self._rng.integers(0, self._engine.size))
        row = self._read_row(pos)
        if pos != last:
            for buf in self._cols:
                buf[pos] = buf[last]
        for buf in self._cols:
            clear_refs(buf, last)
        return row[0] if self._one_comp else row

    def _draw_sparse(self, k: int) -> np.ndarray[Any, Any]:
        """k distinct positions in [0, size) with size > 4k, uniformly, in random order."""
        size, rng = self._engine.size, self._rng
        while True:
            # The first k distinct values of iid uniform draws are a uniform
            # k-permutation; 2k+16 draws from > 4k values rarely fall short.
            cand = rng.integers(0, size, size=2 * k + 16)
            _, first = np.unique(cand, return_index=True)
            if first.shape[0] >= k:
                first.sort()
                return cand[first[:k]]

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        size = self._engine.size
        tail = size - k
        result = []
        if 4 * k >= size:
            # Dense draw: one permutation gives the k drawn (in random order)
            # and the rows that stay; moving every staying row is O(size),
            # which is O(k) here, and costs two gathers instead of a dozen
            # small index operations.
            perm = self._rng.permutation(size)
            idx, rest = perm[:k], perm[k:]
            for i, buf in enumerate(self._cols):
                if outs is not None:
                    np.take(buf, idx, axis=0, out=outs[i][offset : offset + k])
                else:
                    result.append(buf[idx])
                if tail:
                    buf[:tail] = buf[rest]  # the right side is gathered first
                clear_refs(buf, slice(tail, size))
            return result
        idx = self._draw_sparse(k)
        # Holes left in [0, tail) are refilled from the rows of [tail, size)
        # that were not drawn; both sets have the same size.
        in_tail = idx >= tail
        holes = idx[~in_tail]
        if holes.shape[0]:
            keep = np.ones(k, dtype=bool)
            keep[idx[in_tail] - tail] = False
            fillers = tail + np.flatnonzero(keep)
        for i, buf in enumerate(self._cols):
            if outs is not None:
                np.take(buf, idx, axis=0, out=outs[i][offset : offset + k])
            else:
                result.append(buf[idx])
            if holes.shape[0]:
                buf[holes] = buf[fillers]
            clear_refs(buf, slice(tail, size))
        return result
