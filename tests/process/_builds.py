"""Build functions for the process-stage tests.

They live at the top level of an importable module so that ``spawn`` and
``forkserver`` workers import them by reference (nothing else is sent).
Every batch carries a ``tag`` [worker, epoch, seq] so tests can account for
each batch exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import feedq
from feedq.process import get_worker_info
from feedq.readers import RaggedTensorValue, SparseTensorValue


def _info() -> feedq.process.WorkerInfo:
    info = get_worker_info()
    assert info is not None and info.kind == "process"
    return info


def count_for(worker_index: int) -> int:
    """How many batches :func:`counting` makes in worker ``worker_index``."""
    return 3 + worker_index


def counting(worker_index: int, num_workers: int) -> Iterator[dict[str, Any]]:
    """Worker w makes 3 + w batches: a tag, floats, and a bytes column."""
    info = _info()
    assert (info.index, info.num_workers) == (worker_index, num_workers)
    for seq in range(count_for(worker_index)):
        yield {
            "tag": np.array([worker_index, info.epoch, seq], np.int64),
            "x": np.full((4, 3), worker_index * 100 + seq, np.float32),
            "name": np.array([f"w{worker_index}-{seq}".encode(), b"", "é".encode()], dtype=object),
        }


def jittered(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """5 batches per worker (2 for the last one), each after a random pause:
    the arrival order differs from run to run."""
    info = _info()
    n = 2 if worker_index == num_workers - 1 else 5
    for seq in range(n):
        time.sleep(int.from_bytes(os.urandom(1), "little") / 255 * 0.02)
        yield np.array([worker_index, info.epoch, seq], np.int64)


def slow_worker_zero(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """Worker 0 makes 2 batches slowly (0.4 s each), the others 4 at once."""
    info = _info()
    for seq in range(2 if worker_index == 0 else 4):
        if worker_index == 0:
            time.sleep(0.4)
        yield np.array([worker_index, info.epoch, seq], np.int64)


def feedq_rows(worker_index: int, num_workers: int) -> Any:
    """An ordinary feedq pipeline: this worker's rows of 0..99 (i % n ==
    index), in batches of 8 (smaller final batch kept), one epoch per build."""
    info = _info()
    rows = np.arange(100, dtype=np.int64)[worker_index::num_workers]
    labels = (rows * 10 + info.epoch).astype(np.int32)
    produced = feedq.slice_input_producer([rows, labels], num_epochs=1, shuffle=False)
    return feedq.batch(produced, batch_size=8, num_threads=1, allow_smaller_final_batch=True)


def structures(worker_index: int, num_workers: int) -> Iterator[Any]:
    """One batch of every kind of component a batch may hold."""
    yield structure_batch()


def structure_batch() -> Any:
    grid = np.arange(24, dtype=np.float64).reshape(4, 6)
    return (
        np.arange(6, dtype=np.int16),
        {
            "strided": grid[:, ::2],                       # not contiguous
            "scalar": np.array(3.5, np.float32),           # 0-d
            "empty": np.zeros((0, 3), np.int32),
            "flags": np.array([True, False]),
            "when": np.array(["2024-01-02"], dtype="datetime64[D]"),
            "text": np.array([["ab", "é"], ["", "xyz"]], dtype=object),
            "blobs": np.array([b"\x00\x01", b""], dtype=object),
            "sparse": SparseTensorValue(np.array([[0, 1], [2, 0]], np.int64),
                                        np.array([b"p", b"q"], dtype=object),
                                        np.array([3, 2], np.int64)),
            "ragged": RaggedTensorValue(np.arange(5, dtype=np.int64), np.array([0, 2, 2, 5], np.int64)),
        },
        [7, "seven", None, np.float32(2.5)],
        np.zeros((), dtype=[("a", "<i4"), ("b", "<f8")]),
    )


def growing(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """Batches from 1 KiB to 4 MiB, each filled with its sequence number."""
    for seq, kib in enumerate([1, 4, 64, 1024, 4096, 16]):
        yield np.full(kib * 1024 // 8, seq, np.int64)


def many(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """40 batches of 1000 int64, batch k filled with k."""
    for seq in range(40):
        yield np.full(1000, seq, np.int64)


def endless(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """Batches forever, one every 10 ms."""
    seq = 0
    while True:
        yield np.array([worker_index, seq], np.int64)
        seq += 1
        time.sleep(0.01)


def blocked_after_one(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """One batch, then blocks (as a reader waiting for data would)."""
    yield np.array([worker_index], np.int64)
    time.sleep(3600)


def failing(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """Worker 1 sends 2 batches, then raises ValueError; the others send 4."""
    for seq in range(2 if worker_index == 1 else 4):
        yield np.array([worker_index, seq], np.int64)
    if worker_index == 1:
        _fail_in_worker()


def _fail_in_worker() -> None:
    raise ValueError("bad record 42 in worker 1")


class OddError(Exception):
    """An exception that pickles but cannot be unpickled (two required args)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"odd {a} {b}")


def failing_oddly(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    yield np.array([0], np.int64)
    raise OddError(1, 2)


def exits_early(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """One batch, then the process exits with code 3 (no goodbye)."""
    yield np.array([worker_index], np.int64)
    os._exit(3)


def kills_itself(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    yield np.array([worker_index], np.int64)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)


def returns_int(worker_index: int, num_workers: int) -> Any:
    return 5


def object_column(worker_index: int, num_workers: int) -> Iterator[Any]:
    yield {"x": np.array([1, "a", 2.0], dtype=object)}


def fixed_records(path: str, worker_index: int, num_workers: int) -> Any:
    """A TF1-style reader pipeline over one file of 128-byte records (32
    float32), read in blocks and batched by 256. With
    ``functools.partial(fixed_records, path)`` only the path travels."""
    files = feedq.string_input_producer([path], num_epochs=1, shuffle=False)
    reader = feedq.readers.FixedLengthRecordReader(record_bytes=128)

    def read() -> list[np.ndarray]:
        return [feedq.readers.decode_raw(reader.read_block(files, 1024), np.float32)]

    return feedq.batch_join([read], 256, enqueue_many=True, dtypes=[np.float32], shapes=[[32]])


def torch_rows(worker_index: int, num_workers: int) -> Any:
    """For ``as_torch_dataset(build)``: this worker's rows of 0..99 in batches
    of 8, labels ``row * 10 + epoch``, and the worker index as a column."""
    info = get_worker_info()
    assert info is not None and info.kind == "torch"
    assert (info.index, info.num_workers) == (worker_index, num_workers)
    rows = np.arange(100, dtype=np.int64)[worker_index::num_workers]
    labels = rows * 10 + info.epoch
    worker = np.full(len(rows), worker_index, np.int64)
    produced = feedq.slice_input_producer({"row": rows, "label": labels, "worker": worker},
                                          num_epochs=1, shuffle=False)
    return feedq.batch(produced, batch_size=8, num_threads=1, allow_smaller_final_batch=True)


def worker_infos(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """One batch: what get_worker_info() says in this worker and epoch."""
    info = _info()
    yield np.array([info.index, info.num_workers, info.epoch, info.seed, info.shard_seed()], np.int64)


def keras_rows(worker_index: int, num_workers: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(x float32 [k, 4], y float32 [k]) batches of 16 over this worker's 64 rows."""
    rows = np.arange(128, dtype=np.float32)[worker_index::num_workers]
    for start in range(0, len(rows), 16):
        r = rows[start:start + 16]
        yield np.stack([r, r, r, r], axis=1) / 128, r / 128


def niceness_report(worker_index: int, num_workers: int) -> Iterator[dict[str, Any]]:
    """One batch: the niceness of the worker's main thread and of a runner
    thread its pipeline starts (tests/test_priority.py)."""
    q = feedq.FIFOQueue(4, [np.int64], shapes=[[]])
    seen: list[int] = []

    def op() -> None:
        import threading

        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        q.enqueue(1)

    with feedq.Pipeline() as pipe:
        feedq.add_queue_runner(feedq.QueueRunner(q, [op]))
        q.dequeue()
        pipe.stop()
    yield {"main": np.array([os.getpriority(os.PRIO_PROCESS, 0)]), "runner": np.array(seen[:1])}
