"""Stall reports and periodic reports: a pipeline's monitor thread.

A :class:`feedq.Pipeline` built with ``stall_timeout`` (or under a
process-wide default, :func:`set_stall_timeout`) or ``report_every`` runs one
daemon thread, ``feedq-monitor-<n>``, while it runs. It wakes a few times
per ``stall_timeout`` (on an Event that the pipeline sets to stop it, not a
sleep) and

* logs the per-stage table (``Pipeline.report()``) on the ``feedq`` logger
  every ``report_every`` seconds (INFO);
* logs ONE warning when a call of the pipeline (the consumer's take, a
  runner's enqueue or dequeue, a process stage's take) has been blocked
  longer than ``stall_timeout`` while nothing in the pipeline moved (no
  element in or out of any of its queues, no runner op finished, no batch
  from a worker): which queues and threads are blocked, what each waits for
  (an enqueue on a full queue, a dequeue on an empty one and who feeds it, a
  runner that was never started, a process worker by index and pid), and the
  Python stacks of the blocked threads. The thread that started the
  pipeline (the user's loop in ``with pipe:``) is watched on any queue, its
  own included: a user's enqueue on a full queue, or dequeue on a queue
  nothing feeds, is reported too. A stall that goes on is reported
  again at most once per ``max(stall_timeout, 60 s)``; once anything moves,
  a new stall is reported afresh.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
import threading
import time
import traceback
from typing import Any

from feedq._core.accounts import Account, close_account, current_account, open_account
from feedq._observe.clock import MONOTONIC, Clock

__all__ = ["Monitor", "get_stall_timeout", "set_stall_timeout"]

LOG = logging.getLogger("feedq")

#: A stall that goes on is reported again at most this often (or once per
#: ``stall_timeout`` if that is longer).
STALL_REPEAT_MIN_S = 60.0

_lock = threading.Lock()
_default_stall_timeout: float | None = None  # guarded by _lock (reads are atomic)
_ids = itertools.count()


def set_stall_timeout(seconds: float | None) -> float | None:
    """Set the process-wide default of ``Pipeline(stall_timeout=)``.

    Pipelines created afterwards without their own ``stall_timeout`` warn on
    the ``feedq`` logger when blocked this long with nothing moving.

    Args:
        seconds: the default in seconds (> 0); ``None`` or ``math.inf``
            turns stall reports off (the initial default).

    Returns:
        The previous default.

    Raises:
        ValueError: ``seconds`` is not > 0 (or is NaN).
    """
    global _default_stall_timeout
    value = check_seconds(seconds, "stall timeout")
    with _lock:
        previous, _default_stall_timeout = _default_stall_timeout, value
    return previous


def get_stall_timeout() -> float | None:
    """The process-wide default stall timeout in seconds (``None`` = off)."""
    return _default_stall_timeout


def check_seconds(seconds: float | None, what: str) -> float | None:
    """``seconds`` as a float > 0, or ``None`` for off (``None``/inf)."""
    if seconds is None:
        return None
    value = float(seconds)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{what} must be > 0 seconds or None, got {seconds!r}")
    return None if math.isinf(value) else value


class Monitor:
    """The monitor thread of one pipeline (see the module docstring).

    Args:
        pipe: the :class:`feedq.Pipeline` (read through ``_timed_parts``,
            ``report`` and ``runners``).
        stall_timeout: seconds, or ``None`` for no stall reports.
        report_every: seconds, or ``None`` for no periodic report.
        clock: where the monitor reads the time and waits out its ticks
            (``feedq._observe.clock``; tests pass one they advance).

    The thread that creates the monitor (the one that starts the pipeline:
    the user's, entering ``with pipe:``) is watched too: its blocked queue
    calls are reported like a runner's, whatever queue they wait on (the
    user's own queue that nothing feeds, say). It is given a time account
    (``feedq._core.accounts``) if it has none, through which the queues say
    which queue it waits on.
    """

    def __init__(self, pipe: Any, stall_timeout: float | None, report_every: float | None,
                 *, clock: Clock = MONOTONIC) -> None:
        self._pipe = pipe
        self.stall_timeout = stall_timeout
        self.report_every = report_every
        self._clock = clock
        acc = current_account()
        self._opened_account = acc is None
        self._watched: Account = open_account() if acc is None else acc
        periods = [p for p in (None if stall_timeout is None else stall_timeout / 4, report_every)
                   if p is not None]
        self._tick = max(0.01, min([*periods, 1.0]))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"feedq-monitor-{next(_ids)}", daemon=True)
        self._progress: tuple[int, ...] | None = None
        self._progress_at = clock.now()
        self._warned_at: float | None = None  # the last warning of this stall episode
        self.warnings = 0  # stall warnings logged (for tests and the curious)
        self.ticks = 0  # wake-ups handled (a test that advances the clock waits on this)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._opened_account and self._watched.ident == threading.get_ident() \
                and current_account() is self._watched:
            close_account()  # the account this monitor gave its thread

    def _run(self) -> None:
        clock = self._clock
        next_report = None if self.report_every is None else clock.now() + self.report_every
        while not clock.wait(self._stop, self._tick):
            if self._pipe.coord.should_stop():
                return  # stopping: nothing more to report
            now = clock.now()
            try:
                if next_report is not None and now >= next_report:
                    next_report = now + self.report_every if self.report_every else None
                    LOG.info("%s", self._pipe.report())
                if self.stall_timeout is not None:
                    self.check(now)
            except Exception:  # noqa: BLE001 - a report must never kill the pipeline
                LOG.debug("feedq monitor: report failed", exc_info=True)
            finally:
                self.ticks += 1

    # -- stalls ------------------------------------------------------------------------

    def _signature(self, parts: Any) -> tuple[int, ...]:
        """Counters that change whenever anything in the pipeline moves."""
        sig: list[int] = []
        for q in parts.queues:
            t = q._timing()
            sig.extend((t[2], t[3]))  # enqueued, dequeued
        for r, _kind in parts.runners:
            sig.append(r.statistics().ops_run)
        for stage, _name in parts.process:
            sig.append(int(stage._takes))
            sig.extend(h.received for h in list(stage._handles))
        # The watched thread's queue, when it is not the pipeline's: a new
        # wait, or elements moving through that queue, is progress too.
        q = self._watched.wait_queue
        if q is not None and hasattr(q, "_timing") and not any(q is x for x in parts.queues):
            t = q._timing()
            sig.extend((id(q), t[2], t[3]))
        return tuple(sig)

    def check(self, now: float) -> str | None:
        """Log a stall warning if one is due; the message logged, if any."""
        assert self.stall_timeout is not None
        parts = self._pipe._timed_parts()
        sig = self._signature(parts)
        if sig != self._progress:
            self._progress, self._progress_at, self._warned_at = sig, now, None
            return None
        still = now - self._progress_at
        if still < self.stall_timeout:
            return None
        if self._warned_at is not None and (
                now - self._warned_at < max(self.stall_timeout, STALL_REPEAT_MIN_S)):
            return None
        message = self.describe(parts, now, still)
        if message is None:
            return None
        self._warned_at = now
        self.warnings += 1
        LOG.warning("%s", message)
        return message

    def describe(self, parts: Any, now: float, still: float) -> str | None:
        """The stall report, or ``None`` when no call has been blocked long
        enough (a pipeline that is merely idle is not stalled)."""
        assert self.stall_timeout is not None
        limit = self.stall_timeout
        names = {t.ident: t.name for t in threading.enumerate()}
        lines: list[str] = []
        idents: list[int] = []
        feeders: dict[int, list[Any]] = {}
        busy: list[int] = []
        for r, _kind in parts.runners:
            feeders.setdefault(id(r.queue), []).append(r)
        for q in parts.queues:
            for is_enqueue, ident, since, n in q._blocked():
                waited = now - since
                if waited < limit:
                    continue
                who = f"thread {names.get(ident, '?')!r}"
                fed_by = feeders.get(id(q), [])
                what = _call_text(q, is_enqueue, n, fed_by, parts, now)
                if not is_enqueue:
                    # A feeding thread busy in its op (a read that hangs)
                    # is where to look: its stack goes in too.
                    for r in fed_by:
                        for acc in r._time_accounts():
                            if acc.op_since is not None and acc.wait_since is None:
                                busy.append(acc.ident)
                lines.append(f"  {who} blocked {waited:.2f} s in {what}")
                if ident not in idents:
                    idents.append(ident)
        watched = self._watched_call(parts, now)
        if watched is not None:
            ident, line = watched
            lines.append(line)
            if ident not in idents:
                idents.append(ident)
        for stage, name in parts.process:
            since = getattr(stage, "_waiting_since", None)
            if since is None or time.perf_counter() - since < limit:
                continue
            waited = time.perf_counter() - since
            lines.append(f"  the consumer of process stage {name!r} blocked {waited:.2f} s "
                         f"waiting for {stage._stall_workers()}")
            ident = getattr(stage, "_waiting_ident", None)
            if ident and ident not in idents:
                idents.append(ident)
        if not lines:
            return None
        idents.extend(i for i in dict.fromkeys(busy) if i not in idents)
        idle = [r.name for r, _k in parts.runners if not r.started]
        if idle:
            lines.append("  runners never started: " + ", ".join(repr(n) for n in idle))
        head = (f"feedq pipeline stalled: nothing moved for {still:.2f} s "
                f"(stall_timeout={limit:g} s); blocked:")
        out = [head, *lines, "Stacks of the blocked threads (and of busy threads feeding them):"]
        frames = sys._current_frames()
        for ident in idents:
            frame = frames.get(ident)
            out.append(f"  Thread {names.get(ident, '?')!r} (ident {ident}):")
            if frame is None:
                out.append("    (ended)")
                continue
            for entry in traceback.format_stack(frame):
                out.extend("  " + line for line in entry.rstrip().splitlines())
        return "\n".join(out)


    def _watched_call(self, parts: Any, now: float) -> tuple[int, str] | None:
        """The watched thread's queue call, when it has been blocked for
        ``stall_timeout`` on a queue that is not the pipeline's (those are
        reported with the others): ``(thread ident, report line)``."""
        assert self.stall_timeout is not None
        acc = self._watched
        q: Any = acc.wait_queue
        if q is None or any(q is x for x in parts.queues) or not hasattr(q, "_blocked"):
            return None
        for is_enqueue, ident, since, n in q._blocked():
            waited = now - since
            if ident == acc.ident and waited >= self.stall_timeout:
                what = _call_text(q, is_enqueue, n, [], parts, now)
                return ident, f"  thread {acc.name!r} blocked {waited:.2f} s in {what}"
        return None


def _call_text(q: Any, is_enqueue: bool, n: int, fed_by: list[Any], parts: Any,
               now: float) -> str:
    """What a blocked call waits for: the call, its queue, and who could end the wait."""
    size = q.size()
    cap = "inf" if q.capacity < 0 else str(q.capacity)
    if is_enqueue:
        takers = sum(1 for e, *_ in q._blocked() if not e)
        return (f"enqueue of {n} element(s) on full queue {q.name!r} "
                f"(size {size}/{cap}; {_consumers_text(takers, q, parts)})")
    return (f"dequeue of {n} element(s) on empty queue {q.name!r} "
            f"(size {size}/{cap}; {_feeders_text(fed_by, now)})")


def _feeders_text(runners: list[Any], now: float) -> str:
    if not runners:
        return "no runner of the pipeline fills it"
    parts = []
    for r in runners:
        if not r.started:
            parts.append(f"its runner {r.name!r} was never started")
            continue
        alive = r.statistics().threads_alive
        states = []
        for acc in r._time_accounts():
            if acc.wait_since is not None:
                side = "output" if acc.wait_output else "input"
                states.append(f"{acc.name!r} blocked on its {side} {now - acc.wait_since:.2f} s")
            elif acc.op_since is not None:
                states.append(f"{acc.name!r} busy in its op for {now - acc.op_since:.2f} s")
        detail = f": {'; '.join(states)}" if states and alive else ""
        parts.append(f"fed by runner {r.name!r}, {alive} thread(s) alive{detail}")
    return "; ".join(parts)


def _consumers_text(takers: int, q: Any, parts: Any) -> str:
    if takers:
        return f"{takers} dequeue(s) waiting on it"
    if parts.output_queue is q:
        return "the consumer is not taking from it"
    return "no thread is dequeuing from it"
