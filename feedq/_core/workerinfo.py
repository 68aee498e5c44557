"""Which loader worker this code runs in: set by feedq process stages and by
``feedq.as_torch_dataset(build)`` around the user's ``build`` function.

This module imports nothing from feedq, so the device adapters (which live
below process stages) and the process stages share it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["WorkerInfo", "get_worker_info", "set_worker_info"]


@dataclass(frozen=True)
class WorkerInfo:
    """The worker a ``build(worker_index, num_workers)`` call builds for.

    Attributes:
        index: this worker, ``0 <= index < num_workers``.
        num_workers: how many workers share the data.
        epoch: the epoch being built (0 first); a pipeline seeds its shuffles
            from it so that each epoch has its own order.
        seed: the stage's ``seed`` (``None`` if not given).
        kind: ``"process"`` (a :func:`feedq.process_stage` worker) or
            ``"torch"`` (``as_torch_dataset(build)``, in a DataLoader worker
            or the main process).
    """

    index: int
    num_workers: int
    epoch: int
    seed: int | None = None
    kind: str = "process"

    def shard_seed(self) -> int | None:
        """A seed for this worker and epoch (``None`` without a stage seed):
        ``seed + 1000003 * epoch + index``."""
        if self.seed is None:
            return None
        return self.seed + 1_000_003 * self.epoch + self.index


_local = threading.local()
_process_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """The worker whose pipeline this code builds or runs, or ``None``
    outside loader workers.

    In a worker process the answer holds in every thread (runner threads
    included); in the main process (``as_torch_dataset(build)`` with
    ``num_workers=0``) only in the thread running ``build``.
    """
    info: WorkerInfo | None = getattr(_local, "info", None)
    return info if info is not None else _process_info


def set_worker_info(info: WorkerInfo | None, *, process_wide: bool = False) -> WorkerInfo | None:
    """Set the worker info of this thread (or of the whole process, for a
    worker process); returns the previous one."""
    global _process_info
    if process_wide:
        previous, _process_info = _process_info, info
        return previous
    previous = getattr(_local, "info", None)
    _local.info = info
    return previous
