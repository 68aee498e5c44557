"""The resource container of one task: what a Server holds and serves.

A :class:`Host` maps ``(container, shared_name)`` to a resource (a queue, a
variable, an accumulator, a coordinator's stop record) in one
:class:`feedq.queues.ResourceManager`, and runs operations on them on behalf
of remote callers. It is plain threaded Python with no Ray in it: the Ray
actor (``_ray``) wraps one, and the in-process ``local`` backend calls one
directly, so both backends share every semantic rule. The queues and
accumulators are the local ones, used through their public API only.

What a host adds to the local objects, and why:

* **one way to stop a call** (STYLE 16). A blocking call runs with a
  :class:`~feedq.queues.CancelToken` of its own. When the caller gives up
  (client-side deadline, Ctrl-C), dies (no heartbeat for ``client_timeout``
  seconds) or the server stops, the host fires that token: the waiting call
  withdraws like a local one, and an abandoned dequeue gives back what it had
  collected, in order (T2, T3).
* **deliveries held until acknowledged** (``_ledger``). A remote dequeue's
  elements stay recorded as *in flight* until the caller acknowledges them.
  The caller hands them to user code only once the host has *confirmed* the
  acknowledgement (:meth:`Host.ack` returns True). If the caller dies or
  gives up first, or the acknowledgement comes later than ``ack_window``
  seconds after the delivery, they go back to the front of the queue
  (``put_back``; a padded batch as its unpadded rows) and the acknowledgement
  is refused (the caller then raises UnavailableError and drops them): a
  client that dies mid-dequeue, or a server paused longer than the client
  timeout, loses and duplicates nothing. (One window is left: an
  acknowledgement accepted whose confirmation never reaches the caller within
  ``ack_window`` plus a grace period loses those elements; it needs a reply
  delayed by seconds on the wire.)
* **calls abandoned before they start do nothing.** An abort that arrives
  before its call starts leaves a tombstone and the call is dropped. An
  abort that arrives after a non-delivering call (enqueue, take_grad) already
  ran cannot undo it: the client reports such an outcome as *unknown*.
* **a cluster default timeout** (TF1's ``operation_timeout_in_ms``, T1) for
  calls that pass no timeout.

Time (delivery age, client liveness, tombstones) is read from an injected
clock (STYLE 17), so tests advance it instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from feedq._core.timeouts import resolve_timeout
from feedq.distributed._cluster import TaskName
from feedq.distributed._compression import decode, encode
from feedq.distributed._hosted import HostedVariable, StopRecord
from feedq.distributed._ledger import CallLedger, Clock, Delivery
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from feedq.queues import (
    CancelToken,
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueBase,
    RandomShuffleQueue,
    ResourceManager,
)

__all__ = ["ACK_WINDOW", "BLOCKING_OPS", "DELIVERING_OPS", "Host", "QueueMeta", "ResourceKey",
           "WouldBlock"]

#: (container, shared_name): TF1's resource-manager key.
ResourceKey = tuple[str, str]


class WouldBlock(Exception):
    """An inline attempt (``Host.call(..., inline=True)``) would have to wait.

    Raised having done nothing (nothing inserted or taken): the caller
    retries the call where it may block (a worker thread).
    """


QUEUE_KINDS: dict[str, type[QueueBase]] = {
    "FIFOQueue": FIFOQueue,
    "RandomShuffleQueue": RandomShuffleQueue,
    "PaddingFIFOQueue": PaddingFIFOQueue,
    "PriorityQueue": PriorityQueue,
}

# Operations that may wait (run in a worker thread, with a CancelToken).
BLOCKING_OPS = frozenset({
    "enqueue", "enqueue_many", "dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available",
    "take_grad", "wait_stop",
})
# Operations whose result is held in flight until the caller acknowledges it.
DELIVERING_OPS = frozenset({"dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available"})
# Blocking operations an inline attempt tries: with timeout=0 one element
# either moves or nothing happens at all. (A batch could move in part: an
# enqueue_many inserts rows as room frees, Q15, and a dequeue_many collects
# what is there before it gives up; those go to a worker thread at once.)
INLINE_OPS = frozenset({"enqueue", "dequeue"})

_QUEUE_OPS = frozenset({
    "enqueue", "enqueue_many", "dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available",
    "close", "cancel", "size", "is_closed", "statistics",
})
_ACC_OPS = frozenset({
    "apply_grad", "take_grad", "set_global_step", "num_accumulated", "global_step",
    "statistics",
})
_STOP_OPS = frozenset({"request_stop", "state", "wait_stop", "clear"})

#: Seconds after a delivery within which its acknowledgement is accepted; a
#: later one is refused and the elements go back (the client gives up waiting
#: for the confirmation after this plus a grace period).
ACK_WINDOW = 10.0


@dataclass(frozen=True)
class QueueMeta:
    """What a client needs to know about a hosted queue."""

    kind: str
    name: str
    capacity: int
    dtypes: list[np.dtype[Any]]
    shapes: list[tuple[int | None, ...] | None]
    names: list[str] | None


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
        clock: the monotonic clock of delivery ages and client liveness
            (tests pass a fake one).
    """

    def __init__(self, task: TaskName, operation_timeout: float | None = None,
                 client_timeout: float = 3.0, ack_window: float = ACK_WINDOW,
                 clock: Clock = time.monotonic) -> None:
        self.task = task
        self._resources = ResourceManager("resource")
        self._ledger = CallLedger(ack_window, client_timeout, clock)
        self._lock = threading.Lock()
        self._operation_timeout = operation_timeout  # guarded by self._lock
        self._stopped = False  # guarded by self._lock
        self._stop_event = threading.Event()
        self.put_back_count = 0  # guarded by self._lock: deliveries returned for dead/aborted callers

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
        counts = self._ledger.counts()
        keys = cast("list[ResourceKey]", self._resources.names())
        with self._lock:
            return {
                "task": str(self.task),
                "resources": sorted(f"{c}/{n}" for c, n in keys),
                "pending_calls": counts["pending_calls"],
                "inflight": counts["inflight"],
                "clients": counts["clients"],
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
        name = key[1]
        if rkind == "queue":
            cls = QUEUE_KINDS.get(spec["kind"])
            if cls is None:
                raise InvalidArgumentError(f"unknown queue kind {spec['kind']!r}")
            kwargs = dict(spec["kwargs"])
            kwargs.setdefault("name", name)
            requested = cls(**kwargs)
            q: QueueBase = self._resources.get_or_create(
                "queue", key, lambda: requested,
                lambda existing: existing.check_reopen(requested, name), label=name)
            return QueueMeta(_queue_kind(q), q.name, q.capacity, q.dtypes, q.shapes, q.names)
        if rkind == "variable":
            initial = spec.get("initial_value")
            dtype = spec.get("dtype")

            def new_variable() -> HostedVariable:
                if initial is None:
                    raise FailedPreconditionError(
                        f"Attempting to use uninitialized value {name} on {self.task}")
                return HostedVariable(name, np.array(initial, dtype=dtype))

            def check_variable(existing: HostedVariable) -> None:
                if initial is not None:
                    existing.check_reopen(np.asarray(initial, dtype=dtype), dtype is not None)

            var: HostedVariable = self._resources.get_or_create(
                "variable", key, new_variable, check_variable, label=name)
            return {"dtype": var.dtype, "shape": var.shape}
        if rkind == "accumulator":
            acc = ConditionalAccumulator(name=name, **spec)
            existing: ConditionalAccumulator = self._resources.get_or_create(
                "accumulator", key, lambda: acc, lambda have: have.check_reopen(acc, name),
                label=name)
            return {"dtype": existing.dtype, "shape": existing.shape}
        if rkind == "coordinator":
            self._resources.get_or_create("coordinator", key, StopRecord, label=name)
            return {}
        raise InvalidArgumentError(f"unknown resource kind {rkind!r}")

    def reset(self, containers: list[str] | None = None) -> int:
        """Drop the resources of some containers (all with None); TF1's
        ``Session.reset``. Pending calls on them are cancelled.

        Returns:
            The number of resources dropped.
        """
        dropped = self._resources.pop_where(
            lambda k: containers is None or cast("ResourceKey", k)[0] in containers)
        for res in dropped:
            if isinstance(res, (QueueBase, ConditionalAccumulator)):
                res.cancel(CancelledError(f"container reset on {self.task}"))
        return len(dropped)

    # -- calls --------------------------------------------------------------------------

    def call(self, rkind: str, key: ResourceKey, op: str, args: tuple[Any, ...],
             kwargs: dict[str, Any], call_id: str | None = None,
             client: str | None = None, inline: bool = False,
             cancel: CancelToken | None = None) -> Any:
        """Run one operation on a resource.

        ``kwargs["timeout"]`` of a blocking op: ``None`` = the cluster default.
        With a ``call_id`` the call can be aborted (:meth:`abort`) and a
        delivering op's result is held in flight until :meth:`ack`. With
        ``inline`` a queue operation that would have to wait raises
        :class:`WouldBlock` instead, having done nothing (the Ray actor tries
        inline on its event loop first, and only waits in a thread if needed).
        ``cancel`` (an in-process caller's token) ends the call as an abort does.
        """
        self._check_running()
        if inline and (rkind != "queue" or op not in INLINE_OPS):
            raise WouldBlock(op)
        wire = None
        if "wire" in kwargs:
            kwargs = dict(kwargs)
            wire = kwargs.pop("wire")
        if op in ("enqueue", "enqueue_many") and args:
            args = (decode(args[0]), *args[1:])
        if client is not None:
            self._ledger.seen(client)
        have = self._resources.kind_of(key)
        res = self._resources.get(key)
        if res is None or have is None:
            raise NotFoundError(
                f"Resource {key[0] or 'localhost'}/{key[1]} does not exist on {self.task}"
            )
        if have != rkind:
            raise InvalidArgumentError(
                f"Shared resource '{key[1]}' is a {have} but a {rkind} was requested")
        if op in BLOCKING_OPS:
            kwargs = dict(kwargs, timeout=self._timeout_of(kwargs.get("timeout"), inline))
        token = cancel
        if call_id is not None:
            token = self._ledger.start(call_id, client)
            if token is None:
                # Its caller gave up before it started: do nothing at all.
                raise CancelledError(f"call on {self.task} was abandoned by its caller")
        unlink = None
        if cancel is not None and token is not None and token is not cancel:
            own = token
            unlink = cancel.on_fire(lambda: own.fire(cancel.error()))
        # Only a caller that will acknowledge needs what a put-back restores.
        keep = call_id is not None and client is not None
        try:
            result, back = self._dispatch(rkind, res, key, op, args, kwargs, token, keep)
        except BaseException as exc:
            abandoned = None if call_id is None else self._ledger.finish(call_id)
            if inline and isinstance(exc, DeadlineExceededError):
                if abandoned is not None:
                    raise abandoned from None  # aborted meanwhile: no retry in a thread
                raise WouldBlock(op) from None
            if isinstance(exc, CancelledError) and token is not None and token.fired:
                raise token.error() from None
            raise
        finally:
            if unlink is not None:
                unlink()
        if call_id is not None:
            held = None
            if back is not None:
                held = Delivery(client, res, back[0], back[1], self._ledger.clock())
            abandoned = self._ledger.finish(call_id, held)
            if abandoned is not None and held is not None:
                # Abandoned after the elements were taken: they go back (T2).
                self._put_back([held])
                raise abandoned
        if op in DELIVERING_OPS:
            return encode(result, wire)
        return result

    def _timeout_of(self, timeout: float | None, inline: bool) -> float:
        if inline:
            return 0.0
        if timeout is None:
            # The cluster default; math.inf so the host process's own
            # default (feedq.set_default_timeout) is not applied a second time.
            with self._lock:
                default = self._operation_timeout
            return math.inf if default is None else default
        return timeout

    def _dispatch(self, rkind: str, res: Any, key: ResourceKey, op: str, args: tuple[Any, ...],
                  kwargs: dict[str, Any], token: CancelToken | None, keep: bool
                  ) -> tuple[Any, tuple[Any, bool] | None]:
        """Run ``op``. Returns its result and, for a delivering op when
        ``keep``, what :meth:`~feedq.queues.QueueBase.put_back` restores it
        from: ``(elements, many)``."""
        name = key[1]
        if rkind == "queue":
            q: QueueBase = res
            if op not in _QUEUE_OPS:
                raise InvalidArgumentError(f"queue '{name}' has no operation {op!r}")
            if op == "cancel":
                q.cancel(args[0] if args else None)
                return None, None
            if op not in BLOCKING_OPS:
                return getattr(q, op)(*args, **kwargs), None
            if keep and op in DELIVERING_OPS and op != "dequeue" and _ragged(q):
                # A padded batch cannot be un-padded: keep the rows as stored
                # for a put-back, and pad them for the caller.
                rows = getattr(q, op)(*args, cancel=token, padded=False, **kwargs)
                return q.stack(rows), (rows, True)
            result = getattr(q, op)(*args, cancel=token, **kwargs)
            if keep and op in DELIVERING_OPS:
                return result, (result, op != "dequeue")
            return result, None
        if rkind == "variable":
            return res.op(op, *args), None
        if rkind == "accumulator":
            acc: ConditionalAccumulator = res
            if op not in _ACC_OPS:
                raise InvalidArgumentError(f"accumulator '{name}' has no operation {op!r}")
            if op == "take_grad":
                return acc.take_grad(args[0], kwargs.get("timeout"), cancel=token), None
            return getattr(acc, op)(*args), None
        if rkind == "coordinator":
            record: StopRecord = res
            if op not in _STOP_OPS:
                raise InvalidArgumentError(f"coordinator '{name}' has no operation {op!r}")
            if op == "request_stop":
                return record.request_stop(args[0], args[1]), None
            if op == "wait_stop":
                return record.wait_stop(resolve_timeout(kwargs.get("timeout")), token,
                                        kwargs.get("after")), None
            return getattr(record, op)(), None
        raise InvalidArgumentError(f"unknown resource kind {rkind!r}")

    # -- callers that go away ------------------------------------------------------------------

    def abort(self, call_ids: list[str], reason: str = "abandoned by its caller") -> None:
        """End calls whose caller gave up: pending ones stop waiting and give
        back what they collected; delivered but unacknowledged results go back
        to the front of their queue."""
        task = self.task
        fire, back = self._ledger.abort(
            call_ids, lambda: CancelledError(f"call on {task} was {reason}"))
        for token, cause in fire:
            token.fire(cause)
        self._put_back(back)

    def ack(self, call_ids: list[str]) -> bool:
        """The caller received these deliveries: forget them.

        Returns:
            True if every one was still in flight and within ``ack_window``
            (the caller may keep them); False if any had gone back already
            or came too late (then all of them go back: the caller must drop
            them and report the call as failed).
        """
        ok, back = self._ledger.ack(call_ids)
        self._put_back(back)
        return ok

    def heartbeat(self, client: str) -> float:
        """Record that ``client`` is alive; returns the host's clock."""
        self._ledger.seen(client)
        return self._ledger.clock()

    def reap(self) -> list[str]:
        """Treat clients silent for ``client_timeout`` as dead, and deliveries
        unacknowledged for ``ack_window`` as abandoned (see :meth:`abort`).

        Returns:
            The clients found dead.
        """
        dead, ids = self._ledger.reap()
        if ids:
            self.abort(ids, reason="abandoned: its client stopped sending heartbeats")
        return dead

    def _put_back(self, deliveries: list[Delivery]) -> None:
        # Latest first: each goes to the front, so the earliest ends up first.
        for delivery in reversed(deliveries):
            delivery.put_back()
            with self._lock:
                self.put_back_count += 1

    # -- stop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop serving: pending and later calls raise UnavailableError naming the task."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        task = self.task
        for token, cause in self._ledger.stop_all(lambda: UnavailableError(f"task {task} was stopped")):
            token.fire(cause)
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


def _queue_kind(q: QueueBase) -> str:
    return next(kind for kind, cls in QUEUE_KINDS.items() if type(q) is cls)


def _ragged(q: QueueBase) -> bool:
    """Whether ``q`` has components without a fixed shape (padded in batches)."""
    return any(s is not None and None in s for s in q.shapes)
