"""The consumer side of a process stage: start the workers, take their
batches from shared memory, give slots back, stop everything.

Everything here runs in the consumer's thread (no helper thread): a take
reads the workers' control messages (``multiprocessing.connection.wait`` on
their pipes and process sentinels), so a dead worker is seen the moment it
dies, and nothing happens behind the consumer's back.

When a slot goes back to its worker
-----------------------------------
A batch's numeric arrays are views of its slot. The stage gives a slot back
to its worker only once nothing refers to the batch's memory any more: each
batch's arrays are views of one per-batch ``uint8`` array (NumPy collapses
every view's ``base`` onto it), so its reference count says whether any
array -- or any slice, ``torch.from_numpy`` tensor, or other object built on
one -- is alive. The previous batch of a ``for`` loop is typically still
bound to the loop variables when the next one is taken, so the check runs at
every take for every batch not yet given back.

A consumer that keeps more batches than the worker's ring can spare (for
example ``list(stage)``) does not stall the worker: the stage tells it to
*retain* the slot (the worker creates a new segment for it) and keeps the
old segment mapped until its arrays are gone. Memory then grows with what is
kept, never silently reused.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import signal
import struct
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._defaults import resolve_timeout
from .._scope import register_closeable
from ..errors import (
    AbortedError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    OutOfRangeError,
    UnavailableError,
)
from ..pipeline import current_pipeline
from . import _layout
from ._shm import Segment, new_token, sweep, unlink
from ._worker import (
    EXTRA_SLOTS,
    HEADER,
    HEADER_FORMAT,
    MAGIC,
    MAX_SLOTS,
    SlotReturns,
    WorkerConfig,
    worker_main,
)

__all__ = [
    "ORDERS",
    "START_METHODS",
    "ProcessStage",
    "ProcessStageStatistics",
    "WorkerTraceback",
    "default_start_method",
    "process_stage",
    "warm_up",
]

ORDERS = ("deterministic", "first_ready")
START_METHODS = ("forkserver", "spawn", "fork")

# How long close() lets workers finish on their own after asking them to
# stop, before SIGTERM, then SIGKILL (each stage of the escalation).
_STOP_GRACE_SECS = 1.0
_TERM_GRACE_SECS = 0.5
# The consumer's waits are sliced this finely, to notice close() from
# another thread and a pipeline stop.
_WAIT_SLICE_SECS = 0.1
# A worker's failure is raised in its turn, or after the consumer has waited
# this long for other workers while it was pending (a failure never waits
# behind a worker that may never send again).
_FAILURE_GRACE_SECS = 0.4
_WORKER_MODULE = "feedq.process._worker"


def default_start_method() -> str:
    """``"forkserver"`` on Linux, ``"spawn"`` elsewhere (macOS)."""
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def _context(method: str) -> Any:
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Import feedq once in the fork server, so that each worker forked
        # from it starts with feedq loaded (milliseconds instead of the
        # half second an import takes). Only before the server starts.
        try:
            from multiprocessing import forkserver

            server: Any = forkserver._forkserver
            if server._forkserver_pid is None:
                modules = list(server._preload_modules)
                if _WORKER_MODULE not in modules:
                    ctx.set_forkserver_preload([*modules, _WORKER_MODULE])
        except AttributeError:  # pragma: no cover - another CPython layout
            pass
    return ctx


def warm_up(start_method: str | None = None) -> None:
    """Start the fork server now and wait until it is ready (with feedq
    loaded in it), so that process stages start their workers in
    milliseconds. Does nothing for ``spawn`` and ``fork``. Call it early,
    before the training framework starts its threads.
    """
    method = start_method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, got {method!r}")
    if method != "forkserver":
        return
    ctx = _context(method)
    # The server serves its first request once its preloads are imported.
    probe = ctx.Process(target=os.getpid, name="feedq-process-warm-up", daemon=True)
    probe.start()
    probe.join()
    probe.close()


def _check_importable(build: Callable[..., Any], method: str) -> None:
    """A worker started by spawn or forkserver finds ``build`` by importing
    its module; a function of an interactive ``__main__`` (``python -c``,
    a REPL, a notebook) cannot be found that way."""
    fn = build
    while isinstance(fn, functools.partial):
        fn = fn.func
    if getattr(fn, "__module__", None) != "__main__":
        return
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None):
        return  # a script: the worker runs it as __mp_main__ (keep its `if __name__ == "__main__":`)
    raise TypeError(
        f"build {getattr(fn, '__qualname__', fn)!r} is defined in an interactive session "
        f"(python -c, a REPL or a notebook), where a {method!r} worker cannot import it: define it "
        "in a module and import it, or pass start_method='fork'"
    )


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text.

    The consumer gets the worker's exception itself (its type and message,
    rebuilt from a pickle when possible), chained ``from`` this: Python prints
    the worker's traceback above the consumer's.

    Attributes:
        worker_index: the worker that raised.
        pid: its process id.
        traceback: the formatted traceback.
    """

    def __init__(self, worker_index: int, pid: int, text: str) -> None:
        super().__init__(text)
        self.worker_index = worker_index
        self.pid = pid
        self.traceback = text

    def __str__(self) -> str:
        return (f"in feedq process stage worker {self.worker_index} (pid {self.pid}):\n"
                f"{self.traceback.rstrip()}")


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


class _Held:
    """A batch the consumer took: its slot, and the array its views share."""

    __slots__ = ("worker", "slot", "seg", "raw", "serial", "retained")

    def __init__(self, worker: int, slot: int, seg: Segment, raw: np.ndarray, serial: int) -> None:
        self.worker = worker
        self.slot = slot
        self.seg = seg
        self.raw: np.ndarray | None = raw
        self.serial = serial
        self.retained = False


class _Handle:
    """The consumer's side of one worker."""

    def __init__(self, index: int, process: Any, conn: Any, returns: SlotReturns,
                 slots: int) -> None:
        self.index = index
        self.slots = slots  # the ring's size (the worker says, with prefetch=None)
        self.process = process
        self.conn = conn
        self.returns = returns
        self.layout: tuple[Any, Any] = (None, None)
        self.pid: int = process.pid
        self.inbox: deque[tuple[Any, ...]] = deque()
        self.conn_open = True
        self.exited = False
        self.hello = False
        self.done = False
        self.failed = False
        self.announced: list[str] = []
        self.slot_seg: dict[int, Segment] = {}
        self.received = 0
        self.produced = 0

    def send(self, msg: tuple[Any, ...]) -> None:
        if not self.conn_open or self.exited:
            return
        with contextlib.suppress(OSError, EOFError, ValueError):
            self.conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


class _EpochEnd(Exception):
    pass


_EPOCH_END = ("epoch_end",)

# Stages not yet closed: closed at interpreter exit (Ctrl-C included) if the
# user or a Pipeline did not close them.
_live: weakref.WeakSet[ProcessStage] = weakref.WeakSet()


@atexit.register
def _close_live_stages() -> None:
    for stage in list(_live):
        with contextlib.suppress(Exception):
            stage.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (SIGBUS: is /dev/shm full?)" if name == "SIGBUS" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


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
    """

    #: Pipeline statistics and stall reports (feedq._stats, feedq._stall).
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
    ) -> None:
        if not callable(build):
            raise TypeError(f"build must be a function build(worker_index, num_workers), got {build!r}")
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes must be an int >= 1, got {num_processes!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
            raise ValueError(f"epochs must be an int >= 1 or None (endless), got {epochs!r}")
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int)
                                     or prefetch < 1):
            raise ValueError(f"prefetch must be an int >= 1 or None (automatic), got {prefetch!r}")
        method = start_method or default_start_method()
        if method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {method!r}")
        if method != "fork":
            _check_importable(build, method)
            try:
                pickle.dumps(build)
            except Exception as exc:
                raise TypeError(
                    f"build must be picklable for start_method={method!r}: a function defined at "
                    f"the top level of an importable module, not a lambda or a nested function "
                    f"({exc})"
                ) from None
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
        self._handles: list[_Handle] = []
        self._epoch = 0
        self._epoch_done = False
        self._rotation: list[int] = list(range(num_processes))
        self._turn = 0
        self._active: set[int] = set(range(num_processes))
        self._arrivals: deque[int] = deque()
        self._held: list[_Held] = []
        self._current: _Held | None = None
        self._peeked: Any = None  # a batch peek() took, returned by the next take
        self._serial = 0
        self._takes = 0
        self._ready = 0
        self._bytes = 0
        self._wait = 0.0
        self._retained = 0

        pipe = current_pipeline()
        self._coord = None if pipe is None else pipe.coord
        sweep()  # segments of dead parents (a SIGKILLed run)
        self._start_workers()
        _live.add(self)
        register_closeable(self)
        if pipe is not None:
            pipe.output = self

    # -- start and stop ---------------------------------------------------------

    def _start_workers(self) -> None:
        ctx = _context(self._method)
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
                )
                process = ctx.Process(target=worker_main, args=(config, child_conn),
                                      name=f"feedq-process-{i}", daemon=True)
                try:
                    process.start()
                finally:
                    child_conn.close()
                self._handles.append(_Handle(i, process, parent_conn, returns,
                                             self._slots or MAX_SLOTS))
        except BaseException:
            self._closed = True
            self._shutdown()
            raise

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

    def _shutdown(self, grace: float = _STOP_GRACE_SECS) -> None:
        """Stop the workers: ask, wait ``grace`` s, SIGTERM, SIGKILL."""
        _live.discard(self)
        handles = self._handles
        for h in handles:
            h.send(("stop",))
        deadline = time.monotonic() + grace
        for h in handles:
            h.process.join(max(0.0, deadline - time.monotonic()))
        for h in handles:
            if h.process.is_alive():
                with contextlib.suppress(OSError):
                    h.process.terminate()
        deadline = time.monotonic() + _TERM_GRACE_SECS
        for h in handles:
            h.process.join(max(0.0, deadline - time.monotonic()))
        for h in handles:
            if h.process.is_alive():
                with contextlib.suppress(OSError):
                    h.process.kill()
                h.process.join(5.0)
        for h in handles:
            # Segments announced in messages not read yet (prefetched batches).
            while h.conn_open:
                try:
                    if not h.conn.poll():
                        break
                    msg = pickle.loads(h.conn.recv_bytes())
                except (EOFError, OSError):
                    break
                if msg[0] == "seg":
                    h.announced.append(msg[1])
            for name in h.announced:
                with contextlib.suppress(OSError):
                    unlink(name)
            h.conn_open = False
            h.exited = True
            with contextlib.suppress(OSError):
                h.conn.close()
            with contextlib.suppress(ValueError):
                h.process.close()
            for seg in list(h.slot_seg.values()):
                if seg.users == 0:
                    seg.close()
            h.slot_seg.clear()
            h.inbox.clear()
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

    # -- reading the workers' messages ------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Read what the workers sent; wait up to ``timeout`` for something."""
        waitables: list[Any] = []
        for h in self._handles:
            if h.conn_open:
                waitables.append(h.conn)
            if not h.exited:
                waitables.append(h.process.sentinel)
        if not waitables:
            if timeout > 0:
                time.sleep(min(timeout, _WAIT_SLICE_SECS))
            return
        ready = mp_connection.wait(waitables, timeout)
        if not ready:
            return
        for h in self._handles:
            if h.conn_open and h.conn in ready:
                self._drain(h)
            if not h.exited and h.process.sentinel in ready:
                self._drain(h)  # everything it sent before it ended
                self._on_exit(h)

    def _poll_fast(self) -> None:
        """Read what came without waiting: the worker whose turn it is (one
        ``poll``), or everyone (first-ready)."""
        if self._order == "deterministic" and self._rotation:
            h = self._handles[self._rotation[self._turn % len(self._rotation)]]
            if h.conn_open and h.conn.poll():
                self._drain(h)
                return
        self._pump(0.0)

    def _drain(self, h: _Handle) -> None:
        while h.conn_open:
            try:
                if not h.conn.poll():
                    return
                msg = pickle.loads(h.conn.recv_bytes())
            except (EOFError, OSError):
                h.conn_open = False
                return
            self._on_message(h, msg)

    def _on_message(self, h: _Handle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "batch":
            _, epoch, slot, name, gen, nbytes, tree, descs = msg
            if tree is None:
                tree, descs = h.layout  # as the previous batch
            else:
                h.layout = (tree, descs)
            seg = h.slot_seg.get(slot)
            if seg is None or seg.name != name:
                if seg is not None:
                    self._detach(seg)
                try:
                    seg = Segment.open(name)
                except OSError as exc:
                    raise DataLossError(
                        f"process stage worker {h.index} (pid {h.pid}): cannot map its shared "
                        f"memory segment {name!r}: {exc}"
                    ) from None
                with contextlib.suppress(OSError):
                    unlink(name)  # both sides have it mapped: it needs no name any more
                h.slot_seg[slot] = seg
            h.inbox.append(("batch", epoch, slot, seg, gen, nbytes, tree, descs))
        elif kind in ("end", "error"):
            if kind == "error":
                h.failed = True
            h.inbox.append(msg)
        elif kind == "seg":
            h.announced.append(msg[1])
            return
        elif kind == "hello":
            h.hello = True
            return
        elif kind == "slots":
            h.slots = msg[1]
            return
        elif kind == "done":
            h.done = True
            return
        else:  # pragma: no cover - a protocol error
            raise DataLossError(f"process stage worker {h.index}: unexpected message {kind!r}")
        if self._order == "first_ready":
            self._arrivals.append(h.index)

    def _on_exit(self, h: _Handle) -> None:
        h.exited = True
        h.conn_open = False
        h.process.join(1.0)
        if h.done or h.failed or self._closing or self._closed:
            return
        code = h.process.exitcode
        how = _describe_exit(code)
        if not h.hello:
            how += (" before it started (see its stderr; with start_method='spawn' or "
                    "'forkserver' the build function must be importable by the worker)")
        h.inbox.append(("dead", code, how))
        if self._order == "first_ready":
            self._arrivals.append(h.index)

    def _detach(self, seg: Segment) -> None:
        """The worker replaced ``seg``: close it once no batch uses it."""
        if seg.users == 0:
            seg.close()
        else:
            seg.detached = True

    # -- giving slots back ------------------------------------------------------

    def _reclaim(self) -> None:
        """Give back the slots of batches nobody references; retain (have the
        worker replace) the oldest ones a worker cannot spare."""
        if not self._held:
            return
        still: list[_Held] = []
        for rec in self._held:
            # 2 references: rec.raw and getrefcount's argument. Any array
            # viewing the batch (or object holding one) adds one.
            if sys.getrefcount(rec.raw) <= 2:
                self._give_back(rec)
            else:
                still.append(rec)
        self._held = still
        for h in self._handles:
            pinned = [r for r in still if r.worker == h.index and not r.retained]
            while len(pinned) > h.slots - EXTRA_SLOTS:
                self._retain(pinned.pop(0))

    def _give_back(self, rec: _Held) -> None:
        rec.raw = None
        seg = rec.seg
        seg.users -= 1
        h = self._handles[rec.worker]
        if rec.retained or seg.detached:
            if seg.users == 0:
                seg.close()
            return
        if h.exited or h.done or h.failed:
            if seg.users == 0 and h.slot_seg.get(rec.slot) is seg:
                del h.slot_seg[rec.slot]
                seg.close()
            return
        h.returns.put(rec.slot)

    def _retain(self, rec: _Held) -> None:
        rec.retained = True
        self._retained += 1
        h = self._handles[rec.worker]
        if h.slot_seg.get(rec.slot) is rec.seg:
            del h.slot_seg[rec.slot]
        rec.seg.detached = True
        h.returns.put(rec.slot, retain=True)

    def release(self) -> None:
        """Done with the last batch taken: its slot goes back to its worker
        as soon as none of its arrays is referenced (at once if none is).

        Taking the next batch does the same; call this to give the slot back
        earlier (e.g. after copying the batch to a GPU, before a long step).
        Arrays still referenced stay valid: they only delay the slot.
        """
        with self._take_lock:
            self._release_current()
            self._reclaim()

    def _release_current(self) -> None:
        if self._current is not None:
            self._held.append(self._current)
            self._current = None

    # -- taking -----------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise CancelledError(
                f"this process stage stopped after a worker failed: {self._failure!r}"
            ) from self._failure
        if self._closed or self._closing:
            raise CancelledError("this process stage was closed")

    def _more_epochs(self) -> bool:
        return self._epochs is None or self._epoch + 1 < self._epochs

    def _start_next_epoch(self) -> None:
        self._epoch += 1
        self._epoch_done = False
        alive = [h.index for h in self._handles if not h.failed]
        self._rotation = list(alive)
        self._turn = 0
        self._active = set(alive)
        for h in self._handles:
            h.send(("epoch", self._epoch))

    def _next_event(self) -> tuple[Any, ...] | None:
        """The next event in the stage's order, or None to wait for it."""
        if self._order == "deterministic":
            while self._rotation:
                self._turn %= len(self._rotation)
                h = self._handles[self._rotation[self._turn]]
                if not h.inbox:
                    return None
                ev = h.inbox.popleft()
                if ev[0] == "end":
                    h.produced += ev[2]
                    del self._rotation[self._turn]
                    continue
                if ev[0] == "batch":
                    self._turn += 1
                return (h.index, *ev)
            return _EPOCH_END
        while self._active:
            if not self._arrivals:
                return None
            h = self._handles[self._arrivals.popleft()]
            ev = h.inbox.popleft()
            if ev[0] == "end":
                h.produced += ev[2]
                self._active.discard(h.index)
                continue
            return (h.index, *ev)
        return _EPOCH_END

    def _failure_pending(self) -> bool:
        return any(h.failed or (h.inbox and h.inbox[-1][0] == "dead") for h in self._handles)

    def _pending_failure(self) -> tuple[Any, ...] | None:
        """A worker's error or death waiting behind batches of others."""
        for h in self._handles:
            for ev in h.inbox:
                if ev[0] in ("error", "dead"):
                    h.inbox.remove(ev)
                    with contextlib.suppress(ValueError):
                        self._arrivals.remove(h.index)
                    return (h.index, *ev)
        return None

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
                    if ev is _EPOCH_END:
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
                    slice_ = _WAIT_SLICE_SECS if failure_seen is None else 0.02
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
        h.received += 1
        self._takes += 1
        self._bytes += nbytes
        self._serial += 1
        seg.users += 1
        rec = _Held(index, slot, seg, raw, self._serial)
        del raw
        if self._copy:
            self._give_back(rec)
        else:
            self._current = rec
        return batch

    def _fail(self, ev: tuple[Any, ...]) -> None:
        index, kind = ev[0], ev[1]
        h = self._handles[index]
        exc: BaseException
        if kind == "error":
            _, _, epoch, blob, type_name, message, text = ev
            remote = WorkerTraceback(index, h.pid, text)
            rebuilt: BaseException | None = None
            if blob is not None:
                with contextlib.suppress(Exception):
                    rebuilt = pickle.loads(blob)
            exc = rebuilt if isinstance(rebuilt, BaseException) else AbortedError(
                f"process stage worker {index} (pid {h.pid}) failed in epoch {epoch}: "
                f"{type_name}: {message}")
            exc.__cause__ = remote
        else:
            _, _, code, how = ev
            exc = UnavailableError(
                f"process stage worker {index} (pid {h.pid}) {how}; the stage is stopped")
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


def process_stage(
    build: Callable[[int, int], Any],
    num_processes: int = 1,
    *,
    order: str = "deterministic",
    epochs: int | None = 1,
    seed: int | None = None,
    prefetch: int | None = None,
    start_method: str | None = None,
    copy: bool = False,
) -> ProcessStage:
    """Run ``build``'s pipeline in worker processes; take its batches here,
    through shared memory.

    Each worker process calls ``build(worker_index, num_workers)`` inside a
    :class:`feedq.Pipeline` of its own, and iterates what it returns: a
    batch stage (``feedq.shuffle_batch(...)``...) or any iterable of batches
    (dicts, tuples or lists of NumPy arrays, bytes/str arrays,
    ``SparseTensorValue`` / ``RaggedTensorValue``). ``build`` shards the
    input itself (``feedq.distributed.shard_files(files, worker_index,
    num_workers)``); :func:`feedq.process.get_worker_info` tells it the epoch
    and the seed. Workers open their own files: nothing but ``build`` (by
    reference) is sent to them, so the first batch comes as fast whatever
    the dataset's size.

    Each worker writes batches into a ring of ``prefetch + 2`` shared-memory
    slots (sized from the first batch, grown when a batch does not fit);
    the consumer gets NumPy arrays that are views of a slot: no copy, no
    pickling. Strings travel as offsets + values (rebuilt as bytes/str
    object arrays: a copy).

    Batch lifetime (what is and is not detected): a slot is given back to its
    worker only when no array viewing it is referenced any more -- not
    merely when the next batch is taken. Slices, ``torch.from_numpy``
    tensors and anything holding an array count as references, so a batch
    kept (even ``list(stage)``) is never overwritten: the worker is given a
    new segment instead. The one thing the stage cannot see is a raw
    address (``arr.ctypes.data``, ``__array_interface__``) kept after its
    array is dropped. A slot's header carries a generation number checked at
    every take: a slot overwritten while the consumer owned it would be a
    ``DataLossError``, never silently wrong data. Pass ``copy=True`` for
    batches of private arrays (one copy; the slot goes back at once), and
    call :meth:`ProcessStage.release` to give a slot back before the next
    take.

    Args:
        build: ``build(worker_index, num_workers)``; a top-level function
            (picklable by reference) for ``spawn`` and ``forkserver``.
        num_processes: worker processes; 1 runs the whole loader in one
            subprocess, leaving this interpreter to the training loop.
        order: ``"deterministic"``: round-robin over the workers (worker 0's
            first batch, worker 1's first, ...; a worker whose epoch ended
            is skipped), so the sequence does not depend on timing when each
            worker's own sequence does not; ``"first_ready"``: batches in
            the order they are ready.
        epochs: how many times each worker builds and drains its pipeline
            (``None``: endless). One ``for`` loop over the stage is one
            epoch.
        seed: given to ``build`` through ``get_worker_info().seed``
            (``shard_seed()`` mixes in the worker and epoch).
        prefetch: batches each worker may have ready ahead of the consumer;
            ``None`` chooses from the first batch's size: about 8 MiB of
            batches, 2 to 16 of them (small batches need more in flight:
            each costs a message).
        start_method: ``"forkserver"`` (default on Linux), ``"spawn"``
            (default elsewhere), or ``"fork"`` (fast to start, but forks this
            process's threads' state: only when nothing else runs threads).
        copy: hand out private copies instead of shared-memory views.

    Returns:
        A :class:`ProcessStage`; inside ``with feedq.Pipeline():`` the
        pipeline closes it on exit.

    Raises:
        TypeError: ``build`` is not callable or, for spawn/forkserver, not
            picklable.
        ValueError: a bad argument.
        UnimplementedError: no POSIX shared memory (Windows).
    """
    return ProcessStage(build, num_processes, order=order, epochs=epochs, seed=seed,
                        prefetch=prefetch, start_method=start_method, copy=copy)

