"""Coordinator and LooperThread: stop, error reporting and joining of threads.

A :class:`Coordinator` is the one place where a set of cooperating threads
learns that it should stop, where the first error any of them hit is kept,
and where the main thread waits for all of them (TF1 ``tf.train.Coordinator``,
spec rules C1–C11). A :class:`LooperThread` runs a function repeatedly, at a
fixed rate, until the coordinator stops (L1–L4).

Usage::

    coord = feedq.Coordinator()
    threads = feedq.start_queue_runners(coord=coord)
    try:
        with coord.stop_on_exception():
            while not coord.should_stop():
                train_step(batch_queue.dequeue_many(32))
    finally:
        coord.request_stop()
        coord.join(threads)  # re-raises the first error any thread reported

Differences from TF1, on purpose:

* ``request_stop(ex)`` records exactly the exception it is given, with its
  traceback, whether an instance or an ``exc_info`` triple; TF1 recorded
  whatever ``sys.exc_info()`` held and crashed outside an ``except`` block
  (C4, X8).
* ``stop_on_exception()`` requests the stop for ``KeyboardInterrupt`` and
  ``SystemExit`` too, but lets them propagate instead of swallowing them
  (C11, X8): Ctrl-C must interrupt the program.
* ``join()`` is event driven: it wakes when a thread ends or a stop is
  requested, instead of polling every second (C6, X5).
* ``add_stop_callback(fn)`` tells other objects of a stop without a thread
  that waits for it; queue runners use it to cancel their queues, which
  removes TF1's ``close_on_stop`` thread and the hang of QR11 (X5).

This module holds, in order: how a coordinator records an exception and
raises it again (``exc_info`` normalising, re-raising, the
``stop_on_exception`` context manager; C4, C8, C11, X8), :class:`Coordinator`
(stop, first error, join) and :class:`LooperThread`.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from feedq.errors import OutOfRangeError

__all__ = ["Coordinator", "LooperThread"]




#: An exception as ``request_stop`` accepts it: an instance or an exc_info triple.
_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
_StopException = BaseException | _ExcInfo | tuple[None, None, None] | None
#: A stop callback receives the recorded exception, or None for a clean stop.
_StopCallback = Callable[[BaseException | None], object]


def _as_exc_info(ex: _StopException) -> _ExcInfo | None:
    """Normalise ``request_stop``'s argument to an exc_info triple (C4, X8).

    Raises:
        TypeError: ``ex`` is neither None, an exception instance nor an
            exc_info triple.
    """
    if ex is None:
        return None
    if isinstance(ex, BaseException):
        return (type(ex), ex, ex.__traceback__)
    if isinstance(ex, tuple) and len(ex) == 3:
        _, value, tb = ex
        if value is None:
            # sys.exc_info() outside an except block: nothing to record.
            return None
        if isinstance(value, BaseException) and (tb is None or isinstance(tb, TracebackType)):
            return (type(value), value, tb)
    raise TypeError(f"ex must be None, an exception instance or an exc_info triple, got {ex!r}")


def _raise(exc_info: _ExcInfo) -> None:
    """Re-raise a recorded exception with its original traceback."""
    _, value, tb = exc_info
    raise value.with_traceback(tb)


class _StopOnException:
    """Context manager returned by :meth:`Coordinator.stop_on_exception`."""

    def __init__(self, coord: Coordinator) -> None:
        self._coord = coord

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is None or exc is None:
            return False
        # After join() this re-raises ``exc`` at once (C8), which propagates it.
        self._coord.request_stop((exc_type, exc, tb))
        # X8: the stop is requested, but Ctrl-C and sys.exit() must still end
        # the program; TF1's bare except swallowed them (C11).
        return not isinstance(exc, (KeyboardInterrupt, SystemExit))


# Named for the public module: log records read "feedq.coordinator".
_LOG = logging.getLogger("feedq.coordinator")

# How long join() waits for a thread whose run() has already returned to
# finish its interpreter-level shutdown; it takes microseconds in practice,
# the bound only keeps join() from ever blocking without limit.
_THREAD_EXIT_TIMEOUT_SECS = 5.0

# A watcher thread joins its thread in slices of this length: the thread's
# end still wakes it at once, and between slices it checks whether any
# join() still needs it, so a watcher never outlives the joins it serves by
# more than one slice (Thread.join cannot be woken by anything else).
_WATCH_SLICE_SECS = 0.5

# join() waits on a condition notified by every thread end and every stop;
# it re-checks its targets at least this often anyway, so a missed
# notification can delay it, never hang it.
_JOIN_RECHECK_SECS = 5.0


class Coordinator:
    """Coordinates the termination of a set of threads (C1–C11).

    Threads call :meth:`should_stop` in their loops (or wait with
    :meth:`wait_for_stop`), report errors with :meth:`request_stop`, and the
    owner waits for them with :meth:`join`, which re-raises the first error.
    Exceptions of a *clean* type (default ``(OutOfRangeError,)``: end of
    data) stop the threads without being recorded as errors.

    Every method is thread safe. State is kept under one lock; the condition
    on it is notified when a stop is requested or a watched thread ends, so
    :meth:`join` wakes without polling.

    Usage::

        coord = Coordinator()
        workers = [threading.Thread(target=work, args=(coord,), name=f"w{i}")
                   for i in range(4)]
        for t in workers:
            coord.register_thread(t)  # before start(): its end wakes join()
            t.start()
        coord.join(stop_grace_period_secs=10)

    Args:
        clean_stop_exception_types: exception classes that request a clean
            stop instead of recording an error; ``None`` means
            ``(OutOfRangeError,)``. A given tuple replaces the default (C1, C3).

    Raises:
        TypeError: ``clean_stop_exception_types`` holds something that is not
            an exception class.
    """

    def __init__(
        self, clean_stop_exception_types: Sequence[type[BaseException]] | None = None
    ) -> None:
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (OutOfRangeError,)
        clean = tuple(clean_stop_exception_types)
        for t in clean:
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                raise TypeError(
                    f"clean_stop_exception_types must hold exception classes, got {t!r}"
                )
        self._clean_stop_exception_types: tuple[type[BaseException], ...] = clean
        self._lock = threading.Lock()
        # Notified (notify_all) by request_stop() and whenever a watched
        # thread ends: join() waits on it.
        self._changed = threading.Condition(self._lock)
        # Set with self._lock held; an Event so that wait_for_stop() and
        # LooperThread can wait on it without taking the lock.
        self._stop_event = threading.Event()
        self._exc_info_to_raise: _ExcInfo | None = None  # guarded by self._lock
        self._joined = False  # guarded by self._lock
        # Insertion-ordered set, so error messages name threads in a stable order.
        self._registered_threads: dict[threading.Thread, None] = {}  # guarded by self._lock
        self._stop_callbacks: list[_StopCallback] = []  # guarded by self._lock
        # Threads whose run() this coordinator wrapped, that entered it, that
        # left it, and started ones watched by a helper thread. Weak, so that
        # a coordinator never keeps dead threads alive.
        self._instrumented: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # guarded
        self._entered: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # guarded
        self._ended: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # guarded
        self._watchers: weakref.WeakKeyDictionary[threading.Thread, threading.Thread] = (
            weakref.WeakKeyDictionary()
        )  # guarded by self._lock
        # join() calls in progress: watcher threads end when it drops to 0.
        self._joins_in_progress = 0  # guarded by self._lock

    # -- stop ---------------------------------------------------------------------

    @property
    def clean_stop_exception_types(self) -> tuple[type[BaseException], ...]:
        """The exception classes that stop cleanly (C1)."""
        return self._clean_stop_exception_types

    @property
    def joined(self) -> bool:
        """True once :meth:`join` returned or raised, until :meth:`clear_stop` (C6, C8)."""
        with self._lock:
            return self._joined

    def should_stop(self) -> bool:
        """True if a stop was requested (C2)."""
        return self._stop_event.is_set()

    def request_stop(self, ex: _StopException = None) -> None:
        """Request that the threads stop (C3, C4, C8).

        Only the first stop request can record an exception, and only if it
        is not of a clean type; later exceptions are ignored (C3). Unlike TF1,
        the exception recorded is exactly ``ex``, with its traceback (C4, X8).
        Stop callbacks run in this thread, right after the stop is recorded.

        Args:
            ex: ``None``, an exception instance, or an ``exc_info`` triple
                (``(None, None, None)`` counts as ``None``).

        Raises:
            TypeError: ``ex`` is of another type; the stop is not requested.
            BaseException: ``ex`` itself, when it is not of a clean type and
                :meth:`join` has already returned (C8): nobody would see it
                otherwise.
        """
        exc_info = _as_exc_info(ex)
        if exc_info is not None and isinstance(exc_info[1], self._clean_stop_exception_types):
            exc_info = None  # C3: a clean exception is a plain stop
        with self._lock:
            if self._joined and exc_info is not None:
                _raise(exc_info)
            if self._stop_event.is_set():
                return
            if exc_info is not None and self._exc_info_to_raise is None:
                _LOG.info("Error reported to Coordinator: %r", exc_info[1], exc_info=exc_info)
                self._exc_info_to_raise = exc_info
            self._stop_event.set()
            self._changed.notify_all()
            callbacks, self._stop_callbacks = self._stop_callbacks, []
            cause = self._exc_info_to_raise[1] if self._exc_info_to_raise else None
        # Outside the lock: a callback may call back into the coordinator.
        for fn in callbacks:
            self._call_stop_callback(fn, cause)

    def clear_stop(self) -> None:
        """Clear the stop, the recorded exception and the joined flag (C2, C8).

        Stop callbacks that already ran are not re-armed.
        """
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            self._stop_event.clear()

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested (C5).

        Args:
            timeout: seconds to wait; ``None`` or ``math.inf`` waits until a
                stop, ``0`` only checks. Unlike blocking queue calls, the
                process-wide default timeout does not apply: a missing stop is
                not a failure.

        Returns:
            True if a stop was requested, False if the timeout expired first.

        Raises:
            ValueError: ``timeout`` is negative or NaN.
        """
        if timeout is not None:
            timeout = float(timeout)
            if math.isnan(timeout) or timeout < 0:
                raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
            if math.isinf(timeout):
                timeout = None
        return self._stop_event.wait(timeout)

    def raise_requested_exception(self) -> None:
        """Raise the recorded exception, if any, with its traceback (C9)."""
        with self._lock:
            exc_info = self._exc_info_to_raise
        if exc_info is not None:
            _raise(exc_info)

    def stop_on_exception(self) -> _StopOnException:
        """Context manager that requests a stop when its body raises (C11).

        The exception is passed to :meth:`request_stop` (a clean type gives a
        clean stop) and swallowed; :meth:`join` re-raises it later. feedq
        deviation (X8): ``KeyboardInterrupt`` and ``SystemExit`` are recorded
        and request the stop too, but then propagate, so Ctrl-C still
        interrupts the program; ``join()`` will re-raise them as well.

        Returns:
            A context manager; ``with coord.stop_on_exception(): ...``.
        """
        return _StopOnException(self)

    def add_stop_callback(self, fn: _StopCallback) -> None:
        """Call ``fn(cause)`` once, when a stop is requested (X5).

        ``cause`` is the recorded exception, or ``None`` for a clean stop, so
        ``coord.add_stop_callback(queue.cancel)`` cancels a queue with the
        error that stopped the coordinator. ``fn`` runs in the thread that
        requested the stop, right after the stop is recorded and outside the
        coordinator's lock; if a stop is already requested it runs at once,
        in this thread. Exceptions from ``fn`` are logged and ignored (like
        TF1's cancel_op, QR7). Adding a callback equal to one still pending
        does nothing. ``fn`` should not block: it delays the thread that
        requested the stop.

        Args:
            fn: a callable taking the cause.
        """
        with self._lock:
            if not self._stop_event.is_set():
                if fn not in self._stop_callbacks:
                    self._stop_callbacks.append(fn)
                return
            cause = self._exc_info_to_raise[1] if self._exc_info_to_raise else None
        self._call_stop_callback(fn, cause)

    def remove_stop_callback(self, fn: _StopCallback) -> bool:
        """Forget a pending stop callback.

        Returns:
            True if ``fn`` was pending and is now removed.
        """
        with self._lock:
            try:
                self._stop_callbacks.remove(fn)
            except ValueError:
                return False
            return True

    @staticmethod
    def _call_stop_callback(fn: _StopCallback, cause: BaseException | None) -> None:
        try:
            fn(cause)
        except Exception:  # noqa: BLE001 - a failing callback must not hide the stop
            _LOG.warning("Ignored exception in stop callback %r", fn, exc_info=True)

    # -- threads ------------------------------------------------------------------

    def register_thread(self, thread: threading.Thread) -> None:
        """Add ``thread`` to the threads that :meth:`join` waits for (C10).

        Register a thread before starting it: the coordinator then wraps its
        ``run()`` so that its end wakes :meth:`join` at once. A thread
        registered after it started is watched by a small helper thread
        (named ``feedq-coord-watch-<name>``) while ``join`` waits.

        Args:
            thread: the thread.
        """
        with self._lock:
            self._registered_threads[thread] = None
            self._instrument_if_unstarted(thread)

    def _instrument_if_unstarted(self, thread: threading.Thread) -> None:
        """Wrap ``thread.run`` so that its end notifies ``self._changed`` (lock held)."""
        if thread.ident is not None or thread.is_alive() or thread in self._instrumented:
            return
        # Neither the wrapper nor what it calls may hold the thread strongly:
        # the thread holds the wrapper, and a cycle would wait for the GC.
        # ``inner`` is another coordinator's wrapper (a plain function), if any.
        inner: Callable[[], None] | None = thread.__dict__.get("run")
        class_run = type(thread).run
        thread_ref = weakref.ref(thread)

        def run() -> None:
            me = thread_ref()
            if me is None:  # pragma: no cover - threading references running threads
                return
            with self._lock:
                self._entered.add(me)
            try:
                if inner is not None:
                    inner()
                else:
                    class_run(me)
            finally:
                with self._lock:
                    self._ended.add(me)
                    self._changed.notify_all()

        # An instance attribute shadows the class's run(); Thread._bootstrap
        # calls self.run(), so this works for any Thread (subclass or target=).
        thread.run = run  # type: ignore[method-assign]
        self._instrumented.add(thread)

    def _watch(self, thread: threading.Thread) -> None:
        """Body of a watcher thread: notify join() when ``thread`` ends.

        Every wait is bounded: the watcher ends when ``thread`` ends, or when
        no :meth:`join` is in progress any more (a later join starts a new
        watcher if it needs one).
        """
        me = threading.current_thread()
        while True:
            thread.join(_WATCH_SLICE_SECS)
            with self._lock:
                if not thread.is_alive():
                    self._ended.add(thread)
                    self._changed.notify_all()
                    return
                if self._joins_in_progress == 0:
                    if self._watchers.get(thread) is me:
                        del self._watchers[thread]
                    return

    def _done(self, thread: threading.Thread) -> bool:
        """True if ``thread`` has ended or never started (lock held)."""
        return thread in self._ended or not thread.is_alive()

    def join(
        self,
        threads: Iterable[threading.Thread] | None = None,
        stop_grace_period_secs: float = 120,
        ignore_live_threads: bool = False,
    ) -> None:
        """Wait for the registered threads and ``threads`` to end (C6, C7).

        Phase 1 waits, without limit (C7), until every thread has ended or a
        stop is requested; it wakes on either event, without polling. If all
        threads ended and no stop was requested, it returns and the stop stays
        unrequested. Phase 2, after a stop, waits up to
        ``stop_grace_period_secs`` for the threads to end. Then the recorded
        exception, if any, is re-raised with its traceback (it wins over
        stragglers); else threads still alive raise ``RuntimeError`` unless
        ``ignore_live_threads``, in which case they are only logged. Live
        threads are never killed. Afterwards the registered set is empty and
        :attr:`joined` is True (C8).

        Args:
            threads: threads to join besides the registered ones.
            stop_grace_period_secs: seconds the threads get to end after a
                stop is requested.
            ignore_live_threads: log instead of raising for threads still
                alive after the grace period.

        Raises:
            BaseException: the exception recorded by :meth:`request_stop`.
            RuntimeError: "Coordinator stopped with threads still running:
                <names>" (names separated by spaces, as in TF1).
            ValueError: ``stop_grace_period_secs`` is negative or NaN.
        """
        grace = float(stop_grace_period_secs)
        if math.isnan(grace) or grace < 0:
            raise ValueError(f"stop_grace_period_secs must be >= 0, got {stop_grace_period_secs}")
        extra = list(threads) if threads is not None else []
        with self._lock:
            self._joins_in_progress += 1
        try:
            ended, stragglers, ended_watchers = self._wait_for_targets(extra, grace)
        finally:
            with self._lock:
                self._joins_in_progress -= 1

        # Real joins, outside the lock: these threads have left run() already,
        # so each join returns at once; it makes is_alive() False for callers.
        for t in [*ended, *ended_watchers]:
            if t.ident is not None and t is not threading.current_thread():
                t.join(_THREAD_EXIT_TIMEOUT_SECS)
                if t.is_alive() and t in ended:
                    stragglers.append(t)

        with self._lock:
            self._joined = True
            self._registered_threads = {}
            exc_info = self._exc_info_to_raise
        if exc_info is not None:
            _raise(exc_info)
        if stragglers:
            names = " ".join(t.name for t in stragglers)
            if ignore_live_threads:
                _LOG.info("Coordinator stopped with threads still running: %s", names)
            else:
                raise RuntimeError(f"Coordinator stopped with threads still running: {names}")

    def _wait_for_targets(
        self, extra: list[threading.Thread], grace: float
    ) -> tuple[list[threading.Thread], list[threading.Thread], list[threading.Thread]]:
        """Phases 1 and 2 of :meth:`join`.

        Returns:
            The targets that ended, those still alive, and the watcher
            threads of the ended ones.
        """
        with self._lock:
            # Ordered union: given threads first, then registered ones.
            targets = list(dict.fromkeys([*extra, *self._registered_threads]))
            watchers = self._arm_notifications(targets)
        for w in watchers:
            w.start()

        def all_done() -> bool:
            return all(self._done(t) for t in targets)

        with self._lock:
            # Phase 1 (C6, C7): no time limit; a stop or a thread's end wakes
            # us. Each wait is bounded only so that a missed notification
            # could never hang us.
            while not (self._stop_event.is_set() or all_done()):
                self._changed.wait(_JOIN_RECHECK_SECS)
            # Phase 2: the grace period starts at the stop (C7).
            if self._stop_event.is_set() and not all_done():
                self._changed.wait_for(all_done, timeout=grace)
            ended = [t for t in targets if self._done(t)]
            stragglers = [t for t in targets if not self._done(t)]
            ended_watchers = [self._watchers[t] for t in ended if t in self._watchers]
        return ended, stragglers, ended_watchers

    def _arm_notifications(self, targets: list[threading.Thread]) -> list[threading.Thread]:
        """Make sure the end of every target notifies ``self._changed`` (lock held).

        Returns:
            Watcher threads to start (outside the lock).
        """
        watchers = []
        for t in targets:
            if t.ident is None and not t.is_alive():
                self._instrument_if_unstarted(t)
                continue
            if t in self._ended or not t.is_alive():
                continue
            if t in self._entered or t in self._watchers:
                continue  # its wrapper or watcher will notify
            # Started without our wrapper (or it has not entered it yet): a
            # helper joins it and notifies. It ends when ``t`` ends, or soon
            # after the last join() in progress returns.
            w = threading.Thread(
                target=self._watch, args=(t,), name=f"feedq-coord-watch-{t.name}", daemon=True
            )
            self._watchers[t] = w
            watchers.append(w)
        return watchers


class LooperThread(threading.Thread):
    """A thread that runs code repeatedly, optionally on a timer (L1–L4).

    Either pass ``target`` (called as ``target(*args, **kwargs)``) or
    subclass and override :meth:`run_loop`, and optionally
    :meth:`start_loop` / :meth:`stop_loop`. The thread is a daemon and
    registers itself with ``coord`` when constructed (L1), so
    ``coord.join()`` waits for it.

    With ``timer_interval_secs=None`` or ``0``, ``run_loop`` is called back
    to back until the coordinator stops (checked before every call). Otherwise it is called at once and then at
    ``start + k * timer_interval_secs`` on the monotonic clock: a fixed rate
    without drift, however long each call takes (L2). If a call overruns one
    or more boundaries, those are skipped and the next call happens at the
    next boundary still ahead (TF1 ran the missed calls back to back). The
    wait between calls ends as soon as a stop is requested.

    An exception from a hook is reported to the coordinator and ends the
    thread, without calling :meth:`stop_loop` (L3).

    Args:
        coord: the coordinator.
        timer_interval_secs: seconds between calls, or ``None`` (or ``0``,
            as in TF1) for back to back.
        target: the function to call; ``None`` for a subclass.
        args: positional arguments for ``target``.
        kwargs: keyword arguments for ``target``.
        name: the thread's name; default ``feedq-looper-<target name>`` (or
            the subclass's name).

    Raises:
        ValueError: ``coord`` is not a Coordinator; ``args`` or ``kwargs``
            without ``target`` (L1); ``timer_interval_secs`` negative, NaN
            or infinite.
    """

    def __init__(
        self,
        coord: Coordinator,
        timer_interval_secs: float | None,
        target: Callable[..., object] | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        if not isinstance(coord, Coordinator):
            # L1: TF1 raises ValueError, not TypeError, for this.
            raise ValueError(f"'coord' argument must be a Coordinator: {coord!r}")  # noqa: TRY004
        if target is None and (args or kwargs):
            raise ValueError("'args' and 'kwargs' argument require that you also pass 'target'")
        if timer_interval_secs is not None:
            if isinstance(timer_interval_secs, (str, bytes, bool)) or not isinstance(
                    timer_interval_secs, numbers.Real):
                raise TypeError(
                    f"timer_interval_secs must be a number of seconds or None, "
                    f"got {timer_interval_secs!r}")
            timer_interval_secs = float(timer_interval_secs)
            if not (timer_interval_secs >= 0 and math.isfinite(timer_interval_secs)):
                raise ValueError(
                    f"timer_interval_secs must be a finite number >= 0 or None, "
                    f"got {timer_interval_secs}"
                )
        if name is None:
            label = getattr(target, "__name__", None) if target is not None else None
            name = f"feedq-looper-{label or type(self).__name__}"
        super().__init__(name=name, daemon=True)
        self._coord = coord
        self._timer_interval_secs = timer_interval_secs
        self._loop_target = target
        self._loop_args: tuple[Any, ...] = tuple(args or ())
        self._loop_kwargs: dict[str, Any] = dict(kwargs or {})
        coord.register_thread(self)

    @staticmethod
    def loop(
        coord: Coordinator,
        timer_interval_secs: float | None,
        target: Callable[..., object],
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> LooperThread:
        """Create a LooperThread calling ``target`` and start it (L4).

        Returns:
            The started thread.
        """
        looper = LooperThread(coord, timer_interval_secs, target=target, args=args, kwargs=kwargs)
        looper.start()
        return looper

    def run(self) -> None:
        """Run the hooks until the coordinator stops (L2, L3)."""
        with self._coord.stop_on_exception():
            self.start_loop()
            interval = self._timer_interval_secs
            if not interval:  # None or 0: back to back (L2)
                while not self._coord.should_stop():
                    self.run_loop()
            else:
                start = time.monotonic()
                k = 0  # index of the boundary of the next call
                while not self._coord.wait_for_stop(
                    max(0.0, start + k * interval - time.monotonic())
                ):
                    self.run_loop()
                    # Multiply instead of adding intervals: no accumulated
                    # float error, hence no drift (L2).
                    elapsed = time.monotonic() - start
                    k = max(k + 1, math.floor(elapsed / interval) + 1)
            self.stop_loop()

    def start_loop(self) -> None:
        """Called once, in the thread, before the first :meth:`run_loop`."""

    def run_loop(self) -> None:
        """Called at each tick; by default calls ``target(*args, **kwargs)``."""
        if self._loop_target is not None:
            self._loop_target(*self._loop_args, **self._loop_kwargs)

    def stop_loop(self) -> None:
        """Called once, in the thread, after the last :meth:`run_loop` (not after an error)."""


# Show the public path in reprs and docs (feedq.coordinator.Coordinator).
Coordinator.__module__ = __name__
LooperThread.__module__ = __name__
