"""Stress: 8 producers x 8 consumers, mixed single/batch calls, random
timeouts, a close in the middle. Afterwards every element that went in came
out exactly once or is still queued."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest

from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues import FIFOQueue, PriorityQueue, QueueBase, RandomShuffleQueue


def _make(kind: str) -> QueueBase:
    if kind == "fifo":
        return FIFOQueue(16, [np.int64, np.float32], shapes=[[], [4]])
    if kind == "shuffle":
        return RandomShuffleQueue(32, 4, [np.int64, np.float32], shapes=[[], [4]], seed=7)
    return PriorityQueue(32, [np.int64, np.float32], shapes=[[], [4]])


def _ids_of(result: Any, kind: str) -> list[int]:
    ids = result[1] if kind == "priority" else result[0]
    return np.atleast_1d(ids).tolist()


def _run(kind: str, duration: float, cancel_pending: bool) -> None:
    q = _make(kind)
    inserted: list[list[int]] = [[] for _ in range(8)]
    received: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(17)
    stop_producing = threading.Event()

    def element(ids: np.ndarray) -> list[Any]:
        x = np.repeat(ids[:, None], 4, axis=1).astype(np.float32)
        if kind == "priority":
            return [ids % 5, ids, x]
        return [ids, x]

    def producer(p: int) -> None:
        rng = np.random.default_rng(p)
        nxt = p * 1_000_000  # float32-exact ids
        start.wait()
        try:
            while not stop_producing.is_set():
                k = int(rng.integers(1, 9))
                ids = np.arange(nxt, nxt + k, dtype=np.int64)
                nxt += k
                timeout = float(rng.choice([0.0, 0.001, 0.01, 0.1]))
                try:
                    if k == 1 and rng.random() < 0.5:
                        q.enqueue([c[0] for c in element(ids)], timeout=timeout)
                    else:
                        q.enqueue_many(element(ids), timeout=timeout)
                    inserted[p].extend(ids.tolist())
                except (DeadlineExceededError, CancelledError) as exc:
                    done = getattr(exc, "num_enqueued", 0)
                    inserted[p].extend(ids[:done].tolist())
                    if isinstance(exc, CancelledError):
                        return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consumer(c: int) -> None:
        rng = np.random.default_rng(100 + c)
        start.wait()
        try:
            while True:
                timeout = float(rng.choice([0.0, 0.002, 0.02, 0.2]))
                r = rng.random()
                try:
                    if r < 0.3:
                        got = q.dequeue(timeout=timeout)
                        received[c].extend(_ids_of([np.atleast_1d(v) for v in got], kind))
                    elif r < 0.65:
                        res = q.dequeue_many(int(rng.integers(0, 12)), timeout=timeout)
                        received[c].extend(_ids_of(res, kind))
                        assert np.all(res[-1][:, 0] == _ids_of(res, kind))  # rows aligned
                    else:
                        res = q.dequeue_up_to(int(rng.integers(1, 12)), timeout=timeout)
                        received[c].extend(_ids_of(res, kind))
                except DeadlineExceededError:
                    continue
                except OutOfRangeError:
                    return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(i,), name=f"prod{i}") for i in range(8)]
    threads += [threading.Thread(target=consumer, args=(i,), name=f"cons{i}") for i in range(8)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(duration / 2)  # let the threads run: this is the load, not a sync
    q.close(cancel_pending_enqueues=cancel_pending)
    stop_producing.set()
    for t in threads:
        t.join(timeout=30)
    assert not [t.name for t in threads if t.is_alive()]
    assert not errors, errors
    left: list[int] = []
    while True:
        try:
            left += _ids_of(q.dequeue_up_to(1000, timeout=0), kind)
        except OutOfRangeError:
            break
    all_in = Counter(i for lst in inserted for i in lst)
    all_out = Counter(i for lst in received for i in lst) + Counter(left)
    assert max(all_in.values(), default=1) == 1
    dupes = [i for i, n in all_out.items() if n > 1]
    assert not dupes, f"delivered twice: {dupes[:10]}"
    assert all_out == all_in, (
        f"lost {sorted(set(all_in) - set(all_out))[:10]}, "
        f"invented {sorted(set(all_out) - set(all_in))[:10]}"
    )
    assert sum(all_in.values()) > 100  # the run did real work
    s = q.statistics()
    assert s.size == 0 and s.waiting_consumers == 0 and s.waiting_producers == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "shuffle", "priority"])
@pytest.mark.parametrize("cancel_pending", [False, True])
def test_stress_exact_accounting(kind: str, cancel_pending: bool) -> None:
    _run(kind, duration=0.5, cancel_pending=cancel_pending)  # both closes: 1 s per kind, as before


@pytest.mark.stress
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["fifo", "shuffle", "priority"])
@pytest.mark.parametrize("cancel_pending", [False, True])
def test_stress_exact_accounting_long(kind: str, cancel_pending: bool) -> None:
    _run(kind, duration=15.0, cancel_pending=cancel_pending)
