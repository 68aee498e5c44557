"""DeviceFeeder overhead and throughput, against baselines measured in the same run.

CPU (always):
  (a) a synthetic training step (a NumPy matmul per batch) fed by a DeviceFeeder
      vs the same loop consuming the source directly; overhead = feeder time /
      direct time - 1 (target <= 5 %), for an iterable of batches and for a
      FIFOQueue (direct = a dequeue_many loop);
  (b) the same without a step: the per-batch cost of the feeder's thread hand-off
      (informational: no training loop is this cheap);
  (c) the staged host path (staging=True: slots + copy thread) in the loop of (a),
      for an iterable and for a batcher Stage (read like a queue: each batch is
      dequeued straight into its slot; direct = a stage.dequeue() loop).

GPU (when torch sees CUDA):
  (d) host->device MB/s of a DeviceFeeder from a FIFOQueue vs a bare loop of
      pinned ``copy_(non_blocking=True)`` and vs that loop plus the host copy into
      pinned memory the feeder must do (target feeder >= 0.8x the bare loop);
  (e) input stall fraction of a synthetic GPU step fed by the feeder:
      1 - (time of the steps on a resident batch) / (time fed), target < 5 %.

Run: python benchmarks/device_feed.py [--quick] [--repeats N]
"""

from __future__ import annotations

import os

# The CPU step runs BLAS on one core, leaving the others to the feeder thread
# (as a training job leaves cores to its input pipeline); override to taste.
# Set before NumPy loads BLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

try:
    from benchmarks._util import header, table
except ImportError:  # run as a script from benchmarks/
    from _util import header, table  # type: ignore[no-redef]

import feedq
from feedq import FIFOQueue
from feedq.devices import DeviceFeeder


def make_batches(n: int, rows: int, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((rows, dim), dtype=np.float32),
             np.arange(i * rows, (i + 1) * rows, dtype=np.int64)) for i in range(n)]


def filled_queue(batches: list[tuple[np.ndarray, np.ndarray]]) -> FIFOQueue:
    rows, dim = batches[0][0].shape
    q = FIFOQueue(len(batches) * rows, [np.float32, np.int64], shapes=[(dim,), ()])
    for x, y in batches:
        q.enqueue_many([x, y])
    q.close()
    return q


def stage_run(batches: list[tuple[np.ndarray, np.ndarray]], fed: bool,
              step: Callable[[Any], None]) -> float:
    """A batcher stage over the batches' rows, consumed by a dequeue() loop or
    through a staged DeviceFeeder; the time of the loop (the pipeline built
    and started before)."""
    rows = batches[0][0].shape[0]
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    with feedq.Pipeline():
        elems = feedq.slice_input_producer([x, y], shuffle=False, num_epochs=1, capacity=64)
        stage = feedq.batch(elems, rows, capacity=4 * rows)
        if not fed:
            return run_loop(stage, step)
        with DeviceFeeder(stage, device="cpu", staging=True, prefetch=2) as feeder:
            return run_loop(feeder, step)


def run_loop(items: Iterable[Any], step: Callable[[Any], None]) -> float:
    t0 = time.perf_counter()
    for item in items:
        step(item)
    return time.perf_counter() - t0


def queue_direct(q: FIFOQueue, rows: int) -> Iterable[Any]:
    while q.size() >= rows:
        yield q.dequeue_many(rows)


def paired(repeats: int, direct: Callable[[], float], fed: Callable[[], float]
           ) -> tuple[float, float, float]:
    """Median times of both, and the median of the per-pair ratios fed/direct - 1.

    The two run back to back in alternating order, and the overhead is taken
    per pair, so that load from other processes on a shared machine hits
    both sides of a ratio alike.
    """
    ds, fs = [], []
    direct(), fed()  # warmup
    for i in range(repeats):
        if i % 2:
            fs.append(fed())
            ds.append(direct())
        else:
            ds.append(direct())
            fs.append(fed())
    ratio = statistics.median(f / d for d, f in zip(ds, fs))
    return statistics.median(ds), statistics.median(fs), ratio - 1


def cpu_section(args: argparse.Namespace) -> None:
    rows, dim = 256, 1024
    batches = make_batches(args.batches, rows, dim)
    results = []

    def no_step(batch: Any) -> None:
        pass

    loops: list[tuple[str, Callable[[Any], None]]] = []
    for width in args.width:
        weights = np.random.default_rng(1).standard_normal((dim, width), dtype=np.float32)

        def step(batch: Any, weights: np.ndarray = weights) -> None:
            x, y = batch
            float((x @ weights)[0, 0]) + float(y[0])

        loops.append((f"x @ float32[{dim},{width}]", step))
    loops.append(("no step", no_step))

    for label, fn in loops:
        def it_direct(fn: Callable[[Any], None] = fn) -> float:
            return run_loop(iter(batches), fn)

        def it_fed(fn: Callable[[Any], None] = fn) -> float:
            with DeviceFeeder(batches, device="cpu", prefetch=2) as feeder:
                return run_loop(feeder, fn)

        def q_direct(fn: Callable[[Any], None] = fn) -> float:
            q = filled_queue(batches)
            return run_loop(queue_direct(q, rows), fn)

        def q_fed(fn: Callable[[Any], None] = fn) -> float:
            q = filled_queue(batches)
            with DeviceFeeder(q, rows, device="cpu", prefetch=2) as feeder:
                return run_loop(feeder, fn)

        def staged(fn: Callable[[Any], None] = fn) -> float:
            with DeviceFeeder(batches, device="cpu", staging=True, prefetch=2) as feeder:
                return run_loop(feeder, fn)

        def st_direct(fn: Callable[[Any], None] = fn) -> float:
            return stage_run(batches, False, fn)

        def st_staged(fn: Callable[[Any], None] = fn) -> float:
            return stage_run(batches, True, fn)

        sources = [("iterable", it_direct, it_fed), ("FIFOQueue", q_direct, q_fed)]
        if fn is loops[0][1]:
            sources.append(("iterable, staging=True", it_direct, staged))
            sources.append(("batch Stage, staging=True", st_direct, st_staged))
        for source, direct, fed in sources:
            d, f, over = paired(args.repeats, direct, fed)
            per = over * d / len(batches) * 1e6
            results.append((label, source, f"{d * 1e3:.1f}", f"{f * 1e3:.1f}",
                            f"{over * 100:+.1f} %", f"{per:+.1f}"))
    print(f"\n## CPU: {len(batches)} batches of {rows} x float32[{dim}] + int64 "
          f"({rows * dim * 4 / 2**20:.1f} MiB); step on 1 BLAS thread "
          f"(OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}); "
          f"{args.repeats} pairs")
    print(table(results, ["step", "source", "direct ms", "feeder ms",
                          "overhead (median of pairs)", "us/batch"]))


def gpu_section(args: argparse.Namespace, torch: Any) -> None:
    rows, dim = 4096, 4096  # 64 MiB batches
    n = max(8, args.batches // 4)
    nbytes = rows * dim * 4
    src = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    pinned = torch.empty((rows, dim), dtype=torch.float32, pin_memory=True)
    dst = torch.empty((rows, dim), dtype=torch.float32, device="cuda:0")
    pinned.numpy()[:] = src

    def bare(host_copy: bool) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            if host_copy:
                np.copyto(pinned.numpy(), src)
            dst.copy_(pinned, non_blocking=True)
            if host_copy:
                torch.cuda.current_stream().synchronize()  # the buffer is reused
        torch.cuda.synchronize()
        return n * nbytes / (time.perf_counter() - t0) / 1e6

    def fed() -> float:
        q = FIFOQueue(n * rows, np.float32, shapes=[(dim,)])
        for _ in range(n):
            q.enqueue_many(src)
        q.close()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with DeviceFeeder(q, rows, device="cuda:0", prefetch=2) as feeder:
            for x in feeder:
                x.sum()  # consume on the current stream
        torch.cuda.synchronize()
        return n * nbytes / (time.perf_counter() - t0) / 1e6

    rates: dict[str, list[float]] = {"bare": [], "bare+host": [], "feeder": []}
    for _ in range(args.repeats):
        rates["bare"].append(bare(False))
        rates["bare+host"].append(bare(True))
        rates["feeder"].append(fed())
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n## GPU H2D: {n} batches of {nbytes / 2**20:.0f} MiB, "
          f"{torch.cuda.get_device_name(0)}")
    print(table([(k, f"{v:,.0f}", f"{v / med['bare']:.2f}x") for k, v in med.items()],
                ["path", "MB/s", "vs bare"]))

    # (e) stall fraction: a step of ~5 ms of GPU work per 8 MiB batch.
    rows2, dim2 = 2048, 1024
    batches = make_batches(args.batches, rows2, dim2)
    w = torch.randn(dim2, dim2, device="cuda:0")

    def gpu_step(x: Any) -> None:
        for _ in range(args.gpu_step_matmuls):
            x = torch.tanh(x @ w)

    resident = torch.from_numpy(batches[0][0]).cuda()

    def compute_only() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in batches:
            gpu_step(resident)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def fed_steps() -> float:
        q = filled_queue(batches)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with DeviceFeeder(q, rows2, device="cuda:0", prefetch=3) as feeder:
            for x, _ in feeder:
                gpu_step(x)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    c, f, _ = paired(args.repeats, compute_only, fed_steps)
    print(f"\n## GPU stall: {len(batches)} batches of {rows2 * dim2 * 4 / 2**20:.0f} MiB, "
          f"step = {args.gpu_step_matmuls} x tanh(x @ float32[{dim2}, {dim2}])")
    print(table([(f"{c * 1e3:.1f}", f"{f * 1e3:.1f}", f"{(1 - c / f) * 100:.1f} %")],
                ["compute only ms", "fed ms", "stall fraction"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches and repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--width", type=int, nargs="+", default=[256, 1024],
                        help="matmul widths of the CPU step (one table row each)")
    parser.add_argument("--gpu-step-matmuls", type=int, default=8)
    args = parser.parse_args()
    args.repeats = args.repeats or (5 if args.quick else 15)
    args.batches = args.batches or (40 if args.quick else 60)
    header("DeviceFeeder: overhead vs consuming the source directly; GPU MB/s and stalls")
    print(f"# threads alive before: {threading.active_count()}")
    cpu_section(args)
    try:
        import torch
    except ImportError:
        print("\n## GPU: skipped (torch not installed)")
        return
    if torch.cuda.is_available():
        gpu_section(args, torch)
    else:
        print(f"\n## GPU: skipped (torch {torch.__version__}: no CUDA device)")


if __name__ == "__main__":
    main()
