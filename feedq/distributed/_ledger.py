"""The delivery ledger of a host: which remote calls run, which results are
out for delivery, which clients are alive.

Bookkeeping only, under one lock and on an injected clock (STYLE 17): the
ledger decides, the host (``_host``) acts on its decisions outside the lock
(firing a call's :class:`~feedq.queues.CancelToken`, giving elements back with
``put_back``).

* **pending calls**: a call with a call id holds a CancelToken while it runs;
  :meth:`CallLedger.abort` and :meth:`CallLedger.stop_all` hand back the
  tokens to fire.
* **tombstones**: an abort that arrives before its call started is
  remembered, and the call is dropped when it comes (forgotten after
  :data:`TOMBSTONE_TTL` seconds).
* **deliveries**: a delivering call's result stays recorded until the caller
  acknowledges it within ``ack_window`` seconds; an aborted, late or
  orphaned delivery is handed back to be put back in its queue.
* **clients**: the last heartbeat of each client; one silent for
  ``client_timeout`` seconds is dead, and its calls and deliveries go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from feedq.queues import CancelToken, QueueBase

__all__ = ["TOMBSTONE_TTL", "CallLedger", "Clock", "Delivery"]

#: A monotonic clock in seconds (``time.monotonic``; tests pass a fake one).
Clock = Callable[[], float]

#: Seconds an abort that overtook its call is remembered.
TOMBSTONE_TTL = 60.0


@dataclass
class Delivery:
    """A delivered result not yet acknowledged: what to put back, and where.

    ``elements`` is what :meth:`~feedq.queues.QueueBase.put_back` restores
    exactly (for a padded batch, its per-element rows); ``many`` says whether
    it is a batch.
    """

    client: str | None
    queue: QueueBase
    elements: Any
    many: bool
    at: float

    def put_back(self) -> None:
        """Return the elements to the front of their queue, in order."""
        self.queue.put_back(self.elements, many=self.many)


@dataclass
class _Pending:
    client: str | None
    token: CancelToken
    # Set under the ledger's lock by abort/stop_all, before the token fires
    # with it: a result that completes after this goes back instead of out.
    cause: BaseException | None = None


@dataclass
class _Ledger:
    pending: dict[str, _Pending] = field(default_factory=dict)
    inflight: dict[str, Delivery] = field(default_factory=dict)
    tombstones: dict[str, float] = field(default_factory=dict)
    clients: dict[str, float] = field(default_factory=dict)


class CallLedger:
    """Pending calls, deliveries in flight, tombstones and client liveness.

    Args:
        ack_window: seconds after a delivery within which its
            acknowledgement is accepted.
        client_timeout: seconds without a heartbeat after which a client
            counts as dead.
        clock: the clock every time here is read from.
    """

    def __init__(self, ack_window: float, client_timeout: float, clock: Clock) -> None:
        self.ack_window = ack_window
        self.client_timeout = client_timeout
        self.clock = clock
        self._lock = threading.Lock()
        self._s = _Ledger()  # every field guarded by self._lock

    # -- calls ------------------------------------------------------------------------

    def seen(self, client: str) -> None:
        """``client`` is alive now (a call or a heartbeat from it)."""
        now = self.clock()
        with self._lock:
            self._s.clients[client] = now

    def start(self, call_id: str, client: str | None) -> CancelToken | None:
        """Register a call about to run; returns its token, or ``None`` when
        the call was aborted before it started (a tombstone): then it must
        do nothing at all."""
        token = CancelToken()
        with self._lock:
            if self._s.tombstones.pop(call_id, None) is not None:
                return None
            self._s.pending[call_id] = _Pending(client, token)
        return token

    def finish(self, call_id: str, delivery: Delivery | None = None) -> BaseException | None:
        """The call ended; with a ``delivery``, record it as out for delivery.

        Returns:
            ``None``; or, when the call was aborted meanwhile, the error its
            caller gets: then ``delivery`` is not recorded and must go back.
        """
        with self._lock:
            pending = self._s.pending.pop(call_id, None)
            if pending is None:
                return None
            cause = pending.cause
            if cause is None and pending.token.fired:
                cause = pending.token.error()
            if delivery is not None and cause is None:
                self._s.inflight[call_id] = delivery
            return cause

    # -- callers that go away ---------------------------------------------------------------

    def abort(self, call_ids: list[str], error: Callable[[], BaseException]
              ) -> tuple[list[tuple[CancelToken, BaseException]], list[Delivery]]:
        """Abort calls.

        Returns:
            The running ones' tokens, each with the error (from ``error()``)
            to fire it with, and the deliveries of those already delivered
            (to put back, in this order). An unknown id leaves a tombstone
            for a call still to come.
        """
        fire: list[tuple[CancelToken, BaseException]] = []
        back: list[Delivery] = []
        now = self.clock()
        with self._lock:
            s = self._s
            for cid in call_ids:
                pending = s.pending.get(cid)
                if pending is not None and pending.cause is None:
                    pending.cause = error()
                    fire.append((pending.token, pending.cause))
                delivery = s.inflight.pop(cid, None)
                if delivery is not None:
                    back.append(delivery)
                if pending is None and delivery is None:
                    s.tombstones[cid] = now
            for cid in [c for c, t in s.tombstones.items() if now - t > TOMBSTONE_TTL]:
                del s.tombstones[cid]
        return fire, back

    def ack(self, call_ids: list[str]) -> tuple[bool, list[Delivery]]:
        """The caller received these deliveries.

        Returns:
            ``(True, [])`` if every one was still out and within
            ``ack_window``: they are forgotten. Otherwise ``(False, back)``:
            all of them are forgotten and ``back`` (those still recorded) must
            go back to their queues.
        """
        now = self.clock()
        with self._lock:
            inflight = self._s.inflight
            found = [inflight.pop(cid, None) for cid in call_ids]
        ok = all(d is not None and now - d.at <= self.ack_window for d in found)
        return ok, ([] if ok else [d for d in found if d is not None])

    def reap(self) -> tuple[list[str], list[str]]:
        """Find dead clients and expired deliveries.

        Returns:
            ``(dead clients, call ids to abort)``: the pending calls and
            deliveries of dead clients, and deliveries older than
            ``ack_window``.
        """
        now = self.clock()
        with self._lock:
            s = self._s
            dead = [c for c, seen in s.clients.items() if now - seen > self.client_timeout]
            for c in dead:
                del s.clients[c]
            ids = [cid for cid, p in s.pending.items() if p.client in dead]
            ids += [cid for cid, d in s.inflight.items()
                    if d.client in dead or now - d.at > self.ack_window]
        return dead, ids

    def stop_all(self, error: Callable[[], BaseException]
                 ) -> list[tuple[CancelToken, BaseException]]:
        """Abort every running call; returns their tokens, each with the
        error to fire it with."""
        fire = []
        with self._lock:
            for pending in self._s.pending.values():
                if pending.cause is None:
                    pending.cause = error()
                    fire.append((pending.token, pending.cause))
        return fire

    def counts(self) -> dict[str, int]:
        """Sizes for :meth:`Host.info`: pending calls, deliveries, clients."""
        with self._lock:
            return {"pending_calls": len(self._s.pending), "inflight": len(self._s.inflight),
                    "clients": len(self._s.clients)}

