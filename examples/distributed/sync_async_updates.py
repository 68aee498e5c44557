"""Seed cell "Data Parallelism": async and sync updates, stale gradients, bandwidth.

Two replicas fit ``w`` in ``y = w * x`` (true ``w = 3``). Parameters live on
/job:ps/task:0.

* Async: each replica reads ``w``, computes a gradient and applies it with
  ``assign_add`` at once: more steps per second, but some gradients are stale.
* Sync (TF1 SyncReplicasOptimizer): replicas apply gradients to a shared
  ConditionalAccumulator tagged with the step they read; the chief takes
  the mean of both per step, updates ``w`` and hands out tokens; a gradient
  from an old step is dropped (A2).
* Bandwidth: the training batches travel bfloat16-compressed; the queue
  handle reports the bytes saved.

Run: python examples/distributed/sync_async_updates.py
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
from _cluster import cluster, run_replicas

import feedq.distributed as fd

STEPS = 15
LR = 0.1
PS = "/job:ps/task:0"


def batches() -> fd.RemoteQueue:
    return fd.FIFOQueue(-1, np.float32, shapes=[[16]], shared_name="dp/x", task=PS,
                        compression="bfloat16")


def gradient(w: float, x: np.ndarray) -> float:
    y = 3.0 * x
    return float(np.mean(2 * (w * x - y) * x))


def async_replica(i: int) -> None:
    w = fd.Variable(name="dp/w_async", task=PS)
    xs = batches()
    for _ in range(STEPS):
        x = xs.dequeue()
        w.assign_add(np.float32(-LR * gradient(float(w.read()), x)))


def sync_replica(i: int) -> None:
    sync = fd.SyncReplicas("dp/sync", [], replicas_to_aggregate=2, task=PS)
    w = fd.Variable(name="dp/w_sync", task=PS)
    xs = batches()
    for _ in range(STEPS):
        step = sync.next_step(timeout=60)
        sync.apply(np.float32(gradient(float(w.read()), xs.dequeue())), local_step=step)
    if i == 0:
        # One gradient from an old step: the accumulator drops it (A2).
        print("stale gradient accepted?", sync.apply(np.float32(1e6), local_step=0), flush=True)


def main() -> None:
    with cluster() as (session, env):
        rng = np.random.default_rng(0)
        producer = batches()
        producer.enqueue_many(rng.uniform(0.5, 1.5, (4 * STEPS, 16)).astype(np.float32))
        print(f"bandwidth: bfloat16 saved {producer.wire_statistics().saved_bytes} bytes")

        w = fd.Variable(np.float32(0.0), name="dp/w_async", task=PS)
        _run(session, env, "async", async_replica)
        print(f"async: w = {float(w.read()):.3f}")

        w_sync = fd.Variable(np.float32(0.0), name="dp/w_sync", task=PS)
        sync = fd.SyncReplicas("dp/sync", [], replicas_to_aggregate=2, task=PS)
        sync.start(0)

        def chief() -> None:
            for _ in range(STEPS):
                grad, _step = sync.take(timeout=60)
                w_sync.assign_add(np.float32(-LR * float(grad)))

        t = threading.Thread(target=chief, name="chief")
        t.start()
        _run(session, env, "sync", sync_replica)
        t.join(60)
        print(f"sync: w = {float(w_sync.read()):.3f} after {sync.accumulator.global_step()} steps; "
              f"stale dropped: {sync.accumulator.statistics().dropped_stale}")
        assert abs(float(w_sync.read()) - 3.0) < 0.5
        fd.reset(PS)


def _run(session: fd.Session, env: dict[str, str], mode: str, target: object) -> None:
    """Two replicas of ``mode``: processes on Ray, threads on the local backend."""
    if session.backend == "ray":
        procs = [subprocess.Popen([sys.executable, __file__, "--replica", str(i), mode], env=env)
                 for i in range(2)]
        if any(p.wait(timeout=120) for p in procs):
            raise SystemExit("a replica failed")
    else:
        run_replicas(__file__, target, 2, env, session.backend)  # type: ignore[arg-type]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--replica":
        fd.connect()
        (async_replica if sys.argv[3] == "async" else sync_replica)(int(sys.argv[2]))
        sys.exit(0)
    main()
