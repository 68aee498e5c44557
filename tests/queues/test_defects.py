"""Queue defects of issue 10: close of a full PriorityQueue, num_enqueued on a
closed queue, 0-d array counts (spec Q20, Q24, Q28, Q43)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from feedq.errors import CancelledError, InvalidArgumentError, OutOfRangeError
from feedq.queues import (
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueState,
    RandomShuffleQueue,
)
from tests.conftest import Bg, wait_blocked

pytestmark = pytest.mark.timeout(30)


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


def _make(kind: str) -> Any:
    if kind == "fifo":
        return FIFOQueue(2, np.int64, shapes=[[]])
    if kind == "shuffle":
        return RandomShuffleQueue(2, 0, np.int64, shapes=[[]], seed=5)
    return PaddingFIFOQueue(2, np.int64, shapes=[[]])


@pytest.mark.parametrize("kind", ["fifo", "shuffle", "padding"])
def test_q28_close_of_full_queue_with_pending_enqueue_and_up_to(kind: str) -> None:
    """The same pattern on the other kinds: up_to collects incrementally, so
    the pending enqueue gets room at once, and close() then returns what
    up_to holds (Q28)."""
    q = _make(kind)
    q.enqueue_many(np.arange(2))
    prod = Bg(q.enqueue, 2, name="feedq-test-prod")
    wait_blocked(q, producers=1)
    cons = Bg(q.dequeue_up_to, 5, name="feedq-test-upto")
    prod.result()
    wait_blocked(q, consumers=1)
    q.close()
    got = cons.result()
    assert sorted(got.tolist()) == [0, 1, 2]
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(3)


def test_cancelled_error_of_enqueue_on_a_closed_queue_has_num_enqueued() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]], name="closed")
    q.close()
    with pytest.raises(CancelledError, match=r"^FIFOQueue 'closed' is closed\.$") as info:
        q.enqueue_many(np.arange(3))
    assert info.value.num_enqueued == 0  # type: ignore[attr-defined]
    with pytest.raises(CancelledError) as info:
        q.enqueue(1)
    assert info.value.num_enqueued == 0  # type: ignore[attr-defined]
    cancelled = FIFOQueue(2, np.int64, shapes=[[]])
    cancelled.cancel(RuntimeError("x"))
    with pytest.raises(CancelledError) as info:
        cancelled.enqueue_many(np.arange(3))
    assert info.value.num_enqueued == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_q20_counts_may_be_0d_integer_arrays(dtype: Any) -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(6))
    np.testing.assert_array_equal(q.dequeue_many(np.array(2, dtype=dtype)), [0, 1])
    np.testing.assert_array_equal(q.dequeue_up_to(np.array(2, dtype=dtype)), [2, 3])
    np.testing.assert_array_equal(q.dequeue_available(np.array(5, dtype=dtype)), [4, 5])
    assert q.dequeue_many(np.array(0, dtype=dtype)).shape == (0,)


@pytest.mark.parametrize("bad", [np.array(2.0), np.array(True), np.array([2]), 2.0, True])
def test_q20_counts_reject_floats_bools_and_vectors(bad: Any) -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(3))
    for call in (q.dequeue_many, q.dequeue_up_to, q.dequeue_available):
        with pytest.raises(TypeError, match="n must be an int"):
            call(bad)
    assert q.size() == 3


def test_q20_negative_0d_count_is_invalid_argument() -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]], name="neg")
    with pytest.raises(InvalidArgumentError, match=r"requested -1 < 0 elements"):
        q.dequeue_many(np.array(-1))


def test_t1_huge_finite_timeout_waits_instead_of_overflowing() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    bg = Bg(q.dequeue, timeout=1e12, name="feedq-test-huge")
    wait_blocked(q, consumers=1)
    q.enqueue(3)
    assert bg.result() == 3
