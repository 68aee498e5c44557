"""The resource container of one task: what a Server holds and serves.

A :class:`Host` maps ``(container, shared_name)`` to a resource (a queue, a
variable, an accumulator, a coordinator record) and runs operations on them on
behalf of remote callers. It is plain threaded Python with no Ray in it: the
Ray actor (``_server``) wraps one, and the in-process ``local`` backend calls
one directly, so both backends share every semantic rule.

What a host adds to the local objects, and why:

* **abortable waits.** A blocking call runs under a :class:`_Abort` token.
  When the caller gives up (client-side deadline, Ctrl-C), dies (no heartbeat
  for ``client_timeout`` seconds) or the server stops, the token is set, the
  waiting attempt leaves its line and gives back what it had collected, in
  order: an abandoned dequeue never takes an element (T2, T3).
* **deliveries held until acknowledged.** A remote dequeue's elements stay
  recorded as *in flight* until the caller acknowledges them. The caller
  hands them to user code only once the host has *confirmed* the
  acknowledgement (:meth:`Host.ack` returns True). If the caller dies or
  gives up first, or the acknowledgement comes later than ``ack_window``
  seconds after the delivery, they go back to the front of the queue and the
  acknowledgement is refused (the caller then raises UnavailableError and
  drops them): a client that dies mid-dequeue, or a server paused longer
  than the client timeout, loses and duplicates nothing. (One window is left:
  an acknowledgement accepted whose confirmation never reaches the caller
  within ``ack_window`` plus a grace period loses those elements; it needs a
  reply delayed by seconds on the wire.)
* **calls abandoned before they start do nothing.** An abort that arrives
  before its call starts leaves a tombstone and the call is dropped. An
  abort that arrives after a non-delivering call (enqueue, take_grad) already
  ran cannot undo it: the client reports such an outcome as *unknown*.
* **a cluster default timeout** (TF1's ``operation_timeout_in_ms``, T1) for
  calls that pass no timeout.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._arrays import flatten_values
from .._defaults import resolve_timeout
from ..errors import (
    CancelledError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from ..queues import (
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueBase,
    QueueState,
    RandomShuffleQueue,
)
from ._cluster import TaskName
from ._compression import decode, encode

__all__ = ["Host", "QueueMeta", "ResourceKey", "WouldBlock"]

#: (container, shared_name): TF1's resource-manager key.
ResourceKey = tuple[str, str]

# The abort token of the call this thread is running for (set by Host.call).
_ctx = threading.local()


class WouldBlock(Exception):
    """An inline attempt (``Host.call(..., inline=True)``) would have to wait.

    Raised before the attempt joins a line, so nothing was inserted or taken:
    the caller retries the call where it may block (a worker thread).
    """


class _Abort(threading.Event):
    """Set when the caller of a blocking call is gone; says which error to raise."""

    def __init__(self) -> None:
        super().__init__()
        self._error: Callable[[], BaseException] = lambda: CancelledError("the call was abandoned")
        self._waits_on: list[QueueBase] = []  # guarded by the host lock

    def fire(self, error: Callable[[], BaseException]) -> None:
        self._error = error
        self.set()
        # Wake the attempt at once instead of at its next timed wake-up.
        for q in list(self._waits_on):
            with q._mutex:
                q._producer_done.notify_all()
                q._consumer_done.notify_all()

    def error(self) -> BaseException:
        return self._error()


class _AbortableQueue(QueueBase):
    """A queue whose blocking attempts also end when the call's abort token fires.

    Same lines, same flush, same give-back as the local queue (module
    ``feedq.queues._base``): only the wait loops differ, so the semantics
    (Q14–Q28, T1–T3) are the local ones.
    """

    def _run_enqueue(self, att: Any, timeout: float | None, op: str) -> None:
        if getattr(_ctx, "inline", False):
            raise WouldBlock(op)
        abort: _Abort | None = getattr(_ctx, "abort", None)
        if abort is None:
            super()._run_enqueue(att, timeout, op)
            return
        wait = resolve_timeout(timeout)
        abort._waits_on.append(self)
        try:
            with self._mutex:
                if self._state is not QueueState.OPEN:
                    raise self._closed_enqueue_error()
                self._producers.append(att)
                self._flush()
                deadline = None if wait is None else time.monotonic() + wait
                while not att.finished:
                    if abort.is_set():
                        # Rows already inserted stay, as on a timeout (Q15).
                        self._producers.remove(att)
                        att.finished = True
                        err = abort.error()
                        err.num_enqueued = att.done  # type: ignore[attr-defined]
                        att.error = err
                        self._flush()
                        break
                    if deadline is None:
                        self._producer_done.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._expire_enqueue(att, op, wait)
                        break
                    self._producer_done.wait(remaining)
        finally:
            abort._waits_on.remove(self)
        if att.error is not None:
            raise att.error

    def _run_dequeue(self, att: Any, timeout: float | None) -> None:
        if getattr(_ctx, "inline", False):
            raise WouldBlock(att.op)
        abort: _Abort | None = getattr(_ctx, "abort", None)
        if abort is None:
            super()._run_dequeue(att, timeout)
            return
        wait = resolve_timeout(timeout)
        abort._waits_on.append(self)
        try:
            with self._mutex:
                self._consumers.append(att)
                self._flush()
                deadline = None if wait is None else time.monotonic() + wait
                while not att.finished:
                    if abort.is_set():
                        # T3: what was collected goes back to the front, in order.
                        self._consumers.remove(att)
                        self._give_back(att)
                        att.finished = True
                        att.error = abort.error()
                        self._flush()
                        break
                    if deadline is None:
                        self._consumer_done.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._expire_dequeue(att, wait)
                        break
                    self._consumer_done.wait(remaining)
        finally:
            abort._waits_on.remove(self)
        if att.error is not None:
            raise att.error

    def _assemble(self, chunks: list[list[np.ndarray[Any, Any]]], count: int,
                  outs: list[np.ndarray[Any, Any]] | None) -> Any:
        if not self._all_dense:
            # Padded batches cannot be un-padded: keep the rows as stored,
            # for a put-back (runs in the calling thread, see Host.call).
            _ctx.raw_chunks = list(chunks)
        return super()._assemble(chunks, count, outs)

    def _put_back_chunks(self, chunks: list[list[np.ndarray[Any, Any]]]) -> None:
        """Return rows as they were stored to the front of the queue, in order."""
        with self._mutex:
            for chunk in reversed(chunks):
                k = int(chunk[0].shape[0])
                if k == 0:
                    continue
                self._ensure_alloc(self._size + k)
                self._putback(chunk)
                self._size += k
                self._dequeued -= k
            self._flush()
            self._consumer_done.notify_all()

    def _put_back_result(self, op: str, result: Any) -> None:
        """Return a delivered result to the front of the queue, in order."""
        names = self._names
        if op == "dequeue":
            values = [result] if (self._single and names is None) else flatten_values(
                result, names, len(self._components), self._desc)
            cols = self._row_to_cols(list(values))
        else:
            values = [result] if (self._single and names is None) else flatten_values(
                result, names, len(self._components), self._desc)
            cols = [np.asarray(v) if c.dense else _object_column(v)
                    for v, c in zip(values, self._components)]
        k = int(cols[0].shape[0])
        if k == 0:
            return
        with self._mutex:
            self._ensure_alloc(self._size + k)
            self._putback(cols)
            self._size += k
            self._dequeued -= k
            self._flush()
            self._consumer_done.notify_all()


def _object_column(value: Any) -> np.ndarray[Any, Any]:
    col = np.empty(len(value), dtype=object)
    for i, v in enumerate(value):
        col[i] = v
    return col


class HostedFIFOQueue(_AbortableQueue, FIFOQueue):
    """FIFOQueue held by a task's container."""


class HostedRandomShuffleQueue(_AbortableQueue, RandomShuffleQueue):
    """RandomShuffleQueue held by a task's container."""


class HostedPaddingFIFOQueue(_AbortableQueue, PaddingFIFOQueue):
    """PaddingFIFOQueue held by a task's container."""


class HostedPriorityQueue(_AbortableQueue, PriorityQueue):
    """PriorityQueue held by a task's container."""


QUEUE_KINDS: dict[str, type[_AbortableQueue]] = {
    "FIFOQueue": HostedFIFOQueue,
    "RandomShuffleQueue": HostedRandomShuffleQueue,
    "PaddingFIFOQueue": HostedPaddingFIFOQueue,
    "PriorityQueue": HostedPriorityQueue,
}

# Operations that may wait (run in a worker thread, under an abort token).
BLOCKING_OPS = frozenset({
    "enqueue", "enqueue_many", "dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available",
    "take_grad", "wait_stop",
})
# Operations whose result is held in flight until the caller acknowledges it.
DELIVERING_OPS = frozenset({"dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available"})

_QUEUE_OPS = frozenset({
    "enqueue", "enqueue_many", "dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available",
    "close", "cancel", "size", "is_closed", "statistics",
})
_ACC_OPS = frozenset({
    "apply_grad", "take_grad", "set_global_step", "num_accumulated", "global_step",
    "statistics",
})


@dataclass(frozen=True)
class QueueMeta:
    """What a client needs to know about a hosted queue."""

    kind: str
    name: str
    capacity: int
    dtypes: list[np.dtype[Any]]
    shapes: list[tuple[int | None, ...] | None]
    names: list[str] | None


class _Variable:
    """A shared variable: a NumPy value under a lock."""

    def __init__(self, name: str, value: np.ndarray[Any, Any]) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.value = value  # guarded by self.lock
        self.dtype = value.dtype
        self.shape = value.shape

    def op(self, op: str, *args: Any) -> Any:
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


class _StopRecord:
    """A cluster-wide coordinator's state: stopped, and the first error with its origin."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Notified (notify_all) by request_stop and clear; wait_stop waits on it.
        self.changed = threading.Condition(self.lock)
        self.stopped = False  # guarded by self.lock
        self.error: BaseException | None = None  # guarded by self.lock
        self.origin: str | None = None  # guarded by self.lock
        self.generation = 0  # guarded by self.lock

    def request_stop(self, error: BaseException | None, origin: str) -> bool:
        with self.lock:
            if self.stopped:
                return False
            self.stopped = True
            self.error = error
            self.origin = origin
            self.changed.notify_all()
            return True

    def state(self) -> tuple[bool, BaseException | None, str | None, int]:
        with self.lock:
            return self.stopped, self.error, self.origin, self.generation

    def wait_stop(self, wait: float | None, abort: _Abort | None
                  ) -> tuple[bool, BaseException | None, str | None, int]:
        deadline = None if wait is None else time.monotonic() + wait
        with self.lock:
            while not self.stopped:
                if abort is not None and abort.is_set():
                    raise abort.error()
                remaining = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return self.stopped, self.error, self.origin, self.generation

    def clear(self) -> None:
        with self.lock:
            self.stopped = False
            self.error = None
            self.origin = None
            self.generation += 1
            self.changed.notify_all()


@dataclass
class _Pending:
    client: str | None
    abort: _Abort


@dataclass
class _Delivery:
    client: str | None
    queue: _AbortableQueue
    op: str
    result: Any
    # The rows as stored, when the result was padded (PaddingFIFOQueue).
    raw: list[list[np.ndarray[Any, Any]]] | None = None
    at: float = field(default_factory=time.monotonic)


#: Seconds after a delivery within which its acknowledgement is accepted; a
#: later one is refused and the elements go back (the client gives up waiting
#: for the confirmation after this plus a grace period).
ACK_WINDOW = 10.0


class Host:
    """The resource container of one task; see the module docstring.

    Args:
        task: the task this host serves (for messages).
        operation_timeout: the cluster default timeout in seconds for calls
            that give none (T1); ``None`` = wait forever.
        client_timeout: seconds without a heartbeat after which a remote
            client counts as dead: its pending calls end and its unacknowledged
            deliveries go back to their queues.
        ack_window: seconds after a delivery within which its
            acknowledgement is accepted (see :meth:`ack`).
    """

    def __init__(self, task: TaskName, operation_timeout: float | None = None,
                 client_timeout: float = 3.0, ack_window: float = ACK_WINDOW) -> None:
        self.task = task
        self._ack_window = ack_window
        self._lock = threading.Lock()
        self._resources: dict[ResourceKey, Any] = {}  # guarded by self._lock
        self._pending: dict[str, _Pending] = {}  # guarded by self._lock
        self._inflight: dict[str, _Delivery] = {}  # guarded by self._lock
        self._clients: dict[str, float] = {}  # guarded by self._lock: last heartbeat
        # Aborts that arrived before their call started (it was still queued
        # or between the inline try and its worker thread): call id -> when.
        self._tombstones: dict[str, float] = {}  # guarded by self._lock
        self._operation_timeout = operation_timeout  # guarded by self._lock
        self._client_timeout = client_timeout
        self._stopped = False  # guarded by self._lock
        self._stop_event = threading.Event()
        self.put_back_count = 0  # guarded by self._lock: elements returned for dead/aborted callers

    # -- configuration ----------------------------------------------------------------

    def set_operation_timeout(self, seconds: float | None) -> float | None:
        """Set the default timeout of calls that give none; returns the previous one."""
        if seconds is not None:
            seconds = resolve_timeout(seconds)
        with self._lock:
            previous, self._operation_timeout = self._operation_timeout, seconds
        return previous

    def info(self) -> dict[str, Any]:
        """A snapshot for clients and tests."""
        with self._lock:
            return {
                "task": str(self.task),
                "resources": sorted(f"{c}/{n}" for c, n in self._resources),
                "pending_calls": len(self._pending),
                "inflight": len(self._inflight),
                "clients": len(self._clients),
                "operation_timeout": self._operation_timeout,
                "put_back": self.put_back_count,
                "stopped": self._stopped,
            }

    # -- resources ----------------------------------------------------------------------

    def open(self, rkind: str, key: ResourceKey, spec: dict[str, Any]) -> Any:
        """Get or create a resource; atomic per key (Q7).

        Raises:
            InvalidArgumentError: the resource exists with another kind or spec.
            FailedPreconditionError: a variable that does not exist and was
                given no initial value.
        """
        self._check_running()
        with self._lock:
            existing = self._resources.get(key)
            if rkind == "queue":
                cls = QUEUE_KINDS.get(spec["kind"])
                if cls is None:
                    raise InvalidArgumentError(f"unknown queue kind {spec['kind']!r}")
                kwargs = dict(spec["kwargs"])
                kwargs.setdefault("name", key[1])
                requested = cls(**kwargs)
                if existing is None:
                    self._resources[key] = existing = requested
                else:
                    _check_queue_reopen(existing, requested, key[1])
                return QueueMeta(existing._kind, existing.name, existing.capacity,
                                 existing.dtypes, existing.shapes, existing.names)
            if rkind == "variable":
                if existing is None:
                    if spec.get("initial_value") is None:
                        raise FailedPreconditionError(
                            f"Attempting to use uninitialized value {key[1]} on {self.task}"
                        )
                    value = np.array(spec["initial_value"], dtype=spec.get("dtype"))
                    self._resources[key] = existing = _Variable(key[1], value)
                if not isinstance(existing, _Variable):
                    raise InvalidArgumentError(_kind_clash(key[1], existing, "variable"))
                if spec.get("initial_value") is not None:
                    value = np.asarray(spec["initial_value"], dtype=spec.get("dtype"))
                    if value.shape != existing.shape or (
                            spec.get("dtype") is not None and value.dtype != existing.dtype):
                        raise InvalidArgumentError(
                            f"Shared variable '{key[1]}' has dtype {existing.dtype} shape "
                            f"{list(existing.shape)} but requested dtype {value.dtype} shape "
                            f"{list(value.shape)}"
                        )
                return {"dtype": existing.dtype, "shape": existing.shape}
            if rkind == "accumulator":
                acc = ConditionalAccumulator(name=key[1], **spec)
                if existing is None:
                    self._resources[key] = existing = acc
                elif not isinstance(existing, ConditionalAccumulator):
                    raise InvalidArgumentError(_kind_clash(key[1], existing, "accumulator"))
                else:
                    existing._check_reopen(key[1], acc.dtype, acc._declared_shape, acc.reduction_type)
                return {"dtype": existing.dtype, "shape": existing._declared_shape}
            if rkind == "coordinator":
                if existing is None:
                    self._resources[key] = existing = _StopRecord()
                elif not isinstance(existing, _StopRecord):
                    raise InvalidArgumentError(_kind_clash(key[1], existing, "coordinator"))
                return {}
        raise InvalidArgumentError(f"unknown resource kind {rkind!r}")

    def reset(self, containers: list[str] | None = None) -> int:
        """Drop the resources of some containers (all with None); TF1's
        ``Session.reset``. Pending calls on them are cancelled.

        Returns:
            The number of resources dropped.
        """
        with self._lock:
            keys = [k for k in self._resources if containers is None or k[0] in containers]
            dropped = [self._resources.pop(k) for k in keys]
        for res in dropped:
            if isinstance(res, (QueueBase, ConditionalAccumulator)):
                res.cancel(CancelledError(f"container reset on {self.task}"))
        return len(dropped)

    # -- calls --------------------------------------------------------------------------

    def call(self, rkind: str, key: ResourceKey, op: str, args: tuple[Any, ...],
             kwargs: dict[str, Any], call_id: str | None = None,
             client: str | None = None, inline: bool = False) -> Any:
        """Run one operation on a resource.

        ``kwargs["timeout"]`` of a blocking op: ``None`` = the cluster default.
        With a ``call_id`` the call can be aborted (:meth:`abort`) and a
        delivering op's result is held in flight until :meth:`ack`. With
        ``inline`` a queue operation that would have to wait raises
        :class:`WouldBlock` instead, having done nothing (the Ray actor tries
        inline on its event loop first, and only waits in a thread if needed).
        """
        self._check_running()
        wire = None
        if "wire" in kwargs:
            kwargs = dict(kwargs)
            wire = kwargs.pop("wire")
        if op in ("enqueue", "enqueue_many") and args:
            args = (decode(args[0]), *args[1:])
        with self._lock:
            res = self._resources.get(key)
            if client is not None:
                self._clients[client] = time.monotonic()
            default_timeout = self._operation_timeout
        if res is None:
            raise NotFoundError(
                f"Resource {key[0] or 'localhost'}/{key[1]} does not exist on {self.task}"
            )
        if op in BLOCKING_OPS:
            timeout = kwargs.get("timeout")
            if timeout is None:
                # The cluster default; math.inf so the host process's own
                # default (feedq.set_default_timeout) is not applied a second time.
                kwargs = dict(kwargs, timeout=math.inf if default_timeout is None else default_timeout)
        abort = None
        if call_id is not None:
            abort = _Abort()
            with self._lock:
                if call_id in self._tombstones:
                    # Its caller gave up before it started: do nothing at all.
                    del self._tombstones[call_id]
                    raise CancelledError(f"call on {self.task} was abandoned by its caller")
                self._pending[call_id] = _Pending(client, abort)
        _ctx.abort = abort
        _ctx.inline = inline
        _ctx.raw_chunks = None
        try:
            result = self._dispatch(rkind, res, key, op, args, kwargs, abort)
            raw = _ctx.raw_chunks if op in DELIVERING_OPS else None
        except CancelledError:
            if abort is not None and abort.is_set():
                raise abort.error() from None
            raise
        finally:
            _ctx.abort = None
            _ctx.inline = False
            _ctx.raw_chunks = None
            if call_id is not None:
                with self._lock:
                    self._pending.pop(call_id, None)
        if call_id is not None and client is not None and op in DELIVERING_OPS:
            with self._lock:
                if not (abort is not None and abort.is_set()):
                    self._inflight[call_id] = _Delivery(client, res, op, result, raw)
                    return encode(result, wire)
            # Abandoned after the elements were taken: they go back (T2).
            self._put_back(_Delivery(client, res, op, result, raw))
            raise abort.error()
        if op in DELIVERING_OPS:
            return encode(result, wire)
        return result

    def _dispatch(self, rkind: str, res: Any, key: ResourceKey, op: str, args: tuple[Any, ...],
                  kwargs: dict[str, Any], abort: _Abort | None) -> Any:
        if rkind == "queue":
            if not isinstance(res, QueueBase):
                raise InvalidArgumentError(_kind_clash(key[1], res, "queue"))
            if op not in _QUEUE_OPS:
                raise InvalidArgumentError(f"queue '{key[1]}' has no operation {op!r}")
            if op == "cancel":
                cause = args[0] if args else None
                return res.cancel(cause)
            return getattr(res, op)(*args, **kwargs)
        if rkind == "variable":
            if not isinstance(res, _Variable):
                raise InvalidArgumentError(_kind_clash(key[1], res, "variable"))
            return res.op(op, *args)
        if rkind == "accumulator":
            if not isinstance(res, ConditionalAccumulator):
                raise InvalidArgumentError(_kind_clash(key[1], res, "accumulator"))
            if op not in _ACC_OPS:
                raise InvalidArgumentError(f"accumulator '{key[1]}' has no operation {op!r}")
            if op == "take_grad":
                return res._take_grad(args[0], kwargs.get("timeout"), abort)
            return getattr(res, op)(*args)
        if rkind == "coordinator":
            if not isinstance(res, _StopRecord):
                raise InvalidArgumentError(_kind_clash(key[1], res, "coordinator"))
            if op == "request_stop":
                return res.request_stop(args[0], args[1])
            if op == "state":
                return res.state()
            if op == "wait_stop":
                return res.wait_stop(resolve_timeout(kwargs.get("timeout")), abort)
            if op == "clear":
                return res.clear()
            raise InvalidArgumentError(f"coordinator '{key[1]}' has no operation {op!r}")
        raise InvalidArgumentError(f"unknown resource kind {rkind!r}")

    # -- callers that go away ------------------------------------------------------------------

    def abort(self, call_ids: list[str], reason: str = "abandoned by its caller") -> None:
        """End calls whose caller gave up: pending ones stop waiting and give
        back what they collected; delivered but unacknowledged results go back
        to the front of their queue."""
        fire: list[_Abort] = []
        back: list[_Delivery] = []
        now = time.monotonic()
        with self._lock:
            for cid in call_ids:
                pending = self._pending.get(cid)
                if pending is not None:
                    fire.append(pending.abort)
                delivery = self._inflight.pop(cid, None)
                if delivery is not None:
                    back.append(delivery)
                if pending is None and delivery is None:
                    self._tombstones[cid] = now
            # Forget tombstones of calls that never came (a minute is plenty).
            for cid in [c for c, t in self._tombstones.items() if now - t > 60.0]:
                del self._tombstones[cid]
        task = self.task
        for a in fire:
            a.fire(lambda: CancelledError(f"call on {task} was {reason}"))
        for d in reversed(back):
            self._put_back(d)

    def ack(self, call_ids: list[str]) -> bool:
        """The caller received these deliveries: forget them.

        Returns:
            True if every one was still in flight and within ``ack_window``
            (the caller may keep them); False if any had gone back already
            or came too late (then all of them go back: the caller must drop
            them and report the call as failed).
        """
        now = time.monotonic()
        with self._lock:
            found = [self._inflight.get(cid) for cid in call_ids]
            ok = all(d is not None and now - d.at <= self._ack_window for d in found)
            back = [] if ok else [d for d in found if d is not None]
            for cid in call_ids:
                self._inflight.pop(cid, None)
        for d in reversed(back):
            self._put_back(d)
        return ok

    def heartbeat(self, client: str) -> float:
        """Record that ``client`` is alive; returns the host's clock."""
        with self._lock:
            self._clients[client] = time.monotonic()
        return time.monotonic()

    def reap(self) -> list[str]:
        """Treat clients silent for ``client_timeout`` as dead (see :meth:`abort`).

        Returns:
            The clients found dead.
        """
        now = time.monotonic()
        with self._lock:
            dead = [c for c, seen in self._clients.items() if now - seen > self._client_timeout]
            for c in dead:
                del self._clients[c]
            ids = [cid for cid, p in self._pending.items() if p.client in dead]
            ids += [cid for cid, d in self._inflight.items()
                    if d.client in dead or now - d.at > self._ack_window]
        if ids:
            self.abort(ids, reason="abandoned: its client stopped sending heartbeats")
        return dead

    def _put_back(self, delivery: _Delivery) -> None:
        if delivery.raw is not None:
            delivery.queue._put_back_chunks(delivery.raw)
        else:
            delivery.queue._put_back_result(delivery.op, delivery.result)
        with self._lock:
            self.put_back_count += 1

    # -- stop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop serving: pending and later calls raise UnavailableError naming the task."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            pending = [p.abort for p in self._pending.values()]
        task = self.task
        for a in pending:
            a.fire(lambda: UnavailableError(f"task {task} was stopped"))
        self._stop_event.set()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` ran."""
        return self._stopped

    def wait_stopped(self, timeout: float | None) -> bool:
        """Wait until :meth:`stop`; True if it happened."""
        return self._stop_event.wait(timeout)

    def _check_running(self) -> None:
        if self._stopped:
            raise UnavailableError(f"task {self.task} was stopped")


def _kind_clash(name: str, existing: Any, wanted: str) -> str:
    have = {QueueBase: "queue", _Variable: "variable", ConditionalAccumulator: "accumulator",
            _StopRecord: "coordinator"}
    kind = next((v for k, v in have.items() if isinstance(existing, k)), type(existing).__name__)
    return f"Shared resource '{name}' is a {kind} but a {wanted} was requested"


def _check_queue_reopen(existing: QueueBase, requested: QueueBase, shared_name: str) -> None:
    """Q7 across processes: the same checks and messages as a local re-open."""
    prefix = f"Shared queue '{shared_name}'"
    if not isinstance(existing, QueueBase):
        raise InvalidArgumentError(_kind_clash(shared_name, existing, "queue"))
    if existing._kind != requested._kind:
        raise InvalidArgumentError(
            f"{prefix} is a {existing._kind} but a {requested._kind} was requested"
        )
    if existing.capacity != requested.capacity:
        raise InvalidArgumentError(
            f"{prefix} has capacity {existing.capacity} but requested capacity was "
            f"{requested.capacity}"
        )
    existing._check_reopen(shared_name, requested.capacity, requested._components,
                           requested.names, requested._storage_args)
