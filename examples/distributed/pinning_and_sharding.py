"""Seed cells "Pinning Ops Across Tasks" and "Sharding Variables across
Multiple Param Servers".

``feedq.device("/job:ps/task:0")`` pins the queues and variables created in
its block to that task, like ``tf.device``; ``replica_device_setter`` places
them round-robin over the ps tasks: v1..v5 go to ps:0, ps:1, ps:0, ps:1, ps:0.

Run: python examples/distributed/pinning_and_sharding.py
"""

from __future__ import annotations

import numpy as np
from _cluster import cluster

import feedq
import feedq.distributed as fd


def main() -> None:
    with cluster():
        # TF1: with tf.device("/job:ps/task:0"): a = tf.constant(1.0)
        with feedq.device("/job:ps/task:0"):
            a = fd.Variable(1.0, name="a")
        with feedq.device("/job:worker/task:0"):
            inbox = fd.FIFOQueue(10, np.float32, shapes=[[]], shared_name="inbox")
        b = float(a.read()) + 2          # computed here, in the client
        inbox.enqueue(float(a.read()) + b)  # c = a + b lands on worker 0
        print("a on", a.device, "| inbox on", inbox.device, "| c =", inbox.dequeue())

        # TF1: with tf.device(tf.train.replica_device_setter(ps_tasks=2)): v1..v5
        with feedq.device(fd.replica_device_setter(ps_tasks=2)):
            vs = [fd.Variable(float(i), name=f"v{i}") for i in range(1, 6)]
        for v in vs:
            print(f"{v.name} = {float(v.read())} pinned to {v.device}")
        assert [v.device for v in vs] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0",
                                          "/job:ps/task:1", "/job:ps/task:0"]
        fd.reset()


if __name__ == "__main__":
    main()
