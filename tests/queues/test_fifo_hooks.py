"""Differential test: the one take/put path over FIFOQueue's ring hooks
(and its copies outside the lock) against the same path over the simplest
storage hooks there are, over random single-threaded operation sequences.

Every queue call goes through QueueBase's one put path and one take path;
queue kinds differ only in their storage hooks (STYLE 1, 20). The reference
below keeps its rows at the front of its columns and shifts them on every
take: no ring, no wrap, no slot kept busy, no reference left to drop later.
Both queues see the same calls; every call must return the same values
(dtype, shape, contents), raise the same error (type, message,
``num_enqueued``), and leave the same statistics. ``timeout=0`` everywhere,
so nothing blocks and the partial inserts and put-backs of timed-out calls
(Q15, Q27, T2, T3) are compared too. A small ``_unlocked_copy_bytes`` sends
the larger batches through reserve → copy → commit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from feedq.queues import STRING, FIFOQueue, PaddingFIFOQueue

pytestmark = pytest.mark.timeout(60)


class _ShiftHooks:
    """Storage hooks without a ring: rows ``[0, size)`` of each column."""

    _unlocked_copy_bytes = None
    _cols: list[Any]
    _engine: Any
    _alloc: int
    _components: list[Any]

    def _init_storage(self) -> None:
        super()._init_storage()  # type: ignore[misc]
        self._has_refs = False

    def _grow(self, alloc: int) -> None:
        new = [self._new_column(c, alloc) for c in self._components]  # type: ignore[attr-defined]
        for dst, src in zip(new, self._cols):
            dst[: self._engine.size] = src[: self._engine.size]
        self._cols = new
        self._alloc = alloc

    def _put(self, cols: list[Any], start: int, k: int) -> None:
        for buf, src in zip(self._cols, cols):
            buf[self._engine.size : self._engine.size + k] = src[start : start + k]

    def _put_one(self, value: Any) -> None:
        row = [value] if len(self._cols) == 1 else value
        for buf, v in zip(self._cols, row):
            buf[self._engine.size] = v

    def _take(self, k: int, outs: list[Any] | None, offset: int) -> list[Any]:
        result = []
        size = self._engine.size
        for i, buf in enumerate(self._cols):
            if outs is None:
                result.append(buf[:k].copy())
            else:
                outs[i][offset : offset + k] = buf[:k]
            buf[: size - k] = buf[k:size].copy()
            if buf.dtype == object:
                buf[size - k : size] = None
        return result

    def _take_one(self) -> Any:
        row = [c[0] for c in self._take(1, None, 0)]
        return row[0] if len(row) == 1 else row

    def _putback(self, chunk: list[Any]) -> None:
        k = chunk[0].shape[0]
        size = self._engine.size
        for buf, src in zip(self._cols, chunk):
            buf[k : size + k] = buf[:size].copy()
            buf[:k] = src


class GenericFIFO(_ShiftHooks, FIFOQueue):  # type: ignore[misc]
    pass


class GenericPadding(_ShiftHooks, PaddingFIFOQueue):  # type: ignore[misc]
    pass


class SmallCopyFIFO(FIFOQueue):
    _unlocked_copy_bytes = 64


# name -> (dtypes, shapes, names)
SPECS: dict[str, tuple[list[Any], list[list[int]], list[str] | None]] = {
    "1": ([np.float32], [[3]], None),
    "2": ([np.float32, np.int64], [[3], []], None),
    "4": ([np.float32, np.int64, np.uint8, np.bool_], [[2, 2], [], [3], []], None),
    "2+str": ([np.float32, STRING], [[3], []], None),
    "named": ([np.int64, np.float64], [[], [2]], ["pos", "x"]),
}

ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue_many"), st.integers(0, 9), st.integers(0, 4)),
        st.tuples(st.just("enqueue"), st.integers(0, 0), st.integers(0, 1)),
        st.tuples(st.just("dequeue_many"), st.integers(0, 9), st.integers(0, 0)),
        st.tuples(st.just("dequeue_up_to"), st.integers(1, 9), st.integers(0, 0)),
        st.tuples(st.just("dequeue_available"), st.integers(1, 9), st.integers(0, 0)),
        st.tuples(st.just("dequeue"), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("put_back"), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("close"), st.integers(0, 0), st.integers(0, 0)),
    ),
    min_size=8,
    max_size=50,
)

# Reads and writes across the end of the ring, a put-back over it, a close.
WRAPS = [
    ("enqueue_many", 5, 0), ("dequeue_many", 3, 0), ("enqueue_many", 3, 2), ("dequeue_many", 4, 0),
    ("enqueue_many", 4, 1), ("dequeue_available", 9, 0), ("enqueue_many", 5, 0),
    ("dequeue_up_to", 4, 0), ("put_back", 0, 0), ("enqueue_many", 2, 0), ("dequeue_many", 4, 0),
    ("enqueue", 0, 0), ("close", 0, 0), ("dequeue_up_to", 9, 0),
]


def _column(dtype: Any, shape: list[int], k: int, rng: np.random.Generator, form: int) -> Any:
    if dtype is STRING:
        col = np.array([b"s%d" % v for v in rng.integers(0, 99, k)], dtype=object)
        return col.tolist() if form == 1 else col
    arr = (rng.integers(0, 9, (k, *shape)) * 1.5).astype(dtype)
    if form == 1:
        return arr.tolist()  # converted (lists)
    if form == 2 and np.dtype(dtype).kind == "i":
        return arr.astype(np.int32)  # converted (safe cast)
    if form == 3 and np.dtype(dtype).kind == "f":
        return arr.astype(np.float64) if dtype == np.float32 else arr.tolist()  # float64 -> float32: TypeError
    return arr


def _batch(spec: str, k: int, rng: np.random.Generator, form: int) -> Any:
    dtypes, shapes, names = SPECS[spec]
    cols = [_column(d, s, k, rng, form if i == len(dtypes) - 1 else 0)
            for i, (d, s) in enumerate(zip(dtypes, shapes))]
    if form == 4 and len(cols) > 1:
        cols[-1] = cols[-1][: max(k - 1, 0)]  # leading sizes differ: InvalidArgumentError
    if names is not None:
        return dict(zip(names, cols))
    return cols[0] if len(cols) == 1 else tuple(cols) if form == 2 else cols


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _norm(v) for key, v in sorted(value.items())}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return (str(value.dtype), np.shape(value), np.asarray(value).tolist())
    return value


def _call(q: Any, op: str, k: int, arg: Any) -> tuple[Any, Any]:
    """``(outcome, value)``: outcome compares the result or the error."""
    try:
        if op == "enqueue_many":
            q.enqueue_many(arg, timeout=0)
        elif op == "enqueue":
            q.enqueue(arg, timeout=0)
        elif op == "put_back":
            q.put_back(arg)
        elif op == "close":
            q.close()
        else:
            value = q.dequeue(timeout=0) if op == "dequeue" else getattr(q, op)(k, timeout=0)
            return ("ok", _norm(value)), value
        return ("ok",), None
    except Exception as exc:  # noqa: BLE001 - compared, not swallowed
        return ("err", type(exc).__name__, str(exc), getattr(exc, "num_enqueued", None)), None


def _stats(q: Any) -> Any:
    s = q.statistics()
    return (s.size, s.peak_size, s.enqueued, s.dequeued, s.state, q._engine.takes, q._engine.fill_sum)


def _run(fast_cls: Any, generic_cls: Any, spec: str, capacity: int, seq: list[Any], seed: int) -> None:
    dtypes, shapes, names = SPECS[spec]
    fast = fast_cls(capacity, dtypes, shapes=shapes, names=names, name="q")
    generic = generic_cls(capacity, dtypes, shapes=shapes, names=names, name="q")
    rng = np.random.default_rng(seed)
    last: Any = None
    for op, k, form in seq:
        arg: Any = None
        if op == "enqueue_many":
            arg = _batch(spec, k, rng, form)
        elif op == "enqueue":
            row = _batch(spec, 1, rng, form)
            if isinstance(row, dict):
                arg = {key: v[0] for key, v in row.items()}
            elif isinstance(row, (list, tuple)):
                arg = [v[0] for v in row]
            else:
                arg = row[0]
        elif op == "put_back":
            if last is None:
                continue
            arg = last
        a, value = _call(fast, op, k, arg)
        b, _ = _call(generic, op, k, arg)
        assert a == b, (op, k, form)
        assert _stats(fast) == _stats(generic), (op, k, form)
        if op.startswith("dequeue_") and value is not None:
            last = value  # a batch as returned is what put_back takes
    # Drain: the same elements, in the same order.
    fast.close()
    generic.close()
    assert _call(fast, "dequeue_up_to", 1000, None)[0] == _call(generic, "dequeue_up_to", 1000, None)[0]


@pytest.mark.parametrize("spec", sorted(SPECS))
@settings(max_examples=50, deadline=None)
@given(seq=ops, capacity=st.sampled_from([3, 5, 12, -1]), seed=st.integers(0, 2**16))
@example(seq=WRAPS, capacity=5, seed=1)
def test_ring_hooks_match_shift_hooks(spec: str, seq: list[Any], capacity: int, seed: int) -> None:
    _run(FIFOQueue, GenericFIFO, spec, capacity, seq, seed)


@pytest.mark.parametrize("spec", ["2", "2+str"])
@settings(max_examples=20, deadline=None)
@given(seq=ops, capacity=st.sampled_from([12, -1]), seed=st.integers(0, 2**16))
def test_ring_hooks_match_shift_hooks_unlocked_copies(
    spec: str, seq: list[Any], capacity: int, seed: int
) -> None:
    # Batches of >= 64 bytes of numeric data copy with the lock released.
    _run(SmallCopyFIFO, GenericFIFO, spec, capacity, seq, seed)


@settings(max_examples=20, deadline=None)
@given(seq=ops, capacity=st.sampled_from([5, -1]), seed=st.integers(0, 2**16))
def test_ring_hooks_match_shift_hooks_padding(seq: list[Any], capacity: int, seed: int) -> None:
    _run(PaddingFIFOQueue, GenericPadding, "4", capacity, seq, seed)


def test_ring_drops_object_references() -> None:
    # A dequeued string batch or element leaves no reference in the ring (also after a wrap).
    q = FIFOQueue(4, [np.int64, STRING], shapes=[[], []])
    for _ in range(3):
        q.enqueue_many([np.arange(3), np.array([b"a", b"b", b"c"], dtype=object)])
        ids, strs = q.dequeue_many(3)
        assert strs.tolist() == [b"a", b"b", b"c"]
        assert all(v is None for v in q._cols[1].tolist())
        q.enqueue([7, b"x"])
        assert q.dequeue() == [7, b"x"]
        assert all(v is None for v in q._cols[1].tolist())
