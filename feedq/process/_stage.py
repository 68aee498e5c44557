"""The consumer side of a process stage: the :class:`ProcessStage` class
(start the workers, take their batches from shared memory, stop everything).

Everything here runs in the consumer's thread (no helper thread): a take
reads the workers' control messages (``multiprocessing.connection.wait`` on
their pipes and process sentinels), so a dead worker is seen the moment it
dies, and nothing happens behind the consumer's back.

The stage owns one object per thing it keeps, each with its own
invariants: a :class:`~feedq.process._messages.WorkerChannel` (the workers'
handles, pipes and inboxes), a :class:`~feedq.process._slots.SlotRing`
(segments mapped, batches held, slots given back: batch lifetime), a
:class:`~feedq.process._order.MergeOrder` (epochs and the merge order) and
:class:`~feedq.process._state.Positions` (what ``state_dict`` is made of).
``_launch`` starts and stops processes, ``_failures`` turns a worker's
failure into the consumer's exception; ``_factory`` holds
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedq._core.priority import loader_niceness
from feedq._core.scope import register_closeable
from feedq._core.timeouts import resolve_timeout
from feedq.errors import (
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    OutOfRangeError,
    UnavailableError,
)
from feedq.pipeline import current_pipeline
from feedq.process import _layout
from feedq.process._failures import worker_exception
from feedq.process._launch import (
    STOP_GRACE_SECS,
    WorkerHandle,
    check_arguments,
    context,
)
from feedq.process._messages import WAIT_SLICE_SECS, WorkerChannel
from feedq.process._order import EPOCH_END, MergeOrder
from feedq.process._shm import new_token, sweep
from feedq.process._slots import SlotRing
from feedq.process._state import STATE_TIMEOUT_SECS, Positions
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


class ProcessStage:
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

    After the last epoch: once the end of the last epoch was taken, the
    stage keeps the workers' answers to every state request its window of
    takes can still make, then stops the workers and frees their shared
    memory (``statistics().workers_alive == 0``); ``state_dict`` still
    answers, and batches still referenced stay valid. ``close()`` is still
    needed for a stage left before its end.
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
        self._ring = SlotRing()
        self._channel = WorkerChannel(order, self._ring)
        self._merge = MergeOrder(order, num_processes, epochs, self._channel)
        self._peeked: Any = None  # a batch peek() took, returned by the next take
        self._takes = 0
        self._ready = 0
        self._bytes = 0
        self._wait = 0.0
        pipe = current_pipeline()
        self._coord = None if pipe is None else pipe.coord
        # Workers run this many niceness steps down: the current pipeline's
        # loader_niceness, else the process-wide one (feedq._core.priority).
        self._niceness = (loader_niceness() if pipe is None or pipe.loader_niceness is None
                          else pipe.loader_niceness)
        self._resumable = (pipe is not None and pipe.resumable) if resumable is None else bool(
            resumable)
        self._positions = Positions(num_processes, order, self._resumable, self._channel,
                                    self._merge)
        if pipe is not None and pipe.resumable:
            # The pipeline's output: its state_dict is ours, and its state=...
            # (if any) is ours to start from.
            pending = pipe.resumption.add_batcher(self)
            if pending is not None and state is None:
                state = pending
        if state is not None:
            self._positions.apply(state)
        sweep()  # segments of dead parents (a SIGKILLed run)
        self._start_workers()
        _live.add(self)
        register_closeable(self)
        if pipe is not None:
            pipe.output = self

    # -- start and stop ---------------------------------------------------------

    def _start_workers(self) -> None:
        ctx = context(self._method)
        handles = self._channel.handles
        positions = self._positions
        niceness = self._niceness
        try:
            for i in range(self._num):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                close_fds = [h.conn.fileno() for h in handles] if self._method == "fork" else []
                if self._method == "fork":
                    close_fds.append(parent_conn.fileno())
                returns = SlotReturns(ctx, self._slots or MAX_SLOTS)
                config = WorkerConfig(
                    build=self._build, index=i, num_workers=self._num, epochs=self._epochs,
                    seed=self._seed, parent_pid=self._parent_pid, token=self._token,
                    slots=self._slots, returns=returns, close_fds=close_fds,
                    start_epoch=positions.start_epoch,
                    resume=None if positions.resume is None else positions.resume[i],
                    resumable=self._resumable, niceness=niceness,
                )
                process = ctx.Process(target=worker_main, args=(config, child_conn),
                                      name=f"feedq-process-{i}", daemon=True)
                try:
                    process.start()
                finally:
                    child_conn.close()
                handles.append(WorkerHandle(i, process, parent_conn, returns,
                                            self._slots or MAX_SLOTS))
            positions.workers_started()
        except BaseException:
            self._closed = True
            self._shutdown()
            raise

    def _restart_workers(self) -> None:
        """Stop the workers (nothing was taken from them) and start new ones
        from where the positions say (load_state_dict)."""
        self._shutdown(grace=STOP_GRACE_SECS)
        self._channel.handles.clear()
        self._channel.closing = False
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
        self._channel.closing = True
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
        self._channel.stop(grace)
        self._ring.drop()
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
            self._ring.release_current()
            self._ring.reclaim()
            merge = self._merge
            wait = resolve_timeout(timeout)
            deadline = None if wait is None else time.monotonic() + wait
            started = time.perf_counter()
            self._waiting_since, self._waiting_ident = started, threading.get_ident()
            first = True
            failure_seen: float | None = None
            try:
                while True:
                    if merge.epoch_done:
                        if not stream or not merge.more_epochs():
                            raise _EpochEnd()
                        merge.start_next_epoch()
                    ev = merge.next_event()
                    if ev is None:
                        self._channel.poll_fast(merge.next_worker())
                        ev = merge.next_event()
                    if ev is EPOCH_END:
                        merge.epoch_done = True
                        if not merge.more_epochs():
                            self._release_workers()
                        continue
                    if ev is not None:
                        if ev[1] == "batch":
                            if first:
                                self._ready += 1
                            return self._deliver(ev)
                        self._fail(ev)
                    first = False
                    if merge.failure_pending():
                        # Another worker failed while we wait for this one:
                        # give the one we wait for a moment (its batches come
                        # first in the rotation), then report the failure.
                        now = time.monotonic()
                        if failure_seen is None:
                            failure_seen = now
                        elif now - failure_seen >= _FAILURE_GRACE_SECS:
                            failure = merge.pending_failure()
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
                    self._channel.pump(min(remaining, slice_))
            finally:
                self._wait += time.perf_counter() - started
                self._waiting_since = None

    def _release_workers(self) -> None:
        """The last epoch's end was taken: nothing more will come from the
        workers. Keep their answers to every state request the window of
        takes can still make, then stop them and free their segments (issue:
        a loop that trains for hours after its last epoch would hold N idle
        processes). If a worker cannot answer, keep the workers (state
        requests then ask them, and report it)."""
        try:
            self._positions.keep_final()
        except (UnavailableError, DeadlineExceededError, CancelledError):
            return
        self._channel.stop(STOP_GRACE_SECS)
        self._ring.let_go()

    def _deliver(self, ev: tuple[Any, ...]) -> Any:
        index, _, epoch, slot, seg, gen, nbytes, tree, descs = ev
        h = self._channel.handles[index]
        magic, hgen, hbytes, _pid = struct.unpack_from(HEADER_FORMAT, seg.mm, 0)
        if magic != MAGIC or hgen != gen or hbytes != nbytes:
            raise DataLossError(
                f"process stage worker {index} (pid {h.pid}): slot {slot} holds generation {hgen} "
                f"({hbytes} bytes), the worker announced {gen} ({nbytes} bytes): it was "
                "overwritten while the consumer owned it"
            )
        raw = np.frombuffer(seg.mm, np.uint8, count=nbytes, offset=HEADER)
        batch = _layout.unflatten(tree, _layout.read(raw, descs, copy=self._copy))
        self._positions.record(self._takes, index, epoch)
        h.received += 1
        self._takes += 1
        self._bytes += nbytes
        self._ring.took(h, slot, seg, raw, give_back=self._copy)
        del raw  # the ring's reference is the one it counts
        return batch

    def _fail(self, ev: tuple[Any, ...]) -> None:
        exc = worker_exception(ev, self._channel.handles[ev[0]].pid)
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
            self._start_epoch_if_done()
        try:
            batch = self._take(timeout, stream=False)
        except _EpochEnd:
            raise OutOfRangeError(
                f"epoch {self._merge.epoch} of the process stage is empty") from None
        self._peeked = batch
        return batch

    def _start_epoch_if_done(self) -> None:
        """Before a new loop or a peek: start the next epoch if this one is
        over (``OutOfRangeError`` after the last)."""
        if self._merge.epoch_done:
            if not self._merge.more_epochs():
                raise OutOfRangeError(self._end_message())
            self._merge.start_next_epoch()

    def _end_message(self) -> str:
        n = self._epochs
        return f"end of data: the process stage's {'epoch was' if n == 1 else f'{n} epochs were'} read"

    def __iter__(self) -> Iterator[Any]:
        """The batches of one epoch (see the class docstring)."""
        with self._take_lock:
            self._check_usable()
            self._start_epoch_if_done()
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

    # -- batch lifetime and resumption ----------------------------------------------

    def release(self) -> None:
        """Done with the last batch taken: its slot goes back to its worker
        as soon as none of its arrays is referenced (at once if none is).

        Taking the next batch does the same; call this to give the slot back
        earlier (e.g. after copying the batch to a GPU, before a long step).
        Arrays still referenced stay valid: they only delay the slot.
        """
        with self._take_lock:
            self._ring.release_current()
            self._ring.reclaim()

    @property
    def taken(self) -> int:
        """Batches handed to the consumer so far (tickets 0, 1, ...; a batch
        :meth:`peek` holds is not counted until it is taken)."""
        return self._takes - (self._peeked is not None)

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        """The stage's position, as plain data (picklable, ``torch.save``-able).

        The state describes what the consumer received: restored into a new
        stage built the same way (same ``build``, ``num_processes``,
        ``epochs`` and ``seed``), the new stage delivers exactly the batches
        this one would have delivered next -- in the same order with
        ``order="deterministic"`` and worker pipelines whose own order is
        fixed (seeded shuffles), and in any case every batch not yet
        delivered, once.

        Each worker is asked for its pipeline's state as of the batches the
        consumer took from it; batches waiting in shared memory are not
        delivered. A worker whose ``build`` returned a plain iterable (no
        ``state_dict``) is saved as a count of batches: the restored worker
        replays its iterable from the start and skips them.

        Args:
            upto: the state as if only the first ``upto`` batches taken had
                been delivered (``None``: all taken so far). Batches taken
                after them are delivered again after a restore (a
                :class:`feedq.DeviceFeeder` passes the batches its consumer
                got). At most ``STATE_WINDOW`` (256) batches back.

        Raises:
            InvalidArgumentError: ``upto`` is out of range.
            UnavailableError: a worker died or failed before it answered.
            DeadlineExceededError: a worker did not answer within 30 s.
            CancelledError: the stage was closed or failed.
        """
        # A feeder's thread may be inside a take, waiting for a batch: wait
        # for it, within bounds.
        if not self._take_lock.acquire(timeout=STATE_TIMEOUT_SECS):
            raise DeadlineExceededError(
                f"state_dict waited {STATE_TIMEOUT_SECS:g} s for another thread's take from "
                "the process stage")
        try:
            self._check_usable()
            return self._positions.state(upto, self.taken, self._takes)
        finally:
            self._take_lock.release()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of a stage built
        the same way), before the first batch is taken.

        The workers started when the stage was made are stopped and started
        again with their states (a restore costs one worker start; a batch
        :meth:`peek` holds is dropped with them): each
        calls ``load_state_dict`` on the stage its ``build`` returns before
        taking from it, or replays a plain iterable and skips the batches
        the state counts as delivered. The merge position (whose turn it is)
        is restored here.

        Raises:
            InvalidArgumentError: not a process stage state, or one of a
                different shape (another ``num_processes``, an epoch beyond
                ``epochs``); nothing is changed.
            FailedPreconditionError: batches were already taken.
            CancelledError: the stage was closed or failed.
        """
        with self._take_lock:
            self._check_usable()
            if self.taken:
                raise FailedPreconditionError(
                    "load_state_dict must come before the process stage's first batch is taken")
            # A batch peek() holds (an adapter reading the structure) is
            # dropped with the workers: the restored stage delivers its own.
            self._positions.apply(state)
            self._restart_workers()
            self._takes = 0

    # -- what it is -------------------------------------------------------------

    @property
    def num_processes(self) -> int:
        return self._num

    @property
    def epoch(self) -> int:
        """The epoch being read (0 first)."""
        return self._merge.epoch

    @property
    def epochs(self) -> int | None:
        """Epochs to read (``None``: endless)."""
        return self._epochs

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, in worker order."""
        return [h.pid for h in self._channel.handles]

    @property
    def _handles(self) -> list[WorkerHandle]:
        """The consumer's handles on the workers (tests read their inboxes)."""
        return self._channel.handles

    def _pump(self, timeout: float) -> None:
        """Read what the workers sent, waiting up to ``timeout`` (tests)."""
        self._channel.pump(timeout)

    def _stall_workers(self) -> str:
        """Stall reports: the workers a waiting take waits for, by index and pid."""
        handles = self._channel.handles
        waited = [handles[i] for i in self._merge.waited_for()]
        return ", ".join(
            f"worker {h.index} (pid {h.pid}, "
            f"{'exited' if h.exited or not h.process.is_alive() else 'alive'}, "
            f"{h.received} batches received)" for h in waited)

    def storage_statistics(self) -> dict[str, float]:
        """The remote reads of this stage's workers, added up: the keys of
        ``feedq.storage.statistics()``, as each worker last reported them
        (at most 0.5 s old while it runs; exact after each epoch's end)."""
        total: dict[str, float] = {}
        for h in list(self._channel.handles):
            for k, v in dict(h.storage).items():
                total[k] = total.get(k, 0) + v
        return total

    def statistics(self) -> ProcessStageStatistics:
        """A snapshot (see :class:`ProcessStageStatistics`)."""
        handles = list(self._channel.handles)
        segs = [s for h in handles for s in list(h.slot_seg.values())]
        return ProcessStageStatistics(
            num_processes=self._num,
            start_method=self._method,
            order=self._order,
            epoch=self._merge.epoch,
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
            held=self._ring.holding,
            retained=self._ring.retained,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"epoch {self._merge.epoch}"
        return (f"ProcessStage({self._num} processes, order={self._order!r}, "
                f"start_method={self._method!r}, {state})")
