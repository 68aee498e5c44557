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
    """Reference semantics: a list, a capacity, a closed flag."""

    def __init__(self, kind: str, capacity: int, min_after: int) -> None:
        self.kind, self.capacity, self.min_after = kind, capacity, min_after
        self.items: list[tuple[int, int]] = []  # (priority, id)
        self.closed = False

    def free(self) -> int:
        return 1 << 30 if self.capacity < 0 else self.capacity - len(self.items)

    def available(self) -> int:
        if self.kind == "shuffle" and not self.closed:
            return max(0, len(self.items) - self.min_after)
        return len(self.items)

    def take(self, k: int) -> list[tuple[int, int]]:
        if self.kind == "priority":
            self.items.sort()
        out, self.items = self.items[:k], self.items[k:]
        return out


def _ids(result: Any, kind: str) -> list[int]:
    if kind == "priority":
        prio, ids = result
        return np.atleast_1d(ids).tolist()
    return np.atleast_1d(result).tolist()


def _check(kind: str, capacity: int, min_after: int, seq: list[tuple[str, int]], seed: int) -> None:
    if kind == "fifo":
        q: Any = FIFOQueue(capacity, np.int64, shapes=[[]])
    elif kind == "shuffle":
        q = RandomShuffleQueue(capacity, min_after, np.int64, shapes=[[]], seed=seed)
    else:
        q = PriorityQueue(capacity, [np.int64], shapes=[[]])
    m = Model(kind, capacity, min_after)
    rng = np.random.default_rng(seed)
    next_id = 0
    for op, k in seq:
        if op in ("enqueue", "enqueue_many"):
            n = 1 if op == "enqueue" else k
            ids = list(range(next_id, next_id + n))
            next_id += n
            prios = rng.integers(-3, 3, size=n).tolist()
            if op == "enqueue":
                vals: Any = ids[0] if kind != "priority" else [prios[0], ids[0]]
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
                expected = m.take(n) if kind != "shuffle" else None
                got = _ids(getattr(q, op)(*(() if op == "dequeue" else (k,)), timeout=0), kind)
                if kind == "shuffle":
                    assert len(got) == n
                    remaining = [i for _, i in m.items]
                    assert set(got) <= set(remaining) and len(set(got)) == n
                    m.items = [(p, i) for p, i in m.items if i not in set(got)]
                else:
                    assert expected is not None
                    assert got == [i for _, i in expected]
            else:
                exc = OutOfRangeError if m.closed else DeadlineExceededError
                with pytest.raises(exc):
                    getattr(q, op)(*(() if op == "dequeue" else (k,)), timeout=0)
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
    if kind == "shuffle":
        assert sorted(rest) == sorted(i for _, i in m.items)
    else:
        assert rest == [i for _, i in m.take(len(m.items))]


@settings(max_examples=150, deadline=None)
@given(capacity=st.sampled_from([-1, 1, 3, 8]), seq=ops, seed=st.integers(0, 2**16))
def test_fifo_matches_model(capacity: int, seq: list[tuple[str, int]], seed: int) -> None:
    _check("fifo", capacity, 0, seq, seed)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.sampled_from([-1, 4, 9]),
    min_after=st.integers(0, 3),
    seq=ops,
    seed=st.integers(0, 2**16),
)
def test_random_shuffle_matches_model(capacity: int, min_after: int, seq: list[tuple[str, int]], seed: int) -> None:
    _check("shuffle", capacity, min_after, seq, seed)


@settings(max_examples=150, deadline=None)
@given(capacity=st.sampled_from([-1, 7, 8]), seq=ops, seed=st.integers(0, 2**16))
def test_priority_matches_model(capacity: int, seq: list[tuple[str, int]], seed: int) -> None:
    _check("priority", capacity, 0, seq, seed)
