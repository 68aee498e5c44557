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
(``feedq._core.scope``).

Input functions (``feedq.input``) called while a pipeline is the current
one (inside ``with pipe:`` or ``with pipe.as_default():``) add their runners
to it instead of the process-wide collection. They find it through
``feedq._core.scope.current_pipeline()`` (they sit below this module), which
sees the pipeline as a :class:`feedq._core.scope.PipelineContext`; the
resumable parts they build register with its :attr:`Pipeline.resumption`
registry (``feedq._resume.registry``; ``docs/resume.md``).

``control_dependencies(deps)`` postpones runners created inside it until
every dependency is done (runners, stages, queues or events); it lives in
``feedq.runners`` and is public here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from feedq._core import scope as _scope
from feedq._core.priority import check_niceness
from feedq._core.scope import closing_scope
from feedq._observe import stall as _stall
from feedq._observe.clock import MONOTONIC, Clock
from feedq._observe.prometheus import prometheus_collector
from feedq._observe.statistics import (
    Bottleneck,
    ConsumerTiming,
    PipelineStatistics,
    QueueTiming,
    ShuffleBufferTiming,
    StageTiming,
    StorageTiming,
    collect,
    format_report,
)
from feedq._resume.registry import Registry
from feedq.coordinator import Coordinator
from feedq.errors import FailedPreconditionError
from feedq.input import Stage
from feedq.queues import QueueBase
from feedq.runners import (
    QueueRunner,
    _set_pipeline_adder,
    add_queue_runner,
    control_dependencies,
    current_dependencies,
    gate_ops,
)
from feedq.storage import statistics as storage_statistics

# current_dependencies, gate_ops and register_runner stay public here; feedq.input
# (below this module) takes gate_ops and add_queue_runner from feedq.runners.
__all__ = [
    "Bottleneck",
    "ConsumerTiming",
    "Pipeline",
    "PipelineStatistics",
    "QueueTiming",
    "ShuffleBufferTiming",
    "StageTiming",
    "StorageTiming",
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

# The statistics classes live in feedq._observe.statistics; they are public here.
for _cls in (Bottleneck, ConsumerTiming, PipelineStatistics, QueueTiming, ShuffleBufferTiming,
             StageTiming, StorageTiming):
    _cls.__module__ = __name__
format_report.__module__ = __name__
control_dependencies.__module__ = __name__
prometheus_collector.__module__ = __name__
set_stall_timeout = _stall.set_stall_timeout
get_stall_timeout = _stall.get_stall_timeout


def current_pipeline() -> Pipeline | None:
    """The pipeline made current in this thread by ``with pipe:`` / ``as_default()``."""
    pipe = _scope.current_pipeline()  # only a Pipeline makes itself current
    return pipe if isinstance(pipe, Pipeline) else None


def register_runner(runner: QueueRunner) -> None:
    """Add a runner to the current pipeline, or to the default collection."""
    add_queue_runner(runner)  # goes to the current pipeline if there is one


def _add_to_current(runner: QueueRunner) -> bool:
    """``add_queue_runner`` inside ``with pipe:``: the pipeline takes the runner."""
    pipe = current_pipeline()
    if pipe is None:
        return False
    pipe.add_runner(runner)
    return True


_set_pipeline_adder(_add_to_current)


@dataclass(frozen=True)
class _TimedParts:
    """What the statistics and the monitor look at (see Pipeline._timed_parts)."""

    runners: list[tuple[QueueRunner, str]]
    queues: list[QueueBase]
    output_queue: QueueBase | None
    process: list[tuple[Any, str]]
    batch_sizes: dict[int, int] = field(default_factory=dict)  # by id(runner)
    shuffles: list[tuple[Any, int]] = field(default_factory=list)  # (ShuffleBuffer, capacity)


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
        resumable: tag every element with its position so that
            :meth:`state_dict` can describe exactly what the consumer has
            received (one producer and one batcher per pipeline; see
            ``docs/resume.md``).
        state: a :meth:`state_dict` to continue from (implies
            ``resumable``): the producer and the batcher built inside the
            pipeline restore it as they are built, before their runners run.
        loader_niceness: how many niceness steps below the starting thread
            the pipeline's runner threads run (Linux: a good neighbour to a
            model using every core; ``docs/performance.md``); default:
            :func:`feedq.loader_niceness`.

    Iterating a pipeline iterates its :attr:`output`: the last stage created
    while it was current, unless set explicitly.
    """

    def __init__(
        self,
        coord: Coordinator | None = None,
        stop_grace_period_secs: float = 10.0,
        daemon: bool = True,
        *,
        resumable: bool = False,
        state: dict[str, Any] | None = None,
        stall_timeout: float | None = None,
        report_every: float | None = None,
        loader_niceness: int | None = None,
        _clock: Clock = MONOTONIC,
    ) -> None:
        self.coord = coord if coord is not None else Coordinator()
        self.loader_niceness = (
            None if loader_niceness is None else check_niceness(loader_niceness, "loader_niceness"))
        self._clock = _clock  # of the statistics and the monitor (tests pass their own)
        self.resumable = bool(resumable) or state is not None
        # The resumable parts built inside the pipeline register here
        # (feedq._resume.registry), and the state=... they restore waits here.
        self._resumption = Registry(state)
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
        self._started_at: float | None = None  # self._clock.now() at start()
        self._storage_at_start: dict[str, float] = {}  # feedq.storage.statistics() at start()
        # When join() ended the run (self._clock.now()), and the storage counters then.
        self._ended_at: float | None = None  # guarded by self._lock
        self._storage_at_end: dict[str, float] | None = None  # guarded by self._lock
        self._monitor: _stall.Monitor | None = None  # guarded by self._lock
        self._lock = threading.Lock()
        self._runners: list[QueueRunner] = []  # guarded by self._lock
        self._threads: list[threading.Thread] = []  # guarded by self._lock
        self._running = False  # guarded by self._lock
        # What the pipeline closes after joining its threads: objects given
        # to closing(), and those that registered themselves with the
        # closing scope open during ``with pipe:`` (feedq._core.scope). One list,
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
    def resumption(self) -> Registry:
        """The registry of the resumable parts built inside the pipeline
        (``feedq._resume.registry``)."""
        return self._resumption

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
        threads = runner.create_threads(self.coord, daemon=self.daemon, start=True,
                                        niceness=self.loader_niceness)
        with self._lock:
            self._threads.extend(threads)

    def closing(self, obj: Any) -> Any:
        """Close ``obj`` (anything with ``close()``, e.g. a reader) when the
        pipeline exits, after its threads are joined, even on an error.

        Readers and device feeders created inside ``with pipe:`` register
        themselves the same way (:func:`feedq._core.scope.register_closeable`);
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
        with _scope.pipeline_context(self):
            yield self

    def start(self) -> Pipeline:
        """Start every runner added so far; later ones start when added."""
        with self._lock:
            if self._running:
                return self
            self._running = True
            self._started_at = self._clock.now()
            self._storage_at_start = storage_statistics()
            runners = list(self._runners)
            if self._monitor is None and (self.stall_timeout or self.report_every):
                self._monitor = _stall.Monitor(self, self.stall_timeout, self.report_every,
                                               clock=self._clock)
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
                if self._started_at is not None and self._ended_at is None:
                    # The statistics stop here: a report read after the
                    # ``with`` block describes the run, not the time since.
                    self._ended_at = self._clock.now()
                    self._storage_at_end = storage_statistics()
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
        batch_sizes: dict[int, int] = {}
        shuffles: list[tuple[Any, int]] = []
        for stage in stages:
            runner = getattr(stage, "runner", None)
            if isinstance(runner, QueueRunner):
                kinds[id(runner)] = "producer" if stage.batch_size is None else "batcher"
                if stage.batch_size is not None:
                    batch_sizes[id(runner)] = int(stage.batch_size)
                shuffle = stage.shuffle_buffer if isinstance(stage, Stage) else None
                if shuffle is not None:
                    shuffles.append(shuffle)
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
            batch_sizes=batch_sizes,
            shuffles=shuffles,
        )

    def statistics(self) -> PipelineStatistics:
        """Per-stage timing, queue fill, the consumer's data readiness and
        the bottleneck verdict, as one frozen snapshot (see
        :class:`PipelineStatistics`; ``.as_dict()`` for logging). After
        :meth:`join` (the end of ``with pipe:``) the figures are those of the
        run: the elapsed time and the remote reads stop counting there."""
        with self._lock:
            started, ended, at_end = self._started_at, self._ended_at, self._storage_at_end
        now = self._clock.now() if ended is None else ended
        elapsed = 0.0 if started is None else now - started
        parts = self._timed_parts()
        remote = None
        if started is not None:
            reads = dict(storage_statistics() if at_end is None else at_end)
            for stage, _ in parts.process:  # its workers' reads, as they last reported them
                more = getattr(stage, "storage_statistics", None)
                for k, v in (more() if more is not None else {}).items():
                    reads[k] = reads.get(k, 0) + v
            remote = StorageTiming.between(self._storage_at_start, reads)
        return collect(elapsed, parts.runners, parts.queues, parts.output_queue, parts.process,
                       batch_sizes=parts.batch_sizes, shuffles=parts.shuffles, now=now,
                       storage=remote)

    def report(self) -> str:
        """:meth:`statistics` as a table, ending with the bottleneck verdict."""
        return format_report(self.statistics())

    def __enter__(self) -> Self:
        _scope.enter_pipeline(self)
        scope = closing_scope()
        taken = scope.__enter__()
        with self._lock:
            taken.extend(self._closeables)  # closing() calls made before the block
            self._closeables = taken
            self._scope = scope
        try:
            self.start()
        except BaseException:
            _scope.leave_pipeline(self)
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
        _scope.leave_pipeline(self)
        self._leave_scope()
        self.coord.request_stop()
        try:
            self.join()  # joins the threads, then closes what we own
        except BaseException as join_error:
            if exc is None or join_error is not exc:
                raise

    # -- resumption ---------------------------------------------------------------

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        """What the consumer of :attr:`output` has received, as plain data:
        a new process that builds the same pipeline inside
        ``feedq.Pipeline(state=...)`` continues from there (see
        ``Stage.state_dict`` for ``upto`` and the guarantees).

        Raises:
            InvalidArgumentError: not built with ``resumable=True`` (or
                ``state=``), or the output is not resumable.
        """
        return self._resumption.state_dict(self.output, upto)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: call it after building the pipeline
        (``with pipe.as_default(): build()``) and before starting it, or
        before building it (then it is applied as the stages are built, as
        ``Pipeline(state=...)`` does).

        Raises:
            FailedPreconditionError: the pipeline already started (a late
                call is never a partial restore).
            InvalidArgumentError: the state is from another pipeline.
        """
        with self._lock:
            running = self._running
        if running:
            raise FailedPreconditionError(
                "load_state_dict() after the pipeline started: pass the state to "
                "feedq.Pipeline(state=...) or call it before `with pipe:`"
            )
        self.resumable = True
        self._resumption.load_state_dict(self.output, state)

    def __iter__(self) -> Iterator[Any]:
        if self.output is None:
            raise ValueError("this pipeline has no output stage yet")
        return iter(self.output)

    def __repr__(self) -> str:
        return f"Pipeline(runners={len(self._runners)}, running={self._running})"
