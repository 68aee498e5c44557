"""What the always-on pipeline statistics cost: accounting on vs off.

``Pipeline.statistics()`` needs per-thread accounts: each runner thread
times its op calls, and the queues add the time a call of that thread
waited. This script runs the same pipelines with runner accounting on and
off (``feedq._core.accounts.set_enabled``), the rounds interleaved (one round runs
every case once, on then off, alternating which goes first) and reports the
median rate of each and the ratio, measured in the same run. The queues' own
counters (two integer adds per dequeue call, a clock read per wait) stay on
in both; they are part of the cost measured against the seed in the report
of issue 15.

Pipelines:

* ``fixed``: benchmarks/readers.py's fixed-length workload: 132-byte
  records in 4 files -> string_input_producer -> 2 reader threads
  (``read_block`` + ``decode_raw``) -> ``batch_join(256, enqueue_many=True)``
  -> a consumer loop (the target: <= 2 % overhead);
* ``slice``: benchmarks/pipeline.py's ``slice_input_producer`` ->
  ``shuffle_batch(256, num_threads=2)`` over in-memory arrays;
* ``per-element``: a per-row callable -> ``batch(256)``: one op call and
  one enqueue per record, the worst case for per-op timing;
* ``op loop``: a runner whose op does nothing: the bare per-op cost.

Run: python benchmarks/stats_overhead.py [--records N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline as pipeline_bench  # noqa: E402 - benchmarks/pipeline.py
import readers as readers_bench  # noqa: E402 - benchmarks/readers.py
from _util import header, table  # noqa: E402

import feedq  # noqa: E402
from feedq._core import accounts as _waits
from feedq.runners import QueueRunner  # noqa: E402


def per_element(rows: int) -> int:
    x = np.arange(rows * 8, dtype=np.float32).reshape(rows, 8)
    idx = iter(range(rows))
    lock = threading.Lock()

    def one_row() -> list[np.ndarray]:
        with lock:
            i = next(idx, None)
        if i is None:
            raise feedq.errors.OutOfRangeError("end")
        return [x[i]]

    seen = 0
    with feedq.Pipeline():
        b = feedq.batch(one_row, 256, capacity=4096, dtypes=[np.float32], shapes=[[8]],
                        allow_smaller_final_batch=True)
        for xb in b:
            seen += xb.shape[0]
    assert seen == rows, (seen, rows)
    return rows


def empty_ops(n: int) -> int:
    """One runner thread calling an op that does nothing, ``n`` times: the
    per-op cost of the accounting, with nothing to hide it."""
    q = feedq.FIFOQueue(1, [np.int64], shapes=[()])
    left = iter(range(n))

    def op() -> None:
        if next(left, None) is None:
            raise feedq.errors.OutOfRangeError("end")

    runner = QueueRunner(q, [op])
    for t in runner.create_threads(start=True):
        t.join()
    return n


def measure(fn: Callable[[], object], records: int) -> tuple[float, float]:
    """``(records/s wall, CPU microseconds per 1000 records)`` of one run:
    the CPU time of the whole process, all threads, is what accounting adds
    to, and it is less disturbed than the wall clock by other processes."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return records / wall, 1e9 * cpu / records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--data", default=None, help="folder for the fixed-length files")
    args = ap.parse_args()
    root = Path(args.data) if args.data else Path(tempfile.gettempdir()) / "feedq-bench"
    files = readers_bench.make_data(root, args.records, {"fixed"})
    (fixed,) = readers_bench.workloads(files)
    x, y = pipeline_bench.data(args.records)
    small = max(20_000, args.records // 10)

    def run_fixed() -> None:
        n = readers_bench.feedq_pipeline(fixed, 2)
        assert n == args.records, (n, args.records)

    cases: dict[str, tuple[Callable[[], object], int]] = {
        "fixed: 2 readers -> batch_join(256)": (run_fixed, args.records),
        "slice_input_producer -> shuffle_batch(256, 2 threads)":
            (lambda: pipeline_bench.shuffle_pipeline(x, y, 2, per_element=False), args.records),
        f"per-element callable -> batch(256) ({small:,} rows)": (lambda: per_element(small), small),
        "runner op loop, ops doing nothing (records = ops)": (lambda: empty_ops(small), small),
    }
    header("feedq pipeline statistics overhead (runner accounting on vs off)")
    rates: dict[tuple[str, bool], list[tuple[float, float]]] = {
        (c, on): [] for c in cases for on in (True, False)}
    for fn, _n in cases.values():  # warm-up, both ways
        for on in (True, False):
            _waits.set_enabled(on)
            fn()
    for r in range(args.rounds):
        for name, (fn, n) in cases.items():
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                _waits.set_enabled(on)
                rates[(name, on)].append(measure(fn, n))
    _waits.set_enabled(True)
    rows = []
    for name in cases:
        on_rate = statistics.median(v[0] for v in rates[(name, True)])
        off_rate = statistics.median(v[0] for v in rates[(name, False)])
        on_cpu = statistics.median(v[1] for v in rates[(name, True)])
        off_cpu = statistics.median(v[1] for v in rates[(name, False)])
        rows.append([name, f"{off_rate:,.0f}", f"{on_rate:,.0f}", f"{on_rate / off_rate:.3f}",
                     f"{off_cpu:,.0f}", f"{on_cpu:,.0f}", f"{100 * (on_cpu / off_cpu - 1):+.1f}%"])
    print(table(rows, ["pipeline", "rec/s off", "rec/s on", "wall on/off",
                       "CPU us/1k rec off", "CPU us/1k rec on", "CPU overhead"]))
    print(f"# {args.rounds} interleaved rounds, medians; target: <= 2 % on the fixed-length "
          "pipeline")


if __name__ == "__main__":
    main()
