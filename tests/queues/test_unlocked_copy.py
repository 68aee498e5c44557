"""Copies outside the queue's lock (reserve -> copy -> commit, see
``feedq.queues._engine``): a large enqueue_many reserves ring slots, copies
with the lock released and commits in order; a large dequeue_many claims the
oldest rows, copies them out and then frees their slots.

The queues here copy every batch that way (``_unlocked_copy_bytes = 0``);
some hold a copy "in flight" on an event to act while it is."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter, deque
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues import CancelToken, FIFOQueue, PaddingFIFOQueue, QueueState
from tests.conftest import Bg, wait_blocked, wait_until

pytestmark = pytest.mark.timeout(60)


class UnlockedFIFO(FIFOQueue):
    """Every dense batch is copied outside the lock."""

    _unlocked_copy_bytes = 0


class UnlockedPadding(PaddingFIFOQueue):
    _unlocked_copy_bytes = 0


class GatedFIFO(UnlockedFIFO):
    """Copies wait for ``release_in`` / ``release_out`` once they started:
    the test acts while a reservation or a claim is in flight."""

    def arm(self, copy_in: bool = False, copy_out: bool = False) -> None:
        self.entered_in = threading.Event()
        self.entered_out = threading.Event()
        self.release_in = threading.Event()
        self.release_out = threading.Event()
        self.gate_in = copy_in
        self.gate_out = copy_out

    def _copy_in(self, res: Any) -> None:
        if getattr(self, "gate_in", False):
            self.gate_in = False  # only the first copy waits
            self.entered_in.set()
            while not self.release_in.wait(0.005):  # a Python loop: interruptible
                pass
        super()._copy_in(res)

    def _copy_out(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        if getattr(self, "gate_out", False):
            self.gate_out = False
            self.entered_out.set()
            while not self.release_out.wait(0.005):
                pass
        return super()._copy_out(claim)


def _gated(capacity: int, copy_in: bool = False, copy_out: bool = False) -> GatedFIFO:
    q = GatedFIFO(capacity, [np.int64, np.float32, str], shapes=[[], [3], []])
    q.arm(copy_in, copy_out)
    return q


def _batch(ids: Any) -> list[Any]:
    ids = np.asarray(ids, np.int64)
    return [ids, np.repeat(ids[:, None], 3, axis=1).astype(np.float32), [str(i) for i in ids]]


def _check_rows(res: Any, expected: Any) -> None:
    ids, xs, names = res
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_array_equal(xs, np.repeat(np.asarray(expected)[:, None], 3, axis=1))
    assert [int(s) for s in names] == list(expected)


def _raise_in(thread: threading.Thread, exc: type[BaseException] = KeyboardInterrupt) -> None:
    assert thread.ident is not None
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))
    assert n == 1


def test_the_threshold_picks_which_batches_copy_outside_the_lock() -> None:
    q = FIFOQueue(10, np.float32, shapes=[[1024]])  # 4 KiB rows
    assert q._unlocked_rows == (1 << 20) // 4096
    assert UnlockedFIFO(10, np.int64, shapes=[[]])._unlocked_rows == 1
    # Object columns only: nothing to copy outside; other kinds: never.
    assert UnlockedFIFO(10, str, shapes=[[]])._unlocked_rows > 1 << 40


# -- a reservation in flight ------------------------------------------------------------


def test_reservation_in_flight_keeps_later_producers_behind_it() -> None:
    """Q14/Q16: a producer that arrives while a batch is being copied in
    waits in line and its rows come after the batch's."""
    q = _gated(20, copy_in=True)
    a = Bg(q.enqueue_many, _batch(range(0, 5)), name="feedq-test-resv-a")
    assert q.entered_in.wait(5)
    assert q.size() == 0 and q.statistics().enqueued == 0  # not published yet (Q12)
    b = Bg(q.enqueue_many, _batch(range(5, 8)), name="feedq-test-resv-b")
    wait_blocked(q, producers=1)
    c = Bg(q.enqueue, [8, np.full(3, 8, np.float32), "8"], name="feedq-test-resv-c")
    wait_blocked(q, producers=2)
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0)  # nothing is visible while the copy runs
    q.release_in.set()
    for bg in (a, b, c):
        bg.result()
    _check_rows(q.dequeue_many(9, timeout=0), range(9))
    s = q.statistics()
    assert (s.size, s.enqueued, s.dequeued, s.waiting_producers) == (0, 9, 9, 0)


def test_reserved_rows_count_against_the_capacity() -> None:
    q = _gated(6, copy_in=True)
    a = Bg(q.enqueue_many, _batch(range(4)), name="feedq-test-resv-cap")
    assert q.entered_in.wait(5)
    with pytest.raises(DeadlineExceededError) as info:
        q.enqueue_many(_batch([10, 11, 12]), timeout=0.01)
    # It waited behind the copy and inserted nothing (T2, Q15).
    assert info.value.num_enqueued == 0  # type: ignore[attr-defined]
    q.release_in.set()
    a.result()
    q.enqueue_many(_batch([4, 5]), timeout=0)
    with pytest.raises(DeadlineExceededError):
        q.enqueue_many(_batch([6]), timeout=0)
    _check_rows(q.dequeue_many(6, timeout=0), range(6))


def test_close_while_a_batch_is_copied_in_lets_it_finish() -> None:
    """The reservation is the call's linearisation point: a close after it
    does not undo it, and dequeues wait for its rows instead of failing."""
    q = _gated(10, copy_in=True)
    a = Bg(q.enqueue_many, _batch(range(4)), name="feedq-test-resv-close")
    assert q.entered_in.wait(5)
    q.close()
    assert q.is_closed() and q.statistics().state is QueueState.CLOSING
    with pytest.raises(CancelledError):
        q.enqueue_many(_batch([9]))  # new enqueues fail at once (Q22)
    got = Bg(q.dequeue_up_to, 10, name="feedq-test-resv-close-deq")
    wait_blocked(q, consumers=1)
    q.release_in.set()
    a.result()
    _check_rows(got.result(), range(4))
    assert q.statistics().state is QueueState.CLOSED
    with pytest.raises(OutOfRangeError):
        q.dequeue(timeout=0)


def test_cancel_while_a_batch_is_copied_in() -> None:
    """Q24: pending enqueues fail, rows already in stay — and the batch
    being copied in counts as in."""
    q = _gated(10, copy_in=True)
    a = Bg(q.enqueue_many, _batch(range(3)), name="feedq-test-resv-cancel")
    assert q.entered_in.wait(5)
    b = Bg(q.enqueue_many, _batch(range(3, 6)), name="feedq-test-resv-cancel-b")
    wait_blocked(q, producers=1)
    q.cancel()
    err = b.exception()
    assert isinstance(err, CancelledError) and err.num_enqueued == 0  # type: ignore[attr-defined]
    q.release_in.set()
    a.result()
    _check_rows(q.dequeue_up_to(10, timeout=0), range(3))
    s = q.statistics()
    assert (s.size, s.enqueued, s.dequeued, s.waiting_producers) == (0, 3, 3, 0)


def test_interrupted_copy_in_releases_the_reservation() -> None:
    """Ctrl-C during the copy: nothing was inserted (num_enqueued 0), the
    slots and the object references are released, and the queue goes on."""
    q = _gated(8, copy_in=True)
    a = Bg(q.enqueue_many, _batch(range(100, 106)), name="feedq-test-resv-intr")
    assert q.entered_in.wait(5)
    b = Bg(q.enqueue_many, _batch(range(3)), name="feedq-test-resv-intr-b")
    wait_blocked(q, producers=1)
    _raise_in(a.thread)
    err = a.exception()
    assert isinstance(err, KeyboardInterrupt) and err.num_enqueued == 0  # type: ignore[attr-defined]
    b.result()  # the producer behind it went on
    assert q.statistics().enqueued == 3 and q._engine.in_busy == 0
    assert sum(x is not None for x in q._cols[2]) == 3  # no reference left behind
    q.enqueue_many(_batch(range(3, 8)), timeout=0)  # all 8 slots usable
    _check_rows(q.dequeue_many(8, timeout=0), range(8))


# -- a claim in flight ----------------------------------------------------------------


def test_claimed_slots_are_not_reused_until_copied_out() -> None:
    q = _gated(8, copy_out=True)
    q.enqueue_many(_batch(range(8)))
    got = Bg(q.dequeue_many, 8, name="feedq-test-claim")
    assert q.entered_out.wait(5)
    # The rows left the queue (Q12) but their slots are still being read.
    assert q.size() == 0 and q.statistics().dequeued == 8
    put = Bg(q.enqueue_many, _batch(range(8, 16)), name="feedq-test-claim-put")
    wait_blocked(q, producers=1)
    q.release_out.set()
    _check_rows(got.result(), range(8))  # not overwritten
    put.result()
    _check_rows(q.dequeue_many(8, timeout=0), range(8, 16))


def test_two_claims_in_flight_free_slots_oldest_first() -> None:
    q = _gated(8, copy_out=True)
    q.enqueue_many(_batch(range(8)))
    first = Bg(q.dequeue_many, 4, name="feedq-test-claim-1")
    assert q.entered_out.wait(5)
    _check_rows(q.dequeue_many(4, timeout=0), range(4, 8))  # a second claim, done first
    # Slots are freed oldest claim first: the finished claim's wait for it.
    assert q._engine.out_busy == 8
    put = Bg(q.enqueue_many, _batch(range(8, 16)), name="feedq-test-claim-put2")
    wait_blocked(q, producers=1)
    assert q.size() == 0
    q.release_out.set()
    _check_rows(first.result(), range(4))
    put.result()
    _check_rows(q.dequeue_many(8, timeout=0), range(8, 16))


def test_rows_taken_under_the_lock_behind_a_claim_keep_its_slots_busy() -> None:
    """Per-element dequeues (copied under the lock) while an older claim is
    still reading: the ring's busy slots stay one run before the head, so a
    producer cannot write into the claimed slots."""
    q = _gated(8, copy_out=True)
    q.enqueue_many(_batch(range(8)))
    got = Bg(q.dequeue_many, 4, name="feedq-test-claim-behind")
    assert q.entered_out.wait(5)
    assert [int(q.dequeue(timeout=0)[0]) for _ in range(2)] == [4, 5]
    put = Bg(q.enqueue_many, _batch(range(8, 12)), name="feedq-test-claim-behind-put")
    wait_blocked(q, producers=1)  # 4 free by count, none by slot
    assert q.size() == 2
    q.release_out.set()
    _check_rows(got.result(), range(4))
    put.result()
    _check_rows(q.dequeue_many(6, timeout=0), range(6, 12))


def test_interrupted_copy_out_puts_the_rows_back_in_order() -> None:
    q = _gated(10, copy_out=True)
    q.enqueue_many(_batch(range(6)))
    got = Bg(q.dequeue_many, 4, name="feedq-test-claim-intr")
    assert q.entered_out.wait(5)
    _raise_in(got.thread)
    assert isinstance(got.exception(), KeyboardInterrupt)
    s = q.statistics()
    assert (s.size, s.dequeued, q._engine.out_busy) == (6, 0, 0)  # T3: nothing lost
    _check_rows(q.dequeue_many(6, timeout=0), range(6))


def test_put_back_while_copies_are_in_flight_lays_the_ring_out_afresh() -> None:
    """put_back needs the front, where a claim may still be reading, and the
    ring may hold a reservation being written: the storage moves to new
    columns, the claim reads the old ones and the commit writes again."""
    q = _gated(12)
    q.enqueue_many(_batch(range(6)))
    q.arm(copy_in=True, copy_out=True)
    got = Bg(q.dequeue_many, 3, name="feedq-test-relayout-claim")
    assert q.entered_out.wait(5)
    put = Bg(q.enqueue_many, _batch(range(6, 9)), name="feedq-test-relayout-resv")
    assert q.entered_in.wait(5)
    old = q._cols
    q.put_back(_batch([-2, -1]))
    assert q._cols is not old and q._engine.out_busy == 0
    q.release_in.set()
    put.result()
    q.release_out.set()
    _check_rows(got.result(), range(3))
    _check_rows(q.dequeue_many(8, timeout=0), [-2, -1, 3, 4, 5, 6, 7, 8])
    s = q.statistics()
    assert (s.size, s.enqueued, s.dequeued) == (0, 9, 9)


def test_out_buffers_and_padding_queues_copy_outside_the_lock() -> None:
    q = UnlockedFIFO(8, [np.int64, np.float32], shapes=[[], [2]])
    q.enqueue_many([np.arange(6), np.ones((6, 2), np.float32)])
    out = [np.zeros(8, np.int64), np.zeros((8, 2), np.float32)]
    ids, xs = q.dequeue_many(5, out=out)
    assert ids.base is out[0] and xs.base is out[1]
    np.testing.assert_array_equal(out[0][:5], range(5))
    p = UnlockedPadding(8, [np.int64, np.float32], shapes=[[], [None]])
    p.enqueue([0, np.ones(1, np.float32)])
    p.enqueue_many([np.arange(1, 3), np.ones((2, 3), np.float32)])
    ids, xs = p.dequeue_many(3)
    assert ids.tolist() == [0, 1, 2] and xs.shape == (3, 3) and xs.sum() == 7


# -- many threads ------------------------------------------------------------------------


class JitteryFIFO(UnlockedFIFO):
    """Copies that sometimes yield or sleep, so that other calls (and
    timeouts, cancels, close) run while they are in flight."""

    overlaps = 0  # copies that saw another call in the queue meanwhile (unlocked reads)

    def _jitter(self) -> None:
        r = np.random.random()
        if r < 0.3:
            time.sleep(0)
        elif r < 0.4:
            time.sleep(0.0005)
        if self._producers or self._consumers or self._engine.out_busy or self._engine.in_busy > 0 and self._claims:
            type(self).overlaps += 1

    def _copy_in(self, res: Any) -> None:
        self._jitter()
        super()._copy_in(res)

    def _copy_out(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        self._jitter()
        return super()._copy_out(claim)


class JitteryPadding(UnlockedPadding):
    def _copy_in(self, res: Any) -> None:
        if np.random.random() < 0.3:
            time.sleep(0)
        super()._copy_in(res)

    def _copy_out(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        if np.random.random() < 0.3:
            time.sleep(0)
        return super()._copy_out(claim)


def _hammer(kind: str, duration: float, cancel_pending: bool) -> None:
    if kind == "fifo":
        q: Any = JitteryFIFO(24, [np.int64, np.float32, str], shapes=[[], [4], []])
    else:
        q = JitteryPadding(24, [np.int64, np.float32], shapes=[[], [None]])
    n_prod, n_cons = 4, 4
    inserted: list[list[int]] = [[] for _ in range(n_prod)]
    received: list[list[int]] = [[] for _ in range(n_cons)]
    errors: list[BaseException] = []
    tokens: list[CancelToken] = []
    tokens_lock = threading.Lock()
    start = threading.Barrier(n_prod + n_cons + 2)
    stop = threading.Event()

    def token(rng: np.random.Generator) -> CancelToken | None:
        if rng.random() >= 0.2:
            return None
        t = CancelToken()
        with tokens_lock:
            tokens.append(t)
        return t

    def element(ids: np.ndarray[Any, Any]) -> list[Any]:
        if kind == "fifo":
            return [ids, np.repeat(ids[:, None], 4, axis=1).astype(np.float32), [str(i) for i in ids]]
        # Rows of one batch share a length; batches differ (Q37 pads them).
        return [ids, np.repeat(ids[:, None], len(ids) % 3 + 1, axis=1).astype(np.float32)]

    def producer(p: int) -> None:
        rng = np.random.default_rng(p)
        nxt = p * 1_000_000
        start.wait()
        try:
            while not stop.is_set():
                k = int(rng.integers(1, 13))
                ids = np.arange(nxt, nxt + k, dtype=np.int64)
                nxt += k
                timeout = float(rng.choice([0.0, 0.001, 0.01, 0.1]))
                try:
                    if k == 1 and rng.random() < 0.3:
                        q.enqueue([c[0] for c in element(ids)], timeout=timeout, cancel=token(rng))
                    else:
                        q.enqueue_many(element(ids), timeout=timeout, cancel=token(rng))
                    inserted[p].extend(ids.tolist())
                except (DeadlineExceededError, CancelledError) as exc:
                    inserted[p].extend(ids[: getattr(exc, "num_enqueued", 0)].tolist())
                    if isinstance(exc, CancelledError) and q.is_closed():
                        return
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def consumer(c: int) -> None:
        rng = np.random.default_rng(100 + c)
        start.wait()
        try:
            while True:
                timeout = float(rng.choice([0.0, 0.002, 0.02, 0.2]))
                r = rng.random()
                try:
                    if r < 0.15:
                        got = q.dequeue(timeout=timeout, cancel=token(rng))
                        ids = [int(got[0])]
                    else:
                        fn = q.dequeue_many if r < 0.6 else q.dequeue_up_to
                        res = fn(int(rng.integers(1, 30)), timeout=timeout, cancel=token(rng))
                        ids = res[0].tolist()
                        if kind == "fifo":
                            assert np.all(res[1][:, 0] == res[0]), "rows misaligned"
                            assert [int(s) for s in res[2]] == ids, "object column misaligned"
                        else:
                            assert np.all(res[1][:, 0] == res[0]), "rows misaligned"
                    received[c].extend(ids)
                except DeadlineExceededError:
                    continue
                except CancelledError:
                    if q.is_closed():
                        return
                except OutOfRangeError:
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def canceller() -> None:
        rng = np.random.default_rng(999)
        start.wait()
        while not stop.is_set():
            with tokens_lock:
                pending = list(tokens)
                tokens.clear()
            for t in pending:
                if rng.random() < 0.5:
                    t.fire()
            time.sleep(0.001)  # pacing of the load, not a synchronisation

    threads = [threading.Thread(target=producer, args=(i,), name=f"feedq-test-hp{i}") for i in range(n_prod)]
    threads += [threading.Thread(target=consumer, args=(i,), name=f"feedq-test-hc{i}") for i in range(n_cons)]
    threads.append(threading.Thread(target=canceller, name="feedq-test-hcancel"))
    for t in threads:
        t.start()
    start.wait()
    time.sleep(duration)  # the load runs; not a synchronisation
    q.close(cancel_pending_enqueues=cancel_pending)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not [t.name for t in threads if t.is_alive()]
    assert not errors, errors
    left: list[int] = []
    while True:
        try:
            left += q.dequeue_up_to(1000, timeout=0)[0].tolist()
        except OutOfRangeError:
            break
    all_in = Counter(i for lst in inserted for i in lst)
    all_out = Counter(i for lst in received for i in lst) + Counter(left)
    assert max(all_in.values(), default=1) == 1
    assert not [i for i, n in all_out.items() if n > 1], "delivered twice"
    assert all_out == all_in, (
        f"lost {sorted(set(all_in) - set(all_out))[:10]}, invented {sorted(set(all_out) - set(all_in))[:10]}"
    )
    assert sum(all_in.values()) > 200  # the run did real work
    # Per producer, every consumer saw its rows in order (FIFO, Q14/Q16).
    for c, ids in enumerate(received + [left]):
        last: dict[int, int] = {}
        for i in ids:
            p = i // 1_000_000
            assert i > last.get(p, -1), f"consumer {c}: {i} after {last[p]} from producer {p}"
            last[p] = i
    s = q.statistics()
    assert (s.size, s.waiting_consumers, s.waiting_producers) == (0, 0, 0)
    assert s.enqueued == s.dequeued == sum(all_in.values())
    assert q._engine.in_busy == 0 and q._engine.out_busy == 0 and not q._claims


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "padding"])
@pytest.mark.parametrize("cancel_pending", [False, True])
def test_unlocked_copies_under_threads_timeouts_and_cancels(kind: str, cancel_pending: bool) -> None:
    JitteryFIFO.overlaps = 0
    _hammer(kind, 1.5, cancel_pending)
    if kind == "fifo":
        assert JitteryFIFO.overlaps > 0  # copies were in flight while other calls ran


@pytest.mark.stress
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["fifo", "padding"])
@pytest.mark.parametrize("cancel_pending", [False, True])
def test_unlocked_copies_under_threads_long(kind: str, cancel_pending: bool) -> None:
    _hammer(kind, 15.0, cancel_pending=cancel_pending)


def test_wait_helpers_see_in_flight_state() -> None:
    # Sanity for the gate used above: the first copy waits, later ones do not.
    q = _gated(4, copy_in=True)
    a = Bg(q.enqueue_many, _batch([1]), name="feedq-test-gate")
    assert q.entered_in.wait(5)
    wait_until(lambda: q._engine.in_busy == 1, what="a reservation")
    q.release_in.set()
    a.result()
    q.enqueue_many(_batch([2]), timeout=0)
    _check_rows(q.dequeue_many(2, timeout=0), [1, 2])


# -- the inlined per-element and batch fast paths of FIFOQueue ------------------------------

fast_ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(1, 1)),
        st.tuples(st.just("enqueue_many"), st.integers(0, 9)),
        st.tuples(st.just("enqueue_many_i32"), st.integers(1, 9)),
        st.tuples(st.just("dequeue"), st.integers(1, 1)),
        st.tuples(st.just("dequeue_many"), st.integers(0, 9)),
        st.tuples(st.just("put_back"), st.integers(1, 3)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.sampled_from([-1, 3, 8, 13]),
    width=st.sampled_from([None, 2]),
    unlocked=st.booleans(),
    seq=fast_ops,
)
def test_fast_paths_match_a_deque(capacity: int, width: int | None, unlocked: bool, seq: list[tuple[str, int]]) -> None:
    """Bare-array enqueue_many, per-element calls, dequeue_many and
    put_back through wrap-around and growth, against a deque (Q12-Q20)."""
    shape = [] if width is None else [width]
    cls = UnlockedFIFO if unlocked else FIFOQueue
    q = cls(capacity, np.int64, shapes=[shape])
    model: deque[int] = deque()
    nxt = 0

    def rows(ids: list[int], dtype: Any = np.int64) -> np.ndarray[Any, Any]:
        a = np.asarray(ids, dtype)
        return a if width is None else np.repeat(a[:, None], width, axis=1)

    def ids_of(a: Any) -> list[int]:
        a = np.asarray(a)
        if width is not None:
            assert (a == a[..., :1]).all()
            a = a[..., 0]
        return np.atleast_1d(a).tolist()

    for op, k in seq:
        # (put_back may take the queue past its capacity)
        free = (1 << 30) if capacity < 0 else max(0, capacity - len(model))
        if op.startswith("enqueue"):
            ids = list(range(nxt, nxt + k))
            nxt += k
            if op == "enqueue":
                value = rows(ids)[0]
                if free >= 1:
                    q.enqueue(value, timeout=0)
                    model.append(ids[0])
                else:
                    with pytest.raises(DeadlineExceededError):
                        q.enqueue(value, timeout=0)
                continue
            batch = rows(ids, np.int32 if op == "enqueue_many_i32" else np.int64)
            if k <= free:  # also k == 0, at once (Q17)
                q.enqueue_many(batch, timeout=0)
                model.extend(ids)
            else:
                with pytest.raises(DeadlineExceededError) as info:
                    q.enqueue_many(batch, timeout=0)
                assert info.value.num_enqueued == free  # type: ignore[attr-defined]
                model.extend(ids[:free])
        elif op == "put_back":
            back = list(range(-nxt - k, -nxt))
            nxt += k
            q.put_back(rows(back))
            model.extendleft(reversed(back))
        else:
            n = 1 if op == "dequeue" else k
            if n <= len(model):
                got = q.dequeue(timeout=0) if op == "dequeue" else q.dequeue_many(n, timeout=0)
                assert ids_of(got) == [model.popleft() for _ in range(n)]
                if width is not None:
                    assert not np.shares_memory(got, q._cols[0])
            else:
                with pytest.raises(DeadlineExceededError):
                    q.dequeue(timeout=0) if op == "dequeue" else q.dequeue_many(n, timeout=0)
        assert q.size() == len(model)
    q.close()
    rest = ids_of(q.dequeue_up_to(1 << 20, timeout=0)) if model else []
    assert rest == list(model)
    s = q.statistics()
    assert s.enqueued - s.dequeued == 0 and s.size == 0


def test_per_element_fast_path_converts_and_copies() -> None:
    q = FIFOQueue(4, str, shapes=[[]])
    q.enqueue(np.array("x", dtype=object))  # an object array is not taken as is
    assert q.dequeue() == b"x"
    with pytest.raises(TypeError):
        q.enqueue(np.array(3, dtype=object))
    f = FIFOQueue(4, np.float32, shapes=[[3]])
    row = np.ones(3, np.float32)
    f.enqueue(row)
    row[:] = 7  # the queue copied it
    got = f.dequeue()
    assert got.tolist() == [1, 1, 1] and not np.shares_memory(got, f._cols[0])
    with pytest.raises(TypeError):
        f.enqueue(np.ones(3, np.float64))  # lossy: still rejected (Q8)
    with pytest.raises(TypeError):
        f.enqueue_many(np.ones((2, 3), np.float64))
    f.enqueue_many(np.ones((2, 3), np.float16))  # a safe cast: accepted
    assert f.dequeue_many(2).dtype == np.float32


def test_a_caller_holding_the_queue_lock_keeps_it() -> None:
    """A batch copied 'outside' the lock by a thread that already holds it
    (re-entrantly) leaves the lock held, as it found it."""
    q = UnlockedFIFO(8, np.int64, shapes=[[]])

    def free_for_another_thread() -> bool:
        got: list[bool] = []

        def probe() -> None:
            ok = q._mutex.acquire(blocking=False)
            if ok:
                q._mutex.release()
            got.append(ok)

        t = threading.Thread(target=probe, name="feedq-test-probe")
        t.start()
        t.join(10)
        return got == [True]

    with q._mutex:
        q.enqueue_many(np.arange(4))
        np.testing.assert_array_equal(q.dequeue_many(3), [0, 1, 2])
        assert not free_for_another_thread()  # still held by this thread
    assert free_for_another_thread()
    np.testing.assert_array_equal(q.dequeue_many(1, timeout=0), [3])


def test_unpadded_batches_copy_outside_the_lock_too() -> None:
    p = UnlockedPadding(8, [np.int64, np.float32], shapes=[[], [None]])
    p.enqueue([0, np.ones(1, np.float32)])
    p.enqueue([1, np.ones(3, np.float32)])
    ids, rows = p.dequeue_many(2, padded=False)
    assert ids.tolist() == [0, 1] and [r.shape for r in rows] == [(1,), (3,)]
    p.put_back([ids, rows])
    ids, xs = p.dequeue_many(2)
    assert ids.tolist() == [0, 1] and xs.shape == (2, 3) and xs.sum() == 4
