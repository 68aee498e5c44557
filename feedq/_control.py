"""Control dependencies: runners held back until other runners, queues or
events are done (TF1's ``tf.control_dependencies`` for queue runners).

``control_dependencies(deps)`` postpones runners created inside it until
every dependency is done: a :class:`~feedq.runners.QueueRunner` or stage whose
threads have all ended, a queue that is closed and drained, or a
``threading.Event`` that is set (the seed's "Control Dependencies", used to
keep memory-hungry stages from starting early). Independent runners run in
parallel threads (the seed's "Parallel Execution"). A gated runner thread
waits on a condition that runners and stages notify, not on a poll.

The public names are re-exported by ``feedq.pipeline`` (``control_dependencies``
is public there; ``current_dependencies`` and ``gate_ops`` are for
``feedq.input``, whose producers and batchers gate their ops through them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._waits import current_account
from .errors import CancelledError
from .queues import QueueBase
from .runners import QueueRunner, runner_events

__all__ = ["control_dependencies", "current_dependencies", "gate_ops"]

_local = threading.local()


def _stack() -> list[list[Any] | None]:
    stack: list[list[Any] | None] | None = getattr(_local, "deps", None)
    if stack is None:
        stack = []
        _local.deps = stack
    return stack


@contextlib.contextmanager
def control_dependencies(deps: Sequence[Any] | None) -> Iterator[None]:
    """Runners created inside start only after every dependency is done.

    Args:
        deps: runners, stages (anything with a ``runner``), queues (done when
            closed and empty) or ``threading.Event`` objects (done when set);
            ``None`` clears the dependencies of enclosing blocks, as in TF.
    """
    stack = _stack()
    if deps is None:
        stack.append(None)
    else:
        for d in deps:
            _done_check(d)  # validate early
        stack.append(list(deps))
    try:
        yield
    finally:
        stack.pop()


def current_dependencies() -> list[Any]:
    """The dependencies in force in this thread (innermost ``None`` clears)."""
    result: list[Any] = []
    for entry in reversed(_stack()):
        if entry is None:
            break
        result.extend(entry)
    return result


def _done_check(dep: Any) -> Callable[[], bool]:
    if isinstance(dep, threading.Event):
        return dep.is_set
    runner = dep if isinstance(dep, QueueRunner) else getattr(dep, "runner", None)
    if isinstance(runner, QueueRunner):
        r = runner
        return lambda: r.started and r.statistics().threads_alive == 0
    if isinstance(dep, QueueBase):
        q = dep
        return lambda: q.is_closed() and q.size() == 0
    raise TypeError(
        f"control dependency must be a QueueRunner, a stage, a queue or a threading.Event, got {dep!r}"
    )


# Runners and stages notify ``runner_events`` when a runner thread ends, a
# runner is stopped or a stage runs dry, so a gate wakes at once. A queue
# closed or drained by user code directly notifies nobody: a gate re-checks
# at least this often, so such a change is noticed late, never missed.
_GATE_RECHECK_SECS = 1.0

# A threading.Event cannot notify us: a gate's helper thread waits on it in
# slices this long, notifying ``runner_events`` when it is set, and ends
# within one slice once the gate no longer waits.
_EVENT_WATCH_SLICE_SECS = 0.5


class _Gate:
    """Holds an op back until its dependencies are done; a cancel of the
    gated runner's queue releases it with CancelledError (ending the thread
    cleanly).

    Waiting is event driven: the gate waits on ``runner_events``, which
    runners and stages notify, and a helper thread (``feedq-gate-<queue>``)
    turns the setting of ``threading.Event`` dependencies into the same
    notification. Every wait is bounded (``_GATE_RECHECK_SECS``,
    ``_EVENT_WATCH_SLICE_SECS``), but only as a safety net: a notification,
    not the bound, opens or cancels the gate.
    """

    def __init__(self, deps: list[Any], queue: Any) -> None:
        self._checks = [_done_check(d) for d in deps]
        self._events = [d for d in deps if isinstance(d, threading.Event)]
        self._queue = queue
        self._open = threading.Event()
        self._lock = threading.Lock()
        self._waiters = 0  # threads in wait(); guarded by self._lock
        self._watcher: threading.Thread | None = None  # guarded by self._lock

    def _done(self) -> bool:
        return all(check() for check in self._checks)

    def _released(self) -> bool:
        return self._done() or self._queue.is_closed()

    def wait(self) -> None:
        """Return once the dependencies are done.

        Raises:
            CancelledError: the gated queue was closed or cancelled first.
        """
        if self._open.is_set():
            return
        with self._lock:
            self._waiters += 1
            self._start_watcher()
        account = current_account()  # a runner thread: held back = input wait
        started = time.monotonic()
        if account is not None:
            account.begin_wait(False, started)
        try:
            while not runner_events.wait_for(self._released, _GATE_RECHECK_SECS):
                pass
            if self._done():
                self._open.set()
                return
            raise CancelledError(
                f"queue '{self._queue.name}' was closed before its dependencies were done"
            )
        finally:
            if account is not None:
                account.end_wait(time.monotonic() - started)
            with self._lock:
                self._waiters -= 1

    def _start_watcher(self) -> None:
        """Start the Event helper if an Event dependency is pending (lock held)."""
        if self._watcher is not None or not any(not e.is_set() for e in self._events):
            return
        self._watcher = threading.Thread(
            target=self._watch_events, name=f"feedq-gate-{self._queue.name}", daemon=True
        )
        self._watcher.start()

    def _watch_events(self) -> None:
        """Helper thread: notify ``runner_events`` as the Event dependencies
        are set; end once they all are, or once no thread waits at the gate."""
        for event in self._events:
            while not event.wait(_EVENT_WATCH_SLICE_SECS):
                with self._lock:
                    if self._waiters == 0:
                        self._watcher = None  # a later wait() starts a new one
                        return
            runner_events.notify()


def gate_ops(ops: Sequence[Callable[[], Any]], queue: Any) -> list[Callable[[], Any]]:
    """Wrap ``ops`` so that each waits for the current control dependencies."""
    deps = current_dependencies()
    if not deps:
        return list(ops)
    gate = _Gate(deps, queue)

    def wrap(op: Callable[[], Any]) -> Callable[[], Any]:
        def gated() -> Any:
            gate.wait()
            return op()

        gated.__name__ = getattr(op, "__name__", "op")
        return gated

    return [wrap(op) for op in ops]
