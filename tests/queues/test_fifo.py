"""FIFOQueue: spec rules Q1–Q28 and T1–T4 (../shared/spec/tf1-semantics.md)."""

from __future__ import annotations

import gc
import math
import sys
import time
import weakref
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.queues import (
    STRING,
    FIFOQueue,
    PaddingFIFOQueue,
    QueueState,
    RandomShuffleQueue,
)
from feedq.queues._engine import TimingRecord
from tests.conftest import Bg, wait_blocked

pytestmark = pytest.mark.timeout(20)


# -- 1.1 construction -----------------------------------------------------------


def test_q1_dtypes_stored_as_list() -> None:
    q = FIFOQueue(3, np.int32)
    assert q.dtypes == [np.dtype(np.int32)]
    q2 = FIFOQueue(3, [np.int32, "float32", str, bytes, "string"])
    assert q2.dtypes == [np.dtype(np.int32), np.dtype(np.float32), STRING, STRING, STRING]


def test_q1_torch_dtypes_accepted() -> None:
    torch = pytest.importorskip("torch")
    q = FIFOQueue(3, [torch.float32, torch.int64])
    assert q.dtypes == [np.dtype(np.float32), np.dtype(np.int64)]
    with pytest.raises(TypeError, match="bfloat16"):
        FIFOQueue(3, torch.bfloat16)


def test_q2_shapes_must_be_fully_defined() -> None:
    with pytest.raises(ValueError, match=r"^All shapes must be fully defined"):
        FIFOQueue(3, [np.int32], shapes=[[None]])
    with pytest.raises(ValueError, match=r"same length as dtypes"):
        FIFOQueue(3, [np.int32, np.int32], shapes=[[1]])


def test_q2_flat_list_is_one_shape() -> None:
    assert FIFOQueue(3, np.int32, shapes=[3]).shapes == [(3,)]
    assert FIFOQueue(3, np.int32, shapes=[]).shapes == [()]
    assert FIFOQueue(3, [np.int32, np.int32], shapes=[[], [2, 2]]).shapes == [(), (2, 2)]


def test_q3_names_require_dict() -> None:
    q = FIFOQueue(3, [np.int32, np.float32], shapes=[[], []], names=["a", "b"])
    with pytest.raises(ValueError, match=r"must enqueue a dictionary"):
        q.enqueue([1, 2.0])
    with pytest.raises(ValueError, match=r"do not match"):
        q.enqueue({"a": 1, "c": 2.0})
    q.enqueue({"a": 1, "b": 2.0})
    q.enqueue_many({"a": [3, 4], "b": [5.0, 6.0]})
    one = q.dequeue()
    assert set(one) == {"a", "b"} and one["a"] == 1
    batch = q.dequeue_many(2)
    np.testing.assert_array_equal(batch["a"], [3, 4])
    with pytest.raises(ValueError, match="same length"):
        FIFOQueue(3, [np.int32], names=["a", "b"])


def test_q4_return_structure() -> None:
    q1 = FIFOQueue(3, np.int32, shapes=[[]])
    q1.enqueue(7)
    v = q1.dequeue()
    assert not isinstance(v, list) and v == 7 and v.dtype == np.int32
    q2 = FIFOQueue(3, [np.int32, np.int32], shapes=[[], []])
    q2.enqueue([1, 2])
    assert isinstance(q2.dequeue(), list)


def test_q5_negative_capacity_is_unbounded() -> None:
    q = FIFOQueue(-1, np.int64, shapes=[[]])
    for i in range(1000):
        q.enqueue(i, timeout=0)
    q.enqueue_many(np.arange(5000), timeout=0)
    assert q.size() == 6000 and q.capacity == -1
    out = q.dequeue_many(6000)
    np.testing.assert_array_equal(out, np.concatenate([np.arange(1000), np.arange(5000)]))


def test_q6_unshaped_queue_has_no_dequeue_many() -> None:
    q = FIFOQueue(5, np.int32)
    q.enqueue(np.arange(3, dtype=np.int32))
    q.enqueue(np.int32(4))
    np.testing.assert_array_equal(q.dequeue(), [0, 1, 2])
    assert q.dequeue() == 4
    q.enqueue(1)
    msg = r"^FIFOQueue 'q6': DequeueMany and DequeueUpTo require the components to have specified shapes\.$"
    q = FIFOQueue(5, np.int32, name="q6")
    q.enqueue(1)
    with pytest.raises(InvalidArgumentError, match=msg):
        q.dequeue_many(1)
    with pytest.raises(InvalidArgumentError, match=msg):
        q.dequeue_up_to(1)
    assert q.size() == 1


def test_q6_unshaped_enqueue_many_leading_sizes_must_agree() -> None:
    q = FIFOQueue(5, [np.int32, np.int32])
    with pytest.raises(InvalidArgumentError, match="same size in the 0th dimension"):
        q.enqueue_many([np.zeros(2, np.int32), np.zeros(3, np.int32)])
    assert q.size() == 0


def test_q7_shared_name_is_the_same_queue() -> None:
    a = FIFOQueue(5, np.int32, shapes=[[]], shared_name="shared")
    b = FIFOQueue(5, np.int32, shapes=[[]], shared_name="shared")
    a.enqueue(1)
    assert b.size() == 1 and b.dequeue() == 1
    b.close()
    assert a.is_closed()


def test_q7_mismatched_reopen_is_invalid_argument() -> None:
    FIFOQueue(5, np.int32, shapes=[[]], shared_name="x")
    with pytest.raises(
        InvalidArgumentError,
        match=r"^Shared queue 'x' has capacity 5 but requested capacity was 6$",
    ):
        FIFOQueue(6, np.int32, shapes=[[]], shared_name="x")
    with pytest.raises(InvalidArgumentError, match="component types"):
        FIFOQueue(5, np.int64, shapes=[[]], shared_name="x")
    with pytest.raises(InvalidArgumentError, match="component shapes"):
        FIFOQueue(5, np.int32, shapes=[[2]], shared_name="x")
    with pytest.raises(InvalidArgumentError, match="is a FIFOQueue but a RandomShuffleQueue"):
        feedq.RandomShuffleQueue(5, 0, np.int32, shapes=[[]], shared_name="x")


def test_reset_shared_queues_forgets() -> None:
    a = FIFOQueue(5, np.int32, shapes=[[]], shared_name="r")
    a.enqueue(1)
    feedq.reset_shared_queues("r")
    b = FIFOQueue(5, np.int32, shapes=[[]], shared_name="r")
    assert b.size() == 0 and a.size() == 1


# -- 1.2 validation -----------------------------------------------------------------


def test_q8_no_lossy_conversion() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]], name="q8")
    with pytest.raises(TypeError, match="without loss"):
        q.enqueue(1.5)
    with pytest.raises(TypeError, match="without loss"):
        q.enqueue(np.float32(1.0))
    with pytest.raises(TypeError, match="out of range"):
        q.enqueue(3_000_000_000)
    with pytest.raises(TypeError, match="without loss"):
        q.enqueue("1")
    qf = FIFOQueue(5, np.float32, shapes=[[2]])
    with pytest.raises(TypeError, match=r"astype"):
        qf.enqueue(np.zeros(2, np.float64))
    assert q.size() == 0 and qf.size() == 0
    # Exact and safe conversions are fine.
    q.enqueue(np.int16(3))
    q.enqueue(True is False or 4)
    qf.enqueue([[0.1, 2]])
    qf.enqueue(np.zeros(2, np.int8))
    assert q.size() == 2 and qf.size() == 2


def test_q8_strings() -> None:
    q = FIFOQueue(5, str, shapes=[[]])
    q.enqueue("héllo")
    q.enqueue(b"raw")
    q.enqueue(np.bytes_(b"np"))
    assert q.dequeue() == "héllo".encode()
    assert q.dequeue() == b"raw"
    v = q.dequeue()
    assert type(v) is bytes and v == b"np"
    with pytest.raises(TypeError, match="string component"):
        q.enqueue(5)
    q.enqueue_many([["a", "b"]])
    out = q.dequeue_many(2)
    assert out.dtype == object and list(out) == [b"a", b"b"]


@pytest.mark.parametrize("vals", [[1, 2], (1, 2, 3)])
def test_q9_too_many_components_is_an_error(vals: object) -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    with pytest.raises(ValueError, match=r"expects 1 components, got \d"):
        q.enqueue(vals)
    assert q.size() == 0


def test_q9_too_few_components_is_an_error() -> None:
    q = FIFOQueue(5, [np.int32, np.int32, np.int32], shapes=[[], [], []])
    with pytest.raises(ValueError, match=r"^FIFOQueue '.*' expects 3 components, got 2$"):
        q.enqueue([1, 2])
    with pytest.raises(ValueError, match="expects 3 components, got 1"):
        q.enqueue(1)


def test_q10_shape_mismatch_messages() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[3]])
    with pytest.raises(
        InvalidArgumentError, match=r"^Shape mismatch in tuple component 0\. Expected \[3\], got \[2\]$"
    ):
        q.enqueue(np.zeros(2, np.int32))
    with pytest.raises(
        InvalidArgumentError, match=r"^Shape mismatch in tuple component 0\. Expected \[1,3\], got \[1,2\]$"
    ):
        q.enqueue_many(np.zeros((1, 2), np.int32))
    with pytest.raises(InvalidArgumentError, match="leading batch dimension"):
        FIFOQueue(5, np.int32, shapes=[[]]).enqueue_many(np.int32(3))


def test_q11_rejected_calls_insert_nothing() -> None:
    q = FIFOQueue(5, [np.int32, np.float32], shapes=[[], [2]])
    q.enqueue([1, [1.0, 2.0]])
    for bad in (
        [2, [1.0]],
        [2.5, [1.0, 2.0]],
        [2],
    ):
        with pytest.raises((ValueError, TypeError)):
            q.enqueue(bad)
    with pytest.raises(InvalidArgumentError):
        q.enqueue_many([[1, 2], np.zeros((2, 3), np.float32)])
    with pytest.raises(TypeError):
        q.enqueue_many([[1, 2.5], np.zeros((2, 2), np.float32)])
    assert q.size() == 1 and q.statistics().enqueued == 1


def test_torch_cpu_tensor_accepted_without_copy() -> None:
    torch = pytest.importorskip("torch")
    q = FIFOQueue(5, np.float32, shapes=[[3]])
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    q.enqueue_many(t)
    q.enqueue(t[0])
    np.testing.assert_array_equal(q.dequeue_many(3), np.array([[0, 1, 2], [3, 4, 5], [0, 1, 2]], np.float32))
    with pytest.raises(TypeError, match="without loss"):
        q.enqueue(torch.zeros(3, dtype=torch.float64))


# -- 1.3 enqueue / dequeue / size -----------------------------------------------------


def test_q12_size_excludes_pending() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]])
    q.enqueue_many([[1, 2]])
    bg = Bg(q.dequeue_many, 3)
    wait_blocked(q, consumers=1)
    assert q.size() == 0  # the two are held by the pending dequeue_many
    q.enqueue(3)
    np.testing.assert_array_equal(bg.result(), [1, 2, 3])
    prod = Bg(q.enqueue_many, [[1, 2, 3, 4, 5]])
    wait_blocked(q, producers=1)
    assert q.size() == 3
    np.testing.assert_array_equal(q.dequeue_many(5), [1, 2, 3, 4, 5])
    prod.result()


def test_q13_blocks_when_full_and_when_empty() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]])
    q.enqueue(1)
    with pytest.raises(DeadlineExceededError):
        q.enqueue(2, timeout=0.05)
    assert q.dequeue() == 1
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0.05)


def test_q14_consumers_served_in_arrival_order() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    waiters = []
    for i in range(3):
        waiters.append(Bg(q.dequeue, name=f"c{i}"))
        wait_blocked(q, consumers=i + 1)
    q.enqueue_many([[10, 11, 12]])
    assert [w.result() for w in waiters] == [10, 11, 12]


def test_q14_producers_served_in_arrival_order() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]])
    q.enqueue(0)
    producers = []
    for i in range(3):
        producers.append(Bg(q.enqueue, i + 1, name=f"p{i}"))
        wait_blocked(q, producers=i + 1)
    got = [q.dequeue(timeout=5) for _ in range(4)]
    assert got == [0, 1, 2, 3]
    for p in producers:
        p.result()


def test_q15_enqueue_many_not_atomic() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]])
    prod = Bg(q.enqueue_many, [[1, 2, 3, 4, 5]])
    wait_blocked(q, producers=1)
    assert q.size() == 3
    assert q.dequeue() == 1  # dequeueable while the call is still blocked
    assert not prod.done.is_set() or q.size() == 3
    np.testing.assert_array_equal(q.dequeue_many(4), [2, 3, 4, 5])
    prod.result()


def test_q16_enqueue_many_contiguous() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]])
    a = Bg(q.enqueue_many, np.arange(6), name="a")
    wait_blocked(q, producers=1)
    b = Bg(q.enqueue_many, np.arange(100, 106), name="b")
    wait_blocked(q, producers=2)
    out = q.dequeue_many(12, timeout=5)
    np.testing.assert_array_equal(out, list(range(6)) + list(range(100, 106)))
    a.result()
    b.result()


def test_q17_empty_enqueue_many_is_a_no_op_even_closed() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]])
    q.close()
    q.enqueue_many(np.zeros(0, np.int32))
    assert q.size() == 0


def test_q18_q19_dequeue_many_larger_than_capacity() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]])
    cons = Bg(q.dequeue_many, 5)
    for i in range(5):
        q.enqueue(i, timeout=5)
    np.testing.assert_array_equal(cons.result(), np.arange(5))


def test_q18_later_consumer_waits_behind_dequeue_many() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    many = Bg(q.dequeue_many, 3, name="many")
    wait_blocked(q, consumers=1)
    q.enqueue_many([[1, 2]])
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0.05)
    q.enqueue(3)
    np.testing.assert_array_equal(many.result(), [1, 2, 3])


def test_q18_waiting_dequeue_many_collects_pieces_without_concatenating(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dequeue_many that had to wait copies each piece once, straight into
    the arrays it returns: no np.concatenate of the pieces afterwards."""
    q = FIFOQueue(10, [np.int64, np.float32, STRING], shapes=[[], [2], []])
    many = Bg(q.dequeue_many, 4, name="feedq-test-pieces")
    wait_blocked(q, consumers=1)
    calls: list[int] = []
    concatenate = np.concatenate

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return concatenate(*args, **kwargs)

    monkeypatch.setattr(np, "concatenate", counting)
    q.enqueue_many([np.arange(2), np.ones((2, 2), np.float32), [b"a", b"b"]])
    q.enqueue_many([np.arange(2, 4), np.ones((2, 2), np.float32), [b"c", b"d"]])
    ids, xs, names = many.result()
    assert ids.tolist() == [0, 1, 2, 3] and xs.shape == (4, 2) and names.tolist() == [b"a", b"b", b"c", b"d"]
    assert calls == []
    assert all(v is None for v in q._cols[2].tolist())  # no reference left in the ring


def test_q20_dequeue_many_zero_and_negative() -> None:
    q = FIFOQueue(2, [np.int32, np.float32], shapes=[[], [3]])
    q.close()
    a, b = q.dequeue_many(0)
    assert a.shape == (0,) and b.shape == (0, 3) and b.dtype == np.float32
    with pytest.raises(InvalidArgumentError, match=r"requested -1 < 0 elements$"):
        q.dequeue_many(-1)


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


def test_q21_dequeue_up_to_on_open_queue_waits_for_n() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    q.enqueue_many([[1, 2]])
    with pytest.raises(DeadlineExceededError):
        q.dequeue_up_to(3, timeout=0.05)
    assert q.size() == 2
    q.enqueue(3)
    np.testing.assert_array_equal(q.dequeue_up_to(3), [1, 2, 3])


# -- 1.4 close -----------------------------------------------------------------------


def test_q22_enqueue_after_close_is_cancelled() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]], name="q22")
    q.close()
    assert q.is_closed()
    with pytest.raises(CancelledError, match=r"^FIFOQueue 'q22' is closed\.$"):
        q.enqueue(1)
    with pytest.raises(CancelledError, match=r"^FIFOQueue 'q22' is closed\.$"):
        q.enqueue_many([[1]])


def test_q23_close_does_not_block_behind_pending_enqueue() -> None:
    """feedq differs from Q23: close() returns at once; the pending enqueue may finish."""
    q = FIFOQueue(1, np.int32, shapes=[[]])
    q.enqueue(1)
    prod = Bg(q.enqueue, 2)
    wait_blocked(q, producers=1)
    q.close(timeout=None) if False else q.close()
    assert q.is_closed()
    assert q.statistics().state is QueueState.CLOSING
    with pytest.raises(CancelledError):
        q.enqueue(3)
    assert q.dequeue() == 1
    prod.result()  # the pending enqueue completed after close
    assert q.dequeue() == 2
    assert q.statistics().state is QueueState.CLOSED
    with pytest.raises(OutOfRangeError):
        q.dequeue()


def test_q24_cancel_pending_enqueues() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]], name="q24")
    prod = Bg(q.enqueue_many, [[1, 2, 3, 4, 5]])
    wait_blocked(q, producers=1)
    q.close(cancel_pending_enqueues=True)
    err = prod.exception()
    assert isinstance(err, CancelledError)
    assert str(err) == "FIFOQueue 'q24': Enqueue operation was cancelled"
    assert err.num_enqueued == 3  # type: ignore[attr-defined]
    np.testing.assert_array_equal(q.dequeue_up_to(5), [1, 2, 3])


def test_q25_close_is_idempotent() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]])
    q.close()
    q.close()
    q.close(cancel_pending_enqueues=True)
    q.close()
    assert q.is_closed()


def test_q26_dequeue_on_closed_empty_queue() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]], name="q26")
    q.enqueue(1)
    blocked = Bg(q.dequeue_many, 2)
    wait_blocked(q, consumers=1)
    q.close()
    with pytest.raises(OutOfRangeError):
        blocked.result()
    assert q.dequeue() == 1
    with pytest.raises(
        OutOfRangeError,
        match=r"^FIFOQueue 'q26' is closed and has insufficient elements \(requested 1, current size 0\)$",
    ):
        q.dequeue()
    waiter = Bg(FIFOQueue(1, np.int32, shapes=[[]], name="w").dequeue)
    assert waiter.done.wait(0.01) is False


def test_q26_blocked_dequeue_fails_at_close() -> None:
    q = FIFOQueue(3, np.int32, shapes=[[]])
    waiters = [Bg(q.dequeue, name=f"w{i}") for i in range(3)]
    wait_blocked(q, consumers=3)
    q.close()
    for w in waiters:
        assert isinstance(w.exception(), OutOfRangeError)


def test_q27_dequeue_many_short_after_close_keeps_elements() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]], name="q27")
    q.enqueue_many([[1, 2]])
    q.close()
    with pytest.raises(OutOfRangeError, match=r"\(requested 3, current size 2\)$"):
        q.dequeue_many(3)
    assert q.size() == 2
    np.testing.assert_array_equal(q.dequeue_many(2), [1, 2])


def test_q27_pending_dequeue_many_puts_back_in_order_at_close() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    bg = Bg(q.dequeue_many, 4)
    wait_blocked(q, consumers=1)
    q.enqueue_many([[1, 2]])
    q.enqueue(3)
    # The three are held by the pending call, not stored.
    assert q.size() == 0
    q.close()
    assert isinstance(bg.exception(), OutOfRangeError)
    np.testing.assert_array_equal(q.dequeue_up_to(10), [1, 2, 3])


def test_q28_dequeue_up_to_after_close() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    q.enqueue_many([[1, 2]])
    q.close()
    np.testing.assert_array_equal(q.dequeue_up_to(5), [1, 2])
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(5)


def test_q28_dequeue_up_to_waits_for_pending_enqueue_when_closing() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]])
    q.enqueue(1)
    prod = Bg(q.enqueue_many, [[2, 3]])
    wait_blocked(q, producers=1)
    q.close()
    got = []
    while True:
        try:
            got.extend(q.dequeue_up_to(5, timeout=5).tolist())
        except OutOfRangeError:
            break
    prod.result()
    assert got == [1, 2, 3]


def test_close_wakes_blocked_up_to_with_partial() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]])
    bg = Bg(q.dequeue_up_to, 4)
    wait_blocked(q, consumers=1)
    q.enqueue_many([[7, 8]])
    q.close()
    np.testing.assert_array_equal(bg.result(), [7, 8])


def _make_small(kind: str) -> Any:
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
    q = _make_small(kind)
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


def test_q22_cancelled_error_of_enqueue_on_a_closed_queue_has_num_enqueued() -> None:
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


# -- 2. timeouts and cancellation -------------------------------------------------------


def test_t1_timeout_and_default() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]], name="t1")
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError, match=r"^Timed out waiting for notification: FIFOQueue 't1' dequeue"):
        q.dequeue(timeout=0.2)
    assert 0.15 <= time.monotonic() - t0 < 2.0
    feedq.set_default_timeout(0.05)
    with pytest.raises(DeadlineExceededError):
        q.dequeue()
    # The per-call value overrides the default.
    bg = Bg(q.dequeue, timeout=math.inf)
    wait_blocked(q, consumers=1)
    q.enqueue(5)
    assert bg.result() == 5
    assert isinstance(DeadlineExceededError("x"), TimeoutError)


def test_t1_timeout_zero_does_not_wait_and_negative_is_rejected() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]])
    with pytest.raises(DeadlineExceededError):
        q.dequeue_nowait()
    q.enqueue_nowait(1)
    with pytest.raises(DeadlineExceededError):
        q.enqueue(2, timeout=0)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        q.dequeue(timeout=-1)
    with pytest.raises(ValueError):
        feedq.set_default_timeout(-2)


def test_t2_timed_out_calls_have_no_effect() -> None:
    q = FIFOQueue(1, np.int32, shapes=[[]])
    q.enqueue(1)
    with pytest.raises(DeadlineExceededError):
        q.enqueue(2, timeout=0.02)
    assert q.dequeue() == 1
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0.02)
    q.enqueue(3)
    assert q.dequeue() == 3
    assert q.size() == 0


@pytest.mark.parametrize("op", ["dequeue_many", "dequeue_up_to"])
def test_t3_timeout_mid_dequeue_many_loses_nothing(op: str) -> None:
    """feedq differs from T3: collected elements go back to the front, in order."""
    q = FIFOQueue(5, np.int32, shapes=[[]])
    bg = Bg(getattr(q, op), 4, timeout=0.3)
    wait_blocked(q, consumers=1)
    q.enqueue_many([[1, 2]])
    assert q.size() == 0
    err = bg.exception()
    assert isinstance(err, DeadlineExceededError)
    assert "the 2 collected were put back" in str(err)
    q.enqueue(3)
    np.testing.assert_array_equal(q.dequeue_many(3), [1, 2, 3])


def test_t3_timed_out_partial_enqueue_many_reports_count() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]])
    with pytest.raises(DeadlineExceededError, match="2 of 5 elements were enqueued") as info:
        q.enqueue_many([[1, 2, 3, 4, 5]], timeout=0.05)
    assert info.value.num_enqueued == 2  # type: ignore[attr-defined]
    np.testing.assert_array_equal(q.dequeue_many(2), [1, 2])


def test_t4_cancel_wakes_blocked_consumers_with_cancelled() -> None:
    q = FIFOQueue(5, np.int32, shapes=[[]], name="t4")
    many = Bg(q.dequeue_many, 3, name="many")
    wait_blocked(q, consumers=1)
    q.enqueue_many([[1, 2]])  # held by the pending dequeue_many
    behind = Bg(q.dequeue_many, 2, name="behind")
    wait_blocked(q, consumers=2)
    cause = RuntimeError("producer broke")
    q.cancel(cause)
    err = many.exception()
    assert isinstance(err, CancelledError) and err.__cause__ is cause
    assert str(err) == "FIFOQueue 't4': Dequeue operation was cancelled"
    # The put-back elements can still be taken by a call that need not wait.
    np.testing.assert_array_equal(behind.result(), [1, 2])
    with pytest.raises(CancelledError, match=r"^FIFOQueue 't4': Dequeue operation was cancelled$"):
        q.dequeue()
    with pytest.raises(CancelledError, match=r"^FIFOQueue 't4' was cancelled\.$"):
        q.enqueue(1)
    q.cancel(ValueError("second cause is ignored"))
    with pytest.raises(CancelledError) as info:
        q.dequeue()
    assert info.value.__cause__ is cause


def test_t4_cancel_wakes_blocked_producer() -> None:
    q = FIFOQueue(2, np.int32, shapes=[[]])
    prod = Bg(q.enqueue_many, [[1, 2, 3, 4]])
    wait_blocked(q, producers=1)
    q.cancel()
    err = prod.exception()
    assert isinstance(err, CancelledError) and err.num_enqueued == 2  # type: ignore[attr-defined]
    np.testing.assert_array_equal(q.dequeue_many(2), [1, 2])  # nothing lost


def test_t1_huge_finite_timeout_waits_instead_of_overflowing() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    bg = Bg(q.dequeue, timeout=1e12, name="feedq-test-huge")
    wait_blocked(q, consumers=1)
    q.enqueue(3)
    assert bg.result() == 3


# -- storage, out=, references --------------------------------------------------------


def test_ring_wraps_and_grows_in_order() -> None:
    q = FIFOQueue(-1, [np.int64, np.float32], shapes=[[], [2]])
    expected = []
    nxt = 0
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 50))
        if rng.random() < 0.55:
            ids = np.arange(nxt, nxt + k)
            q.enqueue_many([ids, np.stack([ids, -ids], 1).astype(np.float32)])
            expected.extend(ids.tolist())
            nxt += k
        elif q.size() >= k:
            a, b = q.dequeue_many(k)
            assert a.tolist() == expected[:k]
            np.testing.assert_array_equal(b[:, 1], -a.astype(np.float32))
            del expected[:k]
    assert q.size() == len(expected)


def test_dequeue_many_into_out_buffers() -> None:
    q = FIFOQueue(10, [np.float32, np.int64], shapes=[[3], []])
    q.enqueue_many([np.ones((4, 3), np.float32), np.arange(4)])
    x = np.zeros((8, 3), np.float32)
    y = np.zeros(8, np.int64)
    a, b = q.dequeue_many(4, out=[x, y])
    assert np.shares_memory(a, x) and np.shares_memory(b, y)
    np.testing.assert_array_equal(y[:4], np.arange(4))
    with pytest.raises(InvalidArgumentError, match="needs a buffer"):
        q.dequeue_many(2, out=[np.zeros((1, 3), np.float32), y])
    with pytest.raises(InvalidArgumentError, match="needs a buffer"):
        q.dequeue_many(2, out=[np.zeros((2, 3), np.float64), y])


def test_out_buffer_put_back_on_timeout() -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many([[1, 2]])
    buf = np.zeros(5, np.int64)
    with pytest.raises(DeadlineExceededError):
        q.dequeue_many(5, timeout=0.02, out=buf)
    np.testing.assert_array_equal(q.dequeue_many(2), [1, 2])


def test_queue_keeps_no_reference_to_handed_out_elements() -> None:
    class Marker(bytes):
        pass

    q = FIFOQueue(5, np.float32)  # unshaped: stored by reference
    arr = np.zeros(3, np.float32)
    q.enqueue(arr)
    out = q.dequeue()
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None
    qs = FIFOQueue(5, str, shapes=[[]])
    payload = b"x" * 1000
    q.enqueue(np.ones(2, np.float32))
    qs.enqueue(payload)
    before = sys.getrefcount(payload)
    got = qs.dequeue()
    assert got is payload or got == payload
    del got
    assert sys.getrefcount(payload) <= before
    del Marker


def test_enqueued_array_is_copied() -> None:
    q = FIFOQueue(5, np.float32, shapes=[[2]])
    a = np.zeros(2, np.float32)
    q.enqueue(a)
    a[:] = 9
    np.testing.assert_array_equal(q.dequeue(), [0, 0])
    q2 = FIFOQueue(5, np.float32)  # ragged path copies too
    b = np.zeros(2, np.float32)
    q2.enqueue(b)
    b[:] = 9
    np.testing.assert_array_equal(q2.dequeue(), [0, 0])


def test_statistics_and_iteration() -> None:
    q = FIFOQueue(4, np.int32, shapes=[[]], name="stats")
    q.enqueue_many([[1, 2, 3]])
    q.dequeue()
    s = q.statistics()
    assert (s.name, s.size, s.capacity, s.closed, s.peak_size, s.enqueued, s.dequeued) == (
        "stats", 2, 4, False, 3, 3, 1,
    )
    q.close()
    assert [int(v) for v in q] == [2, 3]
    assert "FIFOQueue(name='stats'" in repr(q)


def test_dequeue_available_takes_what_is_there() -> None:
    """feedq addition: up to n, waiting only while the queue is empty."""
    q = FIFOQueue(10, np.int32, shapes=[[]])
    q.enqueue_many([[1, 2, 3]])
    np.testing.assert_array_equal(q.dequeue_available(5), [1, 2, 3])
    bg = Bg(q.dequeue_available, 5)
    wait_blocked(q, consumers=1)
    q.enqueue_many([[4, 5]])
    np.testing.assert_array_equal(bg.result(), [4, 5])
    q.enqueue_many([[6, 7, 8]])
    np.testing.assert_array_equal(q.dequeue_available(2), [6, 7])
    with pytest.raises(DeadlineExceededError):
        FIFOQueue(1, np.int32, shapes=[[]]).dequeue_available(3, timeout=0.01)
    q.close()
    np.testing.assert_array_equal(q.dequeue_available(5), [8])
    with pytest.raises(OutOfRangeError):
        q.dequeue_available(5)


def test_timing_record_is_a_named_snapshot() -> None:
    q = FIFOQueue(4, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(3))
    q.dequeue()
    t = q._timing()
    assert isinstance(t, TimingRecord)
    assert (t.size, t.peak, t.enqueued, t.dequeued, t.takes, t.fill_sum) == (2, 3, 3, 1, 1, 3)
    assert (t.enqueue_waits, t.dequeue_waits) == (0, 0)
    assert tuple(t)[:4] == (2, 3, 3, 1)  # still unpacks in order (feedq._observe)
