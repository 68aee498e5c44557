"""Input producers and batching (TF1 ``tf.train.*_input_producer``, ``batch``,
``shuffle_batch`` and friends; spec sections 8 and 9, rules IP1–IP6, B1–B13).

Every function builds a queue and one :class:`~feedq.runners.QueueRunner`
that fills it, registers the runner (with the current
:class:`~feedq.Pipeline`, else the default collection for
:func:`feedq.start_queue_runners`) and returns a :class:`Stage`: the
queue, its runner, and how to take from it. A stage is what TF1 returned as
a tensor: evaluate it with ``stage.dequeue(timeout=...)`` (``OutOfRangeError``
at the end of data) or iterate it (``StopIteration`` at the end).

What can be batched (the ``tensors`` argument): a stage (its evaluations
are the elements), a callable taking no arguments (each call returns one
element, or one batch with ``enqueue_many=True``), or a list or dict whose
entries are stages, callables or constant arrays (each entry gives one
component per step). A callable needs ``dtypes=`` (and ``shapes=``, B3)
since feedq will not run it to find out.

Batch-first: a stage of single elements (a producer) feeding a batcher is
read in blocks of up to ``batch_size`` (``dequeue_up_to``), which gives the
same elements in the same order as one-at-a-time reads, without a Python
call per element.

Where feedq differs from TF1:

* X1: evaluating a stage whose runner (or an upstream runner) was never
  started raises ``FailedPreconditionError`` naming it, instead of hanging.
* X2/IP6: epoch counters are plain Python state; no initializer step.
* X3: a runner's exception reaches the consumer: the stage re-raises it
  (with the runner thread's traceback) instead of ending the data.
* X4: elements dropped at the end by ``allow_smaller_final_batch=False``
  are counted in ``stage.statistics().dropped``.
* X12/B5: ``shuffle_batch(..., seed=s, num_threads=1)`` is reproducible:
  the shuffling is done by the runner thread (a RandomShuffleQueue it
  alone reads) in fixed-size draws, so consumer timing cannot change the
  order. The stage's queue is a FIFO of shuffled elements; ``capacity``
  bounds it and the shuffle buffer together (plus one batch in flight).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._arrays import as_dtype, as_torch_free_array
from .errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    OutOfRangeError,
)
from .pipeline import current_pipeline, gate_ops, register_runner
from .queues import STRING, FIFOQueue, PaddingFIFOQueue, QueueBase, QueueStatistics, RandomShuffleQueue
from .runners import QueueRunner, QueueRunnerStatistics

__all__ = [
    "Stage",
    "StageStatistics",
    "batch",
    "batch_join",
    "input_producer",
    "limit_epochs",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "range_input_producer",
    "shuffle_batch",
    "shuffle_batch_join",
    "slice_input_producer",
    "string_input_producer",
]


# -- stages -------------------------------------------------------------------------


@dataclass(frozen=True)
class StageStatistics:
    """A snapshot of a stage: its queue, its runner, and dropped elements.

    Attributes:
        queue: the queue's statistics (size, capacity, waiters...).
        runner: the runner's statistics (threads alive, ops run, errors).
        dropped: elements left behind at the end because they did not fill a
            batch (``allow_smaller_final_batch=False``, X4).
        epochs_started: producers only: epochs begun so far.
    """

    queue: QueueStatistics
    runner: QueueRunnerStatistics
    dropped: int
    epochs_started: int | None


class Stage:
    """A queue, the runner that fills it, and how to take from it.

    ``dequeue()`` returns one evaluation: an element for producers, a batch
    for batchers. Structures follow B2: a dict for dict inputs, a bare value
    for one component, else a list.
    """

    def __init__(
        self,
        queue: QueueBase,
        runner: QueueRunner,
        *,
        names: list[str] | None,
        single: bool,
        batch_size: int | None = None,
        smaller_final: bool = False,
        upstream: Sequence[Stage] = (),
        epochs: _Epochs | None = None,
    ) -> None:
        self._queue = queue
        self._runner = runner
        self._names = names
        self._single = single
        self._batch_size = batch_size
        self._smaller_final = smaller_final
        self._upstream = list(upstream)
        self._epochs = epochs
        self._dropped = 0
        self._checked = False
        pipe = current_pipeline()
        if pipe is not None:
            pipe.output = self

    # -- what it holds ------------------------------------------------------------

    @property
    def queue(self) -> QueueBase:
        """The queue this stage takes from."""
        return self._queue

    @property
    def runner(self) -> QueueRunner:
        """The runner that fills :attr:`queue`."""
        return self._runner

    @property
    def batch_size(self) -> int | None:
        """Elements per evaluation for batchers; ``None`` for producers."""
        return self._batch_size

    @property
    def names(self) -> list[str] | None:
        """Component names when evaluations are dicts."""
        return None if self._names is None else list(self._names)

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """One dtype per component."""
        return self._queue.dtypes

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        """Shape of one element's components (without the batch dimension)."""
        return self._queue.shapes

    @property
    def output_shapes(self) -> list[tuple[int | None, ...] | None]:
        """Shapes of one evaluation (B4: ``[batch_size] + shape``, or
        ``[None] + shape`` with ``allow_smaller_final_batch``)."""
        if self._batch_size is None:
            return self.shapes
        lead = None if self._smaller_final else self._batch_size
        return [None if s is None else (lead, *s) for s in self.shapes]

    def statistics(self) -> StageStatistics:
        """Queue and runner statistics, and dropped elements (X4)."""
        return StageStatistics(
            queue=self._queue.statistics(),
            runner=self._runner.statistics(),
            dropped=self._dropped,
            epochs_started=None if self._epochs is None else self._epochs.started,
        )

    def __repr__(self) -> str:
        kind = "batch" if self._batch_size else "element"
        return f"Stage({kind}, queue={self._queue.name!r}, size={self._queue.size()})"

    # -- taking -------------------------------------------------------------------

    def _runners(self) -> Iterator[QueueRunner]:
        yield self._runner
        for s in self._upstream:
            yield from s._runners()

    def _check_started(self) -> None:
        """X1: refuse to wait on a queue no started runner will ever fill."""
        if self._checked:
            return
        idle = [r.name for r in self._runners() if not r.started]
        if idle:
            raise FailedPreconditionError(
                f"queue '{self._queue.name}' is fed by queue runners that were never started: "
                f"{', '.join(repr(n) for n in idle)}; call feedq.start_queue_runners(coord) or "
                "build the pipeline inside `with feedq.Pipeline():`"
            )
        self._checked = True

    def _pack(self, cols: list[Any]) -> Any:
        if self._names is not None:
            return dict(zip(self._names, cols))
        if self._single:
            return cols[0]
        return list(cols)

    def _raw(self, timeout: float | None) -> list[Any]:
        """One evaluation as a list of components (errors translated)."""
        self._check_started()
        q = self._queue
        try:
            if self._batch_size is None:
                out = q.dequeue(timeout=timeout)
            elif self._smaller_final:
                out = q.dequeue_up_to(self._batch_size, timeout=timeout)
            else:
                out = q.dequeue_many(self._batch_size, timeout=timeout)
        except CancelledError as exc:
            _reraise_cause(exc)
            raise
        except OutOfRangeError:
            if self._batch_size is not None and not self._smaller_final:
                self._dropped = q.size()
            raise
        return out if isinstance(out, list) else [out]

    def _block(self, n: int, timeout: float | None) -> list[Any]:
        """Up to ``n`` evaluations of an element stage, stacked (batch-first)."""
        self._check_started()
        try:
            out = self._queue.dequeue_up_to(n, timeout=timeout)
        except CancelledError as exc:
            _reraise_cause(exc)
            raise
        return out if isinstance(out, list) else [out]

    def _stream(self, n: int) -> list[Any]:
        """What a batcher reads from an element stage: up to ``n`` elements,
        as many as are queued, waiting only while none is (a big block when
        data is plentiful, no added latency when it trickles)."""
        self._check_started()
        try:
            out = self._queue.dequeue_available(n)
        except CancelledError as exc:
            _reraise_cause(exc)
            raise
        return out if isinstance(out, list) else [out]

    def dequeue(self, timeout: float | None = None) -> Any:
        """One evaluation: an element (producers) or a batch (batchers).

        Args:
            timeout: seconds to wait (``None``: the process default, 0: do
                not wait).

        Raises:
            OutOfRangeError: the end of the data.
            FailedPreconditionError: a runner feeding this stage was never
                started (X1).
            DeadlineExceededError: timed out; nothing was taken.
            CancelledError: the pipeline was stopped.
            Exception: the error that made a runner of this pipeline fail
                (X3), with the runner thread's traceback.
        """
        return self._pack(self._raw(timeout))

    def dequeue_up_to(self, n: int, timeout: float | None = None) -> Any:
        """Element stages: up to ``n`` elements stacked on axis 0 (fewer only
        at the end of the data)."""
        if self._batch_size is not None:
            raise TypeError("dequeue_up_to is for element stages; a batcher's dequeue() returns a batch")
        return self._pack(self._block(n, timeout))

    def __iter__(self) -> Iterator[Any]:
        """Evaluations until the end of the data (or a clean stop)."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return
            except CancelledError as exc:
                if exc.__cause__ is None:
                    return  # a clean stop of the pipeline
                raise


def _reraise_cause(exc: CancelledError) -> None:
    """X3: a queue cancelled because a runner failed: raise the runner's error."""
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, (OutOfRangeError, CancelledError)):
        raise cause.with_traceback(cause.__traceback__) from None


class _SliceStage(Stage):
    """slice_input_producer: a queue of row indices, gathered from arrays."""

    def __init__(self, index: Stage, tensors: list[np.ndarray[Any, Any]], names: list[str] | None, single: bool) -> None:
        super().__init__(index.queue, index.runner, names=names, single=single, epochs=index._epochs)
        self._tensors = tensors

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        return [t.dtype for t in self._tensors]

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        return [tuple(t.shape[1:]) for t in self._tensors]

    def _raw(self, timeout: float | None) -> list[Any]:
        i = int(Stage._raw(self, timeout)[0])
        return [t[i].copy() if t.ndim > 1 else t[i] for t in self._tensors]

    def _block(self, n: int, timeout: float | None) -> list[Any]:
        idx = Stage._block(self, n, timeout)[0]
        return [t[idx] for t in self._tensors]

    def _stream(self, n: int) -> list[Any]:
        idx = Stage._stream(self, n)[0]
        return [t[idx] for t in self._tensors]


# -- producers ----------------------------------------------------------------------


class _Epochs:
    """Epoch counting for producers: plain Python state (X2)."""

    def __init__(self, num_epochs: int | None) -> None:
        if num_epochs is not None:
            if isinstance(num_epochs, bool) or not isinstance(num_epochs, (int, np.integer)):
                raise TypeError(f"num_epochs must be an int or None, got {num_epochs!r}")
            if num_epochs <= 0:
                raise ValueError(f"num_epochs must be > 0 not {num_epochs}.")
        self.limit = None if num_epochs is None else int(num_epochs)
        self._lock = threading.Lock()
        self.started = 0  # guarded by self._lock

    def next(self) -> int:
        """Start the next epoch; its 0-based index. OutOfRange past the limit (IP1)."""
        with self._lock:
            if self.limit is not None and self.started >= self.limit:
                raise OutOfRangeError(f"Reached limit of {self.limit}")
            self.started += 1
            return self.started - 1


def limit_epochs(tensor: Any, num_epochs: int | None = None, name: str | None = None) -> Callable[[], Any]:
    """A callable returning ``tensor`` ``num_epochs`` times, then raising
    ``OutOfRangeError("Reached limit of N")`` (IP1); ``None`` = forever.

    Raises:
        ValueError: ``num_epochs <= 0``.
    """
    epochs = _Epochs(num_epochs)

    def evaluate() -> Any:
        epochs.next()
        return tensor

    evaluate.__name__ = name or "limit_epochs"
    evaluate.epochs = epochs  # type: ignore[attr-defined]
    return evaluate


def _as_array(value: Any, what: str) -> np.ndarray[Any, Any]:
    value = as_torch_free_array(value, what)
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, bytes)) for v in value):
            arr = np.empty(len(value), dtype=object)
            arr[:] = [v.encode() if isinstance(v, str) else v for v in value]
            return arr
        arr = np.asarray(value)
    if arr.dtype.kind in "SU":
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1)]
        return out
    return arr


def _producer(
    arr: np.ndarray[Any, Any],
    *,
    element_shape: Any,
    num_epochs: int | None,
    shuffle: bool,
    seed: int | None,
    capacity: int,
    shared_name: str | None,
    name: str,
    cancel_op: Callable[[], Any] | None,
) -> Stage:
    if arr.ndim == 0:
        raise ValueError(f"{name}: the input must have a leading dimension, got a scalar")
    shape = tuple(arr.shape[1:]) if element_shape is None else tuple(element_shape)
    if tuple(arr.shape[1:]) != shape:
        raise ValueError(f"{name}: element_shape {list(shape)} does not match rows of shape {list(arr.shape[1:])}")
    epochs = _Epochs(num_epochs)
    q = FIFOQueue(capacity, [STRING if arr.dtype == object else arr.dtype], shapes=[list(shape)],
                  shared_name=shared_name, name=name)
    n = arr.shape[0]

    def enqueue_epoch() -> None:
        # One op enqueues a whole epoch: epochs are contiguous, never mixed (IP2).
        epoch = epochs.next()
        if shuffle:
            # Replayable: the order of epoch e depends on (seed, e) only.
            rng = np.random.default_rng(None if seed is None else [seed, epoch])
            q.enqueue_many(arr[rng.permutation(n)])
        else:
            q.enqueue_many(arr)

    runner = QueueRunner(q, gate_ops([enqueue_epoch], q), cancel_op=cancel_op)
    register_runner(runner)
    return Stage(q, runner, names=None, single=True, epochs=epochs)


def input_producer(
    input_tensor: Any,
    element_shape: Any = None,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int = 32,
    shared_name: str | None = None,
    summary_name: str | None = None,
    name: str | None = None,
    cancel_op: Callable[[], Any] | None = None,
) -> Stage:
    """A queue of the rows of ``input_tensor``, refilled one epoch at a time (IP2).

    Args:
        input_tensor: an array (or list) whose rows are the elements.
        element_shape: the row shape, checked against the data.
        num_epochs: epochs before ``OutOfRangeError``; ``None`` cycles forever.
        shuffle: a new random order each epoch (from ``seed`` and the epoch
            number, so a seeded run replays exactly, IP5).
        seed: the shuffle seed; ``None`` is nondeterministic.
        capacity: the queue's capacity.
        shared_name, name: as for queues.
        summary_name: accepted for compatibility; use ``stage.statistics()``.
        cancel_op: the runner's cancel op.

    Returns:
        An element :class:`Stage`.

    Raises:
        ValueError: empty input, a scalar, or ``num_epochs <= 0``.
    """
    del summary_name
    arr = _as_array(input_tensor, "input_producer")
    if arr.ndim and arr.shape[0] == 0:
        raise ValueError("input_producer requires a non-empty input tensor")
    return _producer(arr, element_shape=element_shape, num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                     capacity=capacity, shared_name=shared_name, name=name or "input_producer",
                     cancel_op=cancel_op)


def string_input_producer(
    string_tensor: Any,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int = 32,
    shared_name: str | None = None,
    name: str | None = None,
    cancel_op: Callable[[], Any] | None = None,
) -> Stage:
    """A queue of strings (typically file names) for readers (IP3).

    Raises:
        ValueError: an empty list ("string_input_producer requires a non-null
            input tensor"), or strings that are not 1-D.
    """
    if string_tensor is None or (hasattr(string_tensor, "__len__") and len(string_tensor) == 0):
        raise ValueError("string_input_producer requires a non-null input tensor")
    if isinstance(string_tensor, (str, bytes)):
        string_tensor = [string_tensor]
    strings = [s if isinstance(s, (str, bytes)) else str(s) for s in string_tensor]
    arr = _as_array(strings, "string_input_producer")
    if arr.ndim != 1:
        raise ValueError(f"string_input_producer expects a 1-D list of strings, got shape {list(arr.shape)}")
    return _producer(arr, element_shape=None, num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                     capacity=capacity, shared_name=shared_name, name=name or "input_producer",
                     cancel_op=cancel_op)


def range_input_producer(
    limit: int,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int = 32,
    shared_name: str | None = None,
    name: str | None = None,
) -> Stage:
    """A queue of the int32 values ``0 .. limit-1`` (IP4)."""
    if int(limit) <= 0:
        raise ValueError(f"range_input_producer requires limit > 0, got {limit}")
    return _producer(np.arange(int(limit), dtype=np.int32), element_shape=None, num_epochs=num_epochs,
                     shuffle=shuffle, seed=seed, capacity=capacity, shared_name=shared_name,
                     name=name or "input_producer", cancel_op=None)


def slice_input_producer(
    tensor_list: Any,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int = 32,
    shared_name: str | None = None,
    name: str | None = None,
) -> Stage:
    """Aligned rows of several arrays (IP4): a queue of row indices plus a
    gather, so an epoch costs 8 bytes per row in the queue. Evaluating the
    stage gives ``[row of each array]`` (a dict for a dict input); a
    batcher reads it in blocks with one fancy-index gather per block.

    Raises:
        ValueError: an empty list, or arrays with different leading sizes.
    """
    names: list[str] | None = None
    if isinstance(tensor_list, Mapping):
        names = sorted(tensor_list)
        items = [tensor_list[k] for k in names]
    elif isinstance(tensor_list, (list, tuple)):
        items = list(tensor_list)
    else:
        raise TypeError("slice_input_producer expects a list (or dict) of arrays")
    if not items:
        raise ValueError("Expected at least one tensor in slice_input_producer().")
    tensors = [_as_array(t, "slice_input_producer") for t in items]
    n = tensors[0].shape[0] if tensors[0].ndim else -1
    for t in tensors:
        if t.ndim == 0 or t.shape[0] != n:
            raise ValueError(
                f"slice_input_producer: all tensors need the same leading size; got {[list(x.shape) for x in tensors]}"
            )
    if n == 0:
        raise ValueError("slice_input_producer requires non-empty tensors")
    index = _producer(np.arange(n, dtype=np.int64), element_shape=None, num_epochs=num_epochs, shuffle=shuffle,
                      seed=seed, capacity=capacity, shared_name=shared_name, name=name or "input_producer",
                      cancel_op=None)
    return _SliceStage(index, tensors, names, single=False)


# -- sources: what a batcher evaluates ------------------------------------------------------


class _Source:
    """One input of a batcher: evaluated by a runner thread, it yields either
    one element or a batch of rows (``many``), as a list of components."""

    def __init__(self, tensors: Any, enqueue_many: bool, dtypes: Any, shapes: Any, block: int) -> None:
        self.enqueue_many = enqueue_many
        self.block = block
        self.upstream: list[Stage] = []
        self.names: list[str] | None = None
        self.single = False
        self.dtypes: list[np.dtype[Any]] = []
        self.shapes: list[tuple[int | None, ...] | None] | None = None
        self.evaluate: Callable[[], tuple[list[Any], bool]]
        if isinstance(tensors, Stage):
            self._init_stage(tensors, enqueue_many)
        elif callable(tensors):
            self._init_callable(tensors, dtypes)
        elif isinstance(tensors, Mapping):
            self.names = sorted(tensors)
            self._init_leaves([tensors[k] for k in self.names], dtypes)
        elif isinstance(tensors, (list, tuple)):
            if not tensors:
                raise ValueError("batch: tensors must not be empty")
            self.single = len(tensors) == 1  # B2: a one-element list gives a bare tensor
            self._init_leaves(list(tensors), dtypes)
        else:
            raise TypeError(
                "batch: tensors must be a Stage, a callable, or a list/dict of stages, callables and arrays; "
                f"got {type(tensors).__name__}"
            )
        if shapes is not None:
            self.shapes = list(_normalize_shapes(shapes, len(self.dtypes)))
        if self.shapes is None:
            raise ValueError(
                "batch: shapes are unknown (a callable input): pass shapes=[...] (B3)"
            )

    def _init_stage(self, stage: Stage, many: bool) -> None:
        self.upstream = [stage]
        self.names = stage.names
        # B2: one component gives a bare tensor, as a one-element list does in TF.
        self.single = stage._single or (stage.names is None and len(stage.dtypes) == 1)
        self.dtypes = stage.dtypes
        if stage.batch_size is None:
            self.shapes = [None if s is None else tuple(s) for s in stage.shapes]
            if many:
                # Each element is itself a batch: rows are one level down.
                self.shapes = [None if s is None or not s else tuple(s[1:]) for s in self.shapes]
                self.evaluate = lambda: (stage._raw(None), True)
            else:
                k = self.block

                def block_of_stage() -> tuple[list[Any], bool]:
                    return stage._stream(k), True

                self.evaluate = block_of_stage
        else:
            if many:
                self.shapes = [None if s is None else tuple(s) for s in stage.shapes]
                self.evaluate = lambda: (stage._raw(None), True)
            else:
                self.shapes = [None if s is None else tuple(s) for s in stage.output_shapes]
                self.evaluate = lambda: (stage._raw(None), False)

    def _init_callable(self, fn: Callable[[], Any], dtypes: Any) -> None:
        if dtypes is None:
            raise ValueError(
                "batch: pass dtypes= (and shapes=) when tensors is a callable; feedq does not "
                "run it to find out"
            )
        if isinstance(dtypes, Mapping):
            self.names = sorted(dtypes)
            self.dtypes = [as_dtype(dtypes[k]) for k in self.names]
        elif isinstance(dtypes, (list, tuple)):
            self.dtypes = [as_dtype(d) for d in dtypes]
            self.single = len(self.dtypes) == 1  # B2: a one-element list gives a bare tensor
        else:
            self.dtypes = [as_dtype(dtypes)]
            self.single = True
        self.shapes = None
        names, single, many = self.names, self.single, self.enqueue_many

        def evaluate() -> tuple[list[Any], bool]:
            value = fn()
            if names is not None:
                if not isinstance(value, Mapping) or sorted(value) != names:
                    raise ValueError(f"batch: the callable must return a dict with keys {names}, got {value!r:.80}")
                return [value[k] for k in names], many
            if single:
                if isinstance(value, (list, tuple)) and len(value) == 1:
                    return list(value), many
                return [value], many
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"batch: the callable must return a list of {len(self.dtypes)} components")
            return list(value), many

        self.evaluate = evaluate

    def _init_leaves(self, leaves: list[Any], dtypes: Any) -> None:
        getters: list[Callable[[], Any]] = []
        found: list[Any] = []
        shapes: list[tuple[int | None, ...] | None] = []
        for i, leaf in enumerate(leaves):
            shape: tuple[int | None, ...] | None
            if isinstance(leaf, Stage):
                if len(leaf.dtypes) != 1:
                    raise ValueError("batch: a stage inside a list must have exactly one component")
                self.upstream.append(leaf)
                getters.append(functools.partial(_first_component, leaf))
                found.append(leaf.dtypes[0])
                shape = leaf.output_shapes[0]
            elif callable(leaf):
                if not (isinstance(dtypes, (list, tuple)) and len(dtypes) == len(leaves)):
                    raise ValueError("batch: pass dtypes= (one per entry) when an entry of tensors is a callable")
                getters.append(leaf)
                found.append(dtypes[i])
                shape = None
            else:
                arr = _as_array(leaf, "batch")
                getters.append(functools.partial(_constant, arr))
                found.append(STRING if arr.dtype == object else arr.dtype)
                shape = tuple(arr.shape)
            if shape is not None and self.enqueue_many:
                shape = shape[1:] if shape else None  # rows are one level down
            shapes.append(shape)
        self.dtypes = [as_dtype(d) for d in found]
        self.shapes = None if any(s is None for s in shapes) else shapes
        many = self.enqueue_many

        def evaluate_leaves() -> tuple[list[Any], bool]:
            return [g() for g in getters], many

        self.evaluate = evaluate_leaves


def _block_size(batch_size: int) -> int:
    """Most elements a batcher thread moves from an element stage at once."""
    return max(int(batch_size), 4096)


def _first_component(stage: Stage) -> Any:
    return stage._raw(None)[0]


def _constant(value: Any) -> Any:
    return value


def _normalize_shapes(shapes: Any, count: int) -> list[tuple[int | None, ...]]:
    if isinstance(shapes, Mapping):
        shapes = [shapes[k] for k in sorted(shapes)]
    shapes = list(shapes)
    if shapes and all(d is None or isinstance(d, (int, np.integer)) for d in shapes):
        shapes = [shapes]  # a flat list is one shape (Q2)
    if len(shapes) != count:
        raise ValueError(f"batch: shapes must have one shape per component: {len(shapes)} != {count}")
    return [tuple(None if d is None else int(d) for d in s) for s in shapes]


def _check_spec(sources: list[_Source]) -> None:
    """B9: every list of a *_join call must agree in dtypes, shapes and keys."""
    first = sources[0]
    for s in sources[1:]:
        if s.names != first.names:
            raise ValueError(f"batch_join: all inputs need the same keys: {first.names} vs {s.names}")
        if len(s.dtypes) != len(first.dtypes):
            raise ValueError("batch_join: all inputs need the same number of components")
        for a, b in zip(first.dtypes, s.dtypes):
            if a != b:
                an = "string" if a is STRING else str(a)
                bn = "string" if b is STRING else str(b)
                raise TypeError(f"Expected types to be consistent: {an} vs. {bn}.")
        if first.shapes != s.shapes:
            raise ValueError(f"batch_join: shapes differ between inputs: {first.shapes} vs {s.shapes}")


def _apply_keep(
    keep_input: Any, values: list[Any], many: bool, per_element: bool
) -> tuple[list[Any], bool] | None:
    """B12: keep_input is a bool, or a callable of the evaluated components
    returning a bool (one element) or a bool vector (a batch, with
    ``enqueue_many=True``).

    ``per_element``: the user asked for ``enqueue_many=False`` but the rows
    arrive in a block (a stage read batch-first): a callable is still asked
    about one element at a time, as B12 promises.
    """
    if per_element and many and callable(keep_input):
        rows = len(values[0])
        decisions = []
        for i in range(rows):
            keep_one = keep_input([v[i] for v in values])
            if not isinstance(keep_one, (bool, np.bool_)) and np.ndim(keep_one) != 0:
                raise ValueError("maybe_batch: keep_input must be a scalar bool when enqueue_many=False")
            decisions.append(bool(keep_one))
        mask = np.array(decisions, dtype=bool)
        return [np.asarray(v)[mask] for v in values], many
    keep = keep_input(values) if callable(keep_input) else keep_input
    if not many:
        if not isinstance(keep, (bool, np.bool_)) and np.ndim(keep) != 0:
            raise ValueError("maybe_batch: keep_input must be a scalar bool when enqueue_many=False")
        return (values, many) if bool(keep) else None
    mask = np.asarray(keep)
    if mask.ndim == 0:
        return (values, many) if bool(mask) else None
    if mask.dtype != np.bool_ or mask.ndim != 1:
        raise ValueError("maybe_batch: keep_input must be a bool vector when enqueue_many=True")
    return [np.asarray(v)[mask] for v in values], many


# -- batchers ---------------------------------------------------------------------------


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
    first = sources[0]
    if first.shapes is None:  # pragma: no cover - _Source raises first
        raise ValueError("batch: shapes are unknown")
    dtypes, shapes = first.dtypes, [list(s) if s is not None else None for s in first.shapes]
    if dynamic_pad:
        out: QueueBase = PaddingFIFOQueue(capacity, dtypes, shapes, shared_name=shared_name, name=f"{name}/padding_fifo_queue")
    else:
        out_capacity = capacity if shuffle is None else max(batch_size, capacity - shuffle[0])
        out = FIFOQueue(out_capacity, dtypes, shapes, shared_name=shared_name,
                        name=f"{name}/fifo_queue" if shuffle is None else f"{name}/shuffled_fifo_queue")

    put_one, put_many = out.enqueue, out.enqueue_many
    if shuffle is not None:
        min_after, seed = shuffle
        # Unbounded, but each runner drains it below min_after + batch_size
        # after every insert, so it never holds more than that plus a block.
        buf = RandomShuffleQueue(-1, min_after, dtypes, shapes, seed=seed, name=f"{name}/random_shuffle_queue")
        lock = threading.Lock()
        live = [len(sources) * threads_per_source]

        def drain(final: bool) -> None:
            while True:
                try:
                    if final:
                        blk = buf.dequeue_up_to(batch_size, timeout=0)
                    elif buf.size() >= min_after + batch_size:
                        blk = buf.dequeue_many(batch_size, timeout=0)
                    else:
                        return
                except (DeadlineExceededError, OutOfRangeError):
                    return
                out.enqueue_many(blk)

        fed = [0]  # rows put in the shuffle buffer; guarded by `lock`

        def to_shuffle(values: list[Any], many: bool) -> None:
            if not many:
                buf.enqueue(values)
                drain(final=False)
                return
            # Insert in pieces that end at multiples of batch_size counted
            # over the whole stream, draining after each: the buffer sees the
            # same operations however the rows were blocked upstream, so a
            # seeded single-thread run is reproducible (X12).
            n = len(values[0])
            start = 0
            while start < n:
                with lock:
                    take = min(batch_size - fed[0] % batch_size, n - start)
                    fed[0] += take
                    aligned = fed[0] % batch_size == 0
                buf.enqueue_many([np.asarray(v)[start : start + take] for v in values])
                start += take
                if aligned:
                    drain(final=False)

        def finish() -> None:  # noqa: F811 - one of two definitions
            # The last runner thread to see the end of its input empties the
            # shuffle buffer (in random order) before the runner closes `out`.
            with lock:
                live[0] -= 1
                last = live[0] == 0
            if last:
                buf.close()
                drain(final=True)

    else:
        finish = _nothing

    def make_op(src: _Source) -> Callable[[], None]:
        def enqueue_op() -> None:
            try:
                values, many = src.evaluate()
            except OutOfRangeError:
                finish()
                raise
            except CancelledError as exc:
                _reraise_cause(exc)  # an upstream failure is an error here too (X3)
                finish()
                raise
            if keep_input is not None:
                kept = _apply_keep(keep_input, values, many, per_element=not src.enqueue_many)
                if kept is None:
                    return
                values, many = kept
            if shuffle is not None:
                to_shuffle(values, many)
            elif many:
                put_many(values)
            else:
                put_one(values)

        enqueue_op.__name__ = f"{name}_enqueue"
        return enqueue_op

    # The default cancel op cancels `out`. The shuffle buffer needs none: it is
    # unbounded and only read with timeout=0, so nothing ever blocks on it.
    ops = [make_op(s) for s in sources for _ in range(threads_per_source)]
    runner = QueueRunner(out, gate_ops(ops, out))
    register_runner(runner)
    upstream = [u for s in sources for u in s.upstream]
    return Stage(out, runner, names=first.names, single=first.single, batch_size=int(batch_size),
                 smaller_final=allow_smaller_final_batch, upstream=upstream)


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
            the module docstring).
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
    return maybe_batch(tensors, None, batch_size, num_threads, capacity, enqueue_many, shapes, dynamic_pad,
                       allow_smaller_final_batch, shared_name, name, dtypes)


def maybe_batch(tensors: Any, keep_input: Any, batch_size: int, num_threads: int = 1, capacity: int = 32,
                enqueue_many: bool = False, shapes: Any = None, dynamic_pad: bool = False,
                allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                name: str | None = None, dtypes: Any = None) -> Stage:
    """:func:`batch` keeping only the elements for which ``keep_input`` holds (B12).

    ``keep_input`` is a bool, or a callable taking the evaluated components
    and returning a bool (or a bool vector with ``enqueue_many``).
    """
    src = _Source(tensors, enqueue_many, dtypes, shapes, block=_block_size(batch_size))
    return _batcher([src], num_threads, batch_size=batch_size, capacity=capacity, dynamic_pad=dynamic_pad,
                    allow_smaller_final_batch=allow_smaller_final_batch, shuffle=None, keep_input=keep_input,
                    shared_name=shared_name, name=name or "batch")


def batch_join(tensors_list: Sequence[Any], batch_size: int, capacity: int = 32, enqueue_many: bool = False,
               shapes: Any = None, dynamic_pad: bool = False, allow_smaller_final_batch: bool = False,
               shared_name: str | None = None, name: str | None = None, dtypes: Any = None) -> Stage:
    """One runner thread per input, all feeding one batch queue (B9): the
    "N readers in parallel" pattern. Inputs must agree in dtypes and shapes."""
    return maybe_batch_join(tensors_list, None, batch_size, capacity, enqueue_many, shapes, dynamic_pad,
                            allow_smaller_final_batch, shared_name, name, dtypes)


def maybe_batch_join(tensors_list: Sequence[Any], keep_input: Any, batch_size: int, capacity: int = 32,
                     enqueue_many: bool = False, shapes: Any = None, dynamic_pad: bool = False,
                     allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                     name: str | None = None, dtypes: Any = None) -> Stage:
    """:func:`batch_join` with ``keep_input`` (B12)."""
    if not tensors_list:
        raise ValueError("batch_join: tensors_list must not be empty")
    sources = [_Source(t, enqueue_many, dtypes, shapes, block=_block_size(batch_size)) for t in tensors_list]
    return _batcher(sources, 1, batch_size=batch_size, capacity=capacity, dynamic_pad=dynamic_pad,
                    allow_smaller_final_batch=allow_smaller_final_batch, shuffle=None, keep_input=keep_input,
                    shared_name=shared_name, name=name or "batch_join")


def _shuffle_args(capacity: int, min_after_dequeue: int) -> None:
    if capacity <= min_after_dequeue:
        raise ValueError(f"capacity {capacity} must be bigger than min_after_dequeue {min_after_dequeue}.")
    if min_after_dequeue < 0:
        raise ValueError(f"min_after_dequeue must be >= 0, got {min_after_dequeue}")


def shuffle_batch(tensors: Any, batch_size: int, capacity: int, min_after_dequeue: int, num_threads: int = 1,
                  seed: int | None = None, enqueue_many: bool = False, shapes: Any = None,
                  allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                  name: str | None = None, dtypes: Any = None) -> Stage:
    """Batches drawn at random from a buffer of at least ``min_after_dequeue``
    elements (B10). With ``seed`` and ``num_threads=1`` the order is
    reproducible (X12). At the end the buffer drains in full batches; the
    leftovers are dropped unless ``allow_smaller_final_batch``.

    Raises:
        ValueError: ``capacity <= min_after_dequeue``.
    """
    return maybe_shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, None, num_threads, seed,
                               enqueue_many, shapes, allow_smaller_final_batch, shared_name, name, dtypes)


def maybe_shuffle_batch(tensors: Any, batch_size: int, capacity: int, min_after_dequeue: int, keep_input: Any,
                        num_threads: int = 1, seed: int | None = None, enqueue_many: bool = False,
                        shapes: Any = None, allow_smaller_final_batch: bool = False,
                        shared_name: str | None = None, name: str | None = None, dtypes: Any = None) -> Stage:
    """:func:`shuffle_batch` with ``keep_input`` (B12)."""
    _shuffle_args(capacity, min_after_dequeue)
    src = _Source(tensors, enqueue_many, dtypes, shapes, block=_block_size(batch_size))
    return _batcher([src], num_threads, batch_size=batch_size, capacity=capacity, dynamic_pad=False,
                    allow_smaller_final_batch=allow_smaller_final_batch, shuffle=(min_after_dequeue, seed),
                    keep_input=keep_input, shared_name=shared_name, name=name or "shuffle_batch")


def shuffle_batch_join(tensors_list: Sequence[Any], batch_size: int, capacity: int, min_after_dequeue: int,
                       seed: int | None = None, enqueue_many: bool = False, shapes: Any = None,
                       allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                       name: str | None = None, dtypes: Any = None) -> Stage:
    """:func:`batch_join` through a shuffle buffer (B11)."""
    return maybe_shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, None, seed,
                                    enqueue_many, shapes, allow_smaller_final_batch, shared_name, name, dtypes)


def maybe_shuffle_batch_join(tensors_list: Sequence[Any], batch_size: int, capacity: int, min_after_dequeue: int,
                             keep_input: Any, seed: int | None = None, enqueue_many: bool = False,
                             shapes: Any = None, allow_smaller_final_batch: bool = False,
                             shared_name: str | None = None, name: str | None = None,
                             dtypes: Any = None) -> Stage:
    """:func:`shuffle_batch_join` with ``keep_input`` (B12)."""
    _shuffle_args(capacity, min_after_dequeue)
    if not tensors_list:
        raise ValueError("shuffle_batch_join: tensors_list must not be empty")
    sources = [_Source(t, enqueue_many, dtypes, shapes, block=_block_size(batch_size)) for t in tensors_list]
    return _batcher(sources, 1, batch_size=batch_size, capacity=capacity, dynamic_pad=False,
                    allow_smaller_final_batch=allow_smaller_final_batch, shuffle=(min_after_dequeue, seed),
                    keep_input=keep_input, shared_name=shared_name, name=name or "shuffle_batch_join")
