"""Seed cell "In-Graph vs Between-Graph Replication".

In-graph: one client drives every replica (here: one thread per worker task)
from one shared input queue on the ps task. Between-graph: each replica is
its own process, pinned to a worker task; they find the shared queue and a
cluster-wide coordinator by name, and synchronise only through them.

Run: python examples/distributed/replication.py
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from _cluster import cluster, replica_index, run_replicas

import feedq
import feedq.distributed as fd
from feedq.errors import OutOfRangeError

N_BATCHES = 8


def inputs() -> fd.RemoteQueue:
    return fd.FIFOQueue(64, [np.float32, np.int64], shapes=[[4], []],
                        shared_name="replication/inputs", task="/job:ps/task:0")


def replica(i: int) -> None:
    """Between-graph: one replica process, pinned to /job:worker/task:<i>."""
    q = inputs()
    done = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name="replication/done",
                        task="/job:ps/task:0")
    coord = fd.ClusterCoordinator("replication/coord", task="/job:ps/task:0",
                                  origin=f"/job:worker/task:{i}")
    seen = 0
    with coord.stop_on_exception():
        while not coord.should_stop():
            try:
                _x, y = q.dequeue_many(4, timeout=30)
            except OutOfRangeError:
                break
            seen += len(y)
    done.enqueue(seen)
    coord.close()
    print(f"replica /job:worker/task:{i} trained on {seen} examples", flush=True)


def main() -> None:
    with cluster() as (session, env):
        # In-graph: one client, one thread per replica, all fed by one queue.
        q = inputs()
        q.enqueue_many([np.ones((N_BATCHES * 4, 4), np.float32), np.arange(N_BATCHES * 4)])
        q.close()
        counts = [0, 0]

        def in_graph_replica(i: int) -> None:
            with feedq.device(f"/job:worker/task:{i}"):
                for batch in iter(lambda: _next(q), None):
                    counts[i] += len(batch[1])

        threads = [threading.Thread(target=in_graph_replica, args=(i,), name=f"in-graph-{i}")
                   for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        print("in-graph: examples per replica", counts, "total", sum(counts))
        assert sum(counts) == N_BATCHES * 4
        fd.reset("/job:ps/task:0")

        # Between-graph: each replica a separate client process.
        q = inputs()
        q.enqueue_many([np.ones((N_BATCHES * 4, 4), np.float32), np.arange(N_BATCHES * 4)])
        q.close()
        run_replicas(__file__, replica, 2, env, session.backend)
        done = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name="replication/done",
                            task="/job:ps/task:0")
        total = int(done.dequeue_many(2, timeout=60).sum())
        print("between-graph: total examples", total)
        assert total == N_BATCHES * 4
        fd.reset("/job:ps/task:0")


def _next(q: fd.RemoteQueue) -> list[np.ndarray] | None:
    try:
        return q.dequeue_many(4, timeout=30)  # type: ignore[no-any-return]
    except OutOfRangeError:
        return None


if __name__ == "__main__":
    index = replica_index()
    if index is not None:
        fd.connect()
        replica(index)
        sys.exit(0)
    main()
