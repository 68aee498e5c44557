"""Build functions and a tiny stateful stage for the resumption tests
(process stages, DeviceFeeder, torch adapter).

Top-level, importable: ``spawn``/``forkserver`` workers import them by
reference. Every batch is ``[worker, epoch, item]`` (int64), so a test can
compare sequences and account for each batch exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from feedq.process import get_worker_info


def items_for(worker_index: int, epoch: int, seed: int | None) -> list[int]:
    """Worker w's items in an epoch: 5 + 2w of them, shuffled by (seed, epoch, w)."""
    items = np.arange(5 + 2 * worker_index, dtype=np.int64) + 100 * worker_index
    rng = np.random.default_rng([seed or 0, epoch, worker_index])
    return [int(v) for v in rng.permutation(items)]


class ListStage:
    """The resumable-stage interface in miniature: iterate, ``taken``,
    ``state_dict(upto=)``, ``load_state_dict`` (before the first take).

    A batch is ``np.array([worker, epoch, item])``; the state is the
    position in the list.
    """

    WINDOW = 64

    def __init__(self, worker: int, epoch: int, items: list[int]) -> None:
        self.worker = worker
        self.epoch = epoch
        self.items = items
        self.start = 0  # position loaded by load_state_dict
        self._taken = 0
        self._lock = threading.Lock()

    @property
    def taken(self) -> int:
        with self._lock:
            return self._taken

    def __iter__(self) -> Iterator[np.ndarray]:
        while True:
            with self._lock:
                pos = self.start + self._taken
                if pos >= len(self.items):
                    return
                self._taken += 1
            yield np.array([self.worker, self.epoch, self.items[pos]], np.int64)

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        with self._lock:
            upto = self._taken if upto is None else upto
            if not 0 <= upto <= self._taken or self._taken - upto > self.WINDOW:
                raise ValueError(f"upto {upto} out of the window (taken {self._taken})")
            return {"pos": self.start + upto, "n": len(self.items)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            if self._taken:
                raise RuntimeError("load_state_dict after a take")
            if state["n"] != len(self.items):
                raise ValueError("state of another list")
            self.start = int(state["pos"])


def _info() -> tuple[int, int | None]:
    info = get_worker_info()
    assert info is not None
    return info.epoch, info.seed


def stateful_rows(worker_index: int, num_workers: int) -> ListStage:
    """A stateful build: worker w's seeded items of this epoch."""
    epoch, seed = _info()
    return ListStage(worker_index, epoch, items_for(worker_index, epoch, seed))


def plain_rows(worker_index: int, num_workers: int) -> Iterator[np.ndarray]:
    """The same batches as :func:`stateful_rows` from a plain generator
    (restored by replay)."""
    epoch, seed = _info()
    return (np.array([worker_index, epoch, item], np.int64)
            for item in items_for(worker_index, epoch, seed))


def expected(num_workers: int, epochs: int, seed: int | None) -> list[tuple[int, int, int]]:
    """The deterministic order of a process stage over :func:`stateful_rows`:
    round robin over the workers, skipping those whose epoch ended."""
    out = []
    for epoch in range(epochs):
        lists = [items_for(w, epoch, seed) for w in range(num_workers)]
        for k in range(max(len(x) for x in lists)):
            out.extend((w, epoch, x[k]) for w, x in enumerate(lists) if k < len(x))
    return out


def csv_pipeline(folder: str, threads: bool, worker_index: int, num_workers: int) -> Any:
    """A real pipeline over this worker's CSV files of ``tests.resume._support``
    data (``id,tag``): seeded file order, a seeded shuffle, batches of 16.
    One reader and runner thread (a deterministic order), or 3 (``threads``)."""
    import glob

    import feedq
    from feedq.readers import TextLineReader, decode_csv

    info = get_worker_info()
    assert info is not None
    seed = info.shard_seed()
    paths = sorted(glob.glob(f"{folder}/*.csv"))
    files = feedq.string_input_producer(
        feedq.distributed.shard_files(paths, worker_index, num_workers), num_epochs=1, seed=seed)
    readers = [TextLineReader() for _ in range(3 if threads else 1)]

    def read(reader: Any) -> list[Any]:
        ids, tags = decode_csv(reader.read_block(files, 24), record_defaults=[[0], [""]])
        return [ids.astype(np.int64), tags]

    kw: dict[str, Any] = dict(enqueue_many=True, dtypes=[np.int64, feedq.STRING],
                              shapes=[[], []], allow_smaller_final_batch=True, seed=seed)
    if threads:
        return feedq.shuffle_batch_join([lambda r=r: read(r) for r in readers], 16, 200, 100,
                                        **kw)
    return feedq.shuffle_batch(lambda: read(readers[0]), 16, 200, 100, **kw)
