"""LocalCluster: a simulated multi-machine cluster on one box (tests, examples, benchmarks).

With Ray it starts one private Ray runtime (``ray.init(address="local")``)
whose single node offers every task's custom resource, all on 127.0.0.1
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), with token authentication shared
by every process it hands its :attr:`~LocalCluster.env` to, and sockets in a
short temporary directory (Unix socket paths are limited to 107 bytes). It
never runs ``ray stop`` (that would kill every Ray process on the machine):
at the end it shuts its own runtime down and kills the processes it recorded,
by PID. Without Ray (or with ``backend="local"``) the servers live in this
process.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from feedq.distributed._cluster import ClusterSpec, task_resource
from feedq.distributed._server import Server
from feedq.distributed._session import Session, connect, disconnect

__all__ = ["LocalCluster"]

_LOG = logging.getLogger(__name__)


def _ray_available() -> bool:
    # find_spec, not import: Ray reads RAY_AUTH_MODE when imported, so the
    # environment must be set first (see LocalCluster._start_ray).
    return importlib.util.find_spec("ray") is not None


class LocalCluster:
    """Start every task of ``cluster`` on this machine; a context manager.

    Usage::

        with LocalCluster({"ps": ["a:1", "b:1"], "worker": ["a:2"]}) as lc:
            q = feedq.distributed.FIFOQueue(10, np.float32, shared_name="q",
                                            task="/job:ps/task:0")
            subprocess.run([...], env=lc.env)   # other processes join the cluster

    Args:
        cluster: the cluster spec.
        backend: ``"ray"``, ``"local"`` or ``None`` (Ray if installed).
        namespace: the namespace of the servers.
        operation_timeout: the cluster default timeout of every server.
        num_cpus: CPUs the Ray runtime may use.
        start_servers: start a Server for every task (else only the runtime).
        client_timeout: servers' client liveness timeout (seconds).
    """

    def __init__(self, cluster: ClusterSpec | dict[str, Any] | str, *, backend: str | None = None,
                 namespace: str = "feedq", operation_timeout: float | None = None,
                 num_cpus: int = 2, start_servers: bool = True,
                 client_timeout: float = 3.0) -> None:
        self.cluster = ClusterSpec(cluster)
        self.backend = backend or ("ray" if _ray_available() else "local")
        self.namespace = namespace
        self._operation_timeout = operation_timeout
        self._num_cpus = num_cpus
        self._start_servers = start_servers
        self._client_timeout = client_timeout
        self.servers: dict[str, Server] = {}
        self.session: Session | None = None
        self.address: str | None = None
        self._temp_dir: str | None = None
        self._pids: set[int] = set()
        self._env: dict[str, str] = {}
        self._owns_ray = False

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess joining this cluster (Ray address,
        auth token, loopback, cluster spec, namespace, backend)."""
        env = dict(os.environ)
        env.update(self._env)
        return env

    def start(self) -> LocalCluster:
        """Start the runtime and the servers (all undone if any part fails)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalCluster:
        if self.backend == "ray":
            self._start_ray()
        self.session = connect(self.cluster, backend=self.backend, address=self.address,
                               namespace=self.namespace)
        self._env.update({
            "FEEDQ_CLUSTER": self.cluster.to_json(),
            "FEEDQ_NAMESPACE": self.namespace,
            "FEEDQ_BACKEND": self.backend,
        })
        if self._start_servers:
            for task in self.cluster.tasks():
                self.servers[str(task)] = Server(
                    self.cluster, task.job, task.index, backend=self.backend,
                    namespace=self.namespace, operation_timeout=self._operation_timeout,
                    client_timeout=self._client_timeout)
        if self.backend == "ray":
            self._record_pids()
        return self

    def _start_ray(self) -> None:
        # Every process of the run: loopback only, the same token. Ray reads
        # these when imported, so they are set before the first import; a
        # process that imported Ray earlier keeps what it had.
        if "ray" not in sys.modules:
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_AUTH_MODE", "token")
            if os.environ["RAY_AUTH_MODE"] == "token" and not os.environ.get("RAY_AUTH_TOKEN"):
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
            if key in os.environ:
                self._env[key] = os.environ[key]
        # Children always stay on loopback, whatever this process has.
        self._env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from feedq.distributed._ray import check_loopback_ray

        check_loopback_ray("LocalCluster")
        import ray
        if ray.is_initialized():
            # Joined already (e.g. a test session): reuse it, do not own it.
            self.address = ray.get_runtime_context().gcs_address
        else:
            self._temp_dir = tempfile.mkdtemp(prefix="fq", dir="/tmp")
            resources = {task_resource(t): 1.0 for t in self.cluster.tasks()}
            # ray.init installs a SIGTERM handler that raises SystemExit in
            # whatever code runs (e.g. another test): keep this process's own.
            sigterm = signal.getsignal(signal.SIGTERM)
            try:
                ctx = ray.init(address="local", num_cpus=self._num_cpus, resources=resources,
                               namespace=self.namespace, include_dashboard=False,
                               _temp_dir=self._temp_dir, _node_ip_address="127.0.0.1",
                               logging_level=logging.WARNING, log_to_driver=False)
            finally:
                if sigterm is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, sigterm)
            self.address = str(ctx.address_info["address"])  # type: ignore[attr-defined]
            self._owns_ray = True
        self._env["RAY_ADDRESS"] = str(self.address)

    def _record_pids(self) -> None:
        if not self._owns_ray:
            return
        import psutil

        me = psutil.Process()
        if self._temp_dir is None:
            return
        for child in me.children(recursive=True):
            try:
                cmd = " ".join(child.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            # Only the runtime's processes: those naming its temp (session)
            # dir (gcs_server, raylet, monitors) and their descendants (the
            # workers, which rename themselves "ray::..."); never other
            # children of this process.
            if self._temp_dir in cmd:
                self._pids.add(child.pid)
                try:
                    self._pids.update(p.pid for p in child.children(recursive=True))
                except psutil.NoSuchProcess:
                    pass

    def server_pid(self, task: Any) -> int | None:
        """The OS process of a task's server (Ray), for failure tests."""
        info = self.servers[str(task)].info() if str(task) in self.servers else None
        return None if info is None else info.get("pid")

    def stop(self) -> None:
        """Stop the servers, shut the runtime down, kill leftovers by PID."""
        for server in self.servers.values():
            try:
                server.stop()
            except Exception:  # noqa: BLE001 - a dead server needs no stop
                _LOG.debug("stopping %r failed", server, exc_info=True)
        self.servers.clear()
        disconnect()
        if self.backend == "ray" and self._owns_ray:
            self._record_pids()
            import ray

            ray.shutdown()
            self._kill_leftovers()
            self._owns_ray = False
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _kill_leftovers(self) -> None:
        import psutil

        deadline = time.monotonic() + 5.0
        alive = []
        for pid in self._pids:
            try:
                p = psutil.Process(pid)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                continue
        for p in alive:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _gone, still = psutil.wait_procs(alive, timeout=max(0.1, deadline - time.monotonic()))
        for p in still:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self._pids.clear()

    def listening_addresses(self) -> list[tuple[str, int]]:
        """The addresses the recorded runtime processes listen on (for the
        loopback-only check)."""
        import psutil

        self._record_pids()
        out = []
        for conn in psutil.net_connections("inet"):
            if conn.status == psutil.CONN_LISTEN and conn.pid in self._pids:
                out.append((conn.laddr.ip, conn.laddr.port))
        return out

    def __enter__(self) -> LocalCluster:  # noqa: PYI034 - Self needs 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env_json(self) -> str:
        """:attr:`env`'s feedq/Ray part as JSON (for logs)."""
        return json.dumps(self._env, sort_keys=True)
