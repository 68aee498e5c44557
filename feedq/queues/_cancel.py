"""Cancelling one blocking call: :class:`CancelToken`, and how a call waits.

STYLE 16: each blocking wait registers how it can be woken; whoever cancels
fires the token of the calls it means, and each of those calls undoes its own
partial work (trio's ``wait_task_rescheduled(abort_fn)`` idea). A timeout,
``queue.cancel()``, a fired token and an asynchronous exception such as
``KeyboardInterrupt`` all end a wait the same way: the call withdraws its
attempt (see ``_engine``) and raises.

How a call waits. A blocked call sleeps on a private lock of its own
(:class:`Waiter`), not on a condition shared by the whole queue, so a waker
can wake exactly that call without taking the queue's lock. That is what lets
:meth:`CancelToken.fire` run from any thread, and from a signal handler in a
thread that may itself be inside the queue's code: it takes only the token's
own re-entrant lock and releases the sleepers' locks, which never blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from feedq.errors import CancelledError

__all__ = ["CancelToken"]


class CancelToken:
    """Cancels the blocking calls it is passed to, and only those.

    Every blocking queue and accumulator call takes ``cancel=token``. Firing
    the token wakes the calls waiting with it; each one withdraws its attempt
    (a dequeue puts what it had collected back at the front in order; an
    enqueue keeps the rows it had inserted and reports how many in
    ``num_enqueued``) and raises ``cause``, or :class:`~feedq.errors.CancelledError`
    when no cause was given. A call started with a token already fired raises
    at once without touching the queue. A call that completed before the
    token fired is not affected.

    Usage::

        token = CancelToken()
        worker = threading.Thread(target=lambda: q.dequeue_many(64, cancel=token))
        worker.start()
        ...
        token.fire()            # that dequeue_many raises CancelledError;
                                # the queue and its other callers carry on

    A token is one-shot: once fired it stays fired. It is thread safe;
    :meth:`fire` never blocks (it only takes the token's own re-entrant lock
    and runs the wake-up callbacks, which never block), so it may be called
    from any thread, from a ``signal`` handler, or from a callback.
    """

    __slots__ = ("__weakref__", "_callbacks", "_cause", "_fired", "_lock", "_next")

    def __init__(self) -> None:
        # Re-entrant: fire() may run in a signal handler of a thread that is
        # inside one of these methods.
        self._lock = threading.RLock()
        self._fired = False  # guarded by self._lock
        self._cause: BaseException | None = None  # guarded by self._lock
        self._callbacks: dict[int, Callable[[], None]] = {}  # guarded by self._lock
        self._next = 0  # guarded by self._lock

    def fire(self, cause: BaseException | None = None) -> None:
        """Cancel the calls waiting with this token, and later calls given it.

        Idempotent: the first call wins, later causes are ignored.

        Args:
            cause: the exception the cancelled calls raise (the same
                instance in each); ``None`` for a fresh ``CancelledError``
                per call.

        Raises:
            TypeError: ``cause`` is not an exception instance.
        """
        if cause is not None and not isinstance(cause, BaseException):
            raise TypeError(f"cause must be an exception instance or None, got {cause!r}")
        with self._lock:
            if self._fired:
                return
            self._fired = True
            self._cause = cause
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()

    @property
    def fired(self) -> bool:
        """True once :meth:`fire` was called."""
        return self._fired

    @property
    def cause(self) -> BaseException | None:
        """The cause given to the first :meth:`fire`, if any."""
        return self._cause

    def error(self) -> BaseException:
        """What a call cancelled by this token raises: the cause, or a new
        ``CancelledError``."""
        with self._lock:
            cause = self._cause
        if cause is not None:
            return cause
        return CancelledError("the call was cancelled (its CancelToken fired)")

    def raise_if_fired(self) -> None:
        """Raise :meth:`error` if the token has fired."""
        if self._fired:
            raise self.error()

    def on_fire(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback()`` when the token fires (at once if it has).

        For code that waits on something of its own and wants the token to
        wake it. The callback runs in the firing thread (or a signal
        handler): it must be quick and must not block or take a lock that
        the firing thread might hold; releasing a lock or setting an event is
        fine.

        Returns:
            A function that removes the callback (a no-op once it ran).
        """
        with self._lock:
            if not self._fired:
                key = self._next
                self._next += 1
                self._callbacks[key] = callback
                return lambda: self._remove(key)
        callback()
        return _noop

    def _remove(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def __repr__(self) -> str:
        state = f"fired, cause={self._cause!r}" if self._fired else "not fired"
        return f"CancelToken({state})"


def _noop() -> None:
    pass


class Waiter:
    """The wake-up of one blocked call.

    The call :meth:`arm`\\ s, re-checks its condition, then :meth:`sleep`\\ s;
    :meth:`wake` from any thread ends the sleep. A wake between ``arm`` and
    ``sleep`` is not lost. ``wake`` takes no lock but the sleeper's own.
    """

    __slots__ = ("_gate",)

    def __init__(self) -> None:
        self._gate: Any = None  # a locked _thread.lock while armed

    def arm(self) -> None:
        """Prepare to sleep (the caller holds its mutex)."""
        gate = threading.Lock()
        gate.acquire()
        self._gate = gate

    def sleep(self, mutex: Any, timeout: float | None) -> None:
        """Release ``mutex`` (an RLock this thread holds exactly once), sleep
        until :meth:`wake` or ``timeout`` seconds, and take ``mutex`` again,
        also when an exception (Ctrl-C) interrupts the sleep: whatever
        happens, the caller holds ``mutex`` once when this returns or raises.

        That needs no ``RLock._is_owned()``: an asynchronous exception is
        delivered only at the points the interpreter checks for one (a
        function's start, a loop's back edge, the return of a call into C).
        The release is inside the ``try`` (an exception just after it still
        reaches the ``finally``); the ``finally`` takes the lock in a
        ``with`` statement, whose acquisition is not followed by such a
        point, and inside it once more, re-entrantly: the ``with`` gives its
        level back, the inner one stays. An exception raised by the
        acquisition itself (a signal handler, in a contended acquire) leaves
        the lock free, and the ``finally`` takes it plainly; an exception
        after ``taken = True`` leaves it held.
        """
        gate = self._gate
        try:
            mutex.release()
            if timeout is None:
                gate.acquire()
            else:
                gate.acquire(True, min(timeout, threading.TIMEOUT_MAX))
        finally:
            self._gate = None
            taken = False
            try:
                with mutex:
                    taken = True
                    mutex.acquire()
            except BaseException:
                if not taken:
                    mutex.acquire()
                raise

    def wake(self) -> None:
        """End the current or next sleep (of this arming)."""
        gate = self._gate
        if gate is not None:
            try:
                gate.release()
            except RuntimeError:
                pass  # already woken
