"""A worker ahead of its consumer (every slot full) waits in bursts: it
sleeps until about half of its slots should be back and then takes all that
came back, instead of waking every millisecond (each wake-up takes a core
from the training step). Exact accounting: every slot given back is taken
once, in the order given, with its retain flag."""

from __future__ import annotations

import multiprocessing
import threading
import time
import types
from collections import deque
from typing import Any

import pytest

from feedq.process import _worker
from feedq.process._worker import SlotReturns, _Stopped, _Worker

pytestmark = pytest.mark.timeout(30)


def _bare_worker(returns: SlotReturns) -> Any:
    w = _Worker.__new__(_Worker)
    w.cfg = types.SimpleNamespace(returns=returns)
    w.stop = threading.Event()
    w.free = deque()
    w.returned = deque()
    w.period = None
    return w


def test_a_worker_ahead_of_its_consumer_sleeps_about_once_per_half_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    slots, rounds, pace = 8, 12, 0.004
    returns = SlotReturns(multiprocessing.get_context("fork"), slots)
    worker = _bare_worker(returns)
    sleeps: list[float] = []
    real_sleep = time.sleep

    def counting_sleep(s: float) -> None:
        sleeps.append(s)
        real_sleep(s)

    monkeypatch.setattr(_worker.time, "sleep", counting_sleep)
    given = [(i % slots, i % 5 == 0) for i in range(rounds * slots)]

    def consumer() -> None:
        # Gives a slot back every `pace` seconds, never more than `slots`
        # outstanding (the worker has taken them all before more come).
        for n, (slot, retain) in enumerate(given):
            while n - len(taken) >= slots:
                real_sleep(0.0005)
            real_sleep(pace)
            returns.put(slot, retain)

    taken: list[tuple[int, bool]] = []
    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    while len(taken) < len(given):
        taken.append(worker.take_slot())
    t.join(10)
    assert taken == given  # each once, in order, with its flag
    assert returns.poll() is None and not worker.returned
    # Polling from 50 us up to 1 ms per slot (the old wait) slept ~5 times a
    # slot; waiting for half the ring sleeps well under once a slot.
    assert len(sleeps) < 0.6 * len(given), (len(sleeps), len(given))
    assert worker.period is not None and pace * 0.5 < worker.period < pace * 5  # the consumer's pace
    assert max(sleeps) <= _worker._SLEEP_MAX_SECS


def test_a_stop_ends_the_wait() -> None:
    returns = SlotReturns(multiprocessing.get_context("fork"), 4)
    worker = _bare_worker(returns)
    threading.Timer(0.05, worker.stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(_Stopped):
        worker.take_slot()
    assert time.monotonic() - t0 < 1.0
