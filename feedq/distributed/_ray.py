"""Everything that touches Ray: the lazy import, the task actor, the client transport.

Ray is imported on first use only (STYLE 14): ``import feedq`` and
``import feedq.distributed`` work without it, and the first call that needs
it raises one :class:`~feedq.devices.MissingExtraError` naming
``pip install "feedq[ray]"``.

The transport, and why it is built this way:

* one **detached async actor per task**, named ``feedq/<job>/<index>`` in the
  cluster's namespace, pinned to the node offering the task's custom
  resource, never restarted (a restarted server would hold empty queues and
  lose data silently);
* blocking operations run in the actor's thread pool under an abort token
  (``_host``), so waits in one call never stall the actor's event loop and
  any waiter can be ended;
* results come back as ``(ok, value_or_exception)`` envelopes, so errors
  arrive as the same feedq exception with the same message as locally, not
  wrapped in Ray's task error;
* a daemon **heartbeat** thread per client process pings the servers it uses
  every 0.5 s: the servers learn that the client lives (or else put its
  unacknowledged deliveries back), and the client learns within
  ``unresponsive_after`` seconds that a server is gone, so no call waits
  forever on a dead task.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pickle
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from ..errors import (
    DeadlineExceededError,
    FeedqError,
    InvalidArgumentError,
    UnavailableError,
)
from ._cluster import TaskName
from ._host import BLOCKING_OPS, DELIVERING_OPS, Host, WouldBlock

__all__ = ["RayTransport", "actor_name", "require_ray", "task_server_class"]

_LOG = logging.getLogger(__name__)

#: How often clients ping the servers they use, and servers look for dead clients.
HEARTBEAT_INTERVAL = 0.5
#: A server that answered no heartbeat for this long counts as unavailable.
UNRESPONSIVE_AFTER = 3.0
#: Seconds a client waits beyond a call's own timeout before abandoning it.
CLIENT_GRACE = 2.0
#: How long a blocked client sleeps between checks of the server's health.
_POLL = 0.25


def require_ray() -> ModuleType:
    """Import Ray or raise one clear error naming the extra to install.

    Raises:
        MissingExtraError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        from ..devices import MissingExtraError

        raise MissingExtraError(
            'feedq.distributed with backend="ray" needs Ray, which is not installed: '
            'pip install "feedq[ray]"'
        ) from exc
    return ray


def actor_name(task: TaskName) -> str:
    """The Ray actor name of a task's server."""
    return f"feedq/{task.job}/{task.index}"


def _portable(exc: BaseException) -> BaseException:
    """An exception that survives pickling (Ray ships it to the caller)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any unpicklable exception is replaced
        return FeedqError(f"{type(exc).__name__}: {exc}")


class _TaskServer:
    """The body of the async task actor (wrapped by ``ray.remote`` lazily)."""

    def __init__(self, task: str, operation_timeout: float | None, client_timeout: float) -> None:
        self._host = Host(TaskName.parse(task), operation_timeout, client_timeout)
        # Blocked queue calls each hold a thread while they wait.
        self._pool = ThreadPoolExecutor(max_workers=512, thread_name_prefix="feedq-host")
        self._reaper: asyncio.Task[None] | None = None

    def _ensure_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while not self._host.stopped:
            await asyncio.sleep(HEARTBEAT_INTERVAL)
            self._host.reap()

    async def call(self, rkind: str, key: tuple[str, str], op: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any], call_id: str | None, client: str | None
                   ) -> tuple[bool, Any]:
        self._ensure_reaper()
        host = self._host
        try:
            if rkind == "queue" and op in BLOCKING_OPS:
                # Most calls need not wait: serve them on the event loop, and
                # hand only those that must wait to a thread.
                try:
                    return True, host.call(rkind, key, op, args, kwargs, call_id, client,
                                           inline=True)
                except WouldBlock:
                    pass
            if op in BLOCKING_OPS:
                loop = asyncio.get_running_loop()
                fut = loop.run_in_executor(
                    self._pool, functools.partial(host.call, rkind, key, op, args, kwargs,
                                                  call_id, client))
                try:
                    value = await asyncio.shield(fut)
                except asyncio.CancelledError:
                    # Ray cancelled the call: end the wait, give elements back.
                    if call_id is not None:
                        host.abort([call_id])
                    raise
            else:
                value = host.call(rkind, key, op, args, kwargs, call_id, client)
            return True, value
        except Exception as exc:  # noqa: BLE001 - shipped to the caller in the envelope
            return False, _portable(exc)

    async def open(self, rkind: str, key: tuple[str, str], spec: dict[str, Any]) -> tuple[bool, Any]:
        self._ensure_reaper()
        try:
            return True, self._host.open(rkind, key, spec)
        except Exception as exc:  # noqa: BLE001
            return False, _portable(exc)

    async def ack(self, call_ids: list[str]) -> None:
        self._host.ack(call_ids)

    async def abort(self, call_ids: list[str]) -> None:
        self._host.abort(call_ids)

    async def heartbeat(self, client: str) -> float:
        self._ensure_reaper()
        return self._host.heartbeat(client)

    async def info(self) -> dict[str, Any]:
        info = self._host.info()
        info["pid"] = os.getpid()
        return info

    async def reset(self, containers: list[str] | None) -> int:
        return self._host.reset(containers)

    async def set_operation_timeout(self, seconds: float | None) -> float | None:
        return self._host.set_operation_timeout(seconds)

    async def stop(self) -> None:
        self._host.stop()

    async def wait_stopped(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._host.wait_stopped, timeout)


@functools.lru_cache(maxsize=1)
def task_server_class() -> Any:
    """The Ray actor class of a task server (built on first use)."""
    ray = require_ray()
    return ray.remote(_TaskServer)


def ensure_connected(address: str | None, namespace: str) -> ModuleType:
    """Connect this process to a Ray cluster unless it already is.

    Args:
        address: the Ray cluster address (``host:port`` of its GCS, or
            ``"local"`` to start a private runtime); ``None`` reads
            ``RAY_ADDRESS``.
        namespace: the Ray namespace of the feedq cluster.

    Raises:
        MissingExtraError: Ray is not installed.
        InvalidArgumentError: no address given and ``RAY_ADDRESS`` unset.
        UnavailableError: no cluster reachable at the address.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise InvalidArgumentError(
            "no Ray cluster address: pass address='host:port' (see `ray start --head`) "
            "or set RAY_ADDRESS"
        )
    _probe(address)
    try:
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING,
                 log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError) as exc:
        raise UnavailableError(f"no Ray cluster reachable at {address!r}: {exc}") from exc
    return ray


def _probe(address: str) -> None:
    """Fail fast when nothing listens at ``host:port`` (Ray itself retries for
    about a minute before it gives up on an unreachable cluster)."""
    if address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidArgumentError(f"Ray cluster address must be 'host:port', got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as exc:
        raise UnavailableError(
            f"no Ray cluster reachable at {address!r}: {exc.strerror or exc} "
            "(start one with `ray start --head` and pass its address)"
        ) from None


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
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one operation on a task's resource; see the module docstring.

        Raises:
            UnavailableError: the server died or stopped answering.
            DeadlineExceededError: the server did not answer within the
                call's timeout plus a grace period (the call is abandoned,
                losslessly).
            FeedqError: whatever the operation raised on the host.
        """
        h = self.handle(task)
        blocking = op in BLOCKING_OPS
        call_id = uuid.uuid4().hex if blocking else None
        ref = h.call.remote(rkind, key, op, args, kwargs, call_id, self.client_id)
        timeout = kwargs.get("timeout")
        ok, value = self._wait(task, h, ref, call_id, timeout if blocking else None)
        if not ok:
            raise value
        if call_id is not None and op in DELIVERING_OPS:
            # Received: the host may forget the elements (until now it would
            # have put them back had this process died).
            h.ack.remote([call_id])
        return value

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
              timeout: float | None) -> Any:
        ray = self._ray
        deadline = None
        if timeout is not None and timeout != float("inf"):
            deadline = time.monotonic() + float(timeout) + CLIENT_GRACE + 0.1 * float(timeout)
        try:
            while True:
                try:
                    return ray.get(ref, timeout=_POLL)
                except ray.exceptions.GetTimeoutError:
                    pass
                reason = self.unavailable(task)
                if reason is not None:
                    self._abandon(h, call_id)
                    raise UnavailableError(f"task {task} is unavailable: {reason}")
                if deadline is not None and time.monotonic() > deadline:
                    self._abandon(h, call_id)
                    raise DeadlineExceededError(
                        f"Timed out waiting for task {task}: no answer within the call's "
                        f"timeout of {timeout:g} s plus {CLIENT_GRACE:g} s; the call was abandoned"
                    )
        except BaseException as exc:
            if isinstance(exc, FeedqError):
                raise
            if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
                with self._lock:
                    self._dead[task] = "its server died"
                raise UnavailableError(f"task {task} is unavailable: its server died") from None
            if isinstance(exc, ray.exceptions.RayError):
                raise UnavailableError(f"task {task} is unavailable: {exc}") from None
            # KeyboardInterrupt and friends: give up the remote call losslessly.
            self._abandon(h, call_id)
            raise

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
                    with self._lock:
                        self._dead[task] = f"its server died ({type(exc).__name__})"
                        self._beats.pop(task, None)
            if not ray.is_initialized():
                return

    def close(self) -> None:
        """Stop the heartbeat thread (the servers then treat this client as gone)."""
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
            self._handles.clear()
            self._beats.clear()
        if thread is not None:
            thread.join(timeout=5.0)
