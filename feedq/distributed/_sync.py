"""Synchronous data parallelism between processes (TF1 ``SyncReplicasOptimizer``).

The seed's "Data Parallelism": replicas compute gradients against the
current global step and ``apply`` them to a shared ConditionalAccumulator,
which drops stale ones (A2). The chief ``take``s the mean of
``replicas_to_aggregate`` gradients (A3), updates the parameters, and puts
one token per replica into the sync token queue; a replica waits for a
token before its next step, so no replica runs ahead of the chief.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq.distributed._resources import ConditionalAccumulator, FIFOQueue, RemoteQueue
from feedq.distributed._session import Session

__all__ = ["SyncReplicas"]


class SyncReplicas:
    """The accumulator and token queue of one synchronously trained model.

    Args:
        name: prefix of the shared names (every process uses the same).
        shape: gradient shape.
        replicas_to_aggregate: gradients the chief waits for per step.
        total_num_replicas: replicas that take tokens (default: as many as
            are aggregated).
        dtype: gradient dtype (floating, A1).
        task: the task holding the accumulator and the token queue.
        session: the session (``None``: the process default).
    """

    def __init__(self, name: str, shape: Any, replicas_to_aggregate: int, *,
                 total_num_replicas: int | None = None, dtype: Any = np.float32,
                 task: Any = None, session: Session | None = None) -> None:
        if replicas_to_aggregate < 1:
            raise ValueError(f"replicas_to_aggregate must be >= 1, got {replicas_to_aggregate}")
        self.replicas_to_aggregate = replicas_to_aggregate
        self.total_num_replicas = total_num_replicas or replicas_to_aggregate
        self.accumulator = ConditionalAccumulator(
            dtype, shape, shared_name=f"{name}/grad_accum", task=task, session=session)
        self.tokens: RemoteQueue = FIFOQueue(
            -1, np.int64, shapes=[[]], shared_name=f"{name}/sync_token_q", task=task,
            session=session)

    def start(self, global_step: int = 0) -> None:
        """Chief: set the step and hand out the first tokens."""
        self.accumulator.set_global_step(global_step)
        self.tokens.enqueue_many(np.full(self.total_num_replicas, global_step, np.int64))

    def next_step(self, timeout: float | None = None) -> int:
        """Replica: wait for a token; returns the global step to compute at."""
        return int(self.tokens.dequeue(timeout=timeout))

    def apply(self, grad: Any, local_step: int) -> bool:
        """Replica: send a gradient computed at ``local_step``; False if stale (A2)."""
        return self.accumulator.apply_grad(grad, local_step)

    def take(self, timeout: float | None = None) -> tuple[np.ndarray[Any, Any], int]:
        """Chief: the mean gradient of this step, and the new global step.

        Tokens for the new step go out after the take, so replicas waiting
        in :meth:`next_step` start the next step together.
        """
        grad = self.accumulator.take_grad(self.replicas_to_aggregate, timeout=timeout)
        step = self.accumulator.global_step()
        self.tokens.enqueue_many(np.full(self.total_num_replicas, step, np.int64))
        return grad, step

    def stop(self) -> None:
        """Close the token queue: waiting replicas get OutOfRangeError."""
        self.tokens.close()
