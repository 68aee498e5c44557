"""Pipeline: one object that owns queue runners, their coordinator and threads.

TF1 spread this over a graph collection, ``start_queue_runners`` and a
Coordinator. A :class:`Pipeline` keeps them together and is a context
manager::

    with feedq.Pipeline() as pipe:                 # starts runners as they are added
        files = feedq.string_input_producer(paths, num_epochs=1)
        batch = feedq.shuffle_batch(read_and_decode(files), 256, 10_000, 1_000, ...)
        for x, y in batch:                          # ends cleanly at the end of data
            train_step(x, y)
    # on exit: stop, join the threads, close readers and feeders, re-raise
    # the first runner error

Shutdown is one story: ``request_stop`` -> runners cancelled -> threads
joined -> owned resources closed, in reverse order of registration. The
pipeline owns what is given to :meth:`Pipeline.closing` and what registers
itself (readers, device feeders) while ``with pipe:`` is open
(``feedq._scope``).

Input functions (``feedq.input``) called while a pipeline is the current
one (inside ``with pipe:`` or ``with pipe.as_default():``) add their runners
to it instead of the process-wide collection.

``control_dependencies(deps)`` postpones runners created inside it until
every dependency is done: a :class:`~feedq.runners.QueueRunner` or stage whose
threads have all ended, a queue that is closed and drained, or a
``threading.Event`` that is set (the seed's "Control Dependencies", used to
keep memory-hungry stages from starting early). Independent runners run in
parallel threads (the seed's "Parallel Execution"). A gated runner thread
waits on a condition that runners and stages notify, not on a poll.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from . import _stall
from ._prometheus import prometheus_collector
from ._scope import closing_scope
from ._stats import (
    Bottleneck,
    ConsumerTiming,
    PipelineStatistics,
    QueueTiming,
    StageTiming,
    collect,
    format_report,
)
from ._waits import current_account
from .coordinator import Coordinator
from .errors import CancelledError
from .queues import QueueBase
from .runners import QueueRunner, add_queue_runner, runner_events

# current_dependencies, gate_ops and register_runner are for feedq.input (the
# producers and batchers register their runners through them).
__all__ = [
    "Bottleneck",
    "ConsumerTiming",
    "Pipeline",
    "PipelineStatistics",
    "QueueTiming",
    "StageTiming",
    "control_dependencies",
    "current_dependencies",
    "current_pipeline",
    "format_report",
    "gate_ops",
    "get_stall_timeout",
    "prometheus_collector",
    "register_runner",
    "set_stall_timeout",
]

# The statistics classes live in feedq._stats; they are public here.
for _cls in (Bottleneck, ConsumerTiming, PipelineStatistics, QueueTiming, StageTiming):
    _cls.__module__ = __name__
format_report.__module__ = __name__
prometheus_collector.__module__ = __name__
set_stall_timeout = _stall.set_stall_timeout
get_stall_timeout = _stall.get_stall_timeout

_local = threading.local()


def _stack(name: str) -> list[Any]:
    stack = getattr(_local, name, None)
    if stack is None:
        stack = []
        setattr(_local, name, stack)
    return stack


def current_pipeline() -> Pipeline | None:
    """The pipeline made current in this thread by ``with pipe:`` / ``as_default()``."""
    stack = _stack("pipelines")
    return stack[-1] if stack else None


@contextlib.contextmanager
def control_dependencies(deps: Sequence[Any] | None) -> Iterator[None]:
    """Runners created inside start only after every dependency is done.

    Args:
        deps: runners, stages (anything with a ``runner``), queues (done when
            closed and empty) or ``threading.Event`` objects (done when set);
            ``None`` clears the dependencies of enclosing blocks, as in TF.
    """
    stack = _stack("deps")
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
    for entry in reversed(_stack("deps")):
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


def register_runner(runner: QueueRunner) -> None:
    """Add a runner to the current pipeline, or to the default collection."""
    pipe = current_pipeline()
    if pipe is not None:
        pipe.add_runner(runner)
    else:
        add_queue_runner(runner)


@dataclass(frozen=True)
class _TimedParts:
    """What the statistics and the monitor look at (see Pipeline._timed_parts)."""

    runners: list[tuple[QueueRunner, str]]
    queues: list[QueueBase]
    output_queue: QueueBase | None
    process: list[tuple[Any, str]]


class Pipeline:
    """Queue runners, the coordinator that stops them, and their threads.

    Args:
        coord: the coordinator; a new one by default.
        stop_grace_period_secs: how long :meth:`join` waits for threads after
            a stop before naming the ones still alive.
        daemon: make runner threads daemons (so a forgotten pipeline never
            keeps the interpreter alive).
        stall_timeout: log one warning on the ``feedq`` logger when a call
            of the pipeline (the consumer's or a runner's) has been blocked
            this many seconds while nothing in the pipeline moved, naming
            the blocked queues and threads, what each waits for, and their
            stacks; default: :func:`set_stall_timeout` (off unless set).
        report_every: log :meth:`report` (INFO, ``feedq`` logger) every this
            many seconds while the pipeline runs; ``None``: never.

    Iterating a pipeline iterates its :attr:`output`: the last stage created
    while it was current, unless set explicitly.
    """

    def __init__(
        self,
        coord: Coordinator | None = None,
        stop_grace_period_secs: float = 10.0,
        daemon: bool = True,
        *,
        stall_timeout: float | None = None,
        report_every: float | None = None,
    ) -> None:
        self.coord = coord if coord is not None else Coordinator()
        self.stop_grace_period_secs = stop_grace_period_secs
        self.daemon = daemon
        self.stall_timeout = _stall.check_seconds(
            stall_timeout if stall_timeout is not None else _stall.get_stall_timeout(),
            "stall_timeout")
        self.report_every = _stall.check_seconds(report_every, "report_every")
        # Stages created while this pipeline was current (they set
        # ``output``), for the statistics.
        self._stages: list[Any] = []  # guarded by self._lock
        self._output: Any = None
        self._started_at: float | None = None  # time.monotonic() at start()
        self._monitor: _stall.Monitor | None = None  # guarded by self._lock
        self._lock = threading.Lock()
        self._runners: list[QueueRunner] = []  # guarded by self._lock
        self._threads: list[threading.Thread] = []  # guarded by self._lock
        self._running = False  # guarded by self._lock
        # What the pipeline closes after joining its threads: objects given
        # to closing(), and those that registered themselves with the
        # closing scope open during ``with pipe:`` (feedq._scope). One list,
        # so they close in reverse order of registration, whichever way they
        # came. The scope appends to it without our lock (list.append is
        # atomic); _close_all takes it whole under the lock.
        self._closeables: list[Any] = []  # guarded by self._lock
        self._scope: contextlib.AbstractContextManager[list[Any]] | None = None  # guarded by self._lock

    @property
    def output(self) -> Any:
        """The stage that iterating the pipeline reads (the last one created
        while the pipeline was current, unless set)."""
        return self._output

    @output.setter
    def output(self, stage: Any) -> None:
        self._output = stage
        if stage is not None:
            with self._lock:
                if not any(s is stage for s in self._stages):
                    self._stages.append(stage)

    @property
    def runners(self) -> list[QueueRunner]:
        """The runners added so far (a copy)."""
        with self._lock:
            return list(self._runners)

    @property
    def threads(self) -> list[threading.Thread]:
        """Runner threads started so far (a copy)."""
        with self._lock:
            return list(self._threads)

    def add_runner(self, runner: QueueRunner) -> None:
        """Own ``runner``; start it now if the pipeline is running."""
        with self._lock:
            self._runners.append(runner)
            running = self._running
        if running:
            self._start_runner(runner)

    def _start_runner(self, runner: QueueRunner) -> None:
        threads = runner.create_threads(self.coord, daemon=self.daemon, start=True)
        with self._lock:
            self._threads.extend(threads)

    def closing(self, obj: Any) -> Any:
        """Close ``obj`` (anything with ``close()``, e.g. a reader) when the
        pipeline exits, after its threads are joined, even on an error.

        Readers and device feeders created inside ``with pipe:`` register
        themselves the same way (:func:`feedq._scope.register_closeable`);
        everything registered is closed in reverse order of registration.

        Returns:
            ``obj``, so ``reader = pipe.closing(TextLineReader())`` reads well.
        """
        if not callable(getattr(obj, "close", None)):
            raise TypeError(f"{obj!r} has no close() method")
        with self._lock:
            self._closeables.append(obj)
        return obj

    def _close_all(self) -> None:
        with self._lock:
            items = list(self._closeables)
            self._closeables.clear()  # the same list the open scope fills
        errors: list[BaseException] = []
        for obj in reversed(items):
            try:
                obj.close()
            except Exception as exc:  # noqa: BLE001 - close the rest, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Pipeline]:
        """Make this the current pipeline in this thread, without starting it."""
        stack = _stack("pipelines")
        stack.append(self)
        try:
            yield self
        finally:
            stack.remove(self)

    def start(self) -> Pipeline:
        """Start every runner added so far; later ones start when added."""
        with self._lock:
            if self._running:
                return self
            self._running = True
            self._started_at = time.monotonic()
            runners = list(self._runners)
            if self._monitor is None and (self.stall_timeout or self.report_every):
                self._monitor = _stall.Monitor(self, self.stall_timeout, self.report_every)
                self._monitor.start()
        for r in runners:
            self._start_runner(r)
        return self

    def stop(self, ex: BaseException | None = None) -> None:
        """Request a stop: every blocking call in the pipeline is cancelled."""
        self.coord.request_stop(ex)

    def join(self) -> None:
        """Wait for the runner threads; re-raise the first runner error.

        Then, whether the threads ended or not, close what the pipeline owns
        (:meth:`closing`, and readers and feeders created inside ``with
        pipe:``), in reverse order of registration: resources go after the
        threads that use them.
        """
        try:
            self.coord.join(self.threads, stop_grace_period_secs=self.stop_grace_period_secs)
        finally:
            with self._lock:
                monitor, self._monitor = self._monitor, None
            if monitor is not None:
                monitor.stop()
            self._close_all()

    # -- statistics ------------------------------------------------------------------

    def _timed_parts(self) -> _TimedParts:
        """The runners (with their kind), queues, consumer's queue and
        process stages that the statistics and stall reports look at."""
        with self._lock:
            runners = list(self._runners)
            stages = list(self._stages)
        kinds: dict[int, str] = {}
        queues: list[QueueBase] = []
        process: list[tuple[Any, str]] = []
        for stage in stages:
            runner = getattr(stage, "runner", None)
            if isinstance(runner, QueueRunner):
                kinds[id(runner)] = "producer" if stage.batch_size is None else "batcher"
            elif getattr(stage, "_timing_kind", None) == "process":
                process.append((stage, f"process_stage-{len(process)}"))
        for r in runners:
            if isinstance(r.queue, QueueBase):
                queues.append(r.queue)
        for stage in stages:
            q = getattr(stage, "queue", None)
            if isinstance(q, QueueBase) and not any(q is x for x in queues):
                queues.append(q)
        out_q = getattr(self._output, "queue", None)
        return _TimedParts(
            runners=[(r, kinds.get(id(r), "runner")) for r in runners],
            queues=queues,
            output_queue=out_q if isinstance(out_q, QueueBase) else None,
            process=process,
        )

    def statistics(self) -> PipelineStatistics:
        """Per-stage timing, queue fill, the consumer's data readiness and
        the bottleneck verdict, as one frozen snapshot (see
        :class:`PipelineStatistics`; ``.as_dict()`` for logging)."""
        started = self._started_at
        elapsed = 0.0 if started is None else time.monotonic() - started
        parts = self._timed_parts()
        return collect(elapsed, parts.runners, parts.queues, parts.output_queue, parts.process)

    def report(self) -> str:
        """:meth:`statistics` as a table, ending with the bottleneck verdict."""
        return format_report(self.statistics())

    def __enter__(self) -> Self:
        stack = _stack("pipelines")
        stack.append(self)
        scope = closing_scope()
        taken = scope.__enter__()
        with self._lock:
            taken.extend(self._closeables)  # closing() calls made before the block
            self._closeables = taken
            self._scope = scope
        try:
            self.start()
        except BaseException:
            stack.remove(self)
            self._leave_scope()
            raise
        return self

    def _leave_scope(self) -> None:
        """Stop taking registrations (the registered objects stay ours)."""
        with self._lock:
            scope, self._scope = self._scope, None
        if scope is not None:
            scope.__exit__(None, None, None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack = _stack("pipelines")
        if self in stack:
            stack.remove(self)
        self._leave_scope()
        self.coord.request_stop()
        try:
            self.join()  # joins the threads, then closes what we own
        except BaseException as join_error:
            if exc is None or join_error is not exc:
                raise

    def __iter__(self) -> Iterator[Any]:
        if self.output is None:
            raise ValueError("this pipeline has no output stage yet")
        return iter(self.output)

    def __repr__(self) -> str:
        return f"Pipeline(runners={len(self._runners)}, running={self._running})"
