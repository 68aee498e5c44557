"""Shared test fixtures and helpers: bounded waits, no dangling threads, no
silent thread errors, clean registries.

Every test runs under two autouse fixtures:

* ``_clean_state``: a fresh shared-queue registry and default timeout, and
  afterwards a check that the test left no thread running: any new
  non-daemon thread, and any thread named ``feedq-...`` (every thread feedq
  starts carries that prefix, daemon or not). Such threads get a short grace
  to end; then the test fails naming them.
* ``thread_exceptions``: exceptions that escape a thread's ``run()`` (what
  ``threading.excepthook`` sees) fail the test. A test that provokes one on
  purpose requests the fixture by name, checks the list, and clears it.

Tests in :data:`SLOW_MODULES` get the ``slow`` mark.

Helpers: :func:`wait_until` and :func:`wait_blocked` (wait for a state that
``statistics()`` reports, failing at the deadline instead of giving up
quietly), :func:`join_or_fail`, :class:`Bg` (a call in a background thread),
:func:`closed_queue` (a closed queue holding given items, e.g. file names),
:class:`FakeClock` (a clock for feedq's observers that moves only when a test
advances it), :func:`sigint_default` (for a child process the test sends SIGINT).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from hypothesis import settings

import feedq
from feedq.queues import STRING, FIFOQueue, QueueBase, reset_shared_queues

# No property test has a wall-clock deadline: on a loaded machine (a full run
# on two busy cores) one slow example must not fail the test (hypothesis's
# default is 200 ms per example). CI must not depend on which random examples
# a run happens to draw: there hypothesis is derandomized (the same examples
# every run); locally it explores new ones each time.
settings.register_profile("feedq", deadline=None)
settings.register_profile("ci", settings.get_profile("feedq"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "feedq")

#: Test modules whose every test is ``slow`` (seconds each; skip them with
#: ``-m "not slow and not stress"``: a command-line ``-m`` replaces the
#: default ``-m "not stress"`` of pyproject.toml), as ``folder/file`` under
#: tests/: the Ray tests start a local Ray cluster (about 8 s) and several
#: take 5-7 s each (measured with --durations on 2 cores).
SLOW_MODULES = frozenset({"distributed/test_ray.py"})

#: Prefix of the name of every thread feedq starts.
FEEDQ_THREAD_PREFIX = "feedq-"
#: How long threads a test leaves behind may take to end before it fails.
LEFTOVER_GRACE_SECS = 5.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if f"{item.path.parent.name}/{item.path.name}" in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def _leftover_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Live threads a test started and left running: non-daemon ones, and
    feedq's own (``feedq-`` prefix) even when they are daemons."""
    return [
        t for t in threading.enumerate()
        if t not in before
        and t.is_alive()
        and (not t.daemon or t.name.startswith(FEEDQ_THREAD_PREFIX))
    ]


def check_no_leftover_threads(before: set[threading.Thread], grace: float = LEFTOVER_GRACE_SECS) -> None:
    """Fail the test if threads started since ``before`` outlive ``grace`` seconds."""
    deadline = time.monotonic() + grace
    leftover = _leftover_threads(before)
    while leftover and time.monotonic() < deadline:
        for t in leftover:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        leftover = _leftover_threads(before)
    if leftover:
        names = sorted(f"{t.name}{' (daemon)' if t.daemon else ''}" for t in leftover)
        pytest.fail(f"test left threads running after a {grace:g} s grace: {names}", pytrace=False)


@pytest.fixture(autouse=True)
def thread_exceptions() -> Iterator[list[threading.ExceptHookArgs]]:
    """Collect exceptions that escape threads during the test (through
    ``threading.excepthook``, swapped for the test and restored after); fail
    the test if any is still in the list at the end.

    ``_clean_state`` depends on this fixture, so the leftover-thread check
    (which joins the test's threads) runs first and exceptions raised by
    threads ending during its grace are still caught here.
    """
    caught: list[threading.ExceptHookArgs] = []
    lock = threading.Lock()

    def hook(args: threading.ExceptHookArgs) -> None:
        with lock:
            caught.append(args)

    previous = threading.excepthook
    threading.excepthook = hook
    try:
        yield caught
    finally:
        if threading.excepthook is hook:
            threading.excepthook = previous
    with lock:
        found = list(caught)
    if found:
        lines = [
            f"{'<unknown>' if a.thread is None else a.thread.name}: "
            f"{a.exc_type.__name__}: {a.exc_value}"
            for a in found
        ]
        pytest.fail("exceptions escaped threads during the test:\n  " + "\n  ".join(lines),
                    pytrace=False)


@pytest.fixture(autouse=True)
def _clean_state(thread_exceptions: list[threading.ExceptHookArgs]) -> Iterator[None]:
    """Fresh shared-queue registry and default timeout per test; fail on
    threads a test left running."""
    del thread_exceptions  # only ordering: torn down before it
    before = set(threading.enumerate())
    reset_shared_queues()
    previous = feedq.set_default_timeout(None)
    yield
    feedq.set_default_timeout(previous)
    reset_shared_queues()
    check_no_leftover_threads(before, LEFTOVER_GRACE_SECS)


def wait_until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait until ``pred()`` holds (poll a state that ``statistics()`` reports,
    never a fixed sleep); fail the test naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.001)


def wait_blocked(q: QueueBase, producers: int = 0, consumers: int = 0, timeout: float = 5.0) -> None:
    """Wait until exactly the given numbers of callers are blocked on q."""

    def ok() -> bool:
        s = q.statistics()
        return s.waiting_producers == producers and s.waiting_consumers == consumers

    wait_until(ok, timeout, f"{producers} producers / {consumers} consumers blocked on {q.name}")


def join_or_fail(thread: threading.Thread, timeout: float = 5.0) -> None:
    """Join ``thread``; fail the test if it is still alive after ``timeout``."""
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"thread {thread.name} did not end within {timeout:g} s")


def closed_queue(items: Iterable[Any], dtype: Any = STRING, name: str | None = None) -> FIFOQueue:
    """An unbounded single-component queue holding ``items`` (scalars, e.g.
    file names as ``str``/``bytes``), closed, so readers and consumers drain
    it and then see the end of the data."""
    q = FIFOQueue(-1, [dtype], shapes=[[]], name=name)
    for item in items:
        q.enqueue(item)
    q.close()
    return q


class Bg:
    """Run a callable in a named thread; ``result()`` re-raises its error."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "bg", **kwargs: Any) -> None:
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self._fn(*self._args, **self._kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc
        finally:
            self.done.set()

    def result(self, timeout: float = 5.0) -> Any:
        if not self.done.wait(timeout):
            pytest.fail(f"background call {self.thread.name} did not finish in {timeout:g} s")
        join_or_fail(self.thread, timeout)
        if self.error is not None:
            raise self.error
        return self.value

    def exception(self, timeout: float = 5.0) -> BaseException | None:
        if not self.done.wait(timeout):
            pytest.fail(f"background call {self.thread.name} did not finish in {timeout:g} s")
        join_or_fail(self.thread, timeout)
        return self.error


class FakeClock:
    """A ``feedq._observe.clock.Clock`` that moves only when a test moves it.

    ``now()`` starts at ``time.monotonic()`` and changes only by
    :meth:`advance` and :meth:`sync`. The queues time their waits with
    ``time.monotonic``: call :meth:`sync` once the calls to observe are
    blocked, so that ``now() - since`` is then at least the seconds
    advanced. ``wait(event, timeout)`` returns when the clock has been
    advanced past ``timeout`` or ``event`` is set (looked at every 10 ms: a
    stop, not a measurement); ``waiting`` counts the threads in ``wait``.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._now = time.monotonic()  # guarded by self._cond
        self.waiting = 0  # guarded by self._cond

    def now(self) -> float:
        with self._cond:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def sync(self) -> None:
        """Catch up with the real clock (never back)."""
        with self._cond:
            self._now = max(self._now, time.monotonic())
            self._cond.notify_all()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        with self._cond:
            deadline = self._now + timeout
            self.waiting += 1
            try:
                while not event.is_set() and self._now < deadline:
                    self._cond.wait(0.01)
            finally:
                self.waiting -= 1
            return event.is_set()


def sigint_default() -> None:
    """``preexec_fn`` of a child process that a test interrupts with SIGINT.

    A test run started in the background (``cmd &``, ``nohup``) inherits
    SIGINT *ignored*, and so would the child: Python installs its
    ``KeyboardInterrupt`` handler only where the disposition is the
    default. The child gets the default back, so the outcome depends on the
    code under test, not on how the test run was started.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
