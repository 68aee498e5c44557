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

Resumption: the dataset implements ``state_dict`` / ``load_state_dict``, the
protocol ``torchdata.stateful_dataloader.StatefulDataLoader`` calls in each
worker (or in this process with ``num_workers=0``) right after each batch.
A worker's state is its epoch and its pipeline's position as of the batches
it yielded (the stage's ``state_dict(upto=)``; a plain iterable from
``build`` is replayed: built again, the yielded batches skipped). Loading
one makes the next pass of that worker continue there, in that epoch; the
passes after it count on from it.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from feedq._core.scope import closing_scope
from feedq._core.workerinfo import WorkerInfo, set_worker_info
from feedq._devices.extras import require
from feedq._resume.builds import Built, check_state, fresh_state, iterate_output
from feedq.errors import InvalidArgumentError
from feedq.pipeline import Pipeline

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


#: The format tag of a worker's state, and its keys.
FORMAT = "feedq.torch_build/1"
K_FORMAT = "format"
K_EPOCH = "epoch"  # None: nothing started yet
K_WORKER = "worker"
K_WORKERS = "num_workers"
K_DONE = "done"  # the worker's pass of this epoch ended
K_PIPELINE = "pipeline"  # a feedq._resume.builds position, None when done


def _state(epoch: int | None, index: int | None, num: int | None, done: bool,
           pipeline: dict[str, Any] | None) -> dict[str, Any]:
    return {K_FORMAT: FORMAT, K_EPOCH: epoch, K_WORKER: index, K_WORKERS: num, K_DONE: done,
            K_PIPELINE: pipeline}


class _Pass:
    """One worker's pass over its pipeline (one epoch), and its position."""

    def __init__(self, info: WorkerInfo) -> None:
        self.info = info
        self.built: Built | None = None
        self.resume: dict[str, Any] | None = None
        self.yielded = 0
        self.done = False
        self.counted = False  # a restored finished pass: counted by load_state_dict

    def state(self) -> dict[str, Any]:
        info = self.info
        if self.done:
            pipeline = None
        elif self.built is None:
            pipeline = self.resume or fresh_state()
        else:
            pipeline = self.built.state(self.yielded)
        return _state(info.epoch, info.index, info.num_workers, self.done, pipeline)


def _run(build: Callable[[int, int], Any], start: Callable[[], _Pass], in_worker: bool,
         convert: Callable[[Any], Any], resumable: bool = False) -> Iterator[Any]:
    """Build this worker's pipeline, start it, yield its batches as tensors;
    stop and join it at the end (or when the DataLoader lets go). The pass
    (epoch, restored position) is decided when the first batch is asked for."""
    run = start()
    info = run.info
    if run.done:
        return  # restored after this worker's last batch of the epoch
    pipe = Pipeline(resumable=resumable)
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
        # Restored before the runners start (a stage loads its state then).
        built = Built.prepare(out, run.resume,
                              f"DataLoader worker {info.index}, epoch {info.epoch}")
    except BaseException:
        pipe.join()
        raise
    pipe.start()
    try:
        it = built.iterate(functools.partial(iterate_output, index=info.index,
                                             num_workers=info.num_workers))
        run.built = built
        for batch in it:
            run.yielded += 1  # counted before the consumer has it: its state_dict follows
            yield convert(batch)
        run.done = True
    finally:
        pipe.stop()
        pipe.join()


def _rebuild_dataset(state: dict[str, Any]) -> Any:
    """A pickled ``FeedqBuildDataset`` in a spawned process."""
    cls = _dataset_class()
    obj: Any = object.__new__(cls)  # what unpickling does: no __init__
    obj.__dict__.update(state)
    return obj


@functools.lru_cache(maxsize=1)
def _dataset_class() -> type:
    torch = require("torch", "feedq.as_torch_dataset")
    from feedq._devices.adapters import to_torch

    class FeedqBuildDataset(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """A torch ``IterableDataset`` that builds a feedq pipeline per
        DataLoader worker (see ``feedq.as_torch_dataset``)."""

        def __init__(self, build: Callable[[int, int], Any], seed: int | None,
                     resumable: bool) -> None:
            super().__init__()
            self.build = build
            self.seed = seed
            self.resumable = resumable
            # Passes started, counted across DataLoader workers (each pass's
            # workers may be new processes, forked or spawned with a pickle
            # of this dataset; the counter lives in shared memory).
            # A spawn-context lock may go to workers of any start method.
            self.passes = multiprocessing.get_context("spawn").Value("q", 0)
            # This process's last pass started, and a state loaded for the
            # next one (see state_dict).
            self._live: _Pass | None = None
            self._pending: dict[str, Any] | None = None

        def __getstate__(self) -> dict[str, Any]:
            state = dict(self.__dict__)
            state["_live"] = None  # a pass (and its pipeline) stays in its process
            return state

        def __reduce__(self) -> tuple[Any, ...]:
            # The class is made on first use, so pickle cannot find it by
            # name: spawned and fork-server DataLoader workers rebuild it.
            return (_rebuild_dataset, (self.__getstate__(),))

        def _start(self, index: int, num: int, planned: _Pass | None) -> _Pass:
            """The pass this worker starts now: the restored one, or the next epoch."""
            with self.passes.get_lock():
                started = int(self.passes.value)
                if planned is None or not planned.counted:
                    self.passes.value = started + 1
            run = planned or _Pass(WorkerInfo(index, num, started // num, self.seed, "torch"))
            self._live = run
            return run

        def __iter__(self) -> Iterator[Any]:
            _refuse_rebatching()
            worker = torch.utils.data.get_worker_info()
            index, num = (0, 1) if worker is None else (int(worker.id), int(worker.num_workers))
            pending, self._pending = self._pending, None
            planned = None
            if pending is not None:
                if (pending[K_WORKER], pending[K_WORKERS]) != (index, num):
                    raise InvalidArgumentError(
                        f"the state was saved by DataLoader worker {pending[K_WORKER]} of "
                        f"{pending[K_WORKERS]}; it is loaded in worker {index} of {num}: use "
                        "the same num_workers")
                planned = _Pass(WorkerInfo(index, num, pending[K_EPOCH], self.seed, "torch"))
                planned.resume = pending[K_PIPELINE]
                planned.done = planned.counted = pending[K_DONE]
                self._live = planned
            return _run(self.build, functools.partial(self._start, index, num, planned),
                        worker is not None, to_torch, self.resumable)

        def state_dict(self) -> dict[str, Any]:
            """This worker's position: its epoch and its pipeline's state
            as of the batches it yielded (plain data)."""
            if self._pending is not None:
                return dict(self._pending)
            if self._live is not None:
                return self._live.state()
            return _state(None, None, None, False, None)

        def load_state_dict(self, state: dict[str, Any]) -> None:
            """Continue from ``state`` (from :meth:`state_dict`) at the next pass.

            Raises:
                InvalidArgumentError: not a state of this dataset.
            """
            _check(state)
            if state[K_EPOCH] is None:
                return  # saved before anything started
            with self.passes.get_lock():
                # The passes after the restored one count on from its epoch.
                # A finished pass counts as started now: its worker may never
                # start it (a DataLoader restored at the end of an epoch
                # starts the next one with new workers).
                value = max(int(self.passes.value), state[K_EPOCH] * state[K_WORKERS])
                self.passes.value = value + (1 if state[K_DONE] else 0)
            self._pending = dict(state)

    FeedqBuildDataset.__module__ = "feedq.devices"
    return FeedqBuildDataset


def _check(state: Any) -> None:
    if not isinstance(state, dict) or state.get(K_FORMAT) != FORMAT:
        got = state.get(K_FORMAT) if isinstance(state, dict) else type(state).__name__
        raise InvalidArgumentError(
            f"not a state of as_torch_dataset(build) (format {got!r}, expected {FORMAT!r})")
    epoch, index, num = state.get(K_EPOCH), state.get(K_WORKER), state.get(K_WORKERS)
    if epoch is None:
        return
    ints = [v for v in (epoch, index, num) if isinstance(v, int) and not isinstance(v, bool)]
    ok = (len(ints) == 3 and ints[0] >= 0 and 0 <= ints[1] < ints[2]
          and isinstance(state.get(K_DONE), bool)
          and (state[K_DONE] or check_state(state.get(K_PIPELINE))))
    if not ok:
        raise InvalidArgumentError(f"bad state of as_torch_dataset(build): {state!r}")


def build_dataset(build: Callable[[int, int], Any], *, seed: int | None = None,
                  resumable: bool = False) -> Any:
    """The dataset ``as_torch_dataset(build)`` returns (``resumable``: build
    each pipeline in a ``feedq.Pipeline(resumable=True)``)."""
    return _dataset_class()(build, seed, bool(resumable))
