"""Producer -> queue host -> consumer in three processes: a feedq shared queue
vs a bare async Ray actor passing the same arrays (measured in the same run).

An item is a float32[256, 32] array (32 KiB); each call moves ``--per-call``
items (64 by default, 2 MiB). The producer and the consumer are separate
client processes; the host is the task server's actor (feedq) or a bare
async actor holding an ``asyncio.Queue`` (baseline). The consumer's clock
runs from the first item it receives to the last; latency is per call.

Run: python benchmarks/distributed.py [--calls 150] [--per-call 64] [--repeats 3]
     [--compression bfloat16]   (adds a row with that wire codec; MB/s counts float32 bytes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import header, table

ITEM_SHAPE = (256, 32)
ITEM_BYTES = int(np.prod(ITEM_SHAPE)) * 4
SPEC = {"ps": ["127.0.0.1:2221"], "worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
#: Seconds a client may take to start, and one queue call may take.
START_TIMEOUT = 120.0
CALL_TIMEOUT = 60.0


class BareQueue:
    """The baseline: an async actor holding an asyncio.Queue of batches."""

    def __init__(self, capacity_calls: int) -> None:
        self.q: asyncio.Queue[Any] = asyncio.Queue(capacity_calls)

    async def put(self, batch: Any) -> None:
        await self.q.put(batch)

    async def get(self) -> Any:
        return await self.q.get()


def role(system: str, which: str, calls: int, per_call: int, name: str, codec: str) -> None:
    """One client process: produce or consume ``calls`` batches; prints JSON."""
    import ray

    import feedq.distributed as fd

    fd.connect()
    batch = np.random.default_rng(0).standard_normal((per_call, *ITEM_SHAPE)).astype(np.float32)
    if system == "feedq":
        q = fd.FIFOQueue(4 * per_call, np.float32, shapes=[list(ITEM_SHAPE)], shared_name=name,
                         task="/job:ps/task:0", compression=None if codec == "none" else codec)
        op = (lambda: q.enqueue_many(batch, timeout=CALL_TIMEOUT)) if which == "producer" else \
            (lambda: q.dequeue_many(per_call, timeout=CALL_TIMEOUT))
    else:
        actor = ray.get_actor(name, namespace=os.environ["FEEDQ_NAMESPACE"])
        op = (lambda: ray.get(actor.put.remote(batch), timeout=CALL_TIMEOUT)) \
            if which == "producer" else \
            (lambda: ray.get(actor.get.remote(), timeout=CALL_TIMEOUT))
    print("ready", flush=True)
    # The go signal: both sides start together (EOF: the parent is gone).
    if not sys.stdin.readline():
        sys.exit(1)
    lat = []
    t_first = t_last = time.perf_counter()
    for i in range(calls):
        t0 = time.perf_counter()
        out = op()
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        if i == 0:
            t_first = t1
        t_last = t1
        if which == "consumer" and i == 0 and system == "feedq":
            assert out.shape == (per_call, *ITEM_SHAPE)
    print(json.dumps({"lat": lat, "t_first": t_first, "t_last": t_last}), flush=True)


def run_once(system: str, calls: int, per_call: int, env: dict[str, str], ray: Any,
             tag: str, codec: str = "none") -> dict[str, float]:
    name = f"bench_{system}_{codec}_{tag}"
    actor = None
    if system == "bare":
        actor = ray.remote(BareQueue).options(
            name=name, namespace=env["FEEDQ_NAMESPACE"], num_cpus=0, max_concurrency=1000,
            resources={"feedq_task_ps_0": 0.001}).remote(4)
        ray.get(actor.put.remote(None))
        ray.get(actor.get.remote())
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for w in ("consumer", "producer"):
            procs[w] = subprocess.Popen([sys.executable, __file__, "--role", system, w, str(calls),
                                         str(per_call), name, codec], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for p in procs.values():
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], START_TIMEOUT)
            line = p.stdout.readline() if ready else ""
            if line.strip() != "ready":
                raise SystemExit(f"a {system} client failed to start within "
                                 f"{START_TIMEOUT:g} s: {line!r}")
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = {}
        for w, p in procs.items():
            out, _ = p.communicate(timeout=300)
            if p.returncode != 0:
                raise SystemExit(f"the {system} {w} failed (exit status {p.returncode})")
            results[w] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs.values():  # only the children started here
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=10)
        if actor is not None:
            ray.kill(actor)
    cons = results["consumer"]
    # The first call includes the wait for the first batch: rate over the rest.
    span = cons["t_last"] - cons["t_first"]
    items = (calls - 1) * per_call
    return {
        "items_s": items / span,
        "mb_s": items * ITEM_BYTES / span / 1e6,
        "get_ms": statistics.median(cons["lat"][1:]) * 1e3,
        "put_ms": statistics.median(results["producer"]["lat"]) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--per-call", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compression", default=None, choices=["float16", "bfloat16", "int8"],
                        help="also measure a feedq queue with this wire codec")
    args = parser.parse_args()
    import feedq.distributed as fd

    header("distributed: producer -> host -> consumer, three processes")
    with fd.LocalCluster(SPEC) as lc:
        if lc.backend != "ray":
            raise SystemExit('this benchmark needs Ray: pip install "feedq[ray]"')
        import ray

        rows = []
        systems = [("bare", "none"), ("feedq", "none")]
        if args.compression:
            systems.append(("feedq", args.compression))
        runs: dict[str, list[dict[str, float]]] = {f"{s}/{c}": [] for s, c in systems}
        for r in range(args.repeats):
            for system, codec in systems:  # interleaved: same conditions for all
                runs[f"{system}/{codec}"].append(
                    run_once(system, args.calls, args.per_call, lc.env, ray, f"{r}", codec))
        med = {s: {k: statistics.median(x[k] for x in v) for k in v[0]} for s, v in runs.items()}
        labels = {"bare/none": "bare async Ray actor", "feedq/none": "feedq FIFOQueue on ps:0"}
        for key in runs:
            label = labels.get(key, f"feedq FIFOQueue on ps:0, {key.split('/')[1]} wire")
            m = med[key]
            rows.append([label, f"{m['items_s']:,.0f}", f"{m['mb_s']:,.0f}", f"{m['put_ms']:.2f}",
                         f"{m['get_ms']:.2f}",
                         f"{m['items_s'] / med['bare/none']['items_s']:.2f}x"])
        print(f"# item float32{list(ITEM_SHAPE)} ({ITEM_BYTES // 1024} KiB), "
              f"{args.per_call} items per call, {args.calls} calls, {args.repeats} repeats")
        print(table(rows, ["system", "items/s", "MB/s", "put ms/call", "get ms/call",
                           "vs bare"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        role(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
             sys.argv[7])
    else:
        main()
