"""Resumption costs, against the same pipeline without them in the same run.

(a) state size (pickled bytes) and ``state_dict()`` time (median of 30 calls)
    for a 10,000-element shuffle buffer over 1 KiB records
    (``slice_input_producer`` over ``uint8[N, 1024]``, ``shuffle_batch`` of
    64, ``min_after_dequeue=10_000``), deterministic (one thread: the state
    holds the buffer's positions and generator) and threaded (2 threads);
(b) state size and ``state_dict()`` time (median of 30 calls, wall and the
    calling thread's CPU) of a reader pipeline over 10,000 and 100,000 file
    names (``string_input_producer`` in order, one reader, ``shuffle_batch``
    of 16; the first 4 files exist and the run stays in them): a state names
    the list by a digest, so neither grows with the list;
(c) batches/s and process CPU per batch of that pipeline and of reader
    pipelines built in ``Pipeline(resumable=True)`` (positions on every row,
    ledger, the shuffle buffer's draws logged for exact mode) vs plain
    ``Pipeline()``: interleaved rounds (a plain and a resumable run back to
    back), medians; the ratio and the added CPU are medians over the
    rounds' pairs. Process CPU time counts every thread. Reader pipelines
    (``string_input_producer`` -> one reader thread ``read_block(files,
    256)`` + decode -> ``shuffle_batch(64, enqueue_many=True)``):

    * CSV basic: 8 files of ``int,float,tag`` lines, ``decode_csv``;
    * CSV realistic: ``feedq make-data --format csv --layout realistic``
      (header, id, 8 floats of varying widths, label), ``decode_csv``;
    * TFRecord realistic: ``feedq make-data --format tfrecord --layout
      realistic`` Examples, ``parse_example`` of ``label`` and ``x[32]``.

Run: python benchmarks/resume_state.py [--quick] [--files-only]
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
from feedq.cli.datasets import make_dataset
from feedq.readers import (
    FixedLenFeature,
    TextLineReader,
    TFRecordReader,
    decode_csv,
    parse_example,
)

RECORDS = 40_000
BATCH = 64
READER_RECORDS = 200_000  # per realistic data set, in 4 files
CSV_DEFAULTS: list[list[Any]] = [[0]] + [[0.0]] * 8 + [[0]]
EX_FEATURES = {"label": FixedLenFeature([], np.int64), "x": FixedLenFeature([32], np.float32)}


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


def files_state_cost(folder: Path, n: int) -> tuple[int, float, float]:
    """(pickled bytes, median state_dict() ms, median thread CPU ms) of a
    pipeline over ``n`` file names (the first 4 exist)."""
    (folder / "train").mkdir(parents=True)
    paths = [str(folder / "train" / f"part-{i:06d}-of-{n:06d}.csv") for i in range(n)]
    for f in range(4):
        Path(paths[f]).write_text("".join(f"{f * 500 + i}\n" for i in range(500)))
    with feedq.Pipeline(resumable=True) as pipe:
        files = feedq.string_input_producer(paths, shuffle=False, num_epochs=1, capacity=4)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            (i,) = decode_csv(reader.read_block(files, 64), record_defaults=[[0]])
            return [i]

        feedq.shuffle_batch(read, 16, capacity=200, min_after_dequeue=100, seed=1,
                            enqueue_many=True, dtypes=[np.int32], shapes=[[]])
        it = iter(pipe)
        for _ in range(5):
            next(it)
        wall, cpu = [], []
        for _ in range(30):
            next(it)
            t0, c0 = time.perf_counter(), time.thread_time()
            state = pipe.state_dict()
            c1, t1 = time.thread_time(), time.perf_counter()
            wall.append(t1 - t0)
            cpu.append(c1 - c0)
        size = len(pickle.dumps(state))
    return size, 1000 * statistics.median(wall), 1000 * statistics.median(cpu)


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


def reader_builder(paths: list[str], make_reader: Any, decode: Any, dtypes: list[Any],
                   shapes: list[list[int]]) -> Any:
    """string_input_producer -> one reader (read_block + decode) -> shuffle_batch."""
    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, seed=1)
        reader = pipe.closing(make_reader())

        def read() -> list[Any]:
            return decode(reader.read_block(files, 256))

        feedq.shuffle_batch(read, BATCH, capacity=12_000, min_after_dequeue=10_000, seed=7,
                            enqueue_many=True, dtypes=dtypes, shapes=shapes)
    return build


def _parse(block: Any) -> list[Any]:
    out = parse_example(block, EX_FEATURES)
    return [out["label"], out["x"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="rates only, of the cases whose name contains "
                        "this (case-insensitive)")
    parser.add_argument("--files-only", action="store_true",
                        help="only (b): states of pipelines over very many files")
    args = parser.parse_args()
    rounds = 3 if args.quick else 9
    batches = 300 if args.quick else 600
    header("resumption: state size, state_dict() time, per-batch cost")
    x = np.random.default_rng(0).integers(0, 255, (RECORDS, 1024), dtype=np.uint8)
    rows = []
    for n in (() if args.only else (10_000, 100_000)):
        got = []
        for _ in range(3 if args.quick else 5):
            with tempfile.TemporaryDirectory() as tmp:
                got.append(files_state_cost(Path(tmp), n))
        rows.append([f"{n:,} files", f"{statistics.median(g[0] for g in got) / 1024:.1f} KiB",
                     f"{statistics.median(g[1] for g in got):.2f} ms",
                     f"{statistics.median(g[2] for g in got):.2f} ms"])
    if rows:
        print(table(rows, ["string_input_producer over", "state (pickled)",
                           "state_dict() median (wall)", "median (thread CPU)"]))
    if args.files_only:
        return
    rows = []
    for threads in (() if args.only else (1, 2)):
        size, med, worst = state_cost(x, threads, 300)
        mode = "deterministic (1 thread)" if threads == 1 else "threaded (2 threads)"
        rows.append([mode, f"{size / 1024:.1f} KiB", f"{med:.2f} ms", f"{worst:.2f} ms"])
    if rows:
        print(table(rows, ["10,000-element buffer, 1 KiB records", "state (pickled)",
                           "state_dict() median", "max"]))
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for f in range(8):
            p = Path(tmp) / f"part-{f}.csv"
            p.write_text("".join(f"{i},{i * 0.5},tag{i % 97}\n" for i in range(f * 10_000, (f + 1) * 10_000)))
            paths.append(str(p))
        csv_real = make_dataset(Path(tmp) / "csv", "csv", READER_RECORDS, files=4,
                                layout="realistic")
        tf_real = make_dataset(Path(tmp) / "tf", "tfrecord", READER_RECORDS, files=4,
                               layout="realistic")
        cases = {
            "in-memory 1 KiB rows": lambda pipe: memory_pipeline(x, 1),
            "CSV basic (TextLineReader + decode_csv)": csv_builder(paths),
            "CSV realistic (decode_csv, 10 columns)": reader_builder(
                csv_real, lambda: TextLineReader(skip_header_lines=1),
                lambda b: decode_csv(b, CSV_DEFAULTS),
                [np.int32] + [np.float32] * 8 + [np.int32], [[]] * 10),
            "TFRecord realistic (parse_example label, x[32])": reader_builder(
                tf_real, TFRecordReader, _parse, [np.int64, np.float32], [[], [32]]),
        }
        rows = []
        for name, build in cases.items():
            if args.only.lower() not in name.lower():
                continue
            plain, tagged = [], []
            for _ in range(rounds):  # interleaved: both see the same machine load
                plain.append(rate(build, False, batches))
                tagged.append(rate(build, True, batches))
            p = statistics.median(r for r, _ in plain)
            t = statistics.median(r for r, _ in tagged)
            pc = statistics.median(c for _, c in plain)
            tc = statistics.median(c for _, c in tagged)
            # Per-round pairs (each pair ran back to back) cancel slow load drifts.
            ratio = statistics.median(b[0] / a[0] for a, b in zip(plain, tagged))
            added = statistics.median(b[1] - a[1] for a, b in zip(plain, tagged))
            rows.append([name, f"{p:,.0f}", f"{t:,.0f}", f"{ratio:.2f}x",
                         f"{pc:,.0f} / {tc:,.0f} µs", f"{added:+,.0f} µs ({added / pc:+.0%})"])
    print(table(rows, ["shuffle_batch(64), seeded, 1 thread", "plain batches/s",
                       "resumable batches/s", "resumable / plain (median of pairs)",
                       "CPU per batch (plain / resumable)", "added CPU per batch"]))


if __name__ == "__main__":
    main()
