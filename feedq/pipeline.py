"""Pipeline: one object that owns queue runners, their coordinator and threads.

TF1 spread this over a graph collection, ``start_queue_runners`` and a
Coordinator. A :class:`Pipeline` keeps them together and is a context
manager::

    with feedq.Pipeline() as pipe:                 # starts runners as they are added
        files = feedq.string_input_producer(paths, num_epochs=1)
        batch = feedq.shuffle_batch(read_and_decode(files), 256, 10_000, 1_000, ...)
        for x, y in batch:                          # ends cleanly at the end of data
            train_step(x, y)
    # on exit: stop, join the threads, re-raise the first runner error

Input functions (``feedq.input``) called while a pipeline is the current
one (inside ``with pipe:`` or ``with pipe.as_default():``) add their runners
to it instead of the process-wide collection.

``control_dependencies(deps)`` postpones runners created inside it until
every dependency is done: a :class:`~feedq.runners.QueueRunner` or stage whose
threads have all ended, a queue that is closed and drained, or a
``threading.Event`` that is set (the seed's "Control Dependencies", used to
keep memory-hungry stages from starting early). Independent runners run in
parallel threads (the seed's "Parallel Execution").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .coordinator import Coordinator
from .errors import CancelledError
from .queues import QueueBase
from .runners import QueueRunner, add_queue_runner

__all__ = ["Pipeline", "control_dependencies", "current_pipeline"]

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


class _Gate:
    """Holds an op back until its dependencies are done; a cancel of the
    gated runner's queue releases it with CancelledError (ending the thread
    cleanly)."""

    # Dependencies signal in different ways (events, runner ends, queue
    # drains); a short bounded wait between checks keeps this simple and
    # only ever runs before a gated runner's first op.
    _CHECK_INTERVAL = 0.01

    def __init__(self, deps: list[Any], queue: Any) -> None:
        self._checks = [_done_check(d) for d in deps]
        self._queue = queue
        self._open = threading.Event()

    def wait(self) -> None:
        while not self._open.is_set():
            if all(check() for check in self._checks):
                self._open.set()
                return
            stats = self._queue.statistics()
            if stats.cancelled or stats.closed:
                raise CancelledError(f"queue '{self._queue.name}' was closed before its dependencies were done")
            self._open.wait(self._CHECK_INTERVAL)


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


class Pipeline:
    """Queue runners, the coordinator that stops them, and their threads.

    Args:
        coord: the coordinator; a new one by default.
        stop_grace_period_secs: how long :meth:`join` waits for threads after
            a stop before naming the ones still alive.
        daemon: make runner threads daemons (so a forgotten pipeline never
            keeps the interpreter alive).

    Iterating a pipeline iterates its :attr:`output`: the last stage created
    while it was current, unless set explicitly.
    """

    def __init__(
        self,
        coord: Coordinator | None = None,
        stop_grace_period_secs: float = 10.0,
        daemon: bool = True,
    ) -> None:
        self.coord = coord if coord is not None else Coordinator()
        self.stop_grace_period_secs = stop_grace_period_secs
        self.daemon = daemon
        self.output: Any = None
        self._lock = threading.Lock()
        self._runners: list[QueueRunner] = []  # guarded by self._lock
        self._threads: list[threading.Thread] = []  # guarded by self._lock
        self._running = False  # guarded by self._lock
        self._closeables: list[Any] = []  # guarded by self._lock

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
            items, self._closeables = self._closeables, []
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
            runners = list(self._runners)
        for r in runners:
            self._start_runner(r)
        return self

    def stop(self, ex: BaseException | None = None) -> None:
        """Request a stop: every blocking call in the pipeline is cancelled."""
        self.coord.request_stop(ex)

    def join(self) -> None:
        """Wait for the runner threads; re-raise the first runner error."""
        self.coord.join(self.threads, stop_grace_period_secs=self.stop_grace_period_secs)

    def __enter__(self) -> Pipeline:
        stack = _stack("pipelines")
        stack.append(self)
        try:
            self.start()
        except BaseException:
            stack.remove(self)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        stack = _stack("pipelines")
        if self in stack:
            stack.remove(self)
        self.coord.request_stop()
        try:
            self.join()
        except BaseException as join_error:
            if exc is None or join_error is not exc:
                raise
        finally:
            # Readers and other resources go after the threads that use them.
            self._close_all()

    def __iter__(self) -> Iterator[Any]:
        if self.output is None:
            raise ValueError("this pipeline has no output stage yet")
        return iter(self.output)

    def __repr__(self) -> str:
        return f"Pipeline(runners={len(self._runners)}, running={self._running})"
