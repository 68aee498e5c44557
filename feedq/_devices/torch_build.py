"""``as_torch_dataset(build)``: one feedq pipeline per DataLoader worker.

The same ``build(worker_index, num_workers)`` function as
:func:`feedq.process_stage`: in each DataLoader worker process it builds
that worker's shard of the pipeline (``get_worker_info()`` gives the index
and count); with ``num_workers=0`` one pipeline in the main process, as
worker 0 of 1. Each pass over the DataLoader is one epoch: the pipeline is
built again, and ``feedq.process.get_worker_info().epoch`` counts the passes
(shared by the workers, so it advances even when DataLoader starts new
worker processes for each pass).

feedq batches are already batches: the DataLoader must hand them through
(``batch_size=None``); any other batch size is refused with that fix.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from feedq._scope import closing_scope
from feedq._workerinfo import WorkerInfo, set_worker_info
from feedq.errors import InvalidArgumentError
from feedq.pipeline import Pipeline

from .extras import require

__all__ = ["build_dataset", "is_build_function"]

_REBATCH_MESSAGE = (
    "feedq batches are already batches: use DataLoader(dataset, batch_size=None), which hands "
    "each one through as it is (a batch_size of N would stack N feedq batches into one); set the "
    "batch size in the pipeline that build() makes"
)


def is_build_function(source: Any) -> bool:
    """Whether ``source`` is a ``build(worker_index, num_workers)`` function
    rather than a queue, a stage or an iterable of batches."""
    return callable(source) and not hasattr(source, "__iter__") and not hasattr(source, "dequeue")


def _refuse_rebatching() -> None:
    """Raise if the DataLoader iterating us batches what we yield.

    ``DataLoader`` calls ``iter(dataset)`` from its dataset fetcher, which
    knows whether it collates several items into one batch
    (``auto_collation``, true for any ``batch_size`` but ``None``). A
    dataset cannot see the DataLoader otherwise, so look at the caller.
    """
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return
        fetcher = frame.f_locals.get("self")
        if fetcher is not None and hasattr(fetcher, "auto_collation") and hasattr(fetcher, "dataset"):
            if fetcher.auto_collation:
                raise InvalidArgumentError(_REBATCH_MESSAGE)
            return
        frame = frame.f_back


def _run(build: Callable[[int, int], Any], info: WorkerInfo, in_worker: bool,
         convert: Callable[[Any], Any]) -> Iterator[Any]:
    """Build this worker's pipeline, start it, yield its batches as tensors;
    stop and join it at the end (or when the DataLoader lets go)."""
    pipe = Pipeline()
    if in_worker:
        set_worker_info(info, process_wide=True)
    previous = set_worker_info(info)
    try:
        # Current only while build() runs: the consumer's own code between
        # our batches must not add stages to this pipeline.
        with closing_scope() as owned, pipe.as_default():
            out = build(info.index, info.num_workers)
    finally:
        set_worker_info(previous)
    for obj in owned:
        pipe.closing(obj)
    try:
        it = iter(out)
    except TypeError:
        pipe.join()
        raise TypeError(
            f"build({info.index}, {info.num_workers}) returned {type(out).__name__}: it must "
            "return a batch stage or an iterable of batches"
        ) from None
    pipe.start()
    try:
        for batch in it:
            yield convert(batch)
    finally:
        pipe.stop()
        pipe.join()


@functools.lru_cache(maxsize=1)
def _dataset_class() -> type:
    torch = require("torch", "feedq.as_torch_dataset")
    from .adapters import to_torch

    class FeedqBuildDataset(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """A torch ``IterableDataset`` that builds a feedq pipeline per
        DataLoader worker (see ``feedq.as_torch_dataset``)."""

        def __init__(self, build: Callable[[int, int], Any], seed: int | None) -> None:
            super().__init__()
            self.build = build
            self.seed = seed
            # Passes started, counted across DataLoader workers (each pass's
            # workers may be new processes, forked or spawned with a pickle
            # of this dataset; the counter lives in shared memory).
            self.passes = multiprocessing.Value("q", 0)

        def _epoch(self, num_workers: int) -> int:
            with self.passes.get_lock():
                started = int(self.passes.value)
                self.passes.value = started + 1
            return started // num_workers

        def __iter__(self) -> Iterator[Any]:
            _refuse_rebatching()
            worker = torch.utils.data.get_worker_info()
            index, num = (0, 1) if worker is None else (int(worker.id), int(worker.num_workers))
            info = WorkerInfo(index, num, self._epoch(num), self.seed, "torch")
            return _run(self.build, info, worker is not None, to_torch)

    FeedqBuildDataset.__module__ = "feedq.devices"
    return FeedqBuildDataset


def build_dataset(build: Callable[[int, int], Any], *, seed: int | None = None) -> Any:
    """The dataset ``as_torch_dataset(build)`` returns."""
    return _dataset_class()(build, seed)
