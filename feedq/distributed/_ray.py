"""Ray itself: the lazy import, loopback checks, connecting, and the task actor.

Ray is imported on first use only (STYLE 14): ``import feedq`` and
``import feedq.distributed`` work without it, and the first call that needs
it raises one :class:`~feedq.devices.MissingExtraError` naming
``pip install "feedq[ray]"``. The client side of calls is ``_transport``.

The server side, and why it is built this way:

* one **detached async actor per task**, named ``feedq/<job>/<index>`` in the
  cluster's namespace, pinned to the node offering the task's custom
  resource, never restarted (a restarted server would hold empty queues and
  lose data silently);
* a call that can finish at once runs on the actor's event loop; one that
  may wait runs in the actor's thread pool with a CancelToken of its own
  (``_host``), so waits in one call never stall the event loop and any
  waiter can be ended;
* results come back as ``(ok, value_or_exception)`` envelopes, so errors
  arrive as the same feedq exception with the same message as locally, not
  wrapped in Ray's task error;
* a reaper on the event loop ends the calls and takes back the deliveries of
  clients whose heartbeats stopped (``Host.reap``).
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
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from feedq.distributed._cluster import TaskName
from feedq.distributed._host import BLOCKING_OPS, Host, WouldBlock
from feedq.errors import (
    FailedPreconditionError,
    FeedqError,
    InvalidArgumentError,
    UnavailableError,
)

__all__ = [
    "CLIENT_GRACE",
    "HEARTBEAT_INTERVAL",
    "UNRESPONSIVE_AFTER",
    "actor_name",
    "ensure_connected",
    "require_ray",
    "task_server_class",
]

_LOG = logging.getLogger(__name__)

#: How often clients ping the servers they use, and servers look for dead clients.
HEARTBEAT_INTERVAL = 0.5
#: A server that answered no heartbeat for this long counts as unavailable.
UNRESPONSIVE_AFTER = 3.0
#: Seconds a client waits beyond a call's own timeout before abandoning it.
CLIENT_GRACE = 2.0


def require_ray() -> ModuleType:
    """Import Ray or raise one clear error naming the extra to install.

    Raises:
        MissingExtraError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        from feedq.devices import MissingExtraError

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

    async def wait_stopped(self, timeout: float | None) -> bool:
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
