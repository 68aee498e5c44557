"""Stopping a DeviceFeeder (project issue 11): the feeder thread waits on its
queue with the feeder's own CancelToken, fired by close() and by a coordinator
stop (X5), instead of re-checking a stop flag every 50 ms. Rows a cancelled
dequeue had collected go back to the queue in order (T3): exact accounting.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.coordinator import Coordinator
from feedq.devices import DeviceConfig, DeviceFeeder, set_device_config
from feedq.errors import CancelledError, DeadlineExceededError
from tests.conftest import Bg, wait_blocked, wait_until

pytestmark = pytest.mark.timeout(20)

#: How long the tests watch a feeder that waits on a short queue: ten periods
#: of the 50 ms poll this replaced.
WATCH_S = 0.5


@pytest.fixture(autouse=True)
def _no_feeder_threads_left() -> Iterator[None]:
    """Feeder threads are daemons: check by name that each was joined."""
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)
    left = [t.name for t in threading.enumerate() if t.name.startswith("feedq-feeder")]
    assert not left, f"feeder threads left running: {left}"


def rows_queue(n: int, capacity: int = 32) -> feedq.FIFOQueue:
    """An open FIFOQueue holding rows 0..n-1: x = [i, -i] (float32), y = i (int64)."""
    q = feedq.FIFOQueue(capacity, [np.float32, np.int64], shapes=[(2,), ()])
    if n:
        q.enqueue_many([np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32),
                        np.arange(n, dtype=np.int64)])
    return q


def count_calls(q: Any, method: str) -> list[int]:
    """Wrap ``q.<method>`` (on the instance) to count calls; returns the counter."""
    calls = [0]
    real = getattr(q, method)

    @functools.wraps(real)  # keeps the signature: the feeder sees cancel= taken
    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(q, method, counting)
    return calls


def drain_queue(q: feedq.FIFOQueue) -> list[int]:
    n = q.size()
    return q.dequeue_many(n)[1].tolist() if n else []


def watch(q: feedq.FIFOQueue, seconds: float) -> list[tuple[int, int, int, int]]:
    """(size, enqueued, dequeued, waiting consumers) of ``q``, sampled for ``seconds``."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        s = q.statistics()
        seen.append((s.size, s.enqueued, s.dequeued, s.waiting_consumers))
        time.sleep(0.002)  # sampling period, not synchronisation
    return seen


@pytest.mark.parametrize("staging", [False, True])
@pytest.mark.parametrize("up_to", [False, True])
def test_a_feeder_waiting_on_a_short_queue_is_woken_by_close_not_by_a_poll(
        staging: bool, up_to: bool) -> None:
    """3 rows, batches of 4: one dequeue holds the 3 rows and sleeps until close().
    Before: a 50 ms dequeue timed out, put the 3 rows back and took them again,
    ten times in WATCH_S."""
    q = rows_queue(3)
    calls = count_calls(q, "dequeue_up_to" if up_to else "dequeue_many")
    previous = feedq.get_default_timeout()
    feedq.set_default_timeout(0.02)  # the feeder's own wait ignores the default
    feeder = DeviceFeeder(q, 4, device="cpu", staging=staging,
                          allow_smaller_final_batch=up_to)
    try:
        feeder.start()
        wait_blocked(q, consumers=1)
        seen = watch(q, WATCH_S)
        # The one attempt holds the 3 rows the whole time: nothing put back, nothing
        # taken again, no other dequeue call.
        assert set(seen) == {(0, 3, 3, 1)}
        assert calls[0] == 1
        assert feeder.statistics().batches_read == 0
        start = time.monotonic()
        feeder.close()
        assert time.monotonic() - start < 2.0  # woken by the token, not left to time out
    finally:
        feeder.close()
        feedq.set_default_timeout(previous)
    stats = q.statistics()
    assert (stats.size, stats.enqueued, stats.dequeued, stats.waiting_consumers) == (3, 3, 0, 0)
    assert calls[0] == 1
    assert drain_queue(q) == [0, 1, 2]  # back at the front, in order
    assert not q.is_closed()  # the feeder never closes its source


@pytest.mark.parametrize("staging", [False, True])
def test_close_in_the_middle_of_a_partial_batch_loses_nothing(staging: bool) -> None:
    """Every row is delivered once or back in the queue, in order."""
    q = rows_queue(11)
    with DeviceFeeder(q, 4, device="cpu", staging=staging) as feeder:
        delivered = [feeder.get(timeout=5)[1].tolist() for _ in range(2)]
        wait_blocked(q, consumers=1)  # the third dequeue holds rows 8..10
        wait_until(lambda: feeder.statistics().buffered == 0, what="nothing buffered")
        assert q.statistics().dequeued == 11
    with pytest.raises(CancelledError, match=r"feeder is closed$"):
        feeder.get()
    rest = drain_queue(q)
    assert delivered == [[0, 1, 2, 3], [4, 5, 6, 7]] and rest == [8, 9, 10]
    stats = feeder.statistics()
    assert (stats.batches_read, stats.batches_delivered, stats.rows_delivered) == (2, 2, 8)


def test_a_pipeline_stop_ends_the_feeders_wait_and_its_iteration() -> None:
    """X5: a coordinator stop cancels the feeder's blocked dequeue. A clean stop
    ends iteration quietly, as iterating a pipeline stage does; get() says why."""
    q = rows_queue(3)
    with feedq.Pipeline() as pipe:
        feeder = DeviceFeeder(q, 4, device="cpu").start()  # knows pipe's coordinator
        wait_blocked(q, consumers=1)
        consumer = Bg(lambda: list(feeder), name="test-devices-stop-consumer")
        wait_until(lambda: feeder.statistics().waiting_consumers == 1, what="consumer blocked")
        pipe.stop()
        # Before: the feeder waited for data until the pipeline closed it on exit.
        assert consumer.done.wait(5), "a pipeline stop did not end the iteration"
        assert consumer.result() == []
        with pytest.raises(CancelledError, match=r"the pipeline was stopped$"):
            feeder.get()
        assert q.size() == 3 and not q.is_closed()
    assert feeder.statistics().state == "closed"  # and the pipeline closed it
    consumer.result()
    assert drain_queue(q) == [0, 1, 2]


def test_a_stop_error_reaches_the_consumer_after_the_batches_read_before_it() -> None:
    """X3: the coordinator's error, itself, after the batch already buffered."""
    coord = Coordinator()
    q = rows_queue(7)
    boom = ValueError("boom")
    with DeviceFeeder(q, 4, device="cpu", coord=coord) as feeder:
        wait_blocked(q, consumers=1)  # batch 0..3 buffered, rows 4..6 held
        coord.request_stop(boom)
        assert feeder.get(timeout=5)[1].tolist() == [0, 1, 2, 3]
        with pytest.raises(ValueError, match=r"^boom$") as info:
            feeder.get(timeout=5)
        assert info.value is boom
        assert drain_queue(q) == [4, 5, 6]
    with pytest.raises(ValueError, match=r"^boom$"):
        coord.join([])  # the coordinator still reports it


@pytest.mark.parametrize("error", [None, ValueError("boom")])
def test_a_queue_the_stop_cancels_first_gives_the_same_outcome(
        error: BaseException | None) -> None:
    """A runner's queue is cancelled by its own stop callback, maybe before the
    feeder's token fires; the consumer sees the stop either way."""
    coord = Coordinator()
    q = rows_queue(3)
    coord.add_stop_callback(q.cancel)  # runs before the feeder's callback
    with DeviceFeeder(q, 4, device="cpu", coord=coord) as feeder:
        wait_blocked(q, consumers=1)
        coord.request_stop(error)
        if error is None:
            assert list(feeder) == []
        else:
            with pytest.raises(ValueError, match=r"^boom$") as info:
                feeder.get(timeout=5)
            assert info.value is error
    assert q.size() == 3  # what the cancelled dequeue held went back
    if error is not None:
        with pytest.raises(ValueError):
            coord.join([])


def test_a_feeder_made_after_the_stop_stops_at_once() -> None:
    coord = Coordinator()
    coord.request_stop()
    q = rows_queue(8)
    with DeviceFeeder(q, 4, device="cpu", coord=coord) as feeder:
        assert list(feeder) == []
    assert q.size() == 8  # a fired token touches nothing


def test_close_forgets_the_stop_callback() -> None:
    """A long-lived coordinator keeps no closed feeder alive."""
    coord = Coordinator()
    feeder = DeviceFeeder(rows_queue(0), 4, device="cpu", coord=coord)
    assert coord.remove_stop_callback(feeder._on_coord_stop)
    coord.add_stop_callback(feeder._on_coord_stop)
    feeder.close()
    assert not coord.remove_stop_callback(feeder._on_coord_stop)


def test_an_iterable_is_not_asked_for_more_after_a_stop() -> None:
    """No wait to cancel in an iterable: the token is checked before each next()."""
    coord = Coordinator()
    asked = itertools.count()

    def endless() -> Iterator[np.ndarray]:
        for i in asked:
            yield np.full(2, i, np.int64)

    with DeviceFeeder(endless(), device="cpu", prefetch=1, coord=coord) as feeder:
        first = feeder.get(timeout=5).tolist()
        wait_until(lambda: feeder.statistics().waiting_for_room, what="feeder full")
        coord.request_stop()
        rest = [b.tolist() for b in feeder]  # before: never ended
        taken = next(asked)  # the generator's next value: how many were asked for
    got = [first, *rest]
    assert got == [[i, i] for i in range(len(got))]
    assert taken == len(got)  # everything asked for was delivered, then nothing more


class _NoCancelQueue:
    """A queue-like source whose calls take no cancel= (as a remote queue)."""

    def __init__(self, q: feedq.FIFOQueue) -> None:
        self._q = q
        self.dtypes, self.shapes, self.names = q.dtypes, q.shapes, None
        self.timeouts: list[float | None] = []

    def dequeue_many(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        self.timeouts.append(timeout)
        return self._q.dequeue_many(n, timeout=timeout, out=out)

    def dequeue_up_to(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        return self._q.dequeue_up_to(n, timeout=timeout, out=out)


def test_a_source_without_cancel_is_read_in_bounded_waits() -> None:
    from feedq._devices.source import UNCANCELLABLE_WAIT_S

    q = rows_queue(7)
    source = _NoCancelQueue(q)
    feeder = DeviceFeeder(source, 4, device="cpu").start()
    assert feeder.get(timeout=5)[1].tolist() == [0, 1, 2, 3]
    wait_blocked(q, consumers=1)
    start = time.monotonic()
    feeder.close()
    assert time.monotonic() - start < UNCANCELLABLE_WAIT_S + 2.0
    assert set(source.timeouts) == {UNCANCELLABLE_WAIT_S}
    assert drain_queue(q) == [4, 5, 6]


def test_get_still_times_out_while_the_feeder_waits() -> None:
    """The consumer's own timeout is unchanged; the feeder keeps waiting."""
    q = rows_queue(3)
    with DeviceFeeder(q, 4, device="cpu") as feeder:
        with pytest.raises(DeadlineExceededError):
            feeder.get(timeout=0.02)
        q.enqueue_many([np.zeros((1, 2), np.float32), np.array([3])])
        assert feeder.get(timeout=5)[1].tolist() == [0, 1, 2, 3]
