"""PriorityQueue: spec rules Q39–Q43."""

from __future__ import annotations

import numpy as np
import pytest

from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.queues import PriorityQueue, QueueState
from tests.conftest import Bg, wait_blocked

pytestmark = pytest.mark.timeout(20)


def test_q39_implicit_priority_component() -> None:
    q = PriorityQueue(5, [str, np.float32], shapes=[[], [2]])
    assert q.dtypes[0] == np.int64 and len(q.dtypes) == 3
    q.enqueue([3, "c", [1.0, 2.0]])
    p, s, x = q.dequeue()
    assert p == 3 and s == b"c" and x.tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="priority"):
        q.enqueue([1.5, "a", [0.0, 0.0]])


def test_q39_shapes_optional() -> None:
    """feedq: shapes optional (TF 2.21 required them despite its docs)."""
    q = PriorityQueue(5, [np.int32])
    q.enqueue([2, np.arange(3, dtype=np.int32)])
    q.enqueue([1, np.int32(9)])
    assert q.dequeue()[1] == 9
    with pytest.raises(InvalidArgumentError, match="specified shapes"):
        q.dequeue_many(1)


def test_q40_smallest_first_negatives_allowed() -> None:
    q = PriorityQueue(10, [np.int32], shapes=[[]])
    q.enqueue_many([[5, -3, 0, 7, -10], [50, -30, 0, 70, -100]])
    p, v = q.dequeue_many(5)
    assert p.tolist() == [-10, -3, 0, 5, 7] and v.tolist() == [-100, -30, 0, 50, 70]


def test_q41_ties_are_fifo() -> None:
    """feedq is stricter than TF (heap order): ties come out in insertion order."""
    q = PriorityQueue(10, [str], shapes=[[]])
    for ch in "abcdef":
        q.enqueue([1, ch])
    assert b"".join(q.dequeue_many(6)[1]) == b"abcdef"


def test_q42_dequeue_many_all_or_nothing() -> None:
    q = PriorityQueue(5, [np.int32], shapes=[[]])
    q.enqueue_many([[3, 1], [30, 10]])
    with pytest.raises(DeadlineExceededError):
        q.dequeue_many(3, timeout=0.05)
    assert q.size() == 2  # nothing taken
    bg = Bg(q.dequeue_many, 3)
    wait_blocked(q, consumers=1)
    assert q.size() == 2
    q.enqueue([2, 20])
    p, v = bg.result()
    assert p.tolist() == [1, 2, 3] and v.tolist() == [10, 20, 30]


def test_q42_batch_larger_than_capacity_is_rejected() -> None:
    """feedq: an error instead of TF's deadlock."""
    q = PriorityQueue(2, [np.int32], shapes=[[]])
    with pytest.raises(InvalidArgumentError, match="can never complete with capacity 2"):
        q.dequeue_many(3)


def test_q42_closed_short_keeps_elements() -> None:
    q = PriorityQueue(5, [np.int32], shapes=[[]])
    q.enqueue_many([[2, 1], [20, 10]])
    q.close()
    with pytest.raises(OutOfRangeError, match=r"\(requested 3, current size 2\)"):
        q.dequeue_many(3)
    assert q.size() == 2


def test_q43_dequeue_up_to_after_close_returns_remaining_sorted() -> None:
    """feedq fixes the TF bug that discarded the k < n remaining elements."""
    q = PriorityQueue(5, [np.int32], shapes=[[]])
    q.enqueue_many([[9, 4, 6], [90, 40, 60]])
    q.close()
    p, v = q.dequeue_up_to(5)
    assert p.tolist() == [4, 6, 9] and v.tolist() == [40, 60, 90]
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(5)


def test_priority_put_back_keeps_tie_order() -> None:
    q = PriorityQueue(-1, [np.int64], shapes=[[]])
    q.enqueue_many([np.zeros(5, np.int64), np.arange(5)])
    with q._mutex:  # simulate a put-back of two elements taken earlier
        chunk = q._take(2, None, 0)
        q._engine.size -= 2
        q._ensure_alloc(q._engine.size + 2)
        q._putback(chunk)
        q._engine.size += 2
    assert q.dequeue_many(5)[1].tolist() == [0, 1, 2, 3, 4]


def test_named_priority_queue() -> None:
    q = PriorityQueue(5, [np.int32], shapes=[[]], names=["prio", "value"])
    q.enqueue({"prio": 2, "value": 5})
    q.enqueue({"prio": 1, "value": 6})
    assert q.dequeue() == {"prio": 1, "value": 6}


def test_q43_close_of_full_priority_queue_releases_dequeue_up_to_and_enqueue() -> None:
    """Full PriorityQueue (capacity 2), one enqueue pending, dequeue_up_to(3)
    waiting, then close(): up_to returns the 2 there, sorted (Q43), and the
    pending enqueue then finishes (Q23); before, both hung in CLOSING."""
    q = PriorityQueue(2, [np.int64], shapes=[[]])
    q.enqueue_many([np.array([5, 3]), np.array([50, 30])])
    prod = Bg(q.enqueue, [1, 10], name="feedq-test-prod")
    wait_blocked(q, producers=1)
    cons = Bg(q.dequeue_up_to, 3, name="feedq-test-upto")
    wait_blocked(q, producers=1, consumers=1)
    q.close()
    prios, vals = cons.result()
    np.testing.assert_array_equal(prios, [3, 5])
    np.testing.assert_array_equal(vals, [30, 50])
    prod.result()
    assert q.statistics().state is QueueState.CLOSED
    prios, vals = q.dequeue_up_to(3)
    assert prios.tolist() == [1] and vals.tolist() == [10]
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(3)
    s = q.statistics()
    assert (s.enqueued, s.dequeued, s.size) == (3, 3, 0)


def test_q24_full_priority_queue_close_cancelling_the_pending_enqueue() -> None:
    q = PriorityQueue(2, [np.int64], shapes=[[]])
    q.enqueue_many([np.array([5, 3]), np.array([50, 30])])
    prod = Bg(q.enqueue, [1, 10], name="feedq-test-prod")
    wait_blocked(q, producers=1)
    cons = Bg(q.dequeue_up_to, 3, name="feedq-test-upto")
    wait_blocked(q, producers=1, consumers=1)
    q.close(cancel_pending_enqueues=True)
    err = prod.exception()
    assert isinstance(err, CancelledError) and err.num_enqueued == 0  # type: ignore[attr-defined]
    prios, _ = cons.result()
    np.testing.assert_array_equal(prios, [3, 5])
