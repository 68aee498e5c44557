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
    thread, against the floor: the NumPy copies a pair must make (the rows
    into preallocated columns, and out again as new arrays), so the ratio is
    what the queue's bookkeeping costs on top of its copies.
(h) us of thread CPU per dequeue_many(256) (and per dequeue()) from a
    RandomShuffleQueue(12288, min_after_dequeue 4096) of float32[32] + int64
    holding ~8k rows, against the same calls on a FIFOQueue holding the
    same rows, interleaved in one run; each call is timed alone
    (time.thread_time_ns around it; the refill enqueue_many is not
    counted), so the ratio is what the random draw costs over the FIFO's
    contiguous copy.
(g) --against TREE: the per-call costs of this tree beside another checkout
    of feedq (the code before a change), measured in ONE run: each round
    runs both trees in a fresh subprocess (PYTHONPATH=TREE, then this tree,
    the order alternating), each reporting the calling thread's CPU time
    per call (time.thread_time, so other processes on a shared machine
    count less) and 1P+1C pairs per process CPU-second; medians and ranges
    over the rounds, and the ratio of the medians. With --instructions, the
    interpreter instructions per call pair instead (valgrind's callgrind,
    one run per tree, 1,000 pairs per case): a count the load of a shared
    machine does not change, so small differences show. The last rows are
    blocking hand-offs: round trips of one element through two capacity-1
    queues between two threads (every dequeue waits), feedq beside
    queue.Queue, in process CPU (both threads) or instructions per trip.

Run: python benchmarks/queues.py [--quick] [--only components|takes]
     python benchmarks/queues.py --against ../base [--rounds 5] [--instructions]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue as pyqueue
import statistics
import subprocess
import sys
import threading
import time
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


def ragged_block_rate(blocks: int) -> float:
    """Blocks of rows padded per block (as parse_example pads a
    FixedLenSequenceFeature) through PaddingFIFOQueue([None]): enqueue_many
    of 4 x BLOCK rows, four dequeue_many(BLOCK) (the dynamic_pad path)."""
    src = np.random.default_rng(0).random((4 * BLOCK, WIDTH), dtype=np.float32)
    q = PaddingFIFOQueue(8 * BLOCK, np.float32, shapes=[[None]])

    def body() -> None:
        for _ in range(blocks // 4):
            q.enqueue_many(src)
            for _ in range(4):
                q.dequeue_many(BLOCK)

    return timed(blocks // 4 * 4 * BLOCK_MB, body)


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


# -- (g) per-call CPU time, this tree beside another ------------------------------------


def _cpu_us_per_call(run: Any, calls: int, rounds: int) -> float:
    """Median thread CPU microseconds per call of ``run(calls)`` (after a warm-up)."""
    run(max(1, calls // 10))
    per = []
    for _ in range(rounds):
        t0 = time.thread_time()
        run(calls)
        per.append((time.thread_time() - t0) / calls * 1e6)
    return statistics.median(per)


def _pair_one(shape: tuple[int, ...]) -> Any:
    q = FIFOQueue(1024, np.float32, shapes=[list(shape)])
    item = np.zeros(shape, np.float32)

    def run(n: int) -> None:
        put, take = q.enqueue, q.dequeue
        for _ in range(n):
            put(item)
            take()
    return run


def _pair_many(ncomp: int, rows: int, string: bool) -> Any:
    dtypes, shapes, cols = _component_cols(ncomp, rows, string)
    q = FIFOQueue(4 * rows, dtypes, shapes=shapes)
    vals = cols[0] if len(cols) == 1 else cols

    def run(n: int) -> None:
        put, take = q.enqueue_many, q.dequeue_many
        for _ in range(n):
            put(vals)
            take(rows)
    return run


def _threaded_pairs_per_cpu_s(n: int) -> float:
    """1P+1C enqueue/dequeue pairs of float32[32] per CPU-second of the process."""
    q = FIFOQueue(1024, np.float32, shapes=[[WIDTH]])
    item = np.zeros((WIDTH,), np.float32)

    def produce() -> None:
        for _ in range(n):
            q.enqueue(item)
    t0 = time.process_time()
    t = threading.Thread(target=produce)
    t.start()
    for _ in range(n):
        q.dequeue()
    t.join()
    return n / (time.process_time() - t0)


SHUFFLE_STORED = 8192


def _stored_queue(kind: str) -> tuple[Any, list[np.ndarray]]:
    """(h): a queue of float32[32] + int64 holding SHUFFLE_STORED rows, and a 256-row refill."""
    dtypes, shapes = [np.float32, np.int64], [[WIDTH], []]
    q: Any
    if kind == "shuffle":
        q = RandomShuffleQueue(12288, 4096, dtypes, shapes=shapes, seed=0)
    else:
        q = FIFOQueue(12288, dtypes, shapes=shapes)
    x = np.random.default_rng(0).random((SHUFFLE_STORED, WIDTH), dtype=np.float32)
    q.enqueue_many([x, np.arange(SHUFFLE_STORED)])
    return q, [x[:BLOCK], np.arange(BLOCK)]


def _stored_take(kind: str, many: bool) -> Any:
    """(g) case: enqueue_many(256) + dequeue_many(256) (or 256 x enqueue + dequeue) on ~8k stored."""
    q, refill = _stored_queue(kind)
    rows = [[refill[0][i], refill[1][i]] for i in range(BLOCK)]

    def run(n: int) -> None:
        if many:
            for _ in range(n):
                q.dequeue_many(BLOCK)
                q.enqueue_many(refill)
        else:
            take, put = q.dequeue, q.enqueue
            for i in range(n):
                take()
                put(rows[i % BLOCK])
    return run


def take_cpu_us(kind: str, many: bool, calls: int) -> float:
    """(h): median thread CPU us of one dequeue_many(256) (or dequeue()) with ~8k stored."""
    q, refill = _stored_queue(kind)
    row = [refill[0][0], refill[1][0]]
    clock = time.thread_time_ns
    per = []
    for _ in range(calls):
        if many:
            t0 = clock()
            q.dequeue_many(BLOCK)
            t1 = clock()
            q.enqueue_many(refill)
        else:
            t0 = clock()
            q.dequeue()
            t1 = clock()
            q.enqueue(row)
        per.append(t1 - t0)
    return statistics.median(per) / 1e3


def take_rows(quick: bool, repeats: int) -> list[list[str]]:
    """Rows (h): shuffle takes beside FIFO takes, interleaved."""
    calls = 2_000 if quick else 10_000
    rows = []
    for many, what in [(True, f"dequeue_many({BLOCK})"), (False, "dequeue()")]:
        shuffle, fifo = [], []
        take_cpu_us("shuffle", many, calls // 10)
        take_cpu_us("fifo", many, calls // 10)
        for _ in range(repeats):
            shuffle.append(take_cpu_us("shuffle", many, calls))
            fifo.append(take_cpu_us("fifo", many, calls))
        sh, fi = statistics.median(shuffle), statistics.median(fifo)
        rows.append([f"(h) CPU us per {what}, RandomShuffleQueue of ~8k f32[32] + int64", f"{sh:,.2f}",
                     f"FIFOQueue {fi:,.2f}", f"{sh / fi:.2f}x", "(info)"])
    return rows


PER_CALL_CASES = [
    ("enqueue+dequeue, float32[]", lambda: _pair_one(()), 50_000),
    ("enqueue+dequeue, float32[32]", lambda: _pair_one((WIDTH,)), 50_000),
    ("enqueue_many+dequeue_many, 64 x f32[32]", lambda: _pair_many(1, 64, False), 20_000),
    ("enqueue_many+dequeue_many, 64 x f32[32] + int64", lambda: _pair_many(2, 64, False), 10_000),
    ("enqueue_many+dequeue_many, 64 x f32[32] + 3 int64", lambda: _pair_many(4, 64, False), 10_000),
    ("enqueue_many+dequeue_many, 64 x f32[32] + int64 + string", lambda: _pair_many(2, 64, True), 5_000),
    ("enqueue_many+dequeue_many, 1024 x f32[32]", lambda: _pair_many(1, 1024, False), 3_000),
    ("shuffle dequeue_many(256)+enqueue_many(256), ~8k f32[32] + int64 stored",
     lambda: _stored_take("shuffle", True), 5_000),
    ("fifo dequeue_many(256)+enqueue_many(256), ~8k f32[32] + int64 stored",
     lambda: _stored_take("fifo", True), 5_000),
    ("shuffle dequeue+enqueue, ~8k f32[32] + int64 stored", lambda: _stored_take("shuffle", False), 20_000),
]
THREADED = "1P+1C pairs per CPU-second, float32[32] (thousands)"
HANDOFFS = [
    ("blocking hand-off round trip (2 waits), float32[32], feedq", "feedq"),
    ("blocking hand-off round trip (2 waits), float32[32], queue.Queue", "stdlib"),
]


def _handoff_trips(kind: str) -> Any:
    """Round trips of one element through two capacity-1 queues between two
    threads (the echo thread dequeues from one and enqueues into the other):
    each trip makes both threads wait once, so it costs two blocking
    hand-offs (a wait, the notify that ends it, the wake-up)."""
    item = np.zeros((WIDTH,), np.float32)
    if kind == "feedq":
        a, b = FIFOQueue(1, np.float32, shapes=[[WIDTH]]), FIFOQueue(1, np.float32, shapes=[[WIDTH]])
        aput, aget, bput, bget = a.enqueue, a.dequeue, b.enqueue, b.dequeue
    else:
        sa: pyqueue.Queue[object] = pyqueue.Queue(1)
        sb: pyqueue.Queue[object] = pyqueue.Queue(1)
        aput, aget, bput, bget = sa.put, sa.get, sb.put, sb.get

    def run(n: int) -> None:
        def echo() -> None:
            for _ in range(n):
                bput(aget())
        t = threading.Thread(target=echo)
        t.start()
        for _ in range(n):
            aput(item)
            bget()
        t.join()
    return run


def _process_cpu_us_per_call(run: Any, calls: int, rounds: int) -> float:
    """Median process CPU microseconds (all threads) per call of ``run(calls)``."""
    run(max(1, calls // 10))
    per = []
    for _ in range(rounds):
        t0 = time.process_time()
        run(calls)
        per.append((time.process_time() - t0) / calls * 1e6)
    return statistics.median(per)


def per_call_figures(quick: bool) -> dict[str, float]:
    """This process's figures for (g): us per call pair, and 1P+1C kpairs/CPU-s."""
    scale = 5 if quick else 1
    out = {}
    for label, make, calls in PER_CALL_CASES:
        out[label] = _cpu_us_per_call(make(), calls // scale, 3)
    out[THREADED] = statistics.median(_threaded_pairs_per_cpu_s(50_000 // scale) for _ in range(3)) / 1e3
    for label, kind in HANDOFFS:
        out[label] = _process_cpu_us_per_call(_handoff_trips(kind), 10_000 // scale, 3)
    return out


def against_rows(other: str, rounds: int, quick: bool) -> list[list[str]]:
    """(g): this tree and ``other`` in alternating subprocesses, ``rounds`` each."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("before", os.path.abspath(other)), ("after", here)]
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(rounds):
        for name, root in trees if r % 2 == 0 else trees[::-1]:
            cmd = [sys.executable, os.path.join(here, "benchmarks", "queues.py"), "--per-call-json"]
            if quick:
                cmd.append("--quick")
            env = dict(os.environ, PYTHONPATH=root)
            done = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, check=True)
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for label in [c[0] for c in PER_CALL_CASES] + [THREADED] + [h[0] for h in HANDOFFS]:
        b = [x[label] for x in got["before"]]
        a = [x[label] for x in got["after"]]
        mb, ma = statistics.median(b), statistics.median(a)
        unit = "" if label == THREADED else " us"  # hand-offs: process CPU (both threads) per trip
        rows.append([f"(g) {label}", f"{ma:,.2f}{unit} [{min(a):,.2f}-{max(a):,.2f}]",
                     f"before {mb:,.2f}{unit} [{min(b):,.2f}-{max(b):,.2f}]", f"{ma / mb:.3f}x", "(info)"])
    return rows


INSTRUCTION_PAIRS = 1000


def per_call_marks() -> None:
    """(g) --instructions, in the process valgrind runs: each case's pairs
    between two ``time.sleep`` calls, where callgrind dumps its counts."""
    for _label, make, _calls in PER_CALL_CASES:
        run = make()
        run(100)
        time.sleep(1e-6)
        run(INSTRUCTION_PAIRS)
        time.sleep(1e-6)
    for _label, kind in HANDOFFS:  # both threads' instructions, per round trip
        run = _handoff_trips(kind)
        run(100)
        time.sleep(1e-6)
        run(INSTRUCTION_PAIRS)
        time.sleep(1e-6)


def _callgrind_per_pair(root: str, here: str, out_dir: str) -> list[float]:
    out = os.path.join(out_dir, "cg")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=*nanosleep*", f"--callgrind-out-file={out}",
           sys.executable, os.path.join(here, "benchmarks", "queues.py"), "--per-call-marks"]
    subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=root), cwd=root, capture_output=True, check=True)
    totals = []
    dumps = [f for f in os.listdir(out_dir) if f.startswith("cg.")]
    for name in sorted(dumps, key=lambda f: int(f.rsplit(".", 1)[1])):
        with open(os.path.join(out_dir, name)) as f:
            totals.append(next(int(line.split()[1]) for line in f if line.startswith("summary:")))
    # Dump 2k+1 holds case k's measured pairs (2k: its set-up and warm-up).
    return [totals[2 * k + 1] / INSTRUCTION_PAIRS for k in range(len(PER_CALL_CASES) + len(HANDOFFS))]


def instruction_rows(other: str) -> list[list[str]]:
    """(g) --instructions: interpreter instructions per pair, ``other`` and this tree."""
    import tempfile

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as before_dir, tempfile.TemporaryDirectory() as after_dir:
        before = _callgrind_per_pair(os.path.abspath(other), here, before_dir)
        after = _callgrind_per_pair(here, here, after_dir)
    return [[f"(g) instructions per pair, {label}", f"{a:,.0f}", f"before {b:,.0f}", f"{a / b:.3f}x", "(info)"]
            for label, a, b in zip([c[0] for c in PER_CALL_CASES] + [h[0] for h in HANDOFFS], after, before)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and elements")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", choices=["all", "components", "takes"], default="all",
                    help="components: only the (f) rows; takes: only the (h) rows")
    ap.add_argument("--against", metavar="TREE", default=None,
                    help="(g) only: per-call CPU time beside the feedq checkout at TREE")
    ap.add_argument("--rounds", type=int, default=5, help="(g): rounds of each tree")
    ap.add_argument("--instructions", action="store_true",
                    help="(g): interpreter instructions per pair (valgrind callgrind) instead of CPU time")
    ap.add_argument("--per-call-json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--per-call-marks", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.per_call_json:  # one (g) round of the tree on PYTHONPATH
        print(json.dumps(per_call_figures(args.quick)))
        return
    if args.per_call_marks:
        per_call_marks()
        return
    if args.against is not None and args.instructions:
        header("feedq queue per-call interpreter instructions, before and after")
        print(table(instruction_rows(args.against), ["measure", "after", "before", "ratio", "target"]))
        return
    if args.against is not None:
        header("feedq queue per-call cost, before and after, one run")
        print(table(against_rows(args.against, args.rounds, args.quick),
                    ["measure", "after", "before", "ratio", "target"]))
        return
    repeats = args.repeats or (3 if args.quick else 7)

    header("feedq queue benchmark")
    rows: list[list[str]] = []
    if args.only == "all":
        rows += core_rows(args.quick, repeats)
    if args.only in ("all", "components"):
        rows += component_rows(args.quick, repeats)
    if args.only in ("all", "takes"):
        rows += take_rows(args.quick, repeats)
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
    rb, _ = median_rate(lambda: ragged_block_rate(blocks), repeats)
    rows.append(["MB/s padding, [None] rows in blocks, enqueue_many 1024 + dequeue_many 256", f"{rb:,.0f}",
                 f"numpy copy {bound:,.0f}", f"{rb / bound:.3f}x", "(info)"])
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
