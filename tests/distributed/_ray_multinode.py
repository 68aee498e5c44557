"""A node of a multi-node Ray cluster dies under load: run by
``test_distributed_ray.test_multi_node_kill_*`` in a process of its own.

``python -m tests.distributed._ray_multinode <dir>`` starts a ``ray.cluster_utils.Cluster``
on 127.0.0.1 with its files under ``<dir>`` (short: Unix socket paths): a
head node for the client (this driver) and two worker nodes, each offering one
ps task's custom resource, so the two task servers run on different nodes.
Producer and consumer threads move unique integers through a queue on each
server; then the node of ``/job:ps/task:0`` is killed (``remove_node(...,
allow_graceful=False)``). The last line printed is a JSON report: what every
thread saw and when, and the exact accounting of the elements. The PIDs of
every process the cluster started are kept in ``<dir>/pids.json`` for the
test to kill whatever outlives this process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

ROOT = sys.argv[1] if len(sys.argv) > 1 else ""

# Ray reads these when imported: loopback only, files in our own directory
# (Ray otherwise writes the cluster address under the shared /tmp/ray).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.pop("RAY_ADDRESS", None)
if ROOT:
    os.environ["RAY_TMPDIR"] = ROOT
    os.makedirs(os.path.join(ROOT, "ray"), exist_ok=True)

import numpy as np  # noqa: E402
import ray  # noqa: E402

SPEC = {"ps": ["127.0.0.1:2221", "127.0.0.1:2222"]}
PS0, PS1 = "/job:ps/task:0", "/job:ps/task:1"
BATCH = 4
PRODUCERS = CONSUMERS = 2
#: Element values: queue a's below OFFSET, queue b's above.
OFFSET = 1_000_000


def record_pids(path: str) -> None:
    """Write the PIDs (with start times) of every process this one started."""
    import psutil  # Ray's bundled copy: importable once ray is

    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            procs.append([p.pid, p.create_time()])
        except psutil.NoSuchProcess:
            continue
    with open(path + ".tmp", "w") as f:
        json.dump(procs, f)
    os.replace(path + ".tmp", path)


class Side:
    """The producers and consumers of one queue, and what they saw."""

    def __init__(self, q: Any, base: int) -> None:
        self.q = q
        self.base = base
        self.lock = threading.Lock()
        self.acked: list[int] = []  # enqueue acknowledged
        self.unknown: list[int] = []  # enqueue failed: maybe inserted, maybe not
        self.got: list[int] = []  # dequeued (delivery confirmed)
        self.errors: list[tuple[str, str, str, float]] = []  # (role, type, message, when)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, name: str) -> None:
        for i in range(PRODUCERS):
            self.threads.append(threading.Thread(target=self.produce, args=(i,), daemon=True,
                                                 name=f"{name}-producer-{i}"))
        for i in range(CONSUMERS):
            self.threads.append(threading.Thread(target=self.consume, daemon=True,
                                                 name=f"{name}-consumer-{i}"))
        for t in self.threads:
            t.start()

    def produce(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            start = self.base + (i * 100_000) + n * BATCH
            batch = np.arange(start, start + BATCH, dtype=np.int64)
            n += 1
            try:
                self.q.enqueue_many(batch, timeout=30)
            except Exception as exc:  # noqa: BLE001 - recorded for the report
                with self.lock:
                    self.unknown += batch.tolist()
                    self.errors.append(("producer", type(exc).__name__, str(exc), time.monotonic()))
                return
            with self.lock:
                self.acked += batch.tolist()

    def consume(self) -> None:
        from feedq.errors import OutOfRangeError

        while True:
            try:
                got = self.q.dequeue_up_to(BATCH, timeout=30)
            except OutOfRangeError:
                return
            except Exception as exc:  # noqa: BLE001 - recorded for the report
                with self.lock:
                    self.errors.append(("consumer", type(exc).__name__, str(exc), time.monotonic()))
                return
            with self.lock:
                self.got += got.tolist()

    def join(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]


def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)


def listening_beyond_loopback() -> list[str]:
    """Addresses beyond loopback that this process or its descendants listen on."""
    import psutil

    mine = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid()}
    return sorted(f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.net_connections("inet")
                  if c.status == psutil.CONN_LISTEN and c.pid in mine
                  and not (c.laddr.ip.startswith("127.") or c.laddr.ip in ("::1", "::ffff:127.0.0.1")))


def descends_from(pid: int, ancestor: int) -> bool:
    import psutil

    try:
        return any(p.pid == ancestor for p in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return False


def main() -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    import feedq.distributed as fd

    pids_file = os.path.join(ROOT, "pids.json")
    report: dict[str, Any] = {}
    t0 = time.monotonic()
    node_args = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False,
                 "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, shutdown_at_exit=True,
                      head_node_args={**node_args, "resources": {"feedq_test_client": 1}})
    try:
        record_pids(pids_file)
        nodes = {task: cluster.add_node(**node_args,
                                        resources={fd.task_resource(fd.TaskName.parse(task)): 1})
                 for task in (PS0, PS1)}
        record_pids(pids_file)
        session = fd.connect(SPEC, backend="ray", address=cluster.address, namespace="multinode")
        servers = {task: fd.Server(SPEC, "ps", i, backend="ray", namespace="multinode")
                   for i, task in enumerate((PS0, PS1))}
        record_pids(pids_file)
        raylets = {task: node.all_processes["raylet"][0].process.pid
                   for task, node in nodes.items()}
        server_pids = {task: s.info()["pid"] for task, s in servers.items()}
        report["servers_on_their_nodes"] = all(
            descends_from(server_pids[t], raylets[t]) for t in (PS0, PS1))
        report["driver_node_is_head"] = ray.get_runtime_context().get_node_id() == \
            cluster.head_node.node_id
        report["setup_s"] = time.monotonic() - t0
        report["listening_beyond_loopback"] = listening_beyond_loopback()

        sides = {PS0: Side(fd.FIFOQueue(64, np.int64, shapes=[[]], shared_name="qa", task=PS0), 0),
                 PS1: Side(fd.FIFOQueue(64, np.int64, shapes=[[]], shared_name="qb", task=PS1),
                           OFFSET)}
        for task, side in sides.items():
            side.start(f"mn-{task[-1]}")
        wait_for(lambda: all(len(s.got) >= 200 for s in sides.values()), 60,
                 "elements flowing through both queues")
        record_pids(pids_file)

        killed_at = time.monotonic()
        cluster.remove_node(nodes[PS0], allow_graceful=False)
        report["remove_node_s"] = time.monotonic() - killed_at
        a, b = sides[PS0], sides[PS1]
        report["hung_a"] = a.join(30)
        report["errors_a"] = [(role, kind, msg, when - killed_at) for role, kind, msg, when in a.errors]
        t1 = time.monotonic()
        try:
            a.q.size()
            report["after_kill_call"] = ["ok", "", time.monotonic() - t1]
        except Exception as exc:  # noqa: BLE001 - reported
            report["after_kill_call"] = [type(exc).__name__, str(exc), time.monotonic() - t1]

        # The surviving node keeps serving: drain it to the last element.
        b_before = len(b.got)
        wait_for(lambda: len(b.got) > b_before + 40, 30, "queue b to keep flowing after the kill")
        b.stop.set()
        for t in b.threads[:PRODUCERS]:
            t.join(30)
        b.q.close()
        report["hung_b"] = b.join(30)
        report["errors_b"] = [(role, kind, msg, when - killed_at) for role, kind, msg, when in b.errors]
        report["a"] = {"acked": sorted(a.acked), "unknown": sorted(a.unknown), "got": sorted(a.got)}
        report["b"] = {"acked": sorted(b.acked), "unknown": sorted(b.unknown), "got": sorted(b.got),
                       "left": b.q.size()}
        report["total_s"] = time.monotonic() - t0
        for s in servers.values():
            try:
                s.stop()
            except Exception:  # noqa: BLE001 - the killed node's server is gone
                pass
        session.close()
        fd.disconnect()
    finally:
        record_pids(pids_file)
        ray.shutdown()
        cluster.shutdown()
    report["shutdown_s"] = time.monotonic() - t0 - report.get("total_s", 0.0)
    return report


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
