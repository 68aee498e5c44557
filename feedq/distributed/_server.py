"""Server: one task of the cluster, hosting its resource container (TF1 ``tf.train.Server``)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

from feedq.distributed._cluster import ClusterSpec, TaskName, task_resource
from feedq.distributed._host import Host
from feedq.distributed._session import (
    Session,
    default_session,
    register_local_host,
    set_default_session,
    unregister_local_host,
)
from feedq.errors import InvalidArgumentError, UnavailableError

__all__ = ["Server", "stop_server"]

_LOG = logging.getLogger(__name__)


class Server:
    """Serves one task: ``/job:<job_name>/task:<task_index>`` (TF1 ``tf.train.Server``).

    The server holds the task's resource container, ``{shared_name: queue |
    variable | accumulator}``; clients anywhere in the cluster open those
    resources by name. On Ray it is one detached async actor, pinned to the
    node that offers the custom resource ``feedq_task_<job>_<index>``
    (:func:`~feedq.distributed.task_resource`), never restarted by Ray: a
    restarted server would come back with empty queues and lose data
    silently. On the ``local`` backend it lives in this process.

    Usage (one process per task, as in TF1)::

        cluster = ClusterSpec({"ps": ["a:2221"], "worker": ["a:2222", "b:2222"]})
        server = Server(cluster, "ps", 0, address="10.0.0.1:6379")
        server.join()   # blocks until the server is stopped (by stop_server)

    Args:
        cluster: the cluster spec (dict, JSON or ClusterSpec).
        job_name: this task's job.
        task_index: this task's index in the job.
        start: start at once (TF1's default).
        backend: ``"ray"`` or ``"local"``; ``None`` uses the default
            session's backend, else ``"ray"``.
        address: the Ray cluster address (``None``: ``RAY_ADDRESS`` or the
            runtime this process already joined).
        namespace: the Ray namespace shared by the cluster's processes.
        operation_timeout: the cluster default timeout (seconds) this task
            applies to calls that give none (T1).
        pin: place the actor on the node offering the task's resource
            (Ray only). ``False`` lets Ray choose any node.
        client_timeout: seconds without a client's heartbeat after which its
            pending calls end and its unacknowledged deliveries go back.

    Raises:
        InvalidArgumentError: unknown job or task, a task already served
            (duplicate), or no node offering the task's resource.
        MissingExtraError: backend ``"ray"`` without Ray installed.
        UnavailableError: no Ray cluster reachable.
    """

    def __init__(self, cluster: ClusterSpec | dict[str, Any] | str, job_name: str,
                 task_index: int = 0, *, start: bool = True, backend: str | None = None,
                 address: str | None = None, namespace: str = "feedq",
                 operation_timeout: float | None = None, pin: bool = True,
                 client_timeout: float = 3.0) -> None:
        self.cluster = ClusterSpec(cluster)
        self.task = self.cluster.check_task(TaskName(job_name, task_index))
        self._backend = backend
        self._address = address
        self._namespace = namespace
        self._operation_timeout = operation_timeout
        self._pin = pin
        self._client_timeout = client_timeout
        self._session: Session | None = None
        self._host: Host | None = None
        self._actor: Any = None
        self._lock = threading.Lock()
        if start:
            self.start()

    @property
    def target(self) -> str:
        """The task's address from the cluster spec (TF1's ``server.target``)."""
        return self.cluster.task_address(self.task.job, self.task.index)

    @property
    def session(self) -> Session:
        """The session this server's process uses (connected by :meth:`start`)."""
        if self._session is None:
            raise UnavailableError(f"server for {self.task} was not started")
        return self._session

    def _connect(self) -> Session:
        try:
            current: Session | None = default_session()
        except Exception:  # noqa: BLE001 - not connected yet
            current = None
        backend = self._backend or (current.backend if current is not None else "ray")
        if current is not None and current.backend == backend and current.namespace == self._namespace:
            return current
        session = Session(self.cluster, backend=backend, address=self._address,
                          namespace=self._namespace)
        set_default_session(session)
        return session

    def start(self) -> None:
        """Start serving; idempotent.

        Raises:
            InvalidArgumentError: the task is already served (duplicate
                task), or no Ray node offers the task's resource.
        """
        with self._lock:
            if self._host is not None or self._actor is not None:
                return
            session = self._session = self._connect()
            if session.backend == "local":
                host = Host(self.task, self._operation_timeout, self._client_timeout)
                register_local_host(self._namespace, host)
                self._host = host
                return
            self._actor = self._start_actor()

    def _start_actor(self) -> Any:
        from feedq.distributed._ray import actor_name, require_ray, task_server_class

        ray = require_ray()
        name = actor_name(self.task)
        try:
            existing = ray.get_actor(name, namespace=self._namespace)
        except ValueError:
            existing = None
        if existing is not None:
            try:
                ray.get(existing.info.remote(), timeout=10)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                existing = None  # a dead server's name: free to serve the task again
        if existing is not None:
            raise InvalidArgumentError(
                f"task {self.task} is already served by another Server "
                f"(Ray actor {name!r} exists in namespace {self._namespace!r}; duplicate task)"
            )
        options: dict[str, Any] = {
            "name": name, "namespace": self._namespace, "lifetime": "detached",
            "max_restarts": 0, "num_cpus": 0, "max_concurrency": 1000,
        }
        if self._pin:
            resource = task_resource(self.task)
            if ray.cluster_resources().get(resource, 0) <= 0:
                raise InvalidArgumentError(
                    f"no Ray node offers the resource {resource!r} for task {self.task}: start "
                    f"that machine's node with `ray start ... --resources "
                    f"'{{\"{resource}\": 1}}'` (or pass pin=False)"
                )
            options["resources"] = {resource: 0.001}
        try:
            actor = task_server_class().options(**options).remote(
                str(self.task), self._operation_timeout, self._client_timeout)
        except ValueError as exc:  # the name was taken between the check and now
            raise InvalidArgumentError(
                f"task {self.task} is already served by another Server (duplicate task): {exc}"
            ) from None
        # Wait until it serves, so that a failure to start is reported here
        # (and leaves no pending detached actor behind).
        try:
            ray.get(actor.info.remote(), timeout=60)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as exc:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                _LOG.debug("kill of the unstarted server of %s failed", self.task, exc_info=True)
            why = "did not start within 60 s" if isinstance(exc, ray.exceptions.GetTimeoutError) \
                else f"failed to start ({type(exc).__name__}: {exc})"
            raise UnavailableError(
                f"the server of task {self.task} {why}; its actor was removed"
            ) from None
        return actor

    def info(self) -> dict[str, Any]:
        """A snapshot of the server (resources, pending calls, pid on Ray)."""
        return self.session.info(self.task)

    def join(self, timeout: float | None = None) -> bool:
        """Block until the server stops (TF1: "blocks until the server stops,
        i.e. never" unless someone stops it).

        Args:
            timeout: seconds to wait; ``None`` = until it stops.

        Returns:
            True once the server stopped, False if ``timeout`` expired.
        """
        if self._host is not None:
            return self._host.wait_stopped(timeout)
        if self._actor is None:
            return True
        from feedq.distributed._ray import require_ray

        ray = require_ray()
        # One wait on the actor's stop event; the reply (or the actor's death)
        # completes the future. A bounded join answers near its timeout even
        # if the server is paused (it is not stopped then: False).
        future = self._actor.wait_stopped.remote(timeout).future()
        try:
            return bool(future.result(timeout=None if timeout is None else timeout + 1.0))
        except concurrent.futures.TimeoutError:
            return False
        except ray.exceptions.RayActorError:
            return True  # the actor is gone: stopped

    def stop(self) -> None:
        """Stop serving: pending and later calls on this task raise
        UnavailableError naming it. Idempotent."""
        with self._lock:
            host, self._host = self._host, None
            actor, self._actor = self._actor, None
        if host is not None:
            host.stop()
            unregister_local_host(self._namespace, host)
        if actor is not None:
            stop_actor(actor, self.task, self._session)

    def __enter__(self) -> Server:  # noqa: PYI034 - Self needs 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self.task}, target={self.target!r})"


def stop_actor(actor: Any, task: TaskName, session: Session | None) -> None:
    """Stop a Ray task server and kill its actor."""
    from feedq.distributed._ray import require_ray

    ray = require_ray()
    try:
        ray.get(actor.stop.remote(), timeout=10)
    except Exception:  # noqa: BLE001 - already dead: nothing to stop
        _LOG.debug("stop of %s failed", task, exc_info=True)
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        _LOG.debug("kill of %s failed", task, exc_info=True)
    transport = getattr(session, "_transport", None)
    if transport is not None:
        transport.forget(task)


def stop_server(task: Any, session: Session | None = None) -> None:
    """Stop the server of ``task`` from any process of the cluster.

    Raises:
        UnavailableError: no server runs for the task.
    """
    session = session or default_session()
    name = session.check_task(task)
    if session.backend == "local":
        host = session._host(name)
        host.stop()
        unregister_local_host(session.namespace, host)
        return
    actor = session._transport.handle(name)
    stop_actor(actor, name, session)
