"""RandomShuffleQueue: elements handed out in random order (Q29–Q33).

The draw rule (a partial Fisher-Yates against the tail; docs/queue-api.md):
a take of ``k`` from ``n`` stored draws ``k`` raw 64-bit words from the
queue's generator in one call; draw ``j`` picks slot
``r_j = raw_j * (n - j) >> 64`` (uniform in ``[0, n - j)``), hands that row
out as row ``j`` and moves row ``n-1-j`` into the slot. So the drawn rows
need no unique-draw or sort, the kept rows stay compact in ``[0, n - k)``,
``dequeue()`` is exactly ``dequeue_many(1)`` (``k`` dequeues give what one
``dequeue_many(k)`` gives), and the draws depend only on the sizes at each
call, never on how producers split their blocks (X12, Q33). Columns of a
fixed-size dtype go through one native call for all of them
(``feedq._native.shuffle_take``); object columns (strings) get the
same draws as index moves (``shuffle_sources``): one gather and one scatter
each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq import _native
from feedq.queues._engine import QueueState
from feedq.queues._queue import QueueBase
from feedq.queues._spec import STRING, Component

__all__ = ["RandomShuffleQueue"]


class RandomShuffleQueue(QueueBase):
    """A queue that hands out elements in random order (Q29–Q33).

    While the queue is open a dequeue never leaves fewer than
    ``min_after_dequeue`` elements behind (Q30); after close the rule is
    dropped and everything drains (Q32). Each element removed is drawn
    uniformly from those stored (Q31; to within 2**-64 per draw: a 64-bit
    word scaled to the size), with a NumPy Generator seeded by ``seed``
    (Q33: an int gives the same order for the same sequence of calls, and
    ``dequeue()`` is ``dequeue_many(1)``; None is nondeterministic).
    ``dequeue_many(n)`` costs one draw call and O(n) row moves: a partial
    Fisher-Yates against the tail (see the module docstring).

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
        # Raw 64-bit words of the generator: k in one call (an array), or
        # one (an int); the same stream either way.
        self._raw = self._rng.bit_generator.random_raw
        # Columns the native kernel moves as bytes (fixed-size dtypes; all of
        # them in one call), and columns of object references (strings; all
        # columns with the pure-Python core), moved by index.
        native = _native.CORE == "native"
        self._byte_idx = [i for i, c in enumerate(self._components)
                          if native and c.dense and c.dtype is not STRING]
        self._ref_idx = [i for i in range(len(self._components)) if i not in self._byte_idx]
        self._obj_idx = [i for i, c in enumerate(self._components) if c.dtype is STRING or not c.dense]
        self._byte_specs: list[tuple[tuple[int, ...], np.dtype[Any]]] = [
            (tuple(int(d or 0) for d in self._components[i].shape or ()), self._components[i].dtype)
            for i in self._byte_idx
        ]
        self._byte_cols: tuple[np.ndarray[Any, Any], ...] = ()  # the columns of _byte_idx
        self._all_bytes = not self._ref_idx
        # The C function itself when the core has it, not the checking
        # wrapper: the queue's columns and draws (a fresh uint64 array) are
        # right by construction, and the C code checks them again.
        backend = _native.NATIVE.backend if native and _native.NATIVE is not None else None
        self._kernel = getattr(backend, "shuffle_take", None) or _native.shuffle_take
        self._sources = _native.shuffle_sources
        # The kernel's done flag (see _take).
        self._done = np.zeros(1, np.uint8)

    def _grow(self, alloc: int) -> None:
        new = [self._new_column(c, alloc) for c in self._components]
        for dst, src in zip(new, self._cols):
            dst[: self._engine.size] = src[: self._engine.size]
        self._cols = new
        self._byte_cols = tuple(new[i] for i in self._byte_idx)
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
        if self._one_comp and start == 0 and len(cols[0]) == k:
            self._cols[0][size : size + k] = cols[0]
            return
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
        # The k = 1 case of _take's rule: the same word, slot and move.
        size = self._engine.size
        last = size - 1
        pos = (self._raw() * size) >> 64
        cols = self._cols
        row = [buf[pos] for buf in cols]  # reads first: nothing changed yet
        for i, kind in enumerate(self._row_kinds):
            if kind & 1:
                row[i] = row[i].copy()
        moved = False
        try:
            if pos != last:
                for buf in cols:
                    buf[pos] = buf[last]
            moved = True
            for i in self._obj_idx:
                cols[i][last] = None
        except BaseException:
            # An asynchronous exception (Ctrl-C) between two columns: the
            # element goes back to where it was (moved: to the last slot,
            # which the move emptied), so nothing is lost or duplicated.
            for buf, v in zip(cols, row):
                buf[last if moved else pos] = v
            raise
        return row[0] if self._one_comp else row

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        """Draw ``k`` rows (the rule of the module docstring) into
        ``outs[i][offset:offset+k]``, or return them as new columns.

        Asynchronous exceptions (Ctrl-C; see feedq.queues._engine) can
        arrive between the steps that change the storage (the moves of each
        object column, the one native call for the byte columns, dropping
        the references left in the tail); wherever one does, the handler
        leaves the storage whole: before the commit, the moved object slots
        get their rows back (the byte columns are untouched); after it, the
        drawn rows go back into the tail slots, so nothing is lost or
        handed out twice.
        """
        size = self._engine.size
        raw = self._raw(k)
        if outs is None and self._all_bytes:
            # The common case, straight: one native call for every column.
            new = [np.empty((k, *shape), dtype) for shape, dtype in self._byte_specs]
            flag = self._done
            flag[0] = 0
            try:
                self._kernel(size, raw, self._byte_cols, tuple(new), flag)
            except BaseException:
                if flag[0]:  # raised as the call returned: the rows are out
                    tail = size - k
                    for buf, g in zip(self._cols, new):
                        buf[tail:size] = g
                raise
            return new
        return self._take_general(k, outs, offset, size, raw)

    def _take_general(
        self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int, size: int, raw: np.ndarray[Any, Any],
    ) -> list[np.ndarray[Any, Any]]:
        """:meth:`_take` with object columns, the pure-Python core, or ``out=``."""
        tail = size - k
        cols = self._cols
        if outs is None:
            got: list[Any] = [None] * len(cols)
        else:
            got = [o[offset : offset + k] for o in outs]
        # What the kernel writes: got, or a temporary for a strided out=.
        kgot = []
        for i, (shape, dtype) in zip(self._byte_idx, self._byte_specs):
            g = got[i]
            if g is None or not g.flags.c_contiguous:
                g = np.empty((k, *shape), dtype)
                if got[i] is None:
                    got[i] = g
            kgot.append(g)
        flag = self._done
        flag[0] = 0
        committed = mutating = False
        olds: list[Any] = []
        try:
            ref = self._ref_idx
            if ref:
                src, dst, dsrc = self._sources(size, raw)
                for i in ref:  # reads first
                    buf = cols[i]
                    if got[i] is None:
                        got[i] = buf[src]
                    else:
                        np.take(buf, src, axis=0, out=got[i])
                    olds.append(buf[dst])
                mutating = True
                for i in ref:
                    buf = cols[i]
                    buf[dst] = buf[dsrc]
            if kgot:
                self._kernel(size, raw, self._byte_cols, tuple(kgot), flag)
            committed = True
            for i in self._obj_idx:
                cols[i][tail:size] = None
            for i, g in zip(self._byte_idx, kgot):
                if got[i] is not g:
                    got[i][...] = g
        except BaseException:
            if committed or flag[0]:
                # The rows are out: back into the tail slots.
                for i, buf in enumerate(cols):
                    buf[tail:size] = got[i]
                for i, g in zip(self._byte_idx, kgot):
                    cols[i][tail:size] = g
            elif mutating:
                for i, old in zip(ref, olds):
                    cols[i][dst] = old
            raise
        return got if outs is None else []
