"""Seed cells on timeouts: ``RunOptions.timeout_in_ms`` (per call) and
``ConfigProto.operation_timeout_in_ms`` (every call).

A dequeue from an empty queue on /job:ps/task:1 fails with
DeadlineExceededError after the timeout; the host applies it and nothing is
lost (a partial dequeue_many puts its elements back, T2/T3). The cluster
default applies to calls that pass no timeout, from any client.

Run: python examples/distributed/timeouts.py
"""

from __future__ import annotations

import time

import numpy as np
from _cluster import cluster

import feedq.distributed as fd
from feedq.errors import DeadlineExceededError


def main() -> None:
    with cluster():
        predictions = fd.FIFOQueue(10, np.float32, shapes=[[]], shared_name="predictions",
                                   task="/job:ps/task:1")
        predictions.enqueue_many(np.array([0.5, 0.7], np.float32))
        t0 = time.monotonic()
        try:
            predictions.dequeue_many(3, timeout=1.0)  # RunOptions(timeout_in_ms=1000)
        except DeadlineExceededError as exc:
            print(f"per-call timeout after {time.monotonic() - t0:.1f} s: {exc}")
        print("still queued:", predictions.size())  # 2: nothing lost

        # ConfigProto(operation_timeout_in_ms=500) for every task of the cluster.
        fd.set_cluster_default_timeout(0.5)
        predictions.dequeue_many(2)
        t0 = time.monotonic()
        try:
            predictions.dequeue()
        except DeadlineExceededError:
            print(f"cluster default timeout after {time.monotonic() - t0:.1f} s")
        finally:
            fd.set_cluster_default_timeout(None)
        fd.reset()


if __name__ == "__main__":
    main()
