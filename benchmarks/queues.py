"""Queue throughput and memory, against baselines measured in the same run.

(a) per-element enqueue+dequeue pairs/s, FIFOQueue vs queue.Queue put+get,
    1 producer thread and 1 consumer thread;
(b) MB/s of enqueue_many + dequeue_many of 256 x float32[32] blocks vs a
    plain NumPy copy of the same bytes into and out of a preallocated array;
(c) the same for RandomShuffleQueue and PaddingFIFOQueue;
(e) 1P+1C MB/s of 2 MiB blocks (256 x float32[2048]), which FIFOQueue copies
    with its lock released (reserve -> copy -> commit), against the same
    queue copying under its lock, and a NumPy copy;
(d) memory of a FIFOQueue holding 1M float32[32] elements vs the payload;
(f) us per enqueue_many + dequeue_many pair of 64 and 1024 rows with 1, 2 and 4
    components (float32[32] + int64 columns; and + a string column), one
    thread, against the bare NumPy copies a pair makes (in and out).

Run: python benchmarks/queues.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import queue as pyqueue
import statistics
import threading
import tracemalloc
from typing import Any

import numpy as np

try:
    from benchmarks._util import header, median_rate, table, timed
except ImportError:  # run as a script from benchmarks/
    from _util import header, median_rate, table, timed  # type: ignore[no-redef]

from feedq import STRING, FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue


def pairs_feedq(n: int, shape: tuple[int, ...]) -> float:
    q = FIFOQueue(1024, np.float32, shapes=[list(shape)])
    item = np.zeros(shape, np.float32)

    def produce() -> None:
        for _ in range(n):
            q.enqueue(item)

    def body() -> None:
        t = threading.Thread(target=produce)
        t.start()
        for _ in range(n):
            q.dequeue()
        t.join()

    return timed(n, body)


def pairs_stdlib(n: int, shape: tuple[int, ...]) -> float:
    q: pyqueue.Queue[object] = pyqueue.Queue(1024)
    item = np.zeros(shape, np.float32)

    def produce() -> None:
        for _ in range(n):
            q.put(item.copy())  # a queue must not alias the caller's buffer

    def body() -> None:
        t = threading.Thread(target=produce)
        t.start()
        for _ in range(n):
            q.get()
        t.join()

    return timed(n, body)


BLOCK = 256
WIDTH = 32
BLOCK_MB = BLOCK * WIDTH * 4 / 1e6


def copy_bound(blocks: int) -> float:
    src = np.random.default_rng(0).random((BLOCK, WIDTH), dtype=np.float32)
    ring = np.empty((4 * BLOCK, WIDTH), np.float32)
    out = np.empty((BLOCK, WIDTH), np.float32)

    def body() -> None:
        for i in range(blocks):
            j = (i % 4) * BLOCK
            ring[j : j + BLOCK] = src
            out[:] = ring[j : j + BLOCK]

    return timed(blocks * BLOCK_MB, body)


def batch_rate(make: str, blocks: int, threaded: bool) -> float:
    src = np.random.default_rng(0).random((BLOCK, WIDTH), dtype=np.float32)
    if make == "fifo":
        q = FIFOQueue(4 * BLOCK, np.float32, shapes=[[WIDTH]])
    elif make == "shuffle":
        q = RandomShuffleQueue(4 * BLOCK, BLOCK, np.float32, shapes=[[WIDTH]], seed=0)
    else:
        q = PaddingFIFOQueue(4 * BLOCK, np.float32, shapes=[[WIDTH]])
    if make == "shuffle":
        q.enqueue_many(src)  # keep min_after_dequeue satisfied

    if threaded:
        def body() -> None:
            def produce() -> None:
                for _ in range(blocks):
                    q.enqueue_many(src)
            t = threading.Thread(target=produce)
            t.start()
            for _ in range(blocks):
                q.dequeue_many(BLOCK)
            t.join()
    else:
        def body() -> None:
            for _ in range(blocks):
                q.enqueue_many(src)
                q.dequeue_many(BLOCK)

    return timed(blocks * BLOCK_MB, body)


class LockedCopyFIFOQueue(FIFOQueue):
    """FIFOQueue copying every batch under its lock (the (e) baseline)."""

    _unlocked_copy_bytes = None


def large_block_rate(width: int, blocks: int, locked: bool | None) -> float:
    """1P+1C MB/s of 256-row blocks of float32[width]; ``locked=None``: a
    NumPy copy in and out of a ring instead of a queue."""
    src = np.random.default_rng(0).random((BLOCK, width), dtype=np.float32)
    mb = blocks * src.nbytes / 1e6
    if locked is None:
        ring = np.empty((4 * BLOCK, width), np.float32)
        out = np.empty_like(src)

        def copy() -> None:
            for i in range(blocks):
                j = (i % 4) * BLOCK
                ring[j : j + BLOCK] = src
                out[:] = ring[j : j + BLOCK]

        return timed(mb, copy)
    q = (LockedCopyFIFOQueue if locked else FIFOQueue)(4 * BLOCK, np.float32, shapes=[[width]])

    def body() -> None:
        def produce() -> None:
            for _ in range(blocks):
                q.enqueue_many(src)
        t = threading.Thread(target=produce)
        t.start()
        for _ in range(blocks):
            q.dequeue_many(BLOCK)
        t.join()

    return timed(mb, body)


def ragged_padding_rate(blocks: int) -> float:
    """Variable-length rows through PaddingFIFOQueue (the per-element path)."""
    rng = np.random.default_rng(0)
    rows = [np.ones(int(n), np.float32) for n in rng.integers(1, WIDTH + 1, size=BLOCK)]
    q = PaddingFIFOQueue(4 * BLOCK, np.float32, shapes=[[None]])
    mb = sum(r.nbytes for r in rows) / 1e6

    def body() -> None:
        for _ in range(blocks):
            for r in rows:
                q.enqueue(r)
            q.dequeue_many(BLOCK)

    return timed(blocks * mb, body)


def _component_cols(ncomp: int, rows: int, string: bool) -> tuple[list[Any], list[list[int]], list[Any]]:
    rng = np.random.default_rng(0)
    dtypes: list[Any] = [np.float32] + [np.int64] * (ncomp - 1)
    shapes: list[list[int]] = [[WIDTH]] + [[]] * (ncomp - 1)
    cols: list[Any] = [rng.random((rows, WIDTH), dtype=np.float32)]
    cols += [np.arange(rows, dtype=np.int64)] * (ncomp - 1)
    if string:
        dtypes.append(STRING)
        shapes.append([])
        cols.append(np.array([b"r%d" % i for i in range(rows)], dtype=object))
    return dtypes, shapes, cols


def components_pair_us(ncomp: int, rows: int, string: bool, pairs: int) -> float:
    """Pairs per second (1e6 / us per pair) of enqueue_many + dequeue_many."""
    dtypes, shapes, cols = _component_cols(ncomp, rows, string)
    q = FIFOQueue(4 * rows, dtypes, shapes=shapes)
    vals = cols[0] if len(cols) == 1 else cols

    def body() -> None:
        for _ in range(pairs):
            q.enqueue_many(vals)
            q.dequeue_many(rows)

    return timed(pairs, body)


def components_copy_us(ncomp: int, rows: int, string: bool, pairs: int) -> float:
    """The floor: the same columns copied into preallocated columns and out
    again as new arrays (what a pair must at least do), per second."""
    _, _, cols = _component_cols(ncomp, rows, string)
    store = [np.empty((4 * rows, *c.shape[1:]), c.dtype) for c in cols]

    def body() -> None:
        for _ in range(pairs):
            for buf, c in zip(store, cols):
                buf[:rows] = c
            for buf in store:
                buf[:rows].copy()

    return timed(pairs, body)


def memory_ratio(n: int) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    q = FIFOQueue(n, np.float32, shapes=[[WIDTH]])
    chunk = np.ones((65536, WIDTH), np.float32)
    base = tracemalloc.get_traced_memory()[0]
    left = n
    while left:
        k = min(left, chunk.shape[0])
        q.enqueue_many(chunk[:k])
        left -= k
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    payload = n * WIDTH * 4
    del q
    return used / payload, used / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and elements")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", choices=["all", "components"], default="all",
                    help="components: only the (f) rows")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)

    header("feedq queue benchmark")
    rows: list[list[str]] = []
    if args.only == "all":
        rows += core_rows(args.quick, repeats)
    rows += component_rows(args.quick, repeats)
    print(table(rows, ["measure", "feedq", "baseline", "ratio", "target"]))


def core_rows(quick: bool, repeats: int) -> list[list[str]]:
    """Rows (a)-(e) and (d)."""
    n_pairs = 20_000 if quick else 100_000
    blocks = 500 if quick else 3000
    rows = []
    for shape in [(), (32,)]:
        f, _ = median_rate(lambda shape=shape: pairs_feedq(n_pairs, shape), repeats)
        s, _ = median_rate(lambda shape=shape: pairs_stdlib(n_pairs, shape), repeats)
        rows.append([f"(a) pairs/s, float32{list(shape)}, 1P+1C threads", f"{f:,.0f}", f"queue.Queue {s:,.0f}",
                     f"{f / s:.2f}x (cost {s / f:.2f}x)", "cost <= 1.2x"])
    bound, _ = median_rate(lambda: copy_bound(blocks), repeats)
    for make, target in [("fifo", 0.5), ("shuffle", 0.25), ("padding", 0.25)]:
        for threaded in (False, True):
            r, _ = median_rate(lambda make=make, threaded=threaded: batch_rate(make, blocks, threaded), repeats)
            label = f"({'b' if make == 'fifo' else 'c'}) MB/s {make} 256x32 f32 " + ("1P+1C threads" if threaded else "one thread")
            rows.append([label, f"{r:,.0f}", f"numpy copy {bound:,.0f}", f"{r / bound:.2f}x", f">= {target}x"])
    big_blocks = blocks // 10
    big_bound, _ = median_rate(lambda: large_block_rate(2048, big_blocks, None), repeats)
    for locked in (False, True):
        r, _ = median_rate(lambda locked=locked: large_block_rate(2048, big_blocks, locked), repeats)
        how = "copies under the lock" if locked else "copies outside the lock"
        rows.append([f"(e) MB/s fifo 256x2048 f32 1P+1C, {how}", f"{r:,.0f}", f"numpy copy {big_bound:,.0f}",
                     f"{r / big_bound:.2f}x", "(info)"])
    rp, _ = median_rate(lambda: ragged_padding_rate(blocks // 10), repeats)
    rows.append(["MB/s padding, ragged rows, per-element enqueue", f"{rp:,.0f}", f"numpy copy {bound:,.0f}",
                 f"{rp / bound:.3f}x", "(info)"])
    n_mem = 200_000 if quick else 1_000_000
    ratio, mb = memory_ratio(n_mem)
    rows.append([f"(d) memory, FIFOQueue of {n_mem:,} float32[32]", f"{mb:,.0f} MB",
                 f"payload {n_mem * 128 / 1e6:,.0f} MB", f"{ratio:.3f}x", "<= 1.1x"])
    return rows


def component_rows(quick: bool, repeats: int) -> list[list[str]]:
    """Rows (f): the one put path and the one take path, against the bare
    copies they make (interleaved)."""
    n_pairs = 2_000 if quick else 10_000
    rows = []
    for nrows in (64, 1024):
        for ncomp, string in [(1, False), (2, False), (4, False), (2, True)]:
            pairs = n_pairs // (1 + nrows // 256)
            queue_rates, copy_rates = [], []
            components_pair_us(ncomp, nrows, string, pairs)
            components_copy_us(ncomp, nrows, string, pairs)
            for _ in range(repeats):
                queue_rates.append(components_pair_us(ncomp, nrows, string, pairs))
                copy_rates.append(components_copy_us(ncomp, nrows, string, pairs))
            f, c = statistics.median(queue_rates), statistics.median(copy_rates)
            what = f"f32[32]{' + int64' * (ncomp - 1)}{' + string' if string else ''}"
            rows.append([f"(f) us per enqueue_many+dequeue_many, {nrows} x {what}", f"{1e6 / f:,.1f}",
                         f"numpy copies {1e6 / c:,.1f}", f"{f / c:.2f}x", "(info)"])
    return rows


if __name__ == "__main__":
    main()
