"""The cost-cutting in the engine's wait path (issue 22) keeps every rule.

A wait that times out just as the flush finishes it, a flush that makes a
second pass only when it must (a closing queue whose last pending enqueue
finished), and a waited dequeue that returns its row without the codec: each
is checked with exact accounting, bounded by pytest-timeout.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from feedq import STRING
from feedq._core.accounts import current_account
from feedq.errors import DeadlineExceededError, OutOfRangeError
from feedq.queues import FIFOQueue, PaddingFIFOQueue, PriorityQueue, RandomShuffleQueue

pytestmark = pytest.mark.timeout(60)

ROUNDS = 1500


def _timeout(i: int) -> float:
    # 0 .. ~1.5 ms: the short ones expire before the element can arrive, the
    # long ones are notified first, and in between the deadline and the
    # notify race each other.
    return (i % 50) * 3e-5


def test_a_dequeue_timing_out_as_it_is_notified_neither_loses_nor_duplicates() -> None:
    q = FIFOQueue(4, np.int64, shapes=[[]])
    got: list[int] = []
    expired = 0
    go = threading.Barrier(2)
    stop = False

    def producer() -> None:
        for i in range(ROUNDS):
            go.wait()
            q.enqueue(i)
        nonlocal stop
        stop = True

    t = threading.Thread(target=producer)
    t.start()
    for i in range(ROUNDS):
        go.wait()
        try:
            got.append(int(q.dequeue(timeout=_timeout(i))))
        except DeadlineExceededError:
            expired += 1
        # Whatever the race did, the element is now either ours or queued.
        while q.size():
            got.append(int(q.dequeue_nowait()))
    t.join(30)
    assert not t.is_alive() and stop
    while q.size():
        got.append(int(q.dequeue_nowait()))
    assert got == list(range(ROUNDS))  # each exactly once, in order
    st = q.statistics()
    assert st.enqueued == st.dequeued == ROUNDS and st.size == 0
    assert 0 < expired < ROUNDS  # both outcomes happened (the race was run)
    assert not q._engine.consumers and not q._engine.producers


def test_a_dequeue_many_timing_out_mid_collection_puts_back_in_order() -> None:
    q = FIFOQueue(8, np.int64, shapes=[[]])
    expired = held_back = 0
    go = threading.Barrier(2)

    def producer() -> None:
        for i in range(ROUNDS):
            go.wait()
            q.enqueue(2 * i)
            # Not a synchronisation: it places the second element before,
            # at or after the consumer's deadline (another sweep than the
            # timeouts'), so that some calls time out holding the first.
            time.sleep(_timeout(7 * i + 3))
            q.enqueue(2 * i + 1)

    t = threading.Thread(target=producer)
    t.start()
    for i in range(ROUNDS):
        go.wait()
        try:
            batch = q.dequeue_many(2, timeout=_timeout(i)).tolist()
        except DeadlineExceededError as exc:
            expired += 1
            held_back += "the 1 collected were put back" in str(exc)
            # What the timed-out call had collected (0 or 1) went back to
            # the front: the round's two elements come out whole, in order.
            batch = q.dequeue_many(2, timeout=10).tolist()
        assert batch == [2 * i, 2 * i + 1], i
    t.join(30)
    assert not t.is_alive()
    st = q.statistics()
    assert st.size == 0 and st.enqueued == st.dequeued == 2 * ROUNDS
    assert 0 < expired < ROUNDS
    assert held_back > 0  # some timed out holding the first element


def test_an_enqueue_timing_out_as_room_frees_inserts_exactly_once_or_not_at_all() -> None:
    q = FIFOQueue(1, np.int64, shapes=[[]])
    q.enqueue(-1)
    inserted: list[int] = []
    expired = 0
    go = threading.Barrier(2)
    taken: list[int] = []

    def consumer() -> None:
        for _ in range(ROUNDS):
            go.wait()
            taken.append(int(q.dequeue(timeout=30)))

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(ROUNDS):
        go.wait()
        try:
            q.enqueue(i, timeout=_timeout(i))
            inserted.append(i)
        except DeadlineExceededError as exc:
            assert exc.num_enqueued == 0  # type: ignore[attr-defined]
            expired += 1
            # The consumer's take frees the room: fill it so that the next
            # round starts full again.
            q.enqueue(-2 - i, timeout=30)
            inserted.append(-2 - i)
    t.join(30)
    assert not t.is_alive()
    left = [int(q.dequeue_nowait())]
    assert taken + left == [-1, *inserted]  # every insert exactly once, in order
    assert 0 < expired < ROUNDS


def test_the_last_pending_enqueue_closes_a_closing_queue_for_a_waiting_dequeue() -> None:
    # One flush: the dequeue_many takes 1 (room), the pending enqueue puts 2
    # and leaves the line, the queue becomes CLOSED, and the dequeue_many,
    # short of its 3, fails at once and puts 1, 2 back (a flush that stopped
    # after the consumers' loop would leave it waiting until its timeout).
    q = FIFOQueue(1, np.int64, shapes=[[]])
    q.enqueue(1)
    t = threading.Thread(target=lambda: q.enqueue(2, timeout=30))
    t.start()
    while not q.statistics().waiting_producers:
        time.sleep(0.001)  # polling a state, not a synchronisation
    q.close()
    with pytest.raises(OutOfRangeError):
        q.dequeue_many(3, timeout=20)
    t.join(10)
    assert not t.is_alive() and q.is_closed()
    assert q.dequeue_up_to(3).tolist() == [1, 2]


def _waited_and_fast(q: Any, value: Any) -> tuple[Any, Any]:
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(q.dequeue(timeout=30)))
    t.start()
    while not q.statistics().waiting_consumers:
        time.sleep(0.001)  # polling a state, not a synchronisation
    try:
        q.enqueue(value)
    finally:
        t.join(30)
    assert not t.is_alive()
    q.enqueue(value)
    return got[0], q.dequeue()


@pytest.mark.parametrize(
    "make, value",
    [
        (lambda: FIFOQueue(4, np.float32, shapes=[[]]), 1.5),
        (lambda: FIFOQueue(4, np.float32, shapes=[[3]]), np.array([1, 2, 3], np.float32)),
        (lambda: FIFOQueue(4, STRING, shapes=[[]]), b"ab"),
        (lambda: FIFOQueue(4, [np.int64, STRING], shapes=[[], []]), [7, b"x"]),
        (lambda: FIFOQueue(4, [np.int64], shapes=[[]], names=["a"]), {"a": 7}),
        (lambda: PaddingFIFOQueue(4, np.int64, shapes=[[None]]), np.array([5, 6])),
        (lambda: RandomShuffleQueue(4, 0, np.int64, shapes=[[2]], seed=1), np.array([5, 6])),
        (lambda: PriorityQueue(4, [np.float32], shapes=[[2]]), [3, [5.0, 6.0]]),
    ],
)
def test_a_waited_dequeue_returns_what_a_fast_one_does(make: Any, value: Any) -> None:
    waited, fast = _waited_and_fast(make(), value)
    assert type(waited) is type(fast)
    if isinstance(fast, dict):
        assert waited.keys() == fast.keys()
        waited, fast = list(waited.values()), list(fast.values())
    if isinstance(fast, list):
        assert [type(w) for w in waited] == [type(f) for f in fast]
        for w, f in zip(waited, fast):
            np.testing.assert_array_equal(w, f)
    else:
        np.testing.assert_array_equal(waited, fast)
        assert getattr(waited, "dtype", None) == getattr(fast, "dtype", None)
        assert getattr(waited, "shape", None) == getattr(fast, "shape", None)


def test_a_thread_without_an_account_reads_none() -> None:
    seen: list[Any] = ["unset"]
    t = threading.Thread(target=lambda: seen.__setitem__(0, current_account()))
    t.start()
    t.join(10)
    assert seen == [None]
