"""Pipeline throughput: slice_input_producer over in-memory arrays ->
shuffle_batch(256, num_threads=2) consumed in a loop, beside the raw queue
bound (enqueue_many + dequeue_many of the same rows through one FIFOQueue,
one producer thread and the consumer) measured in the same run.

Rows: float32[32] features + an int64 label (136 bytes).

Run: python benchmarks/pipeline.py [--rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

try:
    from benchmarks._util import header, median_rate, table
except ImportError:  # run as a script from benchmarks/
    from _util import header, median_rate, table  # type: ignore[no-redef]

import feedq

BATCH = 256


def data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((rows, 32), dtype=np.float32), np.arange(rows, dtype=np.int64)


def raw_queue_bound(x: np.ndarray, y: np.ndarray) -> float:
    """Rows/s of enqueue_many(256) / dequeue_many(256) through a FIFOQueue."""
    q = feedq.FIFOQueue(4096, [np.float32, np.int64], shapes=[[32], []])
    n = x.shape[0] - x.shape[0] % BATCH

    def produce() -> None:
        for i in range(0, n, BATCH):
            q.enqueue_many([x[i : i + BATCH], y[i : i + BATCH]])

    t0 = time.perf_counter()
    t = threading.Thread(target=produce)
    t.start()
    for _ in range(n // BATCH):
        q.dequeue_many(BATCH)
    t.join()
    return n / (time.perf_counter() - t0)


def shuffle_pipeline(x: np.ndarray, y: np.ndarray, threads: int, per_element: bool) -> float:
    rows = x.shape[0]
    t0 = time.perf_counter()
    seen = 0
    with feedq.Pipeline():
        if per_element:
            # A callable source: one Python call and one enqueue per row.
            idx = iter(range(rows))
            lock = threading.Lock()

            def one_row() -> list:
                with lock:
                    i = next(idx, None)
                if i is None:
                    raise feedq.errors.OutOfRangeError("end")
                return [x[i], y[i]]

            b = feedq.shuffle_batch(one_row, BATCH, capacity=20_000, min_after_dequeue=10_000,
                                    num_threads=threads, dtypes=[np.float32, np.int64], shapes=[[32], []],
                                    allow_smaller_final_batch=True)
        else:
            s = feedq.slice_input_producer([x, y], num_epochs=1, shuffle=True, seed=0, capacity=8192)
            b = feedq.shuffle_batch(s, BATCH, capacity=20_000, min_after_dequeue=10_000, num_threads=threads,
                                    allow_smaller_final_batch=True)
        for _xb, yb in b:
            seen += yb.shape[0]
    assert seen == rows, (seen, rows)
    return rows / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    x, y = data(args.rows)
    header("feedq pipeline benchmark")
    bound, _ = median_rate(lambda: raw_queue_bound(x, y), args.repeats)
    fast, _ = median_rate(lambda: shuffle_pipeline(x, y, 2, per_element=False), args.repeats)
    small = max(20_000, args.rows // 10)
    xs, ys = x[:small], y[:small]
    slow, _ = median_rate(lambda: shuffle_pipeline(xs, ys, 2, per_element=True), max(1, args.repeats // 2))
    rows = [
        ["raw FIFOQueue enqueue_many/dequeue_many(256), 1P+1C", f"{bound:,.0f}", "(bound)", "", ""],
        ["slice_input_producer -> shuffle_batch(256, num_threads=2)", f"{fast:,.0f}", f"{fast / bound:.2f}x",
         ">= 0.5x and >= 1,000,000/s", "ok" if fast >= 0.5 * bound and fast >= 1e6 else "MISSED"],
        [f"per-element callable -> shuffle_batch(256, num_threads=2) ({small:,} rows)", f"{slow:,.0f}",
         f"{slow / bound:.3f}x", "(info)", ""],
    ]
    print(table(rows, ["pipeline", "records/s", "vs bound", "target", ""]))


if __name__ == "__main__":
    main()
