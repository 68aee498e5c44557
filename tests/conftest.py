"""Shared test fixtures: bounded threads, no dangling threads, clean registries."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

import feedq

# CI must not depend on which random examples a run happens to draw: there
# hypothesis is derandomized (the same examples every run); locally it
# explores new ones each time.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
from feedq.queues import QueueBase, reset_shared_queues


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    """Fresh shared-queue registry and default timeout per test; fail on
    threads a test left running (STYLE 11)."""
    before = set(threading.enumerate())
    reset_shared_queues()
    previous = feedq.set_default_timeout(None)
    yield
    feedq.set_default_timeout(previous)
    reset_shared_queues()
    deadline = time.monotonic() + 5.0
    leftover: list[threading.Thread] = []
    while time.monotonic() < deadline:
        leftover = [
            t for t in threading.enumerate()
            if t not in before and t.is_alive() and not t.daemon
        ]
        if not leftover:
            break
        for t in leftover:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not leftover, f"test left threads running: {[t.name for t in leftover]}"


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
            raise AssertionError(f"background call {self.thread.name} did not finish in {timeout} s")
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.value

    def exception(self, timeout: float = 5.0) -> BaseException | None:
        if not self.done.wait(timeout):
            raise AssertionError(f"background call {self.thread.name} did not finish in {timeout} s")
        self.thread.join(timeout)
        return self.error


def wait_until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait for a state that statistics() reports (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def wait_blocked(q: QueueBase, producers: int = 0, consumers: int = 0, timeout: float = 5.0) -> None:
    """Wait until exactly the given numbers of callers are blocked on q."""

    def ok() -> bool:
        s = q.statistics()
        return s.waiting_producers == producers and s.waiting_consumers == consumers

    wait_until(ok, timeout, f"{producers} producers / {consumers} consumers blocked on {q.name}")
