"""Multiple machines: clusters, servers, and resources shared by name (seed's
"Multiple Devices – Multiple Servers"; spec rules Q, T, QR, C, A across processes).

Parts, one module each:

* ``_cluster``: :class:`ClusterSpec` (dict, JSON, ``TF_CONFIG``) and task names;
* ``_server``: :class:`Server`, one per task, holding the task's resource
  container (``_host``: the container and its calls; ``_ledger``: pending
  calls, deliveries awaiting acknowledgement, client liveness; ``_hosted``:
  shared variables and the coordinator's stop record);
* ``_session``: a process's connection; ``_ray``: Ray, the task actor (a
  detached async actor pinned to its node); ``_transport``: the Ray client;
* ``_resources``: remote queues of all four kinds, :class:`Variable` and
  :class:`ConditionalAccumulator` handles, opened by ``shared_name`` from any
  process; :class:`replica_device_setter` places them round-robin on ps tasks;
* ``_coordinator``: :class:`ClusterCoordinator`, one stop and one first error
  for every process;
* ``_sync``: :class:`SyncReplicas` (accumulator + token queue);
* ``_compression``: optional float16 / bfloat16 / 8-bit wire codecs;
* ``_sharding``: :func:`worker_info`, :func:`shard_files` for torchrun / TF_CONFIG;
* ``_testing``: :class:`LocalCluster`, a simulated cluster on one machine.

Ray is imported on first use only: this package imports without it, and the
``"local"`` backend (every server in this process) needs no Ray at all.
"""

from __future__ import annotations

from typing import Any

from feedq.distributed._cluster import ClusterSpec, TaskName, task_resource
from feedq.distributed._compression import CODECS, WireStatistics
from feedq.distributed._coordinator import ClusterCoordinator
from feedq.distributed._resources import (
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    RandomShuffleQueue,
    RemoteQueue,
    Variable,
    replica_device_setter,
)
from feedq.distributed._server import Server, stop_server
from feedq.distributed._session import Session, connect, default_session, disconnect
from feedq.distributed._sharding import (
    FileShard,
    WorkerInfo,
    shard_files,
    shard_records,
    worker_info,
)
from feedq.distributed._sync import SyncReplicas
from feedq.distributed._testing import LocalCluster

__all__ = [
    "CODECS",
    "ClusterCoordinator",
    "ClusterSpec",
    "ConditionalAccumulator",
    "FIFOQueue",
    "FileShard",
    "LocalCluster",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "RandomShuffleQueue",
    "RemoteQueue",
    "Server",
    "Session",
    "SyncReplicas",
    "TaskName",
    "Variable",
    "WireStatistics",
    "WorkerInfo",
    "connect",
    "default_session",
    "disconnect",
    "replica_device_setter",
    "reset",
    "set_cluster_default_timeout",
    "shard_files",
    "shard_records",
    "stop_server",
    "task_resource",
    "worker_info",
]


def reset(task: Any = None, containers: list[str] | None = None,
          session: Session | None = None) -> int:
    """Clear resource containers on one task or all (TF1 ``Session.reset``).

    Variables, queues and accumulators in them are dropped; calls waiting on
    them are cancelled; the next open creates fresh ones.

    Args:
        task: a task, or ``None`` for every task of the cluster.
        containers: container names (``None`` = all, ``[""]`` = the default).
        session: the session (``None``: the process default).

    Returns:
        The number of resources dropped.
    """
    return (session or default_session()).reset(task, containers)


def set_cluster_default_timeout(seconds: float | None, session: Session | None = None) -> None:
    """Set the default timeout of every task's server (TF1's
    ``ConfigProto.operation_timeout_in_ms``, T1): a blocking call from any
    process that passes no ``timeout`` (and whose process has no default of
    its own) fails with DeadlineExceededError after ``seconds``.
    ``None`` = wait forever."""
    (session or default_session()).set_operation_timeout(seconds)


# The public path, for repr() and docs (STYLE 13).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("feedq.distributed."):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj
