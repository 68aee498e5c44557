"""Hand-off of batches from a worker process: feedq's shared-memory slots vs
``multiprocessing.Queue`` (pickling through a pipe), same run, same sizes.

One worker process sends the same prepared batch (a float32 array of the
given size) over and over; the consumer takes it and touches one element.
GB/s = payload bytes taken / time. For feedq the worker copies the batch
into a slot (one ``memcpy``) and the consumer gets a view; ``copy=True``
adds the copy out of the slot that a consumer keeping private arrays pays.
For the queue the worker pickles into a pipe and the consumer unpickles (a
copy into a new array).

    python benchmarks/shm_handoff.py                 # 32 KiB .. 8 MiB
    python benchmarks/shm_handoff.py --sizes 1M 8M --seconds 2
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

try:
    from benchmarks._util import header, table
except ImportError:  # run as a script from benchmarks/
    from _util import header, table  # type: ignore[no-redef]

import feedq


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _label(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def repeat_batch(nbytes: int, worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """The worker's side for feedq: the same batch forever."""
    batch = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    while True:
        yield batch


def _queue_producer(q: Any, nbytes: int, stop: Any) -> None:
    batch = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    while not stop.is_set():
        q.put(batch)


def measure_shm(nbytes: int, seconds: float, copy: bool) -> float:
    """GB/s through a process stage (1 worker)."""
    build = functools.partial(repeat_batch, nbytes)
    with feedq.process_stage(build, 1, epochs=1, copy=copy) as stage:  # automatic prefetch
        it = iter(stage)
        for _ in range(5):
            next(it)  # warm-up: slots made and faulted in
        taken = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            batch = next(it)
            batch[0]  # touch
            taken += 1
        elapsed = time.perf_counter() - t0
    return taken * nbytes / elapsed / 1e9


def measure_queue(nbytes: int, seconds: float, method: str) -> float:
    """GB/s through multiprocessing.Queue (pickling)."""
    ctx = mp.get_context(method)
    q = ctx.Queue(maxsize=4)
    stop = ctx.Event()
    p = ctx.Process(target=_queue_producer, args=(q, nbytes, stop), daemon=True)
    p.start()
    try:
        for _ in range(5):
            q.get(timeout=60)
        taken = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            batch = q.get(timeout=60)
            batch[0]
            taken += 1
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        while p.is_alive():
            try:
                q.get(timeout=0.1)  # unblock a put
            except Exception:  # noqa: BLE001 - empty or closed
                pass
            p.join(0.1)
        q.close()
        q.join_thread()
    return taken * nbytes / elapsed / 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["32K", "128K", "512K", "1M", "2M", "8M"])
    parser.add_argument("--seconds", type=float, default=1.0, help="measuring time per point")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    method = feedq.process.default_start_method()
    header("shared-memory hand-off vs multiprocessing.Queue (indicative: shared, loaded machine)")
    print(f"# start method {method}; one worker; median of {args.repeats} x {args.seconds:g} s")
    feedq.process.warm_up()
    rows = []
    for size in [_parse_size(s) for s in args.sizes]:
        shm = statistics.median(measure_shm(size, args.seconds, False) for _ in range(args.repeats))
        shm_copy = statistics.median(measure_shm(size, args.seconds, True) for _ in range(args.repeats))
        pickled = statistics.median(measure_queue(size, args.seconds, method) for _ in range(args.repeats))
        rows.append([_label(size), f"{shm:.2f}", f"{shm_copy:.2f}", f"{pickled:.2f}",
                     f"{shm / pickled:.1f}x"])
        print(f"# {rows[-1]}", flush=True)
    print(table(rows, ["batch", "shm views GB/s", "shm copy=True GB/s", "mp.Queue GB/s",
                       "views / queue"]))


if __name__ == "__main__":
    main()
