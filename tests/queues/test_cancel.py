"""Cancelling one call (CancelToken, STYLE 16), interrupted calls (Ctrl-C)
and put_back: every way a blocking call gives up withdraws its attempt, so
each element is dequeued exactly once or is still queued (T2, T3, Q15, Q27).
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues import (
    CancelToken,
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    RandomShuffleQueue,
)
from tests.conftest import Bg, sigint_default, wait_blocked, wait_until

pytestmark = pytest.mark.timeout(30)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raise_in(thread: threading.Thread, exc: type[BaseException] = KeyboardInterrupt) -> None:
    """Raise ``exc`` asynchronously in ``thread`` (as Ctrl-C would in the main thread)."""
    assert thread.ident is not None
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))
    assert n == 1


# -- the token itself ---------------------------------------------------------------


def test_token_fire_is_idempotent_and_the_first_cause_wins() -> None:
    token = CancelToken()
    assert (token.fired, token.cause) == (False, None)
    first, second = RuntimeError("first"), RuntimeError("second")
    token.fire(first)
    token.fire(second)
    token.fire()
    assert token.fired and token.cause is first and token.error() is first
    with pytest.raises(TypeError, match="exception instance"):
        CancelToken().fire("stop")  # type: ignore[arg-type]
    plain = CancelToken()
    plain.fire()
    assert isinstance(plain.error(), CancelledError) and plain.error() is not plain.error()
    with pytest.raises(CancelledError):
        plain.raise_if_fired()


def test_token_on_fire_runs_once_and_can_be_removed() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_fire(lambda: calls.append("a"))
    remove = token.on_fire(lambda: calls.append("b"))
    remove()
    token.fire()
    token.fire()
    token.on_fire(lambda: calls.append("late"))  # already fired: runs at once
    assert calls == ["a", "late"]


def test_cancel_token_is_exported() -> None:
    assert feedq.CancelToken is CancelToken
    assert CancelToken.__module__ == "feedq.queues"


# -- cancelling one call ----------------------------------------------------------------


def test_token_wakes_only_the_call_waiting_with_it() -> None:
    q = FIFOQueue(5, np.int64, shapes=[[]])
    token = CancelToken()
    mine = Bg(q.dequeue, cancel=token, name="feedq-test-mine")
    wait_blocked(q, consumers=1)
    other = Bg(q.dequeue, name="feedq-test-other")
    wait_blocked(q, consumers=2)
    token.fire()
    assert isinstance(mine.exception(), CancelledError)
    wait_blocked(q, consumers=1)  # the other call still waits, first in line now
    assert not q.is_closed()
    q.enqueue(7)
    assert other.result() == 7
    assert q.statistics().dequeued == 1


def test_token_dequeue_many_puts_collected_back_in_order() -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    token = CancelToken()
    cause = RuntimeError("consumer went away")
    first = Bg(q.dequeue_many, 5, cancel=token, name="feedq-test-first")
    wait_blocked(q, consumers=1)
    assert q.size() == 0  # both held by the pending call (Q12)
    behind = Bg(q.dequeue_many, 3, name="feedq-test-behind")
    wait_blocked(q, consumers=2)
    token.fire(cause)
    assert first.exception() is cause
    wait_blocked(q, consumers=1)
    q.enqueue(2)
    np.testing.assert_array_equal(behind.result(), [0, 1, 2])  # front, in order
    s = q.statistics()
    assert (s.size, s.enqueued, s.dequeued) == (0, 3, 3)


@pytest.mark.parametrize("kind", ["fifo", "shuffle", "padding", "priority"])
def test_token_dequeue_up_to_of_every_kind_gives_everything_back(kind: str) -> None:
    if kind == "priority":
        q: Any = PriorityQueue(10, [np.int64], shapes=[[]])
        q.enqueue_many([np.arange(3), np.arange(3) * 10])
    else:
        if kind == "fifo":
            q = FIFOQueue(10, np.int64, shapes=[[]])
        elif kind == "shuffle":
            q = RandomShuffleQueue(10, 0, np.int64, shapes=[[]], seed=1)
        else:
            q = PaddingFIFOQueue(10, np.int64, shapes=[[None]])
        q.enqueue_many(np.arange(3).reshape(3, 1) if kind == "padding" else np.arange(3))
    token = CancelToken()
    bg = Bg(q.dequeue_up_to, 5, cancel=token, name="feedq-test-upto")
    wait_blocked(q, consumers=1)
    token.fire()
    assert isinstance(bg.exception(), CancelledError)
    assert q.size() == 3 and q.statistics().dequeued == 0
    q.close()
    got = q.dequeue_up_to(5)
    values = got[0] if kind == "priority" else got
    assert sorted(np.asarray(values).ravel().tolist()) == [0, 1, 2]


def test_token_enqueue_many_stops_and_reports_num_enqueued() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    token = CancelToken()
    prod = Bg(q.enqueue_many, np.arange(5), cancel=token, name="feedq-test-prod")
    wait_blocked(q, producers=1)
    token.fire()
    err = prod.exception()
    assert isinstance(err, CancelledError) and err.num_enqueued == 2  # type: ignore[attr-defined]
    np.testing.assert_array_equal(q.dequeue_many(2), [0, 1])
    # Nothing more arrives: the attempt left the line.
    assert q.size() == 0 and q.statistics().enqueued == 2
    assert q.statistics().waiting_producers == 0
    q.enqueue_many(np.arange(10, 12))  # the queue carries on
    np.testing.assert_array_equal(q.dequeue_many(2), [10, 11])


def test_already_fired_token_raises_without_touching_the_queue() -> None:
    q = FIFOQueue(3, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    before = q.statistics()
    cause = RuntimeError("stopped")
    token = CancelToken()
    token.fire(cause)
    for call in (
        lambda: q.dequeue(cancel=token),
        lambda: q.dequeue_many(1, cancel=token),
        lambda: q.dequeue_up_to(1, cancel=token),
        lambda: q.dequeue_available(1, cancel=token),
        lambda: q.enqueue(5, cancel=token),
    ):
        with pytest.raises(RuntimeError) as info:
            call()
        assert info.value is cause
    with pytest.raises(RuntimeError) as info:
        q.enqueue_many(np.arange(1), cancel=token)
    assert info.value.num_enqueued == 0  # type: ignore[attr-defined]
    assert q.statistics() == before


def test_token_fired_after_the_call_completed_changes_nothing() -> None:
    q = FIFOQueue(3, np.int64, shapes=[[]])
    token = CancelToken()
    bg = Bg(q.dequeue, cancel=token, name="feedq-test-done")
    wait_blocked(q, consumers=1)
    q.enqueue(4)
    assert bg.result() == 4
    token.fire()
    assert q.statistics().dequeued == 1 and q.size() == 0


def test_token_fired_from_a_signal_handler_in_the_waiting_thread() -> None:
    """fire() takes no queue lock, so a handler may run it in the very thread
    that waits (here the main thread, blocked in dequeue_many)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread")
    q = FIFOQueue(5, np.int64, shapes=[[]])
    q.enqueue(1)
    token = CancelToken()
    handled: list[int] = []

    def handler(*_: object) -> None:
        handled.append(1)
        token.fire()

    previous = signal.signal(signal.SIGUSR1, handler)
    # A library loaded by an earlier test may have left SIGUSR1 blocked in
    # this thread; then no handler would ever run here.
    was_blocked = signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    main = threading.get_ident()
    done = threading.Event()

    def send() -> None:
        wait_blocked(q, consumers=1)
        # Sent again until the wait ends: a second fire() does nothing (the
        # first one wins), so a wake-up lost after the handler ran still
        # fails below; only a signal that never reached the handler is helped.
        for _ in range(20):
            signal.pthread_kill(main, signal.SIGUSR1)
            if done.wait(0.5):
                return

    sender = threading.Thread(target=send, name="feedq-test-signal")
    sender.start()
    try:
        try:
            q.dequeue_many(3, cancel=token, timeout=15)
        except CancelledError:
            pass
        except DeadlineExceededError:
            pytest.fail(f"the waiting dequeue was not cancelled (handler ran {len(handled)} times; "
                        f"SIGUSR1 was blocked in this thread before the test: {was_blocked})")
        else:
            pytest.fail("dequeue_many returned")
    finally:
        done.set()
        sender.join(20)
        signal.signal(signal.SIGUSR1, previous)
        if was_blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    assert handled and q.size() == 1 and q.dequeue() == 1


def test_token_cancels_take_grad_and_leaves_the_accumulator_untouched() -> None:
    acc = ConditionalAccumulator(np.float32, [1])
    acc.apply_grad([1.0])
    token = CancelToken()
    mine = Bg(acc.take_grad, 2, cancel=token, name="feedq-test-take")
    other = Bg(acc.take_grad, 2, timeout=10, name="feedq-test-take2")
    wait_until(lambda: acc.statistics().waiting_takers == 2, what="two takers")
    token.fire()
    assert isinstance(mine.exception(), CancelledError)
    wait_until(lambda: acc.statistics().waiting_takers == 1, what="one taker")
    assert acc.num_accumulated() == 1 and acc.global_step() == 0
    acc.apply_grad([3.0])
    np.testing.assert_allclose(other.result(), [2.0])
    fired = CancelToken()
    fired.fire()
    with pytest.raises(CancelledError):
        acc.take_grad(1, cancel=fired)


def test_timeout_and_queue_cancel_still_withdraw() -> None:
    q = FIFOQueue(5, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    with pytest.raises(DeadlineExceededError, match="the 2 collected were put back"):
        q.dequeue_many(3, timeout=0.05, cancel=CancelToken())
    token = CancelToken()
    bg = Bg(q.dequeue_many, 3, cancel=token, name="feedq-test-qcancel")
    wait_blocked(q, consumers=1)
    q.cancel()
    assert isinstance(bg.exception(), CancelledError)
    np.testing.assert_array_equal(q.dequeue_many(2), [0, 1])


# -- asynchronous exceptions (Ctrl-C) inside a blocking call ------------------------


def test_interrupted_dequeue_many_loses_nothing() -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    bg = Bg(q.dequeue_many, 5, name="feedq-test-intr-many")
    wait_blocked(q, consumers=1)
    _raise_in(bg.thread)
    q.enqueue_many(np.arange(2, 5))  # completes (and wakes) the interrupted call
    assert isinstance(bg.exception(), KeyboardInterrupt)
    s = q.statistics()
    assert (s.size, s.waiting_consumers, s.dequeued) == (5, 0, 0)
    np.testing.assert_array_equal(q.dequeue_many(5, timeout=0), np.arange(5))


def test_interrupted_dequeue_does_not_swallow_the_next_element() -> None:
    q = FIFOQueue(10, np.int64, shapes=[[]])
    bg = Bg(q.dequeue, name="feedq-test-intr-one")
    wait_blocked(q, consumers=1)
    _raise_in(bg.thread)
    q.enqueue(42)
    assert isinstance(bg.exception(), KeyboardInterrupt)
    assert q.dequeue(timeout=0) == 42


def test_interrupted_enqueue_many_stops_inserting() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    # The timeout only wakes the blocked thread so that it sees the exception.
    bg = Bg(q.enqueue_many, np.arange(5), timeout=3.0, name="feedq-test-intr-enq")
    wait_blocked(q, producers=1)
    _raise_in(bg.thread)
    err = bg.exception(timeout=10)
    assert isinstance(err, KeyboardInterrupt)
    assert err.num_enqueued == 2  # type: ignore[attr-defined]
    assert q.statistics().waiting_producers == 0
    np.testing.assert_array_equal(q.dequeue_many(2), [0, 1])
    assert q.size() == 0 and q.statistics().enqueued == 2


def test_interrupted_take_grad_leaves_no_waiter() -> None:
    acc = ConditionalAccumulator(np.float32, [1])
    bg = Bg(acc.take_grad, 1, name="feedq-test-intr-take")
    wait_until(lambda: acc.statistics().waiting_takers == 1, what="a taker")
    _raise_in(bg.thread)
    acc.apply_grad([2.0])  # wakes it
    assert isinstance(bg.exception(), KeyboardInterrupt)
    assert acc.statistics().waiting_takers == 0
    assert acc.num_accumulated() == 1 and acc.global_step() == 0


def _interrupt_consumers(
    interruptions: int, max_s: float, seed: int, kind: str = "fifo", strings: bool = False,
) -> tuple[int, int, int, int]:
    """Two producers fill a shared FIFOQueue (``kind="shuffle"``: a
    RandomShuffleQueue, min_after_dequeue 0; ``strings``: with a string
    column too); two consumers dequeue from it
    with every take call (dequeue, dequeue_many, dequeue_up_to,
    dequeue_available) while the main thread raises KeyboardInterrupt in
    them with ``PyThreadState_SetAsyncExc`` (the Ctrl-C path), one at a
    time, at random points (issue 24), ``interruptions`` times or for
    ``max_s`` seconds. Every element id received is checked to be unique
    and one that was enqueued, and the rows' columns to stay aligned.
    Returns (interruptions, enqueued, received, left in the queue)."""
    dtypes: list[Any] = [np.int64, np.float32] + ([str] if strings else [])
    shapes: list[Any] = [[], [2]] + ([[]] if strings else [])
    q: Any
    if kind == "shuffle":
        q = RandomShuffleQueue(256, 0, dtypes, shapes=shapes, seed=seed)
    else:
        q = FIFOQueue(256, dtypes, shapes=shapes)
    n_prod, n_cons = 2, 2
    stop = threading.Event()
    produced = [0] * n_prod
    # Each consumer appends what a call returned in the same expression as
    # the call: no point between them where an exception can arrive.
    boxes: list[list[Any]] = [[] for _ in range(n_cons)]
    # Per consumer: 0 handling an interruption, 1 inside its protected
    # loop, 2 finished, 3 an interruption on its way (one at a time).
    state = [0] * n_cons
    hits = [0] * n_cons
    errors: list[BaseException] = []

    def producer(p: int) -> None:
        rng = np.random.default_rng(seed * 10 + p)
        nxt = p << 40
        try:
            while not stop.is_set():
                k = int(rng.integers(1, 33))
                ids = np.arange(nxt, nxt + k, dtype=np.int64)
                cols: list[Any] = [ids, np.stack([ids, -ids], axis=1).astype(np.float32)]
                if strings:
                    cols.append([str(i) for i in ids.tolist()])
                try:
                    q.enqueue_many(cols, timeout=0.05)
                    done = k
                except DeadlineExceededError as exc:
                    done = exc.num_enqueued  # type: ignore[attr-defined]
                nxt += done
                produced[p] += done
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def takes(rng: np.random.Generator, box: list[Any]) -> None:
        while True:
            r = rng.random()
            try:
                if r < 0.3:
                    box.append(q.dequeue(timeout=0.05))
                elif r < 0.6:
                    box.append(q.dequeue_many(int(rng.integers(1, 6)), timeout=0.05))
                elif r < 0.8:
                    box.append(q.dequeue_up_to(int(rng.integers(1, 6)), timeout=0.05))
                else:
                    box.append(q.dequeue_available(int(rng.integers(1, 6)), timeout=0.05))
            except DeadlineExceededError:
                pass

    def consumer(c: int) -> None:
        rng = np.random.default_rng(seed * 100 + c)
        while True:
            try:
                state[c] = 1
                takes(rng, boxes[c])
            except KeyboardInterrupt:
                state[c] = 0
                hits[c] += 1
            except OutOfRangeError:
                # Closed, and fewer elements than this call asked for: a
                # dequeue_many leaves them queued (Q27); stop once none is.
                if q.size() == 0:
                    state[c] = 2
                    return
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                state[c] = 2
                errors.append(exc)
                return

    prods = [threading.Thread(target=producer, args=(p,), name=f"feedq-test-ip{p}") for p in range(n_prod)]
    conss = [threading.Thread(target=consumer, args=(c,), name=f"feedq-test-ic{c}") for c in range(n_cons)]
    for t in prods + conss:
        t.start()
    rng = np.random.default_rng(seed + 7)
    end = time.monotonic() + max_s
    fired = 0
    # An asynchronous exception that lands while a thread runs a gc callback
    # (hypothesis installs one) is printed and dropped by CPython, so the
    # consumer would never acknowledge it: no collections while we fire.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while fired < interruptions and time.monotonic() < end and not errors:
            c = int(rng.integers(0, n_cons))
            if state[c] != 1:
                continue
            state[c] = 3
            ident = conss[c].ident
            assert ident is not None
            if ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt)) != 1:
                break  # it ended on an error (reported below)
            fired += 1
            lost_at = time.monotonic() + 10.0
            while state[c] == 3 and not errors:  # its handler acknowledges (a yield, not a timing)
                if time.monotonic() > lost_at:  # a clear failure, not a hang
                    errors.append(AssertionError(f"interruption {fired} of consumer {c} never arrived"))
                    break
                time.sleep(0)
            for _ in range(int(rng.integers(0, 200))):  # land at a random point of the next call
                pass
    finally:
        # Also when the loop fails (or the test times out): every thread ends.
        stop.set()
        for t in prods:
            t.join(30)
        q.close()
        for t in conss:
            t.join(30)
        if gc_was_enabled:
            gc.enable()
    assert not [t.name for t in prods + conss if t.is_alive()]
    assert not errors, errors
    received = sum(int(np.asarray(got[0]).size) for box in boxes for got in box)
    ids = [np.atleast_1d(np.asarray(got[0])) for box in boxes for got in box]
    got_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    assert np.unique(got_ids).size == got_ids.size  # none handed out twice
    want = np.concatenate([np.arange(p << 40, (p << 40) + produced[p]) for p in range(n_prod)])
    assert set(got_ids.tolist()) <= set(want.tolist())
    for box in boxes:
        for got in box:
            i = np.atleast_1d(np.asarray(got[0]))
            vec = np.asarray(got[1]).reshape(-1, 2)
            assert np.array_equal(vec[:, 0], i.astype(np.float32)), "columns out of step"
            if strings:
                assert [int(x) for x in np.atleast_1d(np.asarray(got[2], dtype=object))] == i.tolist()
    s = q.statistics()
    assert s.enqueued == sum(produced)
    assert s.dequeued == received  # what the queue handed out, the consumers hold
    return sum(hits), sum(produced), received, q.size()


@pytest.mark.timeout(60)
def test_interrupted_consumers_of_a_shared_queue_lose_nothing() -> None:
    """Issue 24: an asynchronous exception between the queue handing rows
    over and the caller holding them lost the rows; now they go back."""
    hits, enqueued, received, left = _interrupt_consumers(500, 20.0, seed=1)
    assert hits > 20
    assert (enqueued - received - left, left) == (0, 0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strings", [False, True], ids=["numeric", "with-strings"])
def test_interrupted_consumers_of_a_random_shuffle_queue_lose_nothing(strings: bool) -> None:
    """The shuffle queue's takes change the storage in steps (object columns,
    one native call, dropping references); an asynchronous exception between
    any two leaves it whole: nothing lost, nothing handed out twice."""
    hits, enqueued, received, left = _interrupt_consumers(500, 20.0, seed=2, kind="shuffle", strings=strings)
    assert hits > 20
    assert (enqueued - received - left, left) == (0, 0)


@pytest.mark.stress
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("kind", "strings"), [("fifo", False), ("shuffle", False), ("shuffle", True)],
                         ids=["fifo", "shuffle", "shuffle-with-strings"])
def test_interrupted_consumers_of_a_shared_queue_lose_nothing_long(seed: int, kind: str, strings: bool) -> None:
    hits, enqueued, received, left = _interrupt_consumers(20_000, 240.0, seed, kind, strings)
    assert hits > 1000
    assert (enqueued - received - left, left) == (0, 0)


_SIGINT_SCRIPT = textwrap.dedent(
    """
    import signal, threading, time
    import numpy as np
    import feedq

    main = threading.get_ident()

    def interrupt_when(q, producers, consumers):
        def run():
            while True:
                s = q.statistics()
                if (s.waiting_producers, s.waiting_consumers) == (producers, consumers):
                    break
                time.sleep(0.001)
            signal.pthread_kill(main, signal.SIGINT)
        t = threading.Thread(target=run, name="feedq-test-sigint")
        t.start()
        return t

    q = feedq.FIFOQueue(10, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    t = interrupt_when(q, 0, 1)
    try:
        q.dequeue_many(5)
        print("not interrupted")
    except KeyboardInterrupt:
        pass
    t.join()
    q.enqueue_many(np.arange(2, 5))
    print("many", q.dequeue_many(5, timeout=0).tolist(), q.statistics().waiting_consumers)

    q = feedq.FIFOQueue(2, np.int64, shapes=[[]])
    t = interrupt_when(q, 1, 0)
    try:
        q.enqueue_many(np.arange(5))
        print("not interrupted")
    except KeyboardInterrupt as exc:
        print("enqueued", exc.num_enqueued)
    t.join()
    print("queue", q.dequeue_many(2, timeout=0).tolist(), q.size(), q.statistics().enqueued)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_in_blocking_calls_of_a_real_process() -> None:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", _SIGINT_SCRIPT],
        capture_output=True, text=True, timeout=60, env=env, check=False,
        preexec_fn=sigint_default,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == [
        "many [0, 1, 2, 3, 4] 0",
        "enqueued 2",
        "queue [0, 1] 0 2",
        "",
    ]


# -- put_back ---------------------------------------------------------------------------


def test_put_back_returns_rows_to_the_front_in_order() -> None:
    q = FIFOQueue(10, [np.int64, np.float32], shapes=[[], [2]])
    q.enqueue_many([np.arange(4), np.arange(8, dtype=np.float32).reshape(4, 2)])
    taken = q.dequeue_many(2)
    q.put_back(taken)
    assert q.statistics().dequeued == 0
    ids, rows = q.dequeue_many(4)
    np.testing.assert_array_equal(ids, [0, 1, 2, 3])
    np.testing.assert_array_equal(rows[1], [2, 3])
    q.enqueue_many([np.arange(2), np.zeros((2, 2), np.float32)])
    one = q.dequeue()
    q.put_back(one, many=False)
    assert q.dequeue()[0] == 0


def test_put_back_bypasses_capacity_and_close_and_wakes_consumers() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))
    q.put_back(np.array([9]))
    assert q.size() == 3 and q.statistics().peak_size == 3
    with pytest.raises(DeadlineExceededError):
        q.enqueue(5, timeout=0)
    np.testing.assert_array_equal(q.dequeue_many(3), [9, 0, 1])
    waiting = Bg(q.dequeue, name="feedq-test-woken")
    wait_blocked(q, consumers=1)
    q.put_back(np.array([7]))
    assert waiting.result() == 7
    q.close()
    q.put_back(np.array([1, 2]))
    np.testing.assert_array_equal(q.dequeue_up_to(5), [1, 2])
    with pytest.raises(OutOfRangeError):
        q.dequeue()


def test_put_back_keeps_ragged_elements_exact() -> None:
    q = PaddingFIFOQueue(5, np.int32, shapes=[[None]])
    q.enqueue(np.array([1], np.int32))
    q.enqueue(np.array([1, 2, 3], np.int32))
    padded = q.dequeue_many(2)
    assert padded.shape == (2, 3)
    # One component: the list of per-element values is that component's value.
    q.put_back([[np.array([1], np.int32), np.array([1, 2, 3], np.int32)]])
    np.testing.assert_array_equal(q.dequeue(), [1])
    np.testing.assert_array_equal(q.dequeue(), [1, 2, 3])
    rows = np.empty(2, dtype=object)
    rows[0], rows[1] = np.array([4, 5], np.int32), np.array([6], np.int32)
    q.put_back(rows)  # an object array of elements works bare
    assert [q.dequeue().tolist() for _ in range(2)] == [[4, 5], [6]]
    q.put_back(padded)  # a padded batch is stored padded (documented)
    assert q.dequeue().tolist() == [1, 0, 0]


def test_put_back_priority_comes_before_equal_priorities() -> None:
    q = PriorityQueue(5, [object], shapes=[[]])
    q.enqueue([1, b"a"])
    q.enqueue([1, b"b"])
    first = q.dequeue()
    assert first[1] == b"a"
    q.put_back(first, many=False)
    assert [q.dequeue()[1] for _ in range(2)] == [b"a", b"b"]


def test_put_back_shuffle_rejoins_the_pool() -> None:
    q = RandomShuffleQueue(10, 0, np.int64, shapes=[[]], seed=3)
    q.enqueue_many(np.arange(4))
    taken = q.dequeue_many(2)
    q.put_back(taken)
    q.close()
    assert sorted(q.dequeue_up_to(10).tolist()) == [0, 1, 2, 3]
