"""What a task's container holds besides queues and accumulators: shared
variables, and the stop record of a cluster-wide coordinator.

Both are plain thread-safe objects with no knowledge of clients, deliveries or
Ray; the host (``_host``) runs their operations for remote callers.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.queues import CancelToken

__all__ = ["HostedVariable", "StopRecord", "StopState"]

#: What a stop record reports: (stopped, first error, its origin, generation).
StopState = tuple[bool, "BaseException | None", "str | None", int]


class HostedVariable:
    """A shared variable: a NumPy value under a lock."""

    def __init__(self, name: str, value: np.ndarray[Any, Any]) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.value = value  # guarded by self.lock
        self.dtype = value.dtype
        self.shape = value.shape

    def op(self, op: str, *args: Any) -> Any:
        """Run ``read``, ``assign``, ``assign_add``, ``assign_sub`` or
        ``compare_and_set`` atomically; returns a copy of the new value (and
        for ``compare_and_set`` whether it was set)."""
        with self.lock:
            if op == "read":
                return self.value.copy()
            if op == "assign":
                self.value = self._cast(args[0])
                return self.value.copy()
            if op == "assign_add":
                self.value = self._cast(self.value + self._cast(args[0]))
                return self.value.copy()
            if op == "assign_sub":
                self.value = self._cast(self.value - self._cast(args[0]))
                return self.value.copy()
            if op == "compare_and_set":
                expected, new = self._cast(args[0]), self._cast(args[1])
                if np.array_equal(self.value, expected):
                    self.value = new
                    return True, self.value.copy()
                return False, self.value.copy()
        raise InvalidArgumentError(f"variable '{self.name}' has no operation {op!r}")

    def check_reopen(self, value: np.ndarray[Any, Any], dtype_given: bool) -> None:
        """Raise ``InvalidArgumentError`` unless a re-open's initial value
        matches this variable's shape (and dtype, when the re-open names one)."""
        if value.shape != self.shape or (dtype_given and value.dtype != self.dtype):
            raise InvalidArgumentError(
                f"Shared variable '{self.name}' has dtype {self.dtype} shape "
                f"{list(self.shape)} but requested dtype {value.dtype} shape "
                f"{list(value.shape)}"
            )

    def _cast(self, value: Any) -> np.ndarray[Any, Any]:
        arr = np.asarray(value)
        if arr.shape != self.shape:
            raise InvalidArgumentError(
                f"variable '{self.name}': shape mismatch: expected {list(self.shape)}, "
                f"got {list(arr.shape)}"
            )
        if not np.can_cast(arr.dtype, self.dtype, "same_kind"):
            raise TypeError(f"variable '{self.name}': cannot assign {arr.dtype} to {self.dtype}")
        return arr.astype(self.dtype, copy=True)


class StopRecord:
    """A cluster-wide coordinator's state: stopped, and the first error with its origin.

    ``generation`` counts :meth:`clear` calls, so a watcher can tell a stop it
    has applied from a later one. Waiters sleep on an event of their own
    that :meth:`request_stop` and :meth:`clear` set (and their call's
    :class:`~feedq.queues.CancelToken`): no polling.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False  # guarded by self._lock
        self._error: BaseException | None = None  # guarded by self._lock
        self._origin: str | None = None  # guarded by self._lock
        self._generation = 0  # guarded by self._lock
        # The wake-ups of wait_stop calls asleep now; set by request_stop and clear.
        self._waiters: set[threading.Event] = set()  # guarded by self._lock

    def request_stop(self, error: BaseException | None, origin: str) -> bool:
        """Record a stop; the first one wins. Returns whether this one did."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            self._error = error
            self._origin = origin
            self._wake()
            return True

    def state(self) -> StopState:
        """``(stopped, error, origin, generation)`` now."""
        with self._lock:
            return self._state()

    def wait_stop(self, wait: float | None, cancel: CancelToken | None = None,
                  after: int | None = None) -> StopState:
        """Wait until the record is stopped, and with ``after`` until it is
        stopped in a generation other than ``after`` (a stop the caller has
        not applied yet).

        Args:
            wait: seconds to wait; ``None`` = until then.
            cancel: ends the wait, which raises the token's error.
            after: a generation whose stop does not count.

        Returns:
            The state when the wait ended (not stopped on a timeout).
        """
        deadline = None if wait is None else time.monotonic() + wait
        wake = threading.Event()
        unsubscribe = None if cancel is None else cancel.on_fire(wake.set)
        try:
            while True:
                with self._lock:
                    if self._stopped and self._generation != after:
                        return self._state()
                    wake.clear()  # under the lock: a later request_stop/clear sets it
                    self._waiters.add(wake)
                if cancel is not None and cancel.fired:
                    raise cancel.error()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    with self._lock:
                        return self._state()
                wake.wait(remaining)
        finally:
            with self._lock:
                self._waiters.discard(wake)
            if unsubscribe is not None:
                unsubscribe()

    def clear(self) -> None:
        """Clear the stop (C2); starts a new generation."""
        with self._lock:
            self._stopped = False
            self._error = None
            self._origin = None
            self._generation += 1
            self._wake()

    def _state(self) -> StopState:
        return self._stopped, self._error, self._origin, self._generation

    def _wake(self) -> None:
        """Wake every waiter (lock held); each re-checks and re-registers."""
        for event in self._waiters:
            event.set()
        self._waiters.clear()
