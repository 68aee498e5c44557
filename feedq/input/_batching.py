"""Batching (TF1 ``batch``, ``shuffle_batch``, their ``_join`` and ``maybe_``
forms; B1–B13).

Every batcher is one output queue fed by one QueueRunner whose ops evaluate
the sources (``_sources``) and enqueue what they give; shuffling batchers
pass the elements through a :class:`~feedq.input._shuffle.ShuffleBuffer`
first.

In a resumable pipeline the batcher's queue has a hidden last column of
positions: each enqueue op gathers the report of its source evaluation
(``feedq._resume.report``), the stage is built with its
:class:`~feedq._resume.state.BatcherPart`, registered with the pipeline's
registry (``feedq._resume.registry``) before its runner can run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedq._core import scope as _scope
from feedq._resume import report as _report
from feedq._resume.state import BatcherPart
from feedq.errors import CancelledError, OutOfRangeError
from feedq.input._shuffle import ShuffleBuffer
from feedq.input._sources import _apply_keep, _block_size, _check_spec, _Source, check_keep_input
from feedq.input._sparse import SparseCodec, SparseTable
from feedq.input._stage import Stage, _reraise_cause
from feedq.queues import FIFOQueue, PaddingFIFOQueue, QueueBase
from feedq.runners import QueueRunner, gate_ops
from feedq.runners import add_queue_runner as register_runner

LOG = logging.getLogger("feedq")

__all__ = [
    "batch",
    "batch_join",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "shuffle_batch",
    "shuffle_batch_join",
]


def _batcher(
    sources: list[_Source],
    threads_per_source: int,
    *,
    batch_size: int,
    capacity: int,
    dynamic_pad: bool,
    allow_smaller_final_batch: bool,
    shuffle: tuple[int, int | None] | None,
    keep_input: Any,
    shared_name: str | None,
    name: str,
) -> Stage:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    if threads_per_source < 1:
        raise ValueError(f"num_threads must be >= 1, got {threads_per_source}")
    _check_spec(sources)
    if shuffle is None and capacity < batch_size:
        # TF1 allowed it (its default capacity is 32), and so does feedq.
        LOG.warning(
            "%s: capacity %d < batch_size %d: the queue can never hold a whole batch, so every "
            "take waits for the batcher, which waits for room; use capacity >= 2 x batch_size "
            "(%d)", name, capacity, batch_size, 2 * batch_size)
    first = sources[0]
    check_keep_input(keep_input, first.enqueue_many)
    if first.shapes is None:  # pragma: no cover - _Source raises first
        raise ValueError("batch: shapes are unknown")
    codec, stage_sparse = _sparse_codec(first, shared_name)
    # Sparse components travel as int64 handles (see _sparse).
    dtypes = [np.dtype(np.int64) if sp else d for d, sp in zip(first.dtypes, first.sparse)]
    shapes = [[] if sp else (list(s) if s is not None else None) for s, sp in zip(first.shapes, first.sparse)]
    pipe = _scope.current_pipeline()
    resumable = pipe is not None and pipe.resumable
    if resumable:
        if shared_name is not None:
            raise ValueError(f"{name}: a resumable pipeline's batcher cannot use a shared queue")
        # A hidden last column: each row's position (feedq._resume.positions).
        dtypes.append(np.dtype(np.int64))
        shapes.append([])
    if dynamic_pad:
        out: QueueBase = PaddingFIFOQueue(capacity, dtypes, shapes, shared_name=shared_name, name=f"{name}/padding_fifo_queue")
    else:
        out_capacity = capacity if shuffle is None else max(batch_size, capacity - shuffle[0])
        out = FIFOQueue(out_capacity, dtypes, shapes, shared_name=shared_name,
                        name=f"{name}/fifo_queue" if shuffle is None else f"{name}/shuffled_fifo_queue")

    put_one, put_many = out.enqueue, out.enqueue_many
    shuffler: ShuffleBuffer | None = None
    if shuffle is not None:
        shuffler = ShuffleBuffer(out, batch_size=batch_size, min_after_dequeue=shuffle[0], seed=shuffle[1],
                                 writers=len(sources) * threads_per_source, dtypes=dtypes, shapes=shapes,
                                 name=name)
    finish = shuffler.writer_done if shuffler is not None else _nothing
    part: BatcherPart | None = None
    if resumable:
        assert pipe is not None
        exact = len(sources) == 1 and threads_per_source == 1
        fingerprint = {
            "batcher": "shuffle_batch" if shuffle is not None else "batch",
            "batch_size": int(batch_size), "capacity": int(capacity),
            "min_after_dequeue": None if shuffle is None else shuffle[0],
            "seed": None if shuffle is None else shuffle[1],
            "inputs": len(sources), "threads": threads_per_source,
            "dtypes": [str(d) for d in first.dtypes], "shapes": [_plain_shape(x) for x in first.shapes],
            "enqueue_many": first.enqueue_many, "dynamic_pad": dynamic_pad,
            "allow_smaller_final_batch": allow_smaller_final_batch,
        }
        part = BatcherPart(pipe.resumption.producer, shuffler if exact else None, fingerprint,
                           exact)
        if keep_input is not None:
            part.ledger.untrace("maybe_* batchers (keep_input) drop rows and cannot be resumed")

    def make_op(src: _Source) -> Callable[[], None]:
        def enqueue_op() -> None:
            report: _report.Report | None = None
            try:
                if part is None:
                    values, many = src.evaluate()
                else:
                    token = _report.begin()
                    try:
                        values, many = src.evaluate()
                    finally:
                        report = _report.end(token)
            except OutOfRangeError:
                if part is not None and report is not None:
                    part.note(report)
                finish()
                raise
            except CancelledError as exc:
                if part is not None and report is not None:
                    part.note(report)
                _reraise_cause(exc)  # an upstream failure is an error here too (X3)
                finish()
                raise
            if part is not None and report is not None:
                part.note(report)
            if codec is not None:
                values = codec.rows(values, many)
            if keep_input is not None:
                kept = _apply_keep(keep_input, values, many, per_element=not src.enqueue_many)
                if kept is None:
                    return
                values, many = kept
            if codec is not None:
                values = codec.encode(values, many)
            if part is not None and report is not None:
                positions = part.row_positions(report, len(values[0]) if many else 1)
                values = [*values, positions if many else positions[0]]
            if shuffler is not None:
                shuffler.put(values, many)
            elif many:
                put_many(values)
            else:
                put_one(values)

        enqueue_op.__name__ = f"{name}_enqueue"
        return enqueue_op

    # The default cancel op cancels `out`; the shuffle buffer needs none (see ShuffleBuffer).
    ops = [make_op(s) for s in sources for _ in range(threads_per_source)]
    runner = QueueRunner(out, gate_ops(ops, out))
    if part is not None:
        assert pipe is not None
        state = pipe.resumption.add_batcher(part)  # the pipeline's state=..., if any
        if state is not None:
            part.load_batcher(state)  # before the runner can put anything
    register_runner(runner)
    upstream = [u for s in sources for u in s.upstream]
    stage = Stage(out, runner, names=first.names, single=first.single, batch_size=int(batch_size),
                  smaller_final=allow_smaller_final_batch, upstream=upstream, sparse=stage_sparse,
                  sparse_table=None if codec is None else codec.table, resumption=part,
                  shuffle=None if shuffler is None else (shuffler, int(capacity)))
    return stage


def _plain_shape(shape: Any) -> Any:
    return None if shape is None else [None if d is None else int(d) for d in shape]


def _sparse_codec(
    src: _Source, shared_name: str | None
) -> tuple[SparseCodec | None, list[tuple[np.dtype[Any], int] | None] | None]:
    """The codec of a batcher with sparse components, and the stage's view of
    them (values' dtype and rank per sparse component); ``(None, None)`` if
    none is sparse."""
    if not any(src.sparse):
        return None, None
    if shared_name is not None:
        raise ValueError(
            "batch: sparse components cannot go through a shared queue (shared_name): their "
            "values live in the stage that enqueued them"
        )
    assert src.shapes is not None
    ranks = [len(s) if s is not None else 0 for s in src.shapes]
    labels = [
        f"batch: component {src.names[i]!r}" if src.names is not None else f"batch: component {i}"
        for i in range(len(src.dtypes))
    ]
    codec = SparseCodec(src.sparse, ranks, src.dtypes, labels, SparseTable())
    view = [(d, r) if sp else None for d, r, sp in zip(src.dtypes, ranks, src.sparse)]
    return codec, view


def _nothing() -> None:
    return None


def batch(
    tensors: Any,
    batch_size: int,
    num_threads: int = 1,
    capacity: int = 32,
    enqueue_many: bool = False,
    shapes: Any = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """Batches of ``batch_size`` elements, in order with ``num_threads=1`` (B1–B8).

    Args:
        tensors: a stage, a callable, or a list/dict of them and arrays (see
            the ``feedq.input`` docstring).
        batch_size: elements per batch.
        num_threads: runner threads evaluating ``tensors``.
        capacity: the batch queue's capacity, in elements.
        enqueue_many: each evaluation of ``tensors`` is a batch of rows (B8).
        shapes: element shapes (required for callables; B3).
        dynamic_pad: pad ``None`` dimensions per batch (PaddingFIFOQueue, B7).
        allow_smaller_final_batch: end with one smaller batch instead of
            dropping the leftovers (B6; the dropped count is in statistics).
        shared_name, name: queue naming.
        dtypes: component dtypes, required when ``tensors`` is a callable.

    Returns:
        A batch :class:`Stage`.
    """
    return maybe_batch(
        tensors=tensors, keep_input=None, batch_size=batch_size, num_threads=num_threads,
        capacity=capacity, enqueue_many=enqueue_many, shapes=shapes, dynamic_pad=dynamic_pad,
        allow_smaller_final_batch=allow_smaller_final_batch, shared_name=shared_name, name=name,
        dtypes=dtypes,
    )


def maybe_batch(
    tensors: Any,
    keep_input: Any,
    batch_size: int,
    num_threads: int = 1,
    capacity: int = 32,
    enqueue_many: bool = False,
    shapes: Any = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """:func:`batch` keeping only the elements for which ``keep_input`` holds (B12).

    ``keep_input`` is a bool, or a callable taking the evaluated components
    and returning a bool (or a bool vector with ``enqueue_many``).
    """
    src = _Source(tensors, enqueue_many, dtypes, shapes, block=_block_size(batch_size))
    return _batcher(
        [src], num_threads, batch_size=batch_size, capacity=capacity, dynamic_pad=dynamic_pad,
        allow_smaller_final_batch=allow_smaller_final_batch, shuffle=None, keep_input=keep_input,
        shared_name=shared_name, name=name or "batch",
    )


def batch_join(
    tensors_list: Sequence[Any],
    batch_size: int,
    capacity: int = 32,
    enqueue_many: bool = False,
    shapes: Any = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """One runner thread per input, all feeding one batch queue (B9): the
    "N readers in parallel" pattern. Inputs must agree in dtypes and shapes."""
    return maybe_batch_join(
        tensors_list=tensors_list, keep_input=None, batch_size=batch_size, capacity=capacity,
        enqueue_many=enqueue_many, shapes=shapes, dynamic_pad=dynamic_pad,
        allow_smaller_final_batch=allow_smaller_final_batch, shared_name=shared_name, name=name,
        dtypes=dtypes,
    )


def maybe_batch_join(
    tensors_list: Sequence[Any],
    keep_input: Any,
    batch_size: int,
    capacity: int = 32,
    enqueue_many: bool = False,
    shapes: Any = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """:func:`batch_join` with ``keep_input`` (B12)."""
    if not tensors_list:
        raise ValueError("batch_join: tensors_list must not be empty")
    block = _block_size(batch_size)
    sources = [_Source(t, enqueue_many, dtypes, shapes, block=block) for t in tensors_list]
    return _batcher(
        sources, 1, batch_size=batch_size, capacity=capacity, dynamic_pad=dynamic_pad,
        allow_smaller_final_batch=allow_smaller_final_batch, shuffle=None, keep_input=keep_input,
        shared_name=shared_name, name=name or "batch_join",
    )


def _shuffle_args(capacity: int, min_after_dequeue: int) -> None:
    if capacity <= min_after_dequeue:
        raise ValueError(
            f"capacity {capacity} must be bigger than min_after_dequeue {min_after_dequeue}."
        )
    if min_after_dequeue < 0:
        raise ValueError(f"min_after_dequeue must be >= 0, got {min_after_dequeue}")


def shuffle_batch(
    tensors: Any,
    batch_size: int,
    capacity: int,
    min_after_dequeue: int,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: Any = None,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """Batches drawn at random from a buffer of at least ``min_after_dequeue``
    elements (B10). With ``seed`` and ``num_threads=1`` the order is
    reproducible (X12). At the end the buffer drains in full batches; the
    leftovers are dropped unless ``allow_smaller_final_batch``.

    Raises:
        ValueError: ``capacity <= min_after_dequeue``.
    """
    return maybe_shuffle_batch(
        tensors=tensors, batch_size=batch_size, capacity=capacity,
        min_after_dequeue=min_after_dequeue, keep_input=None, num_threads=num_threads, seed=seed,
        enqueue_many=enqueue_many, shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch, shared_name=shared_name, name=name,
        dtypes=dtypes,
    )


def maybe_shuffle_batch(
    tensors: Any,
    batch_size: int,
    capacity: int,
    min_after_dequeue: int,
    keep_input: Any,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: Any = None,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """:func:`shuffle_batch` with ``keep_input`` (B12)."""
    _shuffle_args(capacity, min_after_dequeue)
    src = _Source(tensors, enqueue_many, dtypes, shapes, block=_block_size(batch_size))
    return _batcher(
        [src], num_threads, batch_size=batch_size, capacity=capacity, dynamic_pad=False,
        allow_smaller_final_batch=allow_smaller_final_batch, shuffle=(min_after_dequeue, seed),
        keep_input=keep_input, shared_name=shared_name, name=name or "shuffle_batch",
    )


def shuffle_batch_join(
    tensors_list: Sequence[Any],
    batch_size: int,
    capacity: int,
    min_after_dequeue: int,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: Any = None,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """:func:`batch_join` through a shuffle buffer (B11)."""
    return maybe_shuffle_batch_join(
        tensors_list=tensors_list, batch_size=batch_size, capacity=capacity,
        min_after_dequeue=min_after_dequeue, keep_input=None, seed=seed,
        enqueue_many=enqueue_many, shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch, shared_name=shared_name, name=name,
        dtypes=dtypes,
    )


def maybe_shuffle_batch_join(
    tensors_list: Sequence[Any],
    batch_size: int,
    capacity: int,
    min_after_dequeue: int,
    keep_input: Any,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: Any = None,
    allow_smaller_final_batch: bool = False,
    shared_name: str | None = None,
    name: str | None = None,
    dtypes: Any = None,
) -> Stage:
    """:func:`shuffle_batch_join` with ``keep_input`` (B12)."""
    _shuffle_args(capacity, min_after_dequeue)
    if not tensors_list:
        raise ValueError("shuffle_batch_join: tensors_list must not be empty")
    block = _block_size(batch_size)
    sources = [_Source(t, enqueue_many, dtypes, shapes, block=block) for t in tensors_list]
    return _batcher(
        sources, 1, batch_size=batch_size, capacity=capacity, dynamic_pad=False,
        allow_smaller_final_batch=allow_smaller_final_batch, shuffle=(min_after_dequeue, seed),
        keep_input=keep_input, shared_name=shared_name, name=name or "shuffle_batch_join",
    )
