"""Seed cell "Sharing State across Sessions (Resource Containers)": simple_client.py.

The variable ``x`` lives in /job:ps/task:0's resource container, not in the
client: each run of the client increments it, and the next client sees the
new value (1.0, then 2.0). ``reset`` clears the container, as TF1's
``tf.Session.reset(target, containers)`` did.

Run: python examples/distributed/shared_state.py
"""

from __future__ import annotations

import sys

from _cluster import cluster, replica_index, run_replicas

import feedq.distributed as fd


def simple_client(_: int = 0) -> None:
    # TF1: x = tf.Variable(0.0, name="x"); increment_x = tf.assign(x, x + 1)
    x = fd.Variable(0.0, name="x", task="/job:ps/task:0")
    x.assign_add(1.0)
    print("client sees x =", float(x.read()), flush=True)


def main() -> None:
    with cluster() as (session, env):
        for _ in range(2):  # two separate clients, one after the other
            run_replicas(__file__, simple_client, 1, env, session.backend)
        x = fd.Variable(name="x", task="/job:ps/task:0")
        print("after two clients, x =", float(x.read()))
        assert float(x.read()) == 2.0
        print("reset dropped", fd.reset("/job:ps/task:0"), "resource(s)")


if __name__ == "__main__":
    if replica_index() is not None:
        fd.connect()
        simple_client()
        sys.exit(0)
    main()
