"""Tests of feedq.runners: QueueRunner (QR1–QR12) and runner collections.

Runners fill a real :class:`feedq.queues.FIFOQueue`. Every test is bounded,
leaves no thread behind (fixture), knows a thread is blocked from queue
statistics instead of sleeping, and accounts for every element: each value a
source hands out is dequeued exactly once, still in a queue, or recorded as
dropped by the op that held it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import feedq
from feedq.coordinator import Coordinator
from feedq.errors import CancelledError, FailedPreconditionError, FeedqError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.runners import (
    QUEUE_RUNNERS,
    QueueRunner,
    QueueRunnerStatistics,
    add_queue_runner,
    clear_queue_runners,
    get_queue_runners,
    start_queue_runners,
)

pytestmark = pytest.mark.timeout(10)

# Generous bound for "this must happen now"; failing it means a hang.
JOIN_TIMEOUT = 5.0


@pytest.fixture(autouse=True)
def clean_state() -> Iterator[None]:
    """Empty runner collections and fail a test that leaves a thread running (STYLE 11)."""
    clear_queue_runners()
    before = set(threading.enumerate())
    yield
    clear_queue_runners()
    leftover = [t for t in threading.enumerate() if t not in before]
    for t in leftover:
        t.join(JOIN_TIMEOUT)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads left running: {alive}"


def make_queue(capacity: int, name: str) -> FIFOQueue:
    """A FIFOQueue of int64 scalars."""
    return FIFOQueue(capacity, [np.int64], shapes=[()], name=name)


def wait_until(pred: Callable[[], bool], what: str) -> None:
    """Wait until ``pred()`` holds, reading queue statistics (STYLE 8), or fail."""
    deadline = time.monotonic() + JOIN_TIMEOUT
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def join_or_fail(threads: list[threading.Thread]) -> None:
    """Join threads, failing the test if one does not end in time."""
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive(), f"thread {t.name} did not end"


def drain(q: FIFOQueue) -> tuple[list[int], FeedqError]:
    """Dequeue until the queue raises; return the values and the final error."""
    values: list[int] = []
    while True:
        try:
            values.append(int(q.dequeue(timeout=JOIN_TIMEOUT)))
        except (OutOfRangeError, CancelledError) as e:
            return values, e


class Source:
    """Hands out 0, 1, 2, ... to enqueue ops, and records what reached the queue.

    ``produce`` is the enqueue op: it takes the next value and enqueues it.
    A value whose enqueue was cancelled is recorded in ``dropped``, so that
    handed out == produced + dropped exactly.
    """

    def __init__(self, q: FIFOQueue, limit: int | None = None) -> None:
        self._q = q
        self._limit = limit
        self._lock = threading.Lock()
        self._next = 0  # guarded by self._lock
        self.produced: list[int] = []  # guarded by self._lock
        self.dropped: list[int] = []  # guarded by self._lock

    def produce(self) -> None:
        with self._lock:
            if self._limit is not None and self._next >= self._limit:
                raise OutOfRangeError("source exhausted")
            value = self._next
            self._next += 1
        try:
            self._q.enqueue(value)
        except CancelledError:
            with self._lock:
                self.dropped.append(value)
            raise
        with self._lock:
            self.produced.append(value)

    @property
    def handed_out(self) -> int:
        with self._lock:
            return self._next


def blocked_producers(q: FIFOQueue, n: int) -> Callable[[], bool]:
    """Predicate: ``q`` is full and ``n`` enqueues are waiting on it."""
    return lambda: (s := q.statistics()).size == s.capacity and s.waiting_producers == n


# -- QR1: construction ---------------------------------------------------------------------


def test_qr1_missing_queue_or_enqueue_ops() -> None:
    """QR1: no queue or no enqueue ops → ValueError."""
    q = make_queue(1, "qr1")
    with pytest.raises(ValueError, match=r"^Must provide queue and enqueue_ops\.$"):
        QueueRunner(None, [lambda: None])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Must provide queue and enqueue_ops\.$"):
        QueueRunner(q, [])


def test_qr1_closed_exception_types_must_be_a_tuple_of_feedq_errors() -> None:
    """QR1: a list, an empty tuple or a non-feedq class → TypeError."""
    q = make_queue(1, "qr1")
    for bad in ([OutOfRangeError], (), (ValueError,), ("x",)):
        message = (
            "queue_closed_exception_types, when provided, must be a non-empty tuple of "
            f"feedq.errors types, but saw: {bad!r}"
        )
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            QueueRunner(q, [lambda: None], queue_closed_exception_types=bad)  # type: ignore[arg-type]


def test_qr1_ops_must_be_callable() -> None:
    """QR1: an op that is not callable → TypeError (an op is a callable in feedq)."""
    q = make_queue(1, "qr1")
    with pytest.raises(TypeError, match=r"^enqueue_ops\[1\] is not callable: 42$"):
        QueueRunner(q, [lambda: None, 42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^close_op must be callable, got 'close'$"):
        QueueRunner(q, [lambda: None], close_op="close")  # type: ignore[arg-type]


def test_qr1_x7_defaults() -> None:
    """QR1/X7: default close op closes, cancel op cancels, closed types include Cancelled."""
    q = make_queue(1, "defaults")
    qr = QueueRunner(q, [lambda: None])
    assert qr.queue_closed_exception_types == (OutOfRangeError, CancelledError)
    assert qr.name == "defaults"
    assert qr.close_op == q.close
    assert qr.cancel_op == q.cancel
    assert qr.exceptions_raised == []
    assert qr.statistics() == QueueRunnerStatistics(threads_alive=0, ops_run=0, exceptions=())


# -- QR2–QR5: threads and their loop -------------------------------------------------------


def test_qr2_one_named_thread_per_op_and_no_extra_thread() -> None:
    """QR2: one thread per op (repeats included), named; start/daemon applied; no close_on_stop."""
    q = make_queue(4, "numbers")
    source = Source(q, limit=0)

    def other() -> None:
        raise OutOfRangeError("done")

    qr = QueueRunner(q, [source.produce, source.produce, other])
    threads = qr.create_threads(coord=Coordinator(), daemon=True, start=False)
    assert [t.name for t in threads] == [
        "feedq-runner-numbers-0-produce",
        "feedq-runner-numbers-1-produce",
        "feedq-runner-numbers-2-other",
    ]
    assert all(t.ident is None for t in threads)  # start=False: not started
    assert all(t.daemon for t in threads)
    assert qr.statistics().threads_alive == 3
    for t in threads:
        t.start()
    join_or_fail(threads)
    assert q.is_closed()  # QR5: the last of them ran close_op


def test_qr2_threads_are_registered_with_the_coordinator() -> None:
    """QR2/C10: with a coordinator, coord.join() waits for the runner threads."""
    q = make_queue(4, "registered")
    source = Source(q, limit=3)
    coord = Coordinator()
    threads = QueueRunner(q, [source.produce]).create_threads(coord, start=True)
    assert not threads[0].daemon  # create_threads defaults to daemon=False
    coord.join()  # returns once the thread ended: it was registered
    assert not threads[0].is_alive()
    assert drain(q)[0] == [0, 1, 2]


def test_qr3_no_second_set_of_threads_while_running() -> None:
    """QR3: create_threads returns [] while earlier threads run; later fresh ones, errors cleared."""
    q = make_queue(4, "qr3")
    release = threading.Event()
    calls: list[int] = []

    def op() -> None:
        calls.append(1)
        if len(calls) == 1:
            assert release.wait(JOIN_TIMEOUT)
            raise ValueError("first run fails")
        raise OutOfRangeError("second run ends")

    qr = QueueRunner(q, [op])
    first = qr.create_threads(start=True)
    assert len(first) == 1
    assert qr.create_threads(start=True) == []
    release.set()
    join_or_fail(first)
    assert [str(e) for e in qr.exceptions_raised] == ["first run fails"]
    second = qr.create_threads(start=False)
    assert len(second) == 1
    assert qr.exceptions_raised == []  # cleared by the new threads
    second[0].start()
    join_or_fail(second)
    assert qr.exceptions_raised == []
    assert len(calls) == 2


def test_qr4_loop_enqueues_every_element_exactly_once() -> None:
    """QR4/QR5: two threads run the op until the source ends; every element arrives once."""
    q = make_queue(8, "qr4")
    source = Source(q, limit=200)
    qr = QueueRunner(q, [source.produce, source.produce])
    threads = qr.create_threads(start=True)
    values, end = drain(q)
    join_or_fail(threads)
    assert isinstance(end, OutOfRangeError)  # close_op ran after the last thread
    assert sorted(values) == list(range(200))
    assert sorted(source.produced) == list(range(200)) and source.dropped == []
    assert qr.statistics() == QueueRunnerStatistics(threads_alive=0, ops_run=200, exceptions=())


def test_qr4_stopped_coordinator_threads_exit_without_running_the_op() -> None:
    """QR4: with the coordinator already stopped, threads end without enqueuing."""
    q = make_queue(4, "qr4-stopped")
    calls: list[int] = []
    coord = Coordinator()
    coord.request_stop()
    threads = QueueRunner(q, [lambda: calls.append(1)]).create_threads(coord, start=True)
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert not threads[0].is_alive()
    assert calls == []
    assert q.statistics().cancelled  # the stop callback ran at once


def test_qr5_last_thread_to_end_cleanly_runs_close_op() -> None:
    """QR5: thread A ends on OutOfRange → queue open; thread B ends → close_op runs once."""
    q = make_queue(4, "qr5")
    release = threading.Event()
    closes: list[int] = []

    def op_a() -> None:
        raise OutOfRangeError("a done")

    def op_b() -> None:
        assert release.wait(JOIN_TIMEOUT)
        raise OutOfRangeError("b done")

    def close_op() -> None:
        closes.append(1)
        q.close()

    qr = QueueRunner(q, [op_a, op_b], close_op=close_op)
    thread_a, thread_b = qr.create_threads(start=True)
    join_or_fail([thread_a])
    assert closes == [] and not q.is_closed()
    assert qr.statistics().threads_alive == 1
    release.set()
    join_or_fail([thread_b])
    assert closes == [1] and q.is_closed()


def test_qr5_errors_from_close_op_are_ignored() -> None:
    """QR5: an exception from close_op neither escapes the thread nor counts as an error."""
    q = make_queue(4, "qr5-bad-close")

    def close_op() -> None:
        raise RuntimeError("close failed")

    def op() -> None:
        raise OutOfRangeError("done")

    qr = QueueRunner(q, [op], close_op=close_op)
    join_or_fail(qr.create_threads(start=True))  # an escaping error would fail the test
    assert qr.statistics().exceptions == ()


# -- QR6 / X3: errors ----------------------------------------------------------------------


def test_qr6_qr8_x3_error_in_one_of_several_threads_with_coordinator() -> None:
    """QR6/X3: one failing op stops the coordinator and cancels the queue with the error.

    Two producers are blocked on the full queue when the third op fails: they
    end cleanly, coord.join() raises the error, the elements already queued
    are still dequeued, and then the consumer gets CancelledError chained from
    the error instead of OutOfRange (QR8 in TF1).
    """
    q = make_queue(4, "qr6")
    source = Source(q)
    fail_now = threading.Event()
    boom = ValueError("boom")

    def failing() -> None:
        assert fail_now.wait(JOIN_TIMEOUT)
        raise boom

    coord = Coordinator()
    qr = QueueRunner(q, [source.produce, source.produce, failing])
    threads = qr.create_threads(coord, start=True)
    wait_until(blocked_producers(q, 2), "both producers blocked on the full queue")
    fail_now.set()
    with pytest.raises(ValueError, match=r"^boom$"):
        coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    values, end = drain(q)
    assert isinstance(end, CancelledError) and end.__cause__ is boom
    # Two threads race to the queue, so which four values got in is not fixed;
    # the accounting is: four queued, the two blocked enqueues dropped.
    assert len(values) == 4 and sorted(values) == sorted(source.produced)
    assert len(source.dropped) == 2  # the two enqueues cancelled while blocked
    assert sorted(values + source.dropped) == list(range(source.handed_out)) == list(range(6))
    assert qr.exceptions_raised == []  # with a coordinator the error goes there
    assert qr.statistics().exceptions == (boom,)


def test_qr6_x3_error_without_coordinator_wakes_the_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """QR6/X3: without a coordinator the error is logged, recorded, and reaches the consumer.

    TF1 left the queue open and the consumer hung; here the blocked consumer
    raises CancelledError chained from the runner's error.
    """
    q = make_queue(4, "qr6-nocoord")
    boom = ValueError("boom")

    def failing() -> None:
        wait_until(lambda: q.statistics().waiting_consumers == 1, "the consumer blocked")
        raise boom

    qr = QueueRunner(q, [failing])
    with caplog.at_level(logging.ERROR, logger="feedq.runners"):
        threads = qr.create_threads(start=True)
        with pytest.raises(CancelledError) as info:
            q.dequeue(timeout=JOIN_TIMEOUT)
        join_or_fail(threads)
    assert info.value.__cause__ is boom
    assert qr.exceptions_raised == [boom]
    assert [r.getMessage() for r in caplog.records] == ["Exception in QueueRunner: boom"]


def test_x3_error_travels_down_a_pipeline_of_runners() -> None:
    """X3: an upstream error reaches the consumer of a downstream queue, chained.

    The downstream runner's op gets CancelledError caused by the upstream
    error; it passes the cancellation on instead of closing its queue as if
    the data had ended. Elements produced before the error all arrive.
    """
    upstream, downstream = make_queue(8, "up"), make_queue(8, "down")
    boom = ValueError("upstream broke")
    sent: list[int] = []

    def produce() -> None:
        if len(sent) == 3:
            raise boom
        upstream.enqueue(len(sent))
        sent.append(len(sent))

    def forward() -> None:
        downstream.enqueue(upstream.dequeue())

    up_qr, down_qr = QueueRunner(upstream, [produce]), QueueRunner(downstream, [forward])
    threads = up_qr.create_threads(start=True) + down_qr.create_threads(start=True)
    values, end = drain(downstream)
    join_or_fail(threads)
    assert values == [0, 1, 2]
    assert isinstance(end, CancelledError) and end.__cause__ is boom
    assert up_qr.exceptions_raised == [boom]
    assert down_qr.exceptions_raised == []  # not its own error


# -- QR7–QR11: stop and close --------------------------------------------------------------


def test_qr7_stop_while_runner_is_blocked_on_a_full_queue() -> None:
    """QR7: a stop cancels the queue: the blocked runner ends, join is clean, data stays."""
    q = make_queue(2, "qr7")
    source = Source(q)
    coord = Coordinator()
    qr = QueueRunner(q, [source.produce])
    threads = qr.create_threads(coord, start=True)
    wait_until(blocked_producers(q, 1), "the runner blocked on the full queue")
    t0 = time.monotonic()
    coord.request_stop()
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert time.monotonic() - t0 < 1.0
    assert not threads[0].is_alive()
    values, end = drain(q)
    assert values == source.produced == [0, 1]  # elements already queued remain
    assert source.dropped == [2]
    assert isinstance(end, CancelledError) and end.__cause__ is None  # clean stop
    assert qr.statistics() == QueueRunnerStatistics(threads_alive=0, ops_run=2, exceptions=())


def test_qr9_grace_expiry_names_runner_blocked_on_another_queue() -> None:
    """QR9: a runner blocked on a queue nobody closes survives the stop; join names it."""
    upstream, downstream = make_queue(4, "upstream"), make_queue(4, "downstream")

    def downstream_enqueue() -> None:
        downstream.enqueue(upstream.dequeue())

    coord = Coordinator()
    threads = QueueRunner(downstream, [downstream_enqueue]).create_threads(coord, start=True)
    wait_until(lambda: upstream.statistics().waiting_consumers == 1, "the runner blocked")
    coord.request_stop()
    with pytest.raises(
        RuntimeError,
        match=r"^Coordinator stopped with threads still running: "
        r"feedq-runner-downstream-0-downstream_enqueue$",
    ):
        coord.join(stop_grace_period_secs=0.3)
    upstream.close()  # the thread ends only when the upstream closes
    join_or_fail(threads)


def test_x5_stop_cancels_every_queue_of_chained_runners() -> None:
    """X5 (fixes QR9 when both stages are runners): a stop cancels both queues; join is clean.

    Accounting: every value is in one queue, or was dropped by the op that
    held it when its enqueue was cancelled.
    """
    upstream, downstream = make_queue(2, "upstream"), make_queue(2, "downstream")
    source = Source(upstream)
    forwarded_dropped: list[int] = []

    def downstream_enqueue() -> None:
        value = upstream.dequeue()
        try:
            downstream.enqueue(value)
        except CancelledError:
            forwarded_dropped.append(int(value))
            raise

    coord = Coordinator()
    add_queue_runner(QueueRunner(upstream, [source.produce]))
    add_queue_runner(QueueRunner(downstream, [downstream_enqueue]))
    threads = start_queue_runners(coord)
    wait_until(blocked_producers(downstream, 1), "the downstream runner blocked")
    wait_until(blocked_producers(upstream, 1), "the upstream runner blocked")
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
    up_values, up_end = drain(upstream)
    down_values, down_end = drain(downstream)
    assert isinstance(up_end, CancelledError) and isinstance(down_end, CancelledError)
    everything = sorted(up_values + down_values + forwarded_dropped + source.dropped)
    assert everything == list(range(source.handed_out))
    assert down_values == [0, 1] and forwarded_dropped == [2]


def test_qr10_x7_user_cancel_while_blocked_is_a_clean_end() -> None:
    """QR10/X7: closing the queue with cancel_pending_enqueues ends runners cleanly."""
    q = make_queue(2, "qr10")
    source = Source(q)
    coord = Coordinator()
    qr = QueueRunner(q, [source.produce, source.produce])
    threads = qr.create_threads(coord, start=True)
    wait_until(blocked_producers(q, 2), "both runners blocked")
    q.close(cancel_pending_enqueues=True)
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)  # QR11 fixed too: no stop needed
    assert not any(t.is_alive() for t in threads)
    assert not coord.should_stop()
    assert qr.statistics().exceptions == ()
    values, end = drain(q)
    assert isinstance(end, OutOfRangeError)
    assert len(values) == 2 and sorted(values) == sorted(source.produced)
    assert sorted(values + source.dropped) == list(range(source.handed_out)) == list(range(4))


def test_qr10_cancelled_is_an_error_with_tf1_closed_types() -> None:
    """QR10: with queue_closed_exception_types=(OutOfRangeError,), CancelledError is an error."""
    q = make_queue(1, "qr10-tf1")
    source = Source(q)
    coord = Coordinator()
    qr = QueueRunner(q, [source.produce], queue_closed_exception_types=(OutOfRangeError,))
    threads = qr.create_threads(coord, start=True)
    wait_until(blocked_producers(q, 1), "the runner blocked")
    q.close(cancel_pending_enqueues=True)
    with pytest.raises(CancelledError, match=r"^FIFOQueue 'qr10-tf1': Enqueue operation was"):
        coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    join_or_fail(threads)


def test_qr11_x5_join_returns_after_a_clean_end_without_request_stop() -> None:
    """QR11/X5: no close_on_stop thread: join returns once the runners end cleanly."""
    q = make_queue(4, "qr11")
    source = Source(q, limit=5)
    coord = Coordinator()
    threads = QueueRunner(q, [source.produce]).create_threads(coord, start=True)
    values, end = drain(q)
    t0 = time.monotonic()
    coord.join()
    assert time.monotonic() - t0 < 1.0
    assert values == [0, 1, 2, 3, 4] and isinstance(end, OutOfRangeError)
    assert not coord.should_stop()
    assert not threads[0].is_alive()


# -- QR12: collections ----------------------------------------------------------------------


def test_qr12_collections_and_start_queue_runners() -> None:
    """QR12: add/get/clear; start_queue_runners concatenates threads, daemon by default."""
    first, second = make_queue(4, "first"), make_queue(4, "second")
    qr1 = QueueRunner(first, [Source(first, limit=2).produce])
    qr2 = QueueRunner(second, [Source(second, limit=3).produce])
    add_queue_runner(qr1)
    add_queue_runner(qr2)
    add_queue_runner(qr1, collection="other")
    assert get_queue_runners() == [qr1, qr2]
    assert get_queue_runners(QUEUE_RUNNERS) == [qr1, qr2]
    assert get_queue_runners("other") == [qr1]
    coord = Coordinator()
    threads = start_queue_runners(coord=coord)
    assert [t.name for t in threads] == [
        "feedq-runner-first-0-produce",
        "feedq-runner-second-0-produce",
    ]
    assert all(t.daemon for t in threads)
    coord.join()
    assert drain(first)[0] == [0, 1] and drain(second)[0] == [0, 1, 2]
    clear_queue_runners("other")
    assert get_queue_runners("other") == [] and get_queue_runners() == [qr1, qr2]
    clear_queue_runners()
    assert get_queue_runners() == []
    with pytest.raises(TypeError, match=r"^qr must be a QueueRunner, got 'x'$"):
        add_queue_runner("x")  # type: ignore[arg-type]


def test_qr12_empty_collection_warns_and_returns_nothing() -> None:
    """QR12: an empty collection gives a warning and []."""
    with pytest.warns(
        UserWarning,
        match=r"^start_queue_runners\(\) was called but the collection 'queue_runners' "
        r"holds no queue runners\.$",
    ):
        assert start_queue_runners() == []


def test_statistics_is_a_frozen_snapshot() -> None:
    """STYLE 8: statistics() is a frozen dataclass."""
    stats = QueueRunner(make_queue(1, "s"), [lambda: None]).statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.ops_run = 1  # type: ignore[misc]


# -- issue 10: a coordinator that is not one ---------------------------------------------------


def test_create_threads_rejects_a_non_coordinator_before_counting_threads() -> None:
    """A non-Coordinator is a TypeError raised before the runner counts any
    thread, so the runner can still be started afterwards (it used to raise
    AttributeError with its threads counted alive forever)."""
    q = make_queue(4, "typed")
    source = Source(q, limit=2)
    qr = QueueRunner(q, [source.produce])
    with pytest.raises(
        TypeError, match=r"^coord must be a feedq\.Coordinator or None, got 'coord'$"
    ):
        qr.create_threads("coord", start=True)  # type: ignore[arg-type]
    assert not qr.started
    assert qr.statistics() == QueueRunnerStatistics(threads_alive=0, ops_run=0, exceptions=())
    add_queue_runner(qr)
    with pytest.raises(TypeError, match=r"^coord must be a feedq\.Coordinator or None, got 42$"):
        start_queue_runners(coord=42)  # type: ignore[arg-type]
    assert not qr.started and source.handed_out == 0
    coord = Coordinator()
    threads = start_queue_runners(coord=coord)
    assert [t.name for t in threads] == ["feedq-runner-typed-0-produce"]
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert drain(q)[0] == [0, 1]


def test_runner_threads_are_named_with_the_feedq_prefix() -> None:
    """Every runner thread's name starts with ``feedq-runner-<queue name>-``."""
    q = make_queue(4, "prefixed")

    def done() -> None:
        raise OutOfRangeError("nothing to add")

    qr = QueueRunner(q, [Source(q, limit=1).produce, done])
    threads = qr.create_threads(Coordinator(), start=True)
    assert [t.name for t in threads] == [
        "feedq-runner-prefixed-0-produce",
        "feedq-runner-prefixed-1-done",
    ]
    join_or_fail(threads)


def test_ported_tf1_start_queue_runners_with_sess_runs_and_positional_sess_is_explained() -> None:
    """TF1 code passes ``sess=``; feedq accepts and ignores it. A session
    passed positionally (where ``coord`` goes) gets a TypeError that says why."""
    with pytest.warns(UserWarning, match="holds no queue runners"):
        threads = feedq.start_queue_runners(sess=object(), coord=None, collection="empty-for-sess-test")
    assert threads == []
    class Session:  # what ported code has in coord's place
        def run(self, *args: object) -> None: ...

    with pytest.raises(TypeError, match=r"feedq has no sessions"):
        feedq.start_queue_runners(Session(), collection="empty-for-sess-test")  # type: ignore[arg-type]


def test_looper_interval_must_be_a_number() -> None:
    coord = feedq.Coordinator()
    with pytest.raises(TypeError, match=r"^timer_interval_secs must be a number of seconds or None, got '1'$"):
        feedq.LooperThread(coord, "1", target=lambda: None)  # type: ignore[arg-type]


def test_queue_base_and_from_list_at_top_level() -> None:
    qs = [feedq.FIFOQueue(2, "int64"), feedq.FIFOQueue(2, "int64")]
    sel = feedq.QueueBase.from_list(1, qs)
    sel.enqueue(7)
    assert qs[1].size() == 1 and qs[0].size() == 0


def test_add_queue_runner_inside_a_pipeline_goes_to_the_pipeline() -> None:
    """QR12 inside ``with feedq.Pipeline():``: the pipeline takes the runner,
    starts it, and stops and joins it; the process-wide collection stays
    empty, so a later start_queue_runners cannot start it a second time."""
    clear_queue_runners()
    q = FIFOQueue(4, [np.int64], shapes=[[]], name="added_in_pipe")
    counter = feedq.limit_epochs(np.arange(10), num_epochs=1)
    runner = QueueRunner(q, [lambda: q.enqueue_many([counter()])])
    with feedq.Pipeline() as pipe:
        add_queue_runner(runner)
        assert pipe.runners == [runner] and get_queue_runners() == []
        got = [int(v) for v in q.dequeue_many(10, timeout=10)]
        assert [s.name for s in pipe.statistics().stages] == ["added_in_pipe"]
    assert got == list(range(10))
    assert runner.statistics().threads_alive == 0
    add_queue_runner(runner)  # outside any pipeline: the collection, as before
    assert get_queue_runners() == [runner]
    clear_queue_runners()


# -- X1: never-started runners ---------------------------------------------------------


def test_x1_never_started_runner_is_an_error_naming_it() -> None:
    s = feedq.range_input_producer(3, num_epochs=1, name="forgotten")
    b = feedq.batch(s, 2)
    with pytest.raises(FailedPreconditionError, match=r"never started: 'batch/fifo_queue', 'forgotten'"):
        b.dequeue(timeout=5)
    with pytest.raises(FailedPreconditionError, match=r"never started: 'forgotten'"):
        s.dequeue(timeout=5)


def test_x1_start_queue_runners_makes_it_work() -> None:
    s = feedq.range_input_producer(5, num_epochs=1, shuffle=False)
    b = feedq.batch(s, 2, allow_smaller_final_batch=True)
    coord = feedq.Coordinator()
    threads = feedq.start_queue_runners(coord)
    try:
        assert [x.tolist() for x in b] == [[0, 1], [2, 3], [4]]
    finally:
        coord.request_stop()
        coord.join(threads)
