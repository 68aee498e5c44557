"""A process's connection to a cluster: which backend, which tasks, how to call them.

Two backends share every rule, because both end in a ``_host.Host``:

* ``"ray"``: each task's Host lives in a detached Ray actor; calls travel
  through Ray (``_transport.RayTransport``);
* ``"local"``: each task's Host lives in this process, and calls are plain
  method calls. For tests, single-machine runs and examples without Ray.
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
from typing import Any

from feedq._core.timeouts import get_default_timeout
from feedq.distributed._cluster import ClusterSpec, TaskName
from feedq.distributed._host import BLOCKING_OPS, Host
from feedq.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from feedq.queues import CancelToken

__all__ = ["BACKENDS", "Session", "connect", "default_session", "disconnect"]

BACKENDS = ("ray", "local")

# (namespace, task) -> the Host of a local-backend Server running in this process.
_local_hosts: dict[tuple[str, TaskName], Host] = {}
_local_lock = threading.Lock()

_default: Session | None = None  # guarded by _default_lock
_default_lock = threading.Lock()


class Session:
    """This process's connection to a feedq cluster.

    Most code never builds one: :func:`connect` makes the process default,
    and a started :class:`~feedq.distributed.Server` connects its process.

    Args:
        cluster: the cluster; needed to check task names and for cluster-wide
            operations. ``None`` reads ``FEEDQ_CLUSTER`` (JSON) or
            ``TF_CONFIG``; without either, any task name is accepted.
        backend: ``"ray"`` or ``"local"``.
        address: the Ray cluster address (``None``: ``RAY_ADDRESS``, or the
            runtime this process already joined).
        namespace: the Ray namespace (or the local registry) of the cluster.

    Raises:
        InvalidArgumentError: an unknown backend or a bad cluster spec.
        MissingExtraError: backend "ray" without Ray installed.
        UnavailableError: no Ray cluster reachable.
    """

    def __init__(self, cluster: ClusterSpec | dict[str, Any] | str | None = None, *,
                 backend: str = "ray", address: str | None = None,
                 namespace: str = "feedq") -> None:
        if backend not in BACKENDS:
            raise InvalidArgumentError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.cluster = _cluster_from_env() if cluster is None else ClusterSpec(cluster)
        self.backend = backend
        self.namespace = namespace
        self._transport: Any = None
        if backend == "ray":
            from feedq.distributed._ray import ensure_connected
            from feedq.distributed._transport import RayTransport

            ensure_connected(address, namespace)
            self._transport = RayTransport(namespace)

    # -- tasks -----------------------------------------------------------------------

    def check_task(self, task: Any) -> TaskName:
        """Parse ``task`` and check that the cluster has it.

        Raises:
            InvalidArgumentError: not a task name, or not in the cluster.
        """
        name = TaskName.parse(task)
        if self.cluster is not None:
            self.cluster.check_task(name)
        return name

    def _host(self, task: TaskName) -> Host:
        with _local_lock:
            host = _local_hosts.get((self.namespace, task))
        if host is None:
            raise UnavailableError(f"task {task} is unavailable: no feedq Server runs for it")
        return host

    # -- calls -------------------------------------------------------------------------

    def call(self, task: TaskName, rkind: str, key: tuple[str, str], op: str,
             *args: Any, cancel: CancelToken | None = None, **kwargs: Any) -> Any:
        """Run ``op`` on the resource ``key`` of ``task``'s container.

        ``timeout`` (for blocking ops) is resolved here: a per-call value
        wins, then this process's default (:func:`feedq.set_default_timeout`),
        then the cluster default held by the server (T1). Firing ``cancel``
        ends a blocking call as its caller giving up does (the server
        abandons it); the call raises the token's error.
        """
        if op in BLOCKING_OPS:
            timeout = kwargs.get("timeout")
            if timeout is None:
                timeout = get_default_timeout()
            elif not timeout >= 0:  # also NaN
                raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
            kwargs["timeout"] = timeout
        if self._transport is None:
            host = self._host(task)
            # A call id makes the wait abortable (a stopping server ends it);
            # no client id: in-process results need no acknowledgement.
            call_id = uuid.uuid4().hex if op in BLOCKING_OPS else None
            return host.call(rkind, key, op, args, kwargs, call_id, cancel=cancel)
        return self._transport.call(task, rkind, key, op, args, kwargs, cancel=cancel)

    def open(self, task: TaskName, rkind: str, key: tuple[str, str], spec: dict[str, Any]) -> Any:
        """Get or create a resource on ``task`` (atomic per key, Q7)."""
        if self._transport is None:
            return self._host(task).open(rkind, key, spec)
        return self._transport.open(task, rkind, key, spec)

    def info(self, task: Any) -> dict[str, Any]:
        """A snapshot of a task's server (resources, pending calls, pid, ...)."""
        name = self.check_task(task)
        if self._transport is None:
            return self._host(name).info()
        return dict(self._transport.request(name, "info"))

    def reset(self, task: Any = None, containers: list[str] | None = None) -> int:
        """Clear resource containers (TF1 ``Session.reset``).

        Args:
            task: one task, or ``None`` for every task of the cluster.
            containers: container names to clear; ``None`` = all, ``[""]`` =
                the default container.

        Returns:
            Resources dropped.
        """
        total = 0
        for name in self._tasks(task):
            if self._transport is None:
                total += self._host(name).reset(containers)
            else:
                total += int(self._transport.request(name, "reset", containers))
        return total

    def set_operation_timeout(self, seconds: float | None, task: Any = None) -> None:
        """Set the cluster default timeout (TF1 ``operation_timeout_in_ms``, T1)
        on every task's server (or one): calls that pass no timeout, from any
        process, use it. ``None`` or ``math.inf`` = wait forever."""
        if seconds is not None and math.isinf(seconds):
            seconds = None
        for name in self._tasks(task):
            if self._transport is None:
                self._host(name).set_operation_timeout(seconds)
            else:
                self._transport.request(name, "set_operation_timeout", seconds)

    def _tasks(self, task: Any) -> list[TaskName]:
        if task is not None:
            return [self.check_task(task)]
        if self.cluster is None:
            raise InvalidArgumentError("this session has no cluster spec: name a task")
        return list(self.cluster.tasks())

    def close(self) -> None:
        """Stop heartbeats; servers then treat this process's calls as gone."""
        if self._transport is not None:
            self._transport.close()

    def __repr__(self) -> str:
        return f"Session(backend={self.backend!r}, namespace={self.namespace!r}, cluster={self.cluster!r})"


def _cluster_from_env() -> ClusterSpec | None:
    text = os.environ.get("FEEDQ_CLUSTER")
    if text:
        return ClusterSpec(text)
    tf_config = os.environ.get("TF_CONFIG")
    if tf_config:
        try:
            parsed = json.loads(tf_config)
        except json.JSONDecodeError:
            return None
        if isinstance(parsed, dict) and "cluster" in parsed:
            return ClusterSpec(parsed["cluster"])
    return None


def connect(cluster: ClusterSpec | dict[str, Any] | str | None = None, *,
            backend: str | None = None, address: str | None = None,
            namespace: str | None = None) -> Session:
    """Connect this process to a cluster and make that the default session.

    Args:
        cluster: the cluster spec (``None``: ``FEEDQ_CLUSTER`` or ``TF_CONFIG``).
        backend: ``"ray"`` (default; ``FEEDQ_BACKEND`` overrides) or ``"local"``.
        address: the Ray address (``None``: ``RAY_ADDRESS``).
        namespace: the namespace of the cluster's servers (``None``:
            ``FEEDQ_NAMESPACE`` or ``"feedq"``).

    Returns:
        The new default session (a previous default is closed).
    """
    global _default
    backend = backend or os.environ.get("FEEDQ_BACKEND", "ray")
    namespace = namespace or os.environ.get("FEEDQ_NAMESPACE", "feedq")
    session = Session(cluster, backend=backend, address=address, namespace=namespace)
    with _default_lock:
        previous, _default = _default, session
    if previous is not None and previous is not session:
        previous.close()
    return session


def default_session() -> Session:
    """The session :func:`connect` made.

    Raises:
        FailedPreconditionError: this process is not connected.
    """
    session = _default
    if session is None:
        raise FailedPreconditionError(
            "not connected to a cluster: call feedq.distributed.connect(cluster, address=...) "
            "or start a feedq.distributed.Server in this process first"
        )
    return session


def set_default_session(session: Session | None) -> Session | None:
    """Replace the default session; returns the previous one (not closed)."""
    global _default
    with _default_lock:
        previous, _default = _default, session
    return previous


def disconnect() -> None:
    """Close and forget the default session."""
    previous = set_default_session(None)
    if previous is not None:
        previous.close()


def register_local_host(namespace: str, host: Host) -> None:
    """Make a local-backend host reachable (Server.start).

    Raises:
        InvalidArgumentError: a server already runs for the task (duplicate task).
    """
    with _local_lock:
        key = (namespace, host.task)
        if key in _local_hosts and not _local_hosts[key].stopped:
            raise InvalidArgumentError(
                f"task {host.task} is already served in namespace {namespace!r} (duplicate task)"
            )
        _local_hosts[key] = host


def unregister_local_host(namespace: str, host: Host) -> None:
    """Forget a stopped local-backend host."""
    with _local_lock:
        if _local_hosts.get((namespace, host.task)) is host:
            del _local_hosts[(namespace, host.task)]
