"""QueueRunner: threads that keep a queue filled, and runner collections.

A :class:`QueueRunner` holds a queue and a list of *enqueue ops* (callables
taking no arguments, each typically reading something and enqueuing it).
:meth:`QueueRunner.create_threads` starts one thread per op; each thread runs
its op in a loop until the op reports that a queue is closed, an error
happens, or the coordinator stops (TF1 ``tf.train.QueueRunner``, spec rules
QR1–QR13).

Usage::

    q = FIFOQueue(100, [np.int64], shapes=[()], name="numbers")
    qr = QueueRunner(q, [lambda: q.enqueue_many([source.read_up_to(32)])] * 2)
    feedq.add_queue_runner(qr)
    coord = feedq.Coordinator()
    threads = feedq.start_queue_runners(coord=coord)
    try:
        for x in q: ...              # ends with OutOfRangeError when drained
    finally:
        coord.request_stop()
        coord.join(threads)

Differences from TF1, on purpose:

* X7: the default ``queue_closed_exception_types`` is
  ``(OutOfRangeError, CancelledError)``: a runner that finds its queue
  closed, by its own close_op, by the user or by a stop, ends cleanly
  instead of reporting a ``CancelledError`` "error" (QR10).
* X3: an error in an enqueue op cancels the runner's queue with that error as
  the cause, so the consumer's next blocking call raises ``CancelledError``
  chained from it instead of a normal-looking end of data (QR8), or instead
  of hanging when there is no coordinator (QR6, QR13). Without a coordinator
  the error is logged and kept in :attr:`QueueRunner.exceptions_raised` but
  not re-raised in the runner thread (the consumer gets it instead).
  A runner whose op fails with a closed-queue error *caused by* another
  error (its upstream queue was cancelled by a failing runner) passes the
  cancellation on to its own queue with the same cause, so an error travels
  down a pipeline of queues.
* X5: no ``close_on_stop`` thread. The runner registers a stop callback with
  the coordinator (:meth:`Coordinator.add_stop_callback`) that runs the
  cancel op, so a stop wakes runners blocked on their queue, and
  ``coord.join()`` returns as soon as the runner threads end cleanly, with
  no one calling ``request_stop`` (no QR11 hang).
* There is no session: ``create_threads(coord=None, daemon=False,
  start=False)`` and ``start_queue_runners(coord=None, ...)``; collections are
  process-wide instead of per graph.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from feedq._core import priority
from feedq._core.accounts import (
    Account,
    close_account,
    current_account,
    open_account,
    timing_enabled,
)
from feedq.coordinator import Coordinator
from feedq.errors import CancelledError, FeedqError, OutOfRangeError
from feedq.queues import QueueBase

__all__ = [
    "QUEUE_RUNNERS",
    "QueueRunner",
    "QueueRunnerStatistics",
    "RunnerEvents",
    "add_queue_runner",
    "clear_queue_runners",
    "control_dependencies",
    "current_dependencies",
    "gate_ops",
    "get_queue_runners",
    "runner_events",
    "start_queue_runners",
]



_LOG = logging.getLogger(__name__)

#: The default runner collection (TF1 ``tf.GraphKeys.QUEUE_RUNNERS``).
QUEUE_RUNNERS = "queue_runners"

_Op = Callable[[], object]


class RunnerEvents:
    """A process-wide condition notified when runners make the kind of
    progress a control dependency waits for.

    It is notified (``notify_all``) when a runner thread ends, after its
    accounting (so ``statistics().threads_alive`` is already lower), when a
    runner's stop callback has cancelled its queue, and by
    :class:`feedq.Stage` when a consumer finds a stage's queue closed and
    drained. ``feedq.pipeline``'s control-dependency gates wait on it instead
    of polling. Internal: not part of the public API.
    """

    def __init__(self) -> None:
        # Notified by notify(); waited on by wait_for(). Held only briefly,
        # never while a runner's or a queue's lock is held by the notifier.
        self._cond = threading.Condition(threading.Lock())

    def notify(self) -> None:
        """Wake every waiter so it re-checks its predicate."""
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` is true (checked at each notification),
        at most ``timeout`` seconds; its last value."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)


#: The one :class:`RunnerEvents` of the process.
runner_events = RunnerEvents()


class _Queue(Protocol):
    """What a runner needs of a queue (see ``docs/queue-api.md``)."""

    @property
    def name(self) -> str: ...

    def close(self, cancel_pending_enqueues: bool = False) -> None: ...

    def cancel(self, cause: BaseException | None = None) -> None: ...


@dataclass(frozen=True)
class QueueRunnerStatistics:
    """A consistent snapshot of a runner, taken under its lock.

    Counts cover the threads made by the latest :meth:`QueueRunner.create_threads`
    that made any (QR3).

    Attributes:
        threads_alive: threads created and not yet ended (a thread made with
            ``start=False`` counts until it has run and ended).
        ops_run: enqueue op calls that returned normally.
        exceptions: errors raised by enqueue ops (not of a closed-queue
            type), oldest first, whether they were reported to a coordinator
            or recorded in ``exceptions_raised``.
    """

    threads_alive: int
    ops_run: int
    exceptions: tuple[BaseException, ...]


def _op_name(op: _Op) -> str:
    """A name for ``op`` in thread names: its ``__name__``, seen through partials."""
    while isinstance(op, functools.partial):
        op = op.func
    name = getattr(op, "__name__", None)
    return name if isinstance(name, str) else type(op).__name__


class QueueRunner:
    """Holds a queue and the ops that fill it, and runs them in threads (QR1–QR11).

    Each op is a callable taking no arguments. A runner thread calls its op
    again and again (QR4). When an op raises one of
    ``queue_closed_exception_types`` the thread ends cleanly, and the last
    thread to end that way runs ``close_op`` (QR5). Any other exception is an
    error (QR6): the runner cancels its queue with it (X3), then reports it to
    the coordinator, or, without one, logs it and keeps it in
    :attr:`exceptions_raised`.

    Args:
        queue: the queue the ops fill (anything with ``name``, ``close()`` and
            ``cancel(cause)``, see ``docs/queue-api.md``).
        enqueue_ops: a non-empty list or tuple of callables; the same op
            listed k times runs in k threads (QR2).
        close_op: run by the last thread that ends cleanly, with the runner's
            lock held (it must not block nor call back into the runner);
            errors from it are ignored. Default: ``queue.close()``.
        cancel_op: run when the coordinator stops; errors from it are
            ignored. Default: ``queue.cancel(cause)`` with the error that
            stopped the coordinator (``None`` for a clean stop): pending and
            later blocking calls on the queue raise ``CancelledError``, which
            is ``close(cancel_pending_enqueues=True)`` plus waking consumers.
        queue_closed_exception_types: a non-empty tuple of
            :class:`feedq.errors.FeedqError` subclasses that mean "the queue is
            closed"; default ``(OutOfRangeError, CancelledError)`` (X7).

    Raises:
        ValueError: "Must provide queue and enqueue_ops." (QR1).
        TypeError: an op is not callable, or ``queue_closed_exception_types``
            is not a non-empty tuple of feedq error classes (QR1).
    """

    def __init__(
        self,
        queue: _Queue,
        enqueue_ops: Sequence[_Op],
        close_op: _Op | None = None,
        cancel_op: _Op | None = None,
        queue_closed_exception_types: tuple[type[FeedqError], ...] | None = None,
    ) -> None:
        # ``is None`` / len(), never truthiness: an empty queue may be falsy.
        if queue is None or enqueue_ops is None:
            raise ValueError("Must provide queue and enqueue_ops.")
        if not isinstance(enqueue_ops, (list, tuple)):
            raise TypeError(
                f"enqueue_ops must be a list or tuple of callables, got {type(enqueue_ops).__name__}"
            )
        if len(enqueue_ops) == 0:
            raise ValueError("Must provide queue and enqueue_ops.")
        for i, op in enumerate(enqueue_ops):
            if not callable(op):
                raise TypeError(f"enqueue_ops[{i}] is not callable: {op!r}")
        for label, fn in (("close_op", close_op), ("cancel_op", cancel_op)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{label} must be callable, got {fn!r}")
        if queue_closed_exception_types is None:
            queue_closed_exception_types = (OutOfRangeError, CancelledError)
        elif (
            not isinstance(queue_closed_exception_types, tuple)
            or not queue_closed_exception_types
            or not all(
                isinstance(t, type) and issubclass(t, FeedqError)
                for t in queue_closed_exception_types
            )
        ):
            raise TypeError(
                "queue_closed_exception_types, when provided, must be a non-empty tuple "
                f"of feedq.errors types, but saw: {queue_closed_exception_types!r}"
            )
        self._queue = queue
        self._enqueue_ops: tuple[_Op, ...] = tuple(enqueue_ops)
        self._close_op: _Op = close_op if close_op is not None else queue.close
        self._user_cancel_op = cancel_op
        self._queue_closed_exception_types: tuple[type[FeedqError], ...] = (
            queue_closed_exception_types
        )
        self._lock = threading.Lock()
        # Threads of the latest create_threads() not yet ended (QR3, QR5).
        self._live_threads = 0  # guarded by self._lock
        self._ops_run = 0  # guarded by self._lock
        self._exceptions: list[BaseException] = []  # guarded by self._lock
        self._exceptions_raised: list[BaseException] = []  # guarded by self._lock
        # Set once create_threads() has made threads: the X1 check of
        # feedq.input's stages ("fed by a runner that was never started").
        self._started = False  # guarded by self._lock
        # Where each runner thread's time went (feedq._core.accounts), every thread
        # ever started, for the pipeline's statistics.
        self._accounts: list[Account] = []  # guarded by self._lock

    # -- properties ---------------------------------------------------------------

    @property
    def queue(self) -> _Queue:
        """The queue the ops fill."""
        return self._queue

    @property
    def name(self) -> str:
        """The queue's name."""
        return str(getattr(self._queue, "name", type(self._queue).__name__))

    @property
    def enqueue_ops(self) -> tuple[_Op, ...]:
        """The enqueue ops, one thread each."""
        return self._enqueue_ops

    @property
    def close_op(self) -> _Op:
        """The op run by the last thread that ends cleanly (QR5)."""
        return self._close_op

    @property
    def cancel_op(self) -> _Op:
        """The op run when the coordinator stops (QR7)."""
        if self._user_cancel_op is not None:
            return self._user_cancel_op
        return self._queue.cancel

    @property
    def queue_closed_exception_types(self) -> tuple[type[FeedqError], ...]:
        """Exception types that end a runner thread cleanly (QR5, X7)."""
        return self._queue_closed_exception_types

    @property
    def exceptions_raised(self) -> list[BaseException]:
        """Errors of the latest threads, recorded when there was no coordinator (QR6)."""
        with self._lock:
            return list(self._exceptions_raised)

    @property
    def started(self) -> bool:
        """True once :meth:`create_threads` has made threads for this runner."""
        return self._started

    def statistics(self) -> QueueRunnerStatistics:
        """Threads alive, ops run and errors of the latest threads."""
        with self._lock:
            return QueueRunnerStatistics(
                threads_alive=self._live_threads,
                ops_run=self._ops_run,
                exceptions=tuple(self._exceptions),
            )

    def _time_accounts(self) -> list[Account]:
        """The time accounts of every thread this runner started (feedq._observe.statistics)."""
        with self._lock:
            return list(self._accounts)

    def __repr__(self) -> str:
        return f"QueueRunner(queue={self.name!r}, enqueue_ops={len(self._enqueue_ops)})"

    # -- threads ------------------------------------------------------------------

    def create_threads(
        self, coord: Coordinator | None = None, daemon: bool = False, start: bool = False,
        *, niceness: int | None = None,
    ) -> list[threading.Thread]:
        """Create (and optionally start) one thread per enqueue op (QR2, QR3).

        Threads are named ``feedq-runner-<queue name>-<i>-<op name>`` (``i``
        the op's index, the op's ``__name__``), not TF1's
        ``QueueRunnerThread-<queue>-<op>``: every feedq thread carries the
        ``feedq-`` prefix (QR2 in docs/tf1-compat.md says why). With a coordinator, the threads are registered
        with it, and a stop callback runs the cancel op when it stops; if it
        is already stopped the cancel op runs now and the threads end
        without calling their op (QR4).

        Args:
            coord: the coordinator, or ``None``.
            daemon: make the threads daemons.
            start: start the threads before returning them.
            niceness: a feedq addition: each thread lowers its own OS
                priority by this many niceness steps when it starts (Linux;
                see ``docs/performance.md``); ``None`` uses
                :func:`feedq.loader_niceness`, 0 leaves it alone.

        Returns:
            The threads; ``[]`` if threads of an earlier call have not all
            ended yet (QR3), in which case nothing is created or started.

        Raises:
            TypeError: ``coord`` is neither a :class:`Coordinator` nor
                ``None``; nothing is created, and the runner can still be
                started later.
        """
        _check_coord(coord)
        if niceness is None:
            niceness = priority.loader_niceness()
        else:
            niceness = priority.check_niceness(niceness, "niceness")
        with self._lock:
            if self._live_threads > 0:
                return []
            self._live_threads = len(self._enqueue_ops)
            self._started = True
            self._ops_run = 0
            self._exceptions = []
            self._exceptions_raised = []
        threads = [
            threading.Thread(
                target=self._run,
                args=(op, coord, niceness),
                name=f"feedq-runner-{self.name}-{i}-{_op_name(op)}",
                daemon=daemon,
            )
            for i, op in enumerate(self._enqueue_ops)
        ]
        if coord is not None:
            for t in threads:
                coord.register_thread(t)  # before start: its end wakes coord.join()
            # Replaces TF1's close_on_stop thread (QR7, X5). Idempotent per
            # coordinator: the same bound method is not added twice.
            coord.add_stop_callback(self._on_stop)
        if start:
            for t in threads:
                t.start()
        return threads

    def _on_stop(self, cause: BaseException | None) -> None:
        """Stop callback: run the cancel op (QR7); its errors are ignored."""
        try:
            if self._user_cancel_op is not None:
                self._user_cancel_op()
            else:
                self._queue.cancel(cause)
        except Exception:  # noqa: BLE001 - errors of close/cancel ops are ignored (QR5, QR7)
            _LOG.debug("Ignored exception from the cancel op of %r", self, exc_info=True)
        runner_events.notify()  # a gate holding this runner back can give up now

    def _run(self, op: _Op, coord: Coordinator | None, niceness: int = 0) -> None:
        """Body of a runner thread (QR4–QR6)."""
        if niceness:
            priority.lower_this_thread(niceness)
        ended = False
        # Op time, and (added by the queues) time blocked in them: feedq._core.accounts.
        account = open_account() if timing_enabled() else None
        if account is not None:
            with self._lock:
                self._accounts.append(account)
        clock = time.monotonic
        started = 0.0
        try:
            while not (coord is not None and coord.should_stop()):
                if account is not None:
                    account.op_since = started = clock()
                try:
                    op()
                except self._queue_closed_exception_types as exc:
                    ended = True
                    self._end_on_closed(exc)
                    return
                if account is not None:
                    account.op_s += clock() - started
                    account.op_since = None
                # One lock acquisition per op: ops move blocks, not records,
                # so this costs little and keeps statistics() exact.
                with self._lock:
                    self._ops_run += 1
        except Exception as exc:  # noqa: BLE001 - QR6: any other exception is an error
            self._end_on_error(exc, coord)
        finally:
            if account is not None:
                since = account.op_since
                if since is not None:
                    account.op_s += clock() - since
                    account.op_since = None
                close_account()
            # Every thread ends through here, whatever the reason (QR5).
            if not ended:
                with self._lock:
                    self._live_threads -= 1
            runner_events.notify()  # after the accounting: gates see it done

    def _end_on_closed(self, exc: FeedqError) -> None:
        """A queue is closed: end this thread cleanly (QR5, X7).

        If the closed-queue error was caused by a real error (an upstream
        queue cancelled by a failing runner), pass the cancellation on to our
        own queue with that cause instead of closing it as if the data had
        ended (X3).
        """
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, self._queue_closed_exception_types):
            _LOG.debug("QueueRunner %r: cancelled because of %r", self.name, cause)
            try:
                self._queue.cancel(cause)
            except Exception:  # noqa: BLE001 - errors of close/cancel ops are ignored (QR5, QR7)
                _LOG.debug("Ignored exception from cancel of %r", self, exc_info=True)
            with self._lock:
                self._live_threads -= 1
            return
        # close_op runs under the lock, so a create_threads() racing with the
        # last thread's end cannot start threads that the close then hits.
        with self._lock:
            self._live_threads -= 1
            if self._live_threads == 0:
                try:
                    self._close_op()
                except Exception:  # noqa: BLE001 - errors of close/cancel ops are ignored (QR5, QR7)
                    _LOG.debug("Ignored exception from the close op of %r", self, exc_info=True)

    def _end_on_error(self, exc: Exception, coord: Coordinator | None) -> None:
        """An enqueue op failed: make sure consumers and the coordinator see it (QR6, X3)."""
        with self._lock:
            self._exceptions.append(exc)
            if coord is None:
                self._exceptions_raised.append(exc)
        # First cancel our queue with the error as cause: consumers blocked on
        # it raise CancelledError chained from it, not OutOfRange (X3).
        try:
            self._queue.cancel(exc)
        except Exception:  # noqa: BLE001 - errors of close/cancel ops are ignored (QR5, QR7)
            _LOG.debug("Ignored exception from cancel of %r", self, exc_info=True)
        if coord is None:
            _LOG.error("Exception in QueueRunner: %s", exc, exc_info=exc)
            return
        try:
            coord.request_stop(exc)
        except Exception:  # noqa: BLE001 - C8: request_stop re-raises exc after join()
            # The coordinator was already joined (C8): nobody else will see it.
            _LOG.error("Exception in QueueRunner after Coordinator.join(): %s", exc, exc_info=exc)


def _check_coord(coord: object) -> None:
    if coord is not None and not isinstance(coord, Coordinator):
        hint = ""
        if hasattr(coord, "run"):  # a TF1 Session in coord's place
            hint = (" (feedq has no sessions: TF1's start_queue_runners(sess, coord) is "
                    "start_queue_runners(coord=coord) here)")
        raise TypeError(f"coord must be a feedq.Coordinator or None, got {coord!r}{hint}")


# -- collections ---------------------------------------------------------------------

_collections_lock = threading.Lock()
_collections: dict[str, list[QueueRunner]] = {}  # guarded by _collections_lock


def add_queue_runner(qr: QueueRunner, collection: str = QUEUE_RUNNERS) -> None:
    """Add ``qr`` to a process-wide runner collection (QR12).

    Every input producer and batching function adds exactly one runner.
    Inside ``with feedq.Pipeline():`` (or ``pipe.as_default()``), a runner
    added to the default collection goes to that pipeline instead, which
    starts it (now, if it is running), stops and joins it, and covers it in
    its statistics and stall reports -- as ``pipe.add_runner(qr)`` does.

    Args:
        qr: the runner.
        collection: the collection's name.

    Raises:
        TypeError: ``qr`` is not a QueueRunner.
    """
    if not isinstance(qr, QueueRunner):
        raise TypeError(f"qr must be a QueueRunner, got {qr!r}")
    adder = _pipeline_adder
    if collection == QUEUE_RUNNERS and adder is not None and adder(qr):
        return  # a feedq.Pipeline is current in this thread: it owns and starts qr
    with _collections_lock:
        _collections.setdefault(collection, []).append(qr)


# Set by feedq.pipeline (above this module in the layers): adds a runner to
# the pipeline current in the calling thread and returns True, or returns
# False when none is current.
_pipeline_adder: Callable[[QueueRunner], bool] | None = None


def _set_pipeline_adder(adder: Callable[[QueueRunner], bool] | None) -> None:
    """For feedq.pipeline: route :func:`add_queue_runner` to the current pipeline."""
    global _pipeline_adder
    _pipeline_adder = adder


def get_queue_runners(collection: str = QUEUE_RUNNERS) -> list[QueueRunner]:
    """The runners in ``collection``, in the order they were added (a copy)."""
    with _collections_lock:
        return list(_collections.get(collection, ()))


def clear_queue_runners(collection: str | None = None) -> None:
    """Forget the runners of ``collection``, or of every collection if ``None``."""
    with _collections_lock:
        if collection is None:
            _collections.clear()
        else:
            _collections.pop(collection, None)


def start_queue_runners(
    coord: Coordinator | None = None,
    daemon: bool = True,
    start: bool = True,
    collection: str = QUEUE_RUNNERS,
    *,
    sess: Any = None,
) -> list[threading.Thread]:
    """Create threads for every runner in ``collection`` (QR12).

    ``sess`` is accepted so that ported TF1 calls
    (``start_queue_runners(sess=sess, coord=coord)``) run unchanged; feedq is
    eager and has no session, so it is ignored.

    Note that ``daemon`` defaults to True here but False in
    :meth:`QueueRunner.create_threads`, as in TF1.

    Args:
        coord: the coordinator for every runner, or ``None``.
        daemon: make the threads daemons.
        start: start the threads.
        collection: the collection's name.

    Returns:
        All threads created, concatenated in runner order; ``[]`` with a
        ``UserWarning`` when the collection is empty.

    Raises:
        TypeError: ``coord`` is neither a :class:`Coordinator` nor ``None``
            (no runner is started).
    """
    _check_coord(coord)  # before any runner counts threads as started
    runners = get_queue_runners(collection)
    if not runners:
        warnings.warn(
            f"start_queue_runners() was called but the collection {collection!r} holds "
            "no queue runners.",
            stacklevel=2,
        )
        return []
    threads: list[threading.Thread] = []
    for qr in runners:
        threads.extend(qr.create_threads(coord, daemon=daemon, start=start))
    return threads


_local = threading.local()


# --- Control dependencies ------------------------------------------------
#
# Control dependencies: runners held back until other runners, queues or
# events are done (TF1's ``tf.control_dependencies`` for queue runners).
#
# ``control_dependencies(deps)`` postpones runners created inside it until
# every dependency is done: a :class:`~feedq.runners.QueueRunner` or stage whose
# threads have all ended, a queue that is closed and drained, or a
# ``threading.Event`` that is set (the seed's "Control Dependencies", used to
# keep memory-hungry stages from starting early). Independent runners run in
# parallel threads (the seed's "Parallel Execution"). A gated runner thread
# waits on a condition that runners and stages notify, not on a poll.
#
# ``feedq.pipeline`` re-exports ``control_dependencies``; ``current_dependencies``
# and ``gate_ops`` serve ``feedq.input``, whose producers and batchers gate
# their ops through them.


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
