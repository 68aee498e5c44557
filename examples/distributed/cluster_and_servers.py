"""Seed cells "cluster spec", "server.join()" and "Opening a Session".

A cluster is jobs of tasks; a Server per task holds that task's resources;
``join()`` blocks until the server stops. A client "opens a session against
a server" by connecting to the cluster and naming the task that holds what
it wants. Also shows misconfiguration errors (unknown task, duplicate task).

Run: python examples/distributed/cluster_and_servers.py
(starts a small simulated cluster unless FEEDQ_CLUSTER / RAY_ADDRESS name one)
"""

from __future__ import annotations

import threading
import time

import numpy as np
from _cluster import SPEC, cluster

import feedq.distributed as fd
from feedq.errors import InvalidArgumentError


def main() -> None:
    # TF1: cluster_spec = tf.train.ClusterSpec({"ps": [...], "worker": [...]})
    spec = fd.ClusterSpec(SPEC)
    print("cluster      ->", spec)
    print("workers      ->", spec.num_tasks("worker"), spec.job_tasks("worker"))
    with cluster() as (session, _env):
        cl = session.cluster
        assert cl is not None
        # Opening a session against /job:worker/task:1 (TF1: tf.Session("grpc://machine-b:2222")).
        a = fd.Variable(1.0, name="a", task="/job:worker/task:1")
        b = float(a.read()) + 2
        c = float(a.read()) * 3
        print("c.eval()     ->", c, "(b =", b, ")")

        # Misconfiguration is one clear error.
        try:
            fd.Server(cl, "chief", 0, backend=session.backend, namespace=session.namespace)
        except InvalidArgumentError as exc:
            print("unknown job  ->", exc)
        try:
            fd.Server(cl, "ps", 0, backend=session.backend, namespace=session.namespace)
        except InvalidArgumentError as exc:
            print("duplicate    ->", str(exc)[:70], "...")

        # server.join(): blocks until the server stops. Here a second Server
        # (a job of its own, unpinned) is stopped from another thread after 0.3 s.
        extra = fd.ClusterSpec({**cl.as_dict(), "eval": ["machine-c.example.com:2222"]})
        server = fd.Server(extra, "eval", 0, backend=session.backend,
                           namespace=session.namespace, pin=False)
        eval_session = fd.Session(extra, backend=session.backend, namespace=session.namespace)
        q = fd.FIFOQueue(4, np.int64, shared_name="on_eval", task=server.task,
                         session=eval_session)
        q.enqueue(7)
        threading.Timer(0.3, server.stop).start()
        t0 = time.monotonic()
        server.join()
        print(f"server.join  -> returned after {time.monotonic() - t0:.1f} s (server stopped)")
        eval_session.close()
        fd.reset()  # clear the containers this example filled


if __name__ == "__main__":
    main()
