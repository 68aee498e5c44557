"""The client side of the Ray backend: actor handles, calls, heartbeats.

Why it is built this way:

* a dequeue's elements are handed to user code only after the server
  confirmed their acknowledgement (``_host``), so a client that exits at once,
  or a server paused past the client timeout, duplicates nothing;
* a daemon **heartbeat** thread per client process pings the servers it uses
  every :data:`~feedq.distributed._ray.HEARTBEAT_INTERVAL` seconds: the
  servers learn that the client lives (or else end its calls and put its
  unacknowledged deliveries back), and the client learns within
  ``unresponsive_after`` seconds that a server is gone, so no call waits
  forever on a dead task;
* a caller waits on one event that whatever ends the wait sets: the reply
  arriving (a callback on the Ray future), the heartbeat thread finding the
  task unavailable, or the call's :class:`~feedq.queues.CancelToken`. Only
  the heartbeat thread looks at the clock (Ray-side liveness is the absence
  of answers, which only time can tell).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from feedq.distributed._cluster import TaskName
from feedq.distributed._host import ACK_WINDOW, BLOCKING_OPS, DELIVERING_OPS
from feedq.distributed._ray import (
    CLIENT_GRACE,
    HEARTBEAT_INTERVAL,
    UNRESPONSIVE_AFTER,
    actor_name,
    require_ray,
)
from feedq.errors import DeadlineExceededError, FeedqError, UnavailableError
from feedq.queues import CancelToken

__all__ = ["RayTransport"]

_LOG = logging.getLogger(__name__)


class RayTransport:
    """Client side of the Ray backend: actor handles, calls, heartbeats.

    Args:
        namespace: the Ray namespace of the cluster's task actors.
        unresponsive_after: seconds without a heartbeat reply after which a
            server counts as unavailable.
    """

    def __init__(self, namespace: str, unresponsive_after: float = UNRESPONSIVE_AFTER) -> None:
        self._ray = require_ray()
        self.namespace = namespace
        self.client_id = uuid.uuid4().hex
        self._unresponsive_after = unresponsive_after
        self._lock = threading.Lock()
        self._handles: dict[TaskName, Any] = {}  # guarded by self._lock
        self._beats: dict[TaskName, tuple[Any, float]] = {}  # guarded by self._lock
        self._dead: dict[TaskName, str] = {}  # guarded by self._lock
        # The wake-ups of calls waiting on each task; the heartbeat thread
        # sets them when it finds the task unavailable.
        self._waiting: dict[TaskName, set[threading.Event]] = {}  # guarded by self._lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None  # guarded by self._lock

    # -- handles ---------------------------------------------------------------------

    def handle(self, task: TaskName) -> Any:
        """The actor handle of ``task``'s server.

        Raises:
            UnavailableError: no server runs for the task.
        """
        with self._lock:
            h = self._handles.get(task)
            if h is not None and task not in self._dead:
                return h
        try:
            h = self._ray.get_actor(actor_name(task), namespace=self.namespace)
        except ValueError:
            raise UnavailableError(
                f"task {task} is unavailable: no feedq Server runs for it "
                f"(no Ray actor {actor_name(task)!r} in namespace {self.namespace!r})"
            ) from None
        with self._lock:
            self._handles[task] = h
            self._dead.pop(task, None)
            self._beats.pop(task, None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._heartbeats, daemon=True,
                                                name=f"feedq-heartbeat-{self.client_id[:8]}")
                self._thread.start()
        return h

    def forget(self, task: TaskName) -> None:
        """Drop a cached handle (after the server was stopped)."""
        with self._lock:
            self._handles.pop(task, None)
            self._beats.pop(task, None)

    # -- calls ---------------------------------------------------------------------------

    def call(self, task: TaskName, rkind: str, key: tuple[str, str], op: str,
             args: tuple[Any, ...], kwargs: dict[str, Any],
             cancel: CancelToken | None = None) -> Any:
        """Run one operation on a task's resource; see the module docstring.

        A dequeue's result is returned only once the server has confirmed
        the acknowledgement of its delivery; if it cannot be confirmed the
        server puts the elements back and this raises UnavailableError, so
        nothing is delivered twice.

        Args:
            cancel: a token that ends the wait (the call is abandoned on the
                server, as on a client-side deadline) and makes this raise
                the token's error.

        Raises:
            UnavailableError: the server died or stopped answering, or did
                not confirm a dequeue's delivery.
            DeadlineExceededError: the server did not answer within the
                call's timeout plus a grace period. An abandoned dequeue takes
                nothing; any other call (enqueue, take_grad, ...) may already
                have run on the server, and the message says its outcome is
                unknown.
            FeedqError: whatever the operation raised on the host.
        """
        h = self.handle(task)
        blocking = op in BLOCKING_OPS
        call_id = uuid.uuid4().hex if blocking else None
        ref = h.call.remote(rkind, key, op, args, kwargs, call_id, self.client_id)
        timeout = kwargs.get("timeout")
        ok, value = self._wait(task, h, ref, call_id, timeout if blocking else None,
                               op=op, cancel=cancel)
        if not ok:
            raise value
        if call_id is not None and op in DELIVERING_OPS:
            # Received: the host may forget the elements. Until it confirms
            # that, it would put them back were this process to die or the
            # acknowledgement to come late, so they are handed out only once
            # it has confirmed (else they would be delivered twice).
            self._confirm_ack(task, h, call_id)
        return value

    def _confirm_ack(self, task: TaskName, h: Any, call_id: str) -> None:
        ray = self._ray
        limit = ACK_WINDOW + CLIENT_GRACE
        why = None
        try:
            # Waits out an unresponsive server (a paused one may still
            # confirm: giving up on an acknowledgement it then accepts would
            # lose the elements); only a dead one ends the wait early.
            status, value = self._await(task, h.ack.remote([call_id]),
                                        time.monotonic() + limit, None, dead_only=True)
            if status == "down":
                why = f"its server could not confirm receipt ({value})"
            elif status == "late":
                why = f"its server did not confirm receipt within {limit:g} s"
            elif not value:
                why = "its server had already put the elements back (it saw no heartbeat or " \
                      "no acknowledgement in time)"
        except ray.exceptions.RayError as exc:
            why = f"its server could not confirm receipt ({type(exc).__name__})"
        except BaseException:
            self._abandon(h, call_id)
            raise
        if why is not None:
            self._abandon(h, call_id)
            raise UnavailableError(
                f"task {task} is unavailable: {why}; the dequeued elements were returned "
                "to the queue (nothing was taken)"
            )

    def request(self, task: TaskName, method: str, *args: Any) -> Any:
        """Call a plain actor method (info, reset, ...) with liveness checks."""
        h = self.handle(task)
        return self._wait(task, h, getattr(h, method).remote(*args), None, None)

    def open(self, task: TaskName, rkind: str, key: tuple[str, str], spec: dict[str, Any]) -> Any:
        """Get or create a resource on ``task``; errors as the host raised them."""
        ok, value = self.request(task, "open", rkind, key, spec)
        if not ok:
            raise value
        return value

    def _wait(self, task: TaskName, h: Any, ref: Any, call_id: str | None,
              timeout: float | None, op: str | None = None,
              cancel: CancelToken | None = None) -> Any:
        ray = self._ray
        # What giving up means for the caller: a delivering call that is
        # abandoned takes nothing (its elements go back); any other call may
        # already have run on the server, so its outcome is unknown.
        if call_id is None or op in DELIVERING_OPS:
            outcome = "the call was abandoned (it took nothing)"
        else:
            outcome = ("the outcome is unknown: the call may have taken effect "
                       "(it was abandoned, but the server may have run it already)")
        deadline = None
        if timeout is not None and timeout != float("inf"):
            deadline = time.monotonic() + float(timeout) + CLIENT_GRACE + 0.1 * float(timeout)
        try:
            status, value = self._await(task, ref, deadline, cancel)
        except BaseException as exc:
            if isinstance(exc, FeedqError):
                raise
            if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
                self._mark_dead(task, "its server died")
                # Best effort: were it still alive, it drops or undoes the call.
                self._abandon(h, call_id)
                raise UnavailableError(
                    f"task {task} is unavailable: its server died or is unreachable; {outcome}"
                ) from None
            if isinstance(exc, ray.exceptions.RayError):
                self._abandon(h, call_id)
                raise UnavailableError(f"task {task} is unavailable: {exc}; {outcome}") from None
            # KeyboardInterrupt and friends: give up the remote call losslessly.
            self._abandon(h, call_id)
            raise
        if status == "done":
            return value
        self._abandon(h, call_id)
        if status == "cancelled":
            assert cancel is not None
            raise cancel.error()
        if status == "down":
            raise UnavailableError(f"task {task} is unavailable: {value}; {outcome}")
        assert timeout is not None
        raise DeadlineExceededError(
            f"Timed out waiting for task {task}: no answer within the call's "
            f"timeout of {timeout:g} s plus {CLIENT_GRACE:g} s; {outcome}"
        )

    def _await(self, task: TaskName, ref: Any, deadline: float | None,
               cancel: CancelToken | None, dead_only: bool = False) -> tuple[str, Any]:
        """Wait for ``ref`` until it is ready, ``task`` is unavailable (with
        ``dead_only``: dead, not merely silent), the monotonic ``deadline``
        passes or ``cancel`` fires.

        Returns:
            ``("done", value)``, ``("down", reason)``, ``("late", None)`` or
            ``("cancelled", None)``.

        Raises:
            whatever ``ray.get`` raises for the ready reference.
        """
        wake = threading.Event()
        future = ref.future()
        future.add_done_callback(lambda _f: wake.set())
        with self._lock:
            self._waiting.setdefault(task, set()).add(wake)
        unsubscribe = None if cancel is None else cancel.on_fire(wake.set)
        # Silence is judged from the first wake on: a call made just as a
        # paused server resumes gets its reply (or the heartbeat thread's
        # verdict, within HEARTBEAT_INTERVAL) instead of failing at once on
        # a heartbeat answer still on its way.
        judge_silence = False
        try:
            while True:
                wake.clear()  # before the checks: a wake from now on is not lost
                if future.done():
                    return "done", self._ray.get(ref)
                if cancel is not None and cancel.fired:
                    return "cancelled", None
                if dead_only or not judge_silence:
                    reason = self._dead_reason(task)
                else:
                    reason = self.unavailable(task)
                if reason is not None:
                    return "down", reason
                judge_silence = True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return "late", None
                wake.wait(remaining)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            with self._lock:
                waiting = self._waiting.get(task)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._waiting[task]

    def _abandon(self, h: Any, call_id: str | None) -> None:
        if call_id is not None:
            try:
                h.abort.remote([call_id])
            except Exception:  # noqa: BLE001 - best effort: the host also reaps dead clients
                _LOG.debug("could not send abort for %s", call_id, exc_info=True)

    # -- heartbeats ----------------------------------------------------------------------

    def unavailable(self, task: TaskName) -> str | None:
        """Why ``task`` counts as unavailable now, or None."""
        with self._lock:
            if task in self._dead:
                return self._dead[task]
            beat = self._beats.get(task)
        if beat is not None and time.monotonic() - beat[1] > self._unresponsive_after:
            ready, _ = self._ray.wait([beat[0]], timeout=0)
            if not ready:
                return f"its server did not answer for {self._unresponsive_after:g} s"
        return None

    def _dead_reason(self, task: TaskName) -> str | None:
        with self._lock:
            return self._dead.get(task)

    def _mark_dead(self, task: TaskName, reason: str) -> None:
        with self._lock:
            self._dead[task] = reason
            self._beats.pop(task, None)
            waiting = list(self._waiting.get(task, ()))
        for wake in waiting:
            wake.set()

    def _heartbeats(self) -> None:
        ray = self._ray
        while not self._stop.wait(HEARTBEAT_INTERVAL):
            with self._lock:
                targets = [(t, h, self._beats.get(t)) for t, h in self._handles.items()
                           if t not in self._dead]
            for task, h, beat in targets:
                try:
                    if beat is not None:
                        ready, _ = ray.wait([beat[0]], timeout=0)
                        if not ready:
                            continue  # still out; unavailable() judges its age
                        ray.get(beat[0])
                    ref = h.heartbeat.remote(self.client_id)
                    with self._lock:
                        if task in self._handles:
                            self._beats[task] = (ref, time.monotonic())
                except Exception as exc:  # noqa: BLE001 - any failure marks the task dead
                    self._mark_dead(task, f"its server died ({type(exc).__name__})")
            self._wake_waiters_of_unavailable_tasks()
            if not ray.is_initialized():
                return

    def _wake_waiters_of_unavailable_tasks(self) -> None:
        """Let calls waiting on a task that stopped answering see it now."""
        with self._lock:
            tasks = list(self._waiting)
        for task in tasks:
            if self.unavailable(task) is None:
                continue
            with self._lock:
                waiting = list(self._waiting.get(task, ()))
            for wake in waiting:
                wake.set()

    def close(self) -> None:
        """Stop the heartbeat thread (the servers then treat this client as gone)."""
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
            self._handles.clear()
            self._beats.clear()
        if thread is not None:
            thread.join(timeout=5.0)
