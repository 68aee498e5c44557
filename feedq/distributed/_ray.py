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
* a dequeue's elements are handed to user code only after the server
  confirmed their acknowledgement (``_host``), so a client that exits at once,
  or a server paused past the client timeout, duplicates nothing;
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
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from ..errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    FeedqError,
    InvalidArgumentError,
    UnavailableError,
)
from ._cluster import TaskName
from ._host import ACK_WINDOW, BLOCKING_OPS, DELIVERING_OPS, Host, WouldBlock

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


_LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def is_loopback_address(address: str) -> bool:
    """Whether a ``host:port`` (or ``"local"``) Ray address names this machine's loopback."""
    if address == "local":
        return True
    host = address.rpartition(":")[0].strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


def check_loopback_ray(what: str) -> None:
    """Refuse to run a loopback-only Ray setup in a process whose Ray would
    advertise and bind its routable IP.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when it is first
    imported; unless it was ``0`` then, Ray rewrites ``127.0.0.1`` to the
    machine's routable address.

    Raises:
        FailedPreconditionError: Ray was imported with cluster mode on.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - other Ray layouts: cannot tell
        return
    if getattr(ray_constants, "ENABLE_RAY_CLUSTER", False):
        raise FailedPreconditionError(
            f"{what} needs Ray to stay on loopback (127.0.0.1), but Ray was imported in this "
            f"process without {_LOOPBACK_VAR}=0, so it would advertise and bind the machine's "
            f"routable IP instead: set {_LOOPBACK_VAR}=0 in the environment before anything "
            "imports ray (e.g. at the very top of the program or in the shell)"
        )


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

    async def ack(self, call_ids: list[str]) -> bool:
        return self._host.ack(call_ids)

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
    address = address or os.environ.get("RAY_ADDRESS")
    if "ray" not in sys.modules and address and is_loopback_address(address):
        # Ray reads this when imported: keep a loopback cluster on loopback.
        os.environ.setdefault(_LOOPBACK_VAR, "0")
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if not address:
        raise InvalidArgumentError(
            "no Ray cluster address: pass address='host:port' (see `ray start --head`) "
            "or set RAY_ADDRESS"
        )
    if is_loopback_address(address):
        check_loopback_ray(f"connecting to the Ray cluster at {address!r}")
    _probe(address)
    # ray.init installs a SIGTERM handler that raises SystemExit in whatever
    # code runs: keep the process's own.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING,
                 log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError) as exc:
        raise UnavailableError(f"no Ray cluster reachable at {address!r}: {exc}") from exc
    finally:
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
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
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=5.0)
    except OSError as exc:
        raise UnavailableError(
            f"no Ray cluster reachable at {address!r}: {exc.strerror or exc} "
            "(start one with `ray start --head` and pass its address)"
        ) from None
    # Something listens; Ray's GCS speaks gRPC, i.e. HTTP/2, and answers the
    # client preface with a SETTINGS frame. Anything else (a dashboard, a
    # wrong port) would make ray.init retry for minutes: refuse it here.
    try:
        with sock:
            sock.settimeout(5.0)
            sock.sendall(_H2_PREFACE)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        head = b""
        detail = exc.strerror or str(exc) or type(exc).__name__
    else:
        detail = "it did not answer as a gRPC server"
    if len(head) < 9 or head[3] != 0x04:
        raise UnavailableError(
            f"no Ray cluster at {address!r}: something listens there, but not a Ray GCS "
            f"({detail}); pass the address `ray start --head` printed (the GCS port, "
            "6379 by default), not e.g. the dashboard's"
        )


# HTTP/2 client connection preface followed by an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


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

        A dequeue's result is returned only once the server has confirmed
        the acknowledgement of its delivery; if it cannot be confirmed the
        server puts the elements back and this raises UnavailableError, so
        nothing is delivered twice.

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
                               op=op)
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
        why = None
        try:
            if not ray.get(h.ack.remote([call_id]), timeout=ACK_WINDOW + CLIENT_GRACE):
                why = "its server had already put the elements back (it saw no heartbeat or " \
                      "no acknowledgement in time)"
        except ray.exceptions.GetTimeoutError:
            why = f"its server did not confirm receipt within {ACK_WINDOW + CLIENT_GRACE:g} s"
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
              timeout: float | None, op: str | None = None) -> Any:
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
            while True:
                try:
                    return ray.get(ref, timeout=_POLL)
                except ray.exceptions.GetTimeoutError:
                    pass
                reason = self.unavailable(task)
                if reason is not None:
                    self._abandon(h, call_id)
                    raise UnavailableError(f"task {task} is unavailable: {reason}; {outcome}")
                if deadline is not None and time.monotonic() > deadline:
                    self._abandon(h, call_id)
                    raise DeadlineExceededError(
                        f"Timed out waiting for task {task}: no answer within the call's "
                        f"timeout of {timeout:g} s plus {CLIENT_GRACE:g} s; {outcome}"
                    )
        except BaseException as exc:
            if isinstance(exc, FeedqError):
                raise
            if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
                with self._lock:
                    self._dead[task] = "its server died"
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
