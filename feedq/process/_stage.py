"""The consumer side of a process stage: the :class:`ProcessStage` class
(start the workers, take their batches from shared memory, stop everything).

Everything here runs in the consumer's thread (no helper thread): a take
reads the workers' control messages (``multiprocessing.connection.wait`` on
their pipes and process sentinels), so a dead worker is seen the moment it
dies, and nothing happens behind the consumer's back.

The class is put together from one module per concern: ``_launch`` (start
methods, argument checks, worker handles, the stop escalation),
``_messages`` (reading the workers), ``_slots`` (when a slot goes back to
its worker: batch lifetime), ``_order`` (epochs and the merge order),
``_failures`` (a worker's failure as the consumer's exception) and
``_state`` (``state_dict`` / ``load_state_dict``). ``_factory`` holds
:func:`process_stage`.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedq._core.scope import register_closeable
from feedq._core.timeouts import resolve_timeout
from feedq.errors import (
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    OutOfRangeError,
)
from feedq.pipeline import current_pipeline
from feedq.process import _layout
from feedq.process._failures import worker_exception
from feedq.process._launch import (
    STOP_GRACE_SECS,
    WorkerHandle,
    check_arguments,
    context,
    stop_workers,
)
from feedq.process._messages import WAIT_SLICE_SECS, MessagesMixin
from feedq.process._order import EPOCH_END, OrderMixin
from feedq.process._shm import new_token, sweep
from feedq.process._slots import Held, SlotsMixin
from feedq.process._state import StateMixin, Take, new_records
from feedq.process._worker import (
    EXTRA_SLOTS,
    HEADER,
    HEADER_FORMAT,
    MAGIC,
    MAX_SLOTS,
    SlotReturns,
    WorkerConfig,
    worker_main,
)

__all__ = ["ProcessStage", "ProcessStageStatistics"]

# A worker's failure is raised in its turn, or after the consumer has waited
# this long for other workers while it was pending (a failure never waits
# behind a worker that may never send again).
_FAILURE_GRACE_SECS = 0.4


@dataclass(frozen=True)
class ProcessStageStatistics:
    """A snapshot of a process stage.

    Attributes:
        num_processes: workers started.
        start_method: ``"forkserver"``, ``"spawn"`` or ``"fork"``.
        order: ``"deterministic"`` or ``"first_ready"``.
        epoch: the epoch being read (0 first).
        pids: the workers' process ids.
        workers_alive: workers whose process is still running.
        received: batches the consumer took, per worker (all epochs).
        produced: batches each worker reported sending in the epochs it
            finished (so at the end of the data ``received == produced``).
        bytes_received: payload bytes taken.
        takes: batches taken.
        ready: takes whose batch was already waiting (data readiness is
            ``ready / takes``).
        wait_seconds: time the consumer spent waiting for batches.
        segments: shared-memory segments mapped now.
        shared_bytes: their size.
        held: batches whose arrays are still referenced by the consumer.
        retained: slots the consumer kept beyond what the ring could spare
            (the worker was given a new segment for each).
    """

    num_processes: int
    start_method: str
    order: str
    epoch: int
    pids: tuple[int, ...]
    workers_alive: int
    received: tuple[int, ...]
    produced: tuple[int, ...]
    bytes_received: int
    takes: int
    ready: int
    wait_seconds: float
    segments: int
    shared_bytes: int
    held: int
    retained: int


class _EpochEnd(Exception):
    pass


# Stages not yet closed: closed at interpreter exit (Ctrl-C included) if the
# user or a Pipeline did not close them.
_live: weakref.WeakSet[ProcessStage] = weakref.WeakSet()


@atexit.register
def _close_live_stages() -> None:
    for stage in list(_live):
        with contextlib.suppress(Exception):
            stage.close()


# StateMixin comes last: its stubs (_pump...) must not hide the mixins' methods.
class ProcessStage(MessagesMixin, SlotsMixin, OrderMixin, StateMixin):
    """Batches built by pipelines in worker processes, handed over in shared
    memory. Made by :func:`process_stage`; see there for the arguments.

    Like a :class:`feedq.Stage`: iterate it, or ``dequeue(timeout=)``;
    ``statistics()``; ``close()`` (a :class:`feedq.Pipeline` closes a stage
    created inside its ``with`` block).

    Epochs: each ``for`` loop over the stage reads one epoch and ends at the
    epoch's end; the next ``for`` loop starts the next epoch (the workers
    rebuild their pipelines). A loop left early (``break``) is continued by
    the next one. Iterating after the last epoch raises ``OutOfRangeError``
    (never an empty loop). ``dequeue()`` crosses epochs by itself and raises
    ``OutOfRangeError`` after the last one.

    Batch lifetime: numeric arrays are views of shared memory, valid as long
    as any of them (or anything made from them) is referenced; see
    :func:`process_stage`.

    Resumption: :meth:`state_dict` between batches, :meth:`load_state_dict`
    on a new stage before its first batch (see ``feedq.process._state``).
    """

    #: Pipeline statistics and stall reports (feedq._observe.statistics, feedq._observe.stall).
    _timing_kind = "process"
    _waiting_since: float | None = None  # perf_counter() when a take began waiting
    _waiting_ident: int | None = None  # the thread of that take


    def __init__(
        self,
        build: Callable[[int, int], Any],
        num_processes: int = 1,
        *,
        order: str = "deterministic",
        epochs: int | None = 1,
        seed: int | None = None,
        prefetch: int | None = None,
        start_method: str | None = None,
        copy: bool = False,
        resumable: bool | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        method = check_arguments(build, num_processes, order, epochs, prefetch, start_method)
        self._build = build
        self._num = num_processes
        self._order = order
        self._epochs = epochs
        self._seed = seed
        self._slots = None if prefetch is None else prefetch + EXTRA_SLOTS
        self._method = method
        self._copy = copy
        self._token = new_token()
        self._parent_pid = os.getpid()

        # The consumer's state: touched only by the thread holding _take_lock
        # (and by close() once it holds it or gave up waiting for it).
        self._take_lock = threading.Lock()
        self._closing = False  # set by close() before it takes _take_lock
        self._closed = False
        self._failure: BaseException | None = None
        self._handles: list[WorkerHandle] = []
        self._epoch = 0
        self._epoch_done = False
        self._rotation: list[int] = list(range(num_processes))
        self._turn = 0
        self._active: set[int] = set(range(num_processes))
        self._arrivals: deque[int] = deque()
        self._held: list[Held] = []
        self._current: Held | None = None
        self._peeked: Any = None  # a batch peek() took, returned by the next take
        self._serial = 0
        self._takes = 0
        self._ready = 0
        self._bytes = 0
        self._wait = 0.0
        self._retained = 0
        # Resumption (feedq.process._state): recent takes, state requests
        # sent, and where the workers start (set by load_state_dict).
        self._records: deque[Take] = new_records()
        self._requests = 0
        self._start_epoch = 0
        self._resume: list[dict[str, Any]] | None = None
        self._base_counts: dict[int, list[int]] = {}  # restored: batches delivered before

        pipe = current_pipeline()
        self._coord = None if pipe is None else pipe.coord
        self._resumable = (pipe is not None and pipe.resumable) if resumable is None else bool(
            resumable)
        if pipe is not None and pipe.resumable:
            # The pipeline's output: its state_dict is ours, and its state=...
            # (if any) is ours to start from.
            pending = pipe.resumption.add_batcher(self)
            if pending is not None and state is None:
                state = pending
        if state is not None:
            self._apply_state(state)
        sweep()  # segments of dead parents (a SIGKILLed run)
        self._start_workers()
        _live.add(self)
        register_closeable(self)
        if pipe is not None:
            pipe.output = self

    # -- start and stop ---------------------------------------------------------

    def _start_workers(self) -> None:
        ctx = context(self._method)
        try:
            for i in range(self._num):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                close_fds = [h.conn.fileno() for h in self._handles] if self._method == "fork" else []
                if self._method == "fork":
                    close_fds.append(parent_conn.fileno())
                returns = SlotReturns(ctx, self._slots or MAX_SLOTS)
                config = WorkerConfig(
                    build=self._build, index=i, num_workers=self._num, epochs=self._epochs,
                    seed=self._seed, parent_pid=self._parent_pid, token=self._token,
                    slots=self._slots, returns=returns, close_fds=close_fds,
                    start_epoch=self._start_epoch,
                    resume=None if self._resume is None else self._resume[i],
                    resumable=self._resumable,
                )
                process = ctx.Process(target=worker_main, args=(config, child_conn),
                                      name=f"feedq-process-{i}", daemon=True)
                try:
                    process.start()
                finally:
                    child_conn.close()
                h = WorkerHandle(i, process, parent_conn, returns, self._slots or MAX_SLOTS)
                for epoch, counts in self._base_counts.items():
                    h.counts[epoch] = (counts[i], 0)
                self._handles.append(h)
        except BaseException:
            self._closed = True
            self._shutdown()
            raise

    def _restart_workers(self) -> None:
        """Stop the workers (nothing was taken from them) and start new ones
        from ``_start_epoch`` and ``_resume`` (load_state_dict)."""
        self._shutdown(grace=STOP_GRACE_SECS)
        self._handles = []
        self._token = new_token()
        try:
            self._start_workers()
        except BaseException:
            self._closed = True
            raise
        _live.add(self)

    def close(self) -> None:
        """Stop the workers and free the shared memory (idempotent).

        Workers are asked to stop, then after a grace period terminated, then
        killed; every segment name is unlinked. Arrays still referenced stay
        valid (their memory is freed when the last one goes). A consumer
        blocked in another thread gets ``CancelledError``.
        """
        if self._closed:
            return
        self._closing = True
        got = self._take_lock.acquire(timeout=2.0)
        try:
            if self._closed:
                return
            self._closed = True
            self._shutdown()
        finally:
            if got:
                self._take_lock.release()

    def _shutdown(self, grace: float = STOP_GRACE_SECS) -> None:
        """Stop the workers: ask, wait ``grace`` s, SIGTERM, SIGKILL."""
        _live.discard(self)
        stop_workers(self._handles, grace)
        # Our references only: arrays the user still holds keep their
        # mappings alive until they go.
        for rec in self._held:
            rec.raw = None
        self._held.clear()
        self._current = None
        self._peeked = None

    def __enter__(self) -> ProcessStage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- taking -----------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise CancelledError(
                f"this process stage stopped after a worker failed: {self._failure!r}"
            ) from self._failure
        if self._closed or self._closing:
            raise CancelledError("this process stage was closed")

    def _take(self, timeout: float | None, stream: bool) -> Any:
        with self._take_lock:
            self._check_usable()
            if self._peeked is not None:
                batch, self._peeked = self._peeked, None
                return batch
            self._release_current()
            self._reclaim()
            wait = resolve_timeout(timeout)
            deadline = None if wait is None else time.monotonic() + wait
            started = time.perf_counter()
            self._waiting_since, self._waiting_ident = started, threading.get_ident()
            first = True
            failure_seen: float | None = None
            try:
                while True:
                    if self._epoch_done:
                        if not stream or not self._more_epochs():
                            raise _EpochEnd()
                        self._start_next_epoch()
                    ev = self._next_event()
                    if ev is None:
                        self._poll_fast()
                        ev = self._next_event()
                    if ev is EPOCH_END:
                        self._epoch_done = True
                        continue
                    if ev is not None:
                        if ev[1] == "batch":
                            if first:
                                self._ready += 1
                            return self._deliver(ev)
                        self._fail(ev)
                    first = False
                    if self._failure_pending():
                        # Another worker failed while we wait for this one:
                        # give the one we wait for a moment (its batches come
                        # first in the rotation), then report the failure.
                        now = time.monotonic()
                        if failure_seen is None:
                            failure_seen = now
                        elif now - failure_seen >= _FAILURE_GRACE_SECS:
                            failure = self._pending_failure()
                            if failure is not None:
                                self._fail(failure)
                    if self._closing:
                        raise CancelledError("this process stage was closed")
                    if self._coord is not None and self._coord.should_stop():
                        raise CancelledError("the pipeline was stopped")
                    remaining = math.inf if deadline is None else deadline - time.monotonic()
                    if remaining <= 0:
                        raise DeadlineExceededError(
                            f"no batch from the process stage within {wait:g} s")
                    slice_ = WAIT_SLICE_SECS if failure_seen is None else 0.02
                    self._pump(min(remaining, slice_))
            finally:
                self._wait += time.perf_counter() - started
                self._waiting_since = None

    def _deliver(self, ev: tuple[Any, ...]) -> Any:
        index, _, epoch, slot, seg, gen, nbytes, tree, descs = ev
        h = self._handles[index]
        magic, hgen, hbytes, _pid = struct.unpack_from(HEADER_FORMAT, seg.mm, 0)
        if magic != MAGIC or hgen != gen or hbytes != nbytes:
            raise DataLossError(
                f"process stage worker {index} (pid {h.pid}): slot {slot} holds generation {hgen} "
                f"({hbytes} bytes), the worker announced {gen} ({nbytes} bytes): it was "
                "overwritten while the consumer owned it"
            )
        raw = np.frombuffer(seg.mm, np.uint8, count=nbytes, offset=HEADER)
        batch = _layout.unflatten(tree, _layout.read(raw, descs, copy=self._copy))
        self._record(index, epoch)
        h.received += 1
        self._takes += 1
        self._bytes += nbytes
        self._serial += 1
        seg.users += 1
        rec = Held(index, slot, seg, raw, self._serial)
        del raw
        if self._copy:
            self._give_back(rec)
        else:
            self._current = rec
        return batch

    def _fail(self, ev: tuple[Any, ...]) -> None:
        exc = worker_exception(ev, self._handles[ev[0]].pid)
        self._failure = exc
        self._closed = True
        self._shutdown(grace=0.0)  # the stage is broken: no point in waiting
        raise exc

    def dequeue(self, timeout: float | None = None) -> Any:
        """The next batch, crossing epochs (the next one is started when one
        ends).

        Args:
            timeout: seconds to wait (``None``: the process default, 0: do
                not wait).

        Raises:
            OutOfRangeError: after the last batch of the last epoch.
            DeadlineExceededError: timed out; nothing was taken.
            CancelledError: the stage was closed, or its pipeline stopped.
            UnavailableError: a worker died (names it and its pid).
            Exception: the exception a worker raised, chained from a
                :class:`WorkerTraceback` holding the worker's traceback.
        """
        try:
            return self._take(timeout, stream=True)
        except _EpochEnd:
            raise OutOfRangeError(self._end_message()) from None

    def peek(self, timeout: float | None = None) -> Any:
        """The next batch of the epoch, without taking it: the next
        ``dequeue()`` or iteration returns it (the adapters read a batch's
        structure this way). Starts the next epoch if this one is over.

        Raises:
            OutOfRangeError: no batch left (the last epoch was read, or this
                epoch is empty).
            DeadlineExceededError, CancelledError, UnavailableError: as
                :meth:`dequeue`.
        """
        with self._take_lock:
            if self._peeked is not None:
                return self._peeked
            self._check_usable()
            if self._epoch_done:
                if not self._more_epochs():
                    raise OutOfRangeError(self._end_message())
                self._start_next_epoch()
        try:
            batch = self._take(timeout, stream=False)
        except _EpochEnd:
            raise OutOfRangeError(f"epoch {self._epoch} of the process stage is empty") from None
        self._peeked = batch
        return batch

    def _end_message(self) -> str:
        n = self._epochs
        return f"end of data: the process stage's {'epoch was' if n == 1 else f'{n} epochs were'} read"

    def __iter__(self) -> Iterator[Any]:
        """The batches of one epoch (see the class docstring)."""
        with self._take_lock:
            self._check_usable()
            if self._epoch_done:
                if not self._more_epochs():
                    raise OutOfRangeError(self._end_message())
                self._start_next_epoch()
        return self._epoch_batches()

    def _epoch_batches(self) -> Iterator[Any]:
        while True:
            try:
                batch = self._take(None, stream=False)
            except _EpochEnd:
                return
            except CancelledError as exc:
                if exc.__cause__ is None and self._failure is None:
                    return  # a clean stop: close() or the pipeline's stop
                raise
            yield batch

    # -- what it is -------------------------------------------------------------

    @property
    def num_processes(self) -> int:
        return self._num

    @property
    def epoch(self) -> int:
        """The epoch being read (0 first)."""
        return self._epoch

    @property
    def epochs(self) -> int | None:
        """Epochs to read (``None``: endless)."""
        return self._epochs

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, in worker order."""
        return [h.pid for h in self._handles]

    def _stall_workers(self) -> str:
        """Stall reports: the workers a waiting take waits for, by index and pid."""
        if self._order == "deterministic" and self._rotation:
            waited = [self._handles[self._rotation[self._turn % len(self._rotation)]]]
        else:
            waited = [self._handles[i] for i in sorted(self._active)] or list(self._handles)
        return ", ".join(
            f"worker {h.index} (pid {h.pid}, "
            f"{'exited' if h.exited or not h.process.is_alive() else 'alive'}, "
            f"{h.received} batches received)" for h in waited)

    def statistics(self) -> ProcessStageStatistics:
        """A snapshot (see :class:`ProcessStageStatistics`)."""
        handles = list(self._handles)
        segs = [s for h in handles for s in list(h.slot_seg.values())]
        return ProcessStageStatistics(
            num_processes=self._num,
            start_method=self._method,
            order=self._order,
            epoch=self._epoch,
            pids=tuple(h.pid for h in handles),
            workers_alive=sum(1 for h in handles if not h.exited and h.process.is_alive()),
            received=tuple(h.received for h in handles),
            produced=tuple(h.produced for h in handles),
            bytes_received=self._bytes,
            takes=self._takes,
            ready=self._ready,
            wait_seconds=self._wait,
            segments=len(segs),
            shared_bytes=sum(s.size for s in segs),
            held=len(self._held) + (self._current is not None),
            retained=self._retained,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"epoch {self._epoch}"
        return (f"ProcessStage({self._num} processes, order={self._order!r}, "
                f"start_method={self._method!r}, {state})")
