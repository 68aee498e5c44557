"""Property test: random single-threaded operation sequences against a
simple reference model, for FIFO, RandomShuffle and Priority queues.

With ``timeout=0`` every call completes at once, so the model is exact:
what each call returns or raises, and the queue's contents afterwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues import FIFOQueue, PriorityQueue, RandomShuffleQueue

pytestmark = pytest.mark.timeout(60)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(0, 0)),
        st.tuples(st.just("enqueue_many"), st.integers(0, 7)),
        st.tuples(st.just("dequeue"), st.integers(0, 0)),
        st.tuples(st.just("dequeue_many"), st.integers(0, 7)),
        st.tuples(st.just("dequeue_up_to"), st.integers(1, 7)),
        st.tuples(st.just("dequeue_available"), st.integers(1, 7)),
        st.tuples(st.just("close"), st.integers(0, 0)),
    ),
    max_size=40,
)


class Model:
    """Reference semantics: a list, a capacity, a closed flag; for the
    shuffle queue, its draw rule (docs/queue-api.md) on a generator of the
    same seed: draw j picks slot ``word * size >> 64`` and the last item
    moves into it."""

    def __init__(self, kind: str, capacity: int, min_after: int, seed: int = 0) -> None:
        self.kind, self.capacity, self.min_after = kind, capacity, min_after
        self.items: list[tuple[int, int]] = []  # (priority, id)
        self.closed = False
        self.words = np.random.default_rng(seed).bit_generator

    def free(self) -> int:
        return 1 << 30 if self.capacity < 0 else self.capacity - len(self.items)

    def available(self) -> int:
        if self.kind == "shuffle" and not self.closed:
            return max(0, len(self.items) - self.min_after)
        return len(self.items)

    def take(self, k: int) -> list[tuple[int, int]]:
        if self.kind == "shuffle":
            out = []
            for _ in range(k):
                r = (self.words.random_raw() * len(self.items)) >> 64
                out.append(self.items[r])
                self.items[r] = self.items[-1]
                self.items.pop()
            return out
        if self.kind == "priority":
            self.items.sort()
        out, self.items = self.items[:k], self.items[k:]
        return out


def _ids(result: Any, kind: str) -> list[int]:
    if kind == "priority":
        prio, ids = result
        return np.atleast_1d(ids).tolist()
    if kind == "shuffle+strings":  # ids, their names and rows: all in step
        ids, names, rows = (np.atleast_1d(np.asarray(c, dtype=object if i else None)) for i, c in enumerate(result))
        assert [int(x) for x in names] == ids.tolist()
        assert [int(x) for x in np.asarray(rows).reshape(-1, 2)[:, 1]] == ids.tolist()
        return list(ids.tolist())
    return np.atleast_1d(result).tolist()


def _check(kind: str, capacity: int, min_after: int, seq: list[tuple[str, int]], seed: int) -> None:
    strings = kind == "shuffle+strings"
    if kind == "fifo":
        q: Any = FIFOQueue(capacity, np.int64, shapes=[[]])
    elif kind == "shuffle":
        q = RandomShuffleQueue(capacity, min_after, np.int64, shapes=[[]], seed=seed)
    elif strings:
        q = RandomShuffleQueue(capacity, min_after, [np.int64, str, np.float32], shapes=[[], [], [2]], seed=seed)
    else:
        q = PriorityQueue(capacity, [np.int64], shapes=[[]])
    m = Model("shuffle" if strings else kind, capacity, min_after, seed)
    rng = np.random.default_rng(seed)
    next_id = 0
    for op, k in seq:
        if op in ("enqueue", "enqueue_many"):
            n = 1 if op == "enqueue" else k
            ids = list(range(next_id, next_id + n))
            next_id += n
            prios = rng.integers(-3, 3, size=n).tolist()
            if strings:
                cols: list[Any] = [np.array(ids, np.int64), [str(i) for i in ids],
                                   np.array([[0, i] for i in ids], np.float32).reshape(n, 2)]
                vals: Any = [c[0] for c in cols] if op == "enqueue" else cols
            elif op == "enqueue":
                vals = ids[0] if kind != "priority" else [prios[0], ids[0]]
            else:
                vals = [np.array(ids, np.int64)] if kind != "priority" else [prios, ids]
            if op == "enqueue_many" and n == 0:
                getattr(q, op)(vals, timeout=0)
                continue
            if m.closed:
                with pytest.raises(CancelledError):
                    getattr(q, op)(vals, timeout=0)
                continue
            fit = min(n, m.free())
            if fit == n:
                getattr(q, op)(vals, timeout=0)
            else:
                with pytest.raises(DeadlineExceededError) as info:
                    getattr(q, op)(vals, timeout=0)
                assert getattr(info.value, "num_enqueued", 0) == fit
            m.items.extend(zip(prios[:fit], ids[:fit]))
        elif op == "close":
            q.close()
            m.closed = True
        else:
            n = 1 if op == "dequeue" else k
            avail = m.available()
            if op == "dequeue_many" and n == 0:
                assert _ids(q.dequeue_many(0), kind) == []
                continue
            if op == "dequeue_up_to" and m.closed and 0 < len(m.items) < n:
                n = len(m.items)
            if op == "dequeue_available" and 0 < avail < n:
                n = avail
            if avail >= n and (kind != "priority" or len(m.items) >= n):
                expected = m.take(n)
                result = getattr(q, op)(*(() if op == "dequeue" else (k,)), timeout=0)
                if op == "dequeue" and kind != "priority":
                    result = [[c] for c in result] if strings else [result]
                got = _ids(result, kind)
                assert got == [i for _, i in expected]
            else:
                exc = OutOfRangeError if m.closed else DeadlineExceededError
                with pytest.raises(exc):
                    getattr(q, op)(*(() if op == "dequeue" else (k,)), timeout=0)
                if m.kind == "shuffle" and not m.closed and avail > 0:
                    # It collected what was available (Q18), then timed out
                    # and put it back (T3): drawn, then stored at the end.
                    m.items.extend(m.take(avail))
        assert q.size() == len(m.items)
        assert q.is_closed() == m.closed
    # Exact accounting at the end: drain and compare.
    q.close()
    rest: list[int] = []
    while True:
        try:
            rest += _ids(q.dequeue_up_to(100, timeout=0), kind)
        except OutOfRangeError:
            break
    assert rest == [i for _, i in m.take(len(m.items))]


@settings(max_examples=150, deadline=None)
@given(capacity=st.sampled_from([-1, 1, 3, 8]), seq=ops, seed=st.integers(0, 2**16))
def test_fifo_matches_model(capacity: int, seq: list[tuple[str, int]], seed: int) -> None:
    _check("fifo", capacity, 0, seq, seed)


@pytest.mark.parametrize("kind", ["shuffle", "shuffle+strings"])
@settings(max_examples=120, deadline=None)
@given(
    capacity=st.sampled_from([-1, 4, 9]),
    min_after=st.integers(0, 3),
    seq=ops,
    seed=st.integers(0, 2**16),
)
def test_random_shuffle_matches_model(
    kind: str, capacity: int, min_after: int, seq: list[tuple[str, int]], seed: int,
) -> None:
    """The exact elements, in order: the model follows the draw rule (Q31,
    Q33); with a string column beside the numeric ones (index moves beside
    the native call) too, columns in step."""
    _check(kind, capacity, min_after, seq, seed)


@settings(max_examples=150, deadline=None)
@given(capacity=st.sampled_from([-1, 7, 8]), seq=ops, seed=st.integers(0, 2**16))
def test_priority_matches_model(capacity: int, seq: list[tuple[str, int]], seed: int) -> None:
    _check("priority", capacity, 0, seq, seed)
