"""Resumption costs, against the same pipeline without them in the same run.

(a) state size (pickled bytes) and ``state_dict()`` time (median of 30 calls)
    for a 10,000-element shuffle buffer over 1 KiB records
    (``slice_input_producer`` over ``uint8[N, 1024]``, ``shuffle_batch`` of
    64, ``min_after_dequeue=10_000``), deterministic (one thread: the state
    holds the buffer's positions and generator) and threaded (2 threads);
(b) batches/s of that pipeline and of a CSV pipeline (TextLineReader +
    decode_csv + shuffle_batch) built in ``Pipeline(resumable=True)``
    (positions on every row, ledger, a buffer snapshot per draw) vs plain
    ``Pipeline()``: interleaved rounds, medians, ratio.

Run: python benchmarks/resume_state.py [--quick]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks._util import header, table
except ImportError:  # run as a script from benchmarks/
    from _util import header, table  # type: ignore[no-redef]

import feedq
from feedq.readers import TextLineReader, decode_csv

RECORDS = 40_000
BATCH = 64


def memory_pipeline(x: np.ndarray[Any, Any], threads: int) -> feedq.Stage:
    prod = feedq.slice_input_producer([x], shuffle=True, seed=3)
    return feedq.shuffle_batch(prod, BATCH, capacity=12_000, min_after_dequeue=10_000, seed=7,
                               num_threads=threads)


def state_cost(x: np.ndarray[Any, Any], threads: int, warm: int) -> tuple[int, float, float]:
    """(pickled bytes, median state_dict() ms, max ms) after ``warm`` batches."""
    with feedq.Pipeline(resumable=True) as pipe:
        memory_pipeline(x, threads)
        it = iter(pipe)
        for _ in range(warm):
            next(it)
        times = []
        for _ in range(30):
            next(it)
            t0 = time.perf_counter()
            state = pipe.state_dict()
            times.append(time.perf_counter() - t0)
        size = len(pickle.dumps(state))
    return size, 1000 * statistics.median(times), 1000 * max(times)


def rate(build: Any, resumable: bool, batches: int) -> tuple[float, float]:
    """(batches/s, process CPU µs per batch, all threads) after a warm-up."""
    with feedq.Pipeline(resumable=resumable) as pipe:
        build(pipe)
        it = iter(pipe)
        for _ in range(50):  # fill the buffer first
            next(it)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batches):
            next(it)
        t1, c1 = time.perf_counter(), time.process_time()
        return batches / (t1 - t0), 1e6 * (c1 - c0) / batches


def csv_builder(paths: list[str]) -> Any:
    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, seed=1)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            a, b, c = decode_csv(reader.read_block(files, 256), record_defaults=[[0], [0.0], [""]])
            return [a, b, c]

        feedq.shuffle_batch(read, BATCH, capacity=12_000, min_after_dequeue=10_000, seed=7,
                            enqueue_many=True, dtypes=[np.int32, np.float32, feedq.STRING],
                            shapes=[[], [], []])
    return build


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 2 if args.quick else 5
    batches = 200 if args.quick else 1000
    header("resumption: state size, state_dict() time, per-batch cost")
    x = np.random.default_rng(0).integers(0, 255, (RECORDS, 1024), dtype=np.uint8)
    rows = []
    for threads in (1, 2):
        size, med, worst = state_cost(x, threads, 300)
        mode = "deterministic (1 thread)" if threads == 1 else "threaded (2 threads)"
        rows.append([mode, f"{size / 1024:.1f} KiB", f"{med:.2f} ms", f"{worst:.2f} ms"])
    print(table(rows, ["10,000-element buffer, 1 KiB records", "state (pickled)",
                       "state_dict() median", "max"]))
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for f in range(8):
            p = Path(tmp) / f"part-{f}.csv"
            p.write_text("".join(f"{i},{i * 0.5},tag{i % 97}\n" for i in range(f * 10_000, (f + 1) * 10_000)))
            paths.append(str(p))
        cases = {
            "in-memory 1 KiB rows": lambda pipe: memory_pipeline(x, 1),
            "CSV (TextLineReader + decode_csv)": csv_builder(paths),
        }
        rows = []
        for name, build in cases.items():
            plain, tagged = [], []
            for _ in range(rounds):  # interleaved: both see the same machine load
                plain.append(rate(build, False, batches))
                tagged.append(rate(build, True, batches))
            p = statistics.median(r for r, _ in plain)
            t = statistics.median(r for r, _ in tagged)
            pc = statistics.median(c for _, c in plain)
            tc = statistics.median(c for _, c in tagged)
            rows.append([name, f"{p:,.0f}", f"{t:,.0f}", f"{t / p:.2f}x",
                         f"{pc:,.0f} / {tc:,.0f} µs", f"+{tc - pc:,.0f} µs"])
    print(table(rows, ["shuffle_batch(64), seeded, 1 thread", "plain batches/s",
                       "resumable batches/s", "resumable / plain", "CPU per batch",
                       "added CPU per batch"]))


if __name__ == "__main__":
    main()
