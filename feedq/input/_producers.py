"""Input producers (TF1 ``limit_epochs`` and ``*_input_producer``; IP1–IP6).

Each producer is one FIFOQueue and one QueueRunner whose single op enqueues
a whole epoch at a time (IP2), with epochs counted in plain Python (X2).

In a resumable pipeline the producer's queue has a hidden last column of
unit codes, and the stage is built with its
:class:`~feedq._resume.producer.ProducerPart`, registered with the
pipeline's registry (``feedq._resume.registry``) and restored before its
runner can run.
"""

from __future__ import annotations

import glob
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from feedq import storage
from feedq._core import scope as _scope
from feedq._core.arrays import epoch_order
from feedq._resume.producer import ProducerPart
from feedq._resume.state import restore_producer
from feedq.errors import NotFoundError, OutOfRangeError
from feedq.input._sources import as_array as _as_array
from feedq.input._stage import Stage
from feedq.queues import STRING, FIFOQueue
from feedq.runners import QueueRunner, gate_ops
from feedq.runners import add_queue_runner as register_runner

__all__ = [
    "input_producer",
    "limit_epochs",
    "match_filenames_once",
    "range_input_producer",
    "slice_input_producer",
    "string_input_producer",
]


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
    kind: str = "input",
    extra: dict[str, Any] | None = None,
    shard: dict[str, int] | None = None,
) -> Stage:
    if arr.ndim == 0:
        raise ValueError(f"{name}: the input must have a leading dimension, got a scalar")
    shape = tuple(arr.shape[1:]) if element_shape is None else tuple(element_shape)
    if tuple(arr.shape[1:]) != shape:
        raise ValueError(f"{name}: element_shape {list(shape)} does not match rows of shape {list(arr.shape[1:])}")
    epochs = _Epochs(num_epochs)
    if _resumable():
        return _resumable_producer(arr, shape, epochs, shuffle=shuffle, seed=seed, capacity=capacity,
                                   shared_name=shared_name, name=name, cancel_op=cancel_op, kind=kind,
                                   extra=extra, shard=shard)
    q = FIFOQueue(capacity, [STRING if arr.dtype == object else arr.dtype], shapes=[list(shape)],
                  shared_name=shared_name, name=name)
    n = arr.shape[0]
    hints = _hints(arr, capacity, kind)

    def enqueue_epoch() -> None:
        # One op enqueues a whole epoch: epochs are contiguous, never mixed (IP2).
        epoch = epochs.next()
        names = arr[epoch_order(n, seed, epoch)] if shuffle else arr
        if hints is not None:
            hints.add(names)  # the names the readers will take next, in order
        q.enqueue_many(names)

    runner = QueueRunner(q, gate_ops([enqueue_epoch], q), cancel_op=cancel_op)
    register_runner(runner)
    return Stage(q, runner, names=None, single=True, epochs=epochs)


def _resumable_producer(
    arr: np.ndarray[Any, Any],
    shape: tuple[Any, ...],
    epochs: _Epochs,
    *,
    shuffle: bool,
    seed: int | None,
    capacity: int,
    shared_name: str | None,
    name: str,
    cancel_op: Callable[[], Any] | None,
    kind: str,
    extra: dict[str, Any] | None,
    shard: dict[str, int] | None,
) -> Stage:
    """A producer whose queue also carries each element's unit code
    (``feedq._resume.producer``), in a resumable pipeline."""
    if shared_name is not None:
        raise ValueError(f"{name}: a resumable pipeline's producer cannot use a shared queue")
    part = ProducerPart(arr, kind, shuffle=shuffle, seed=seed, epochs=epochs,
                        single=kind != "string", fingerprint_extra=extra, shard=shard)
    q = FIFOQueue(capacity, [STRING if arr.dtype == object else arr.dtype, np.int64],
                  shapes=[list(shape), []], name=name)
    pipe = _scope.current_pipeline()
    assert pipe is not None
    state = pipe.resumption.add_producer(part)  # the pipeline's state=..., if any
    if state is not None:
        restore_producer(part, state)  # before the runner can run
    hints = _hints(arr, capacity, kind)
    target: Any = q if hints is None else _Hinting(q, hints)
    runner = QueueRunner(q, gate_ops([part.enqueue_op(target)], q), cancel_op=cancel_op)
    register_runner(runner)
    return Stage(q, runner, names=None, single=True, epochs=epochs, resumption=part)


def _hints(arr: np.ndarray[Any, Any], capacity: int, kind: str) -> storage.Hints | None:
    """Hints for the storage layer, which opens the next remote files ahead
    (``StorageOptions.prefetch_files``), when the strings are URLs of a store
    (the first 16 are looked at). Closed with the pipeline, or when the
    producer is collected."""
    if kind != "string" or arr.dtype != object:
        return None
    if not any(isinstance(x, (str, bytes)) and storage.is_remote(x) for x in arr[:16]):
        return None
    hints = storage.Hints(capacity)
    _scope.register_closeable(hints)
    return hints


class _Hinting:
    """The queue as a resumable producer's op sees it: the names of each
    ``enqueue_many`` are hinted first (column 0; column 1 is unit codes)."""

    def __init__(self, q: FIFOQueue, hints: storage.Hints) -> None:
        self._q = q
        self._hints = hints

    def enqueue_many(self, vals: Any, timeout: float | None = None, *, cancel: Any = None) -> None:
        self._hints.add(vals[0])
        self._q.enqueue_many(vals, timeout, cancel=cancel)


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

    ``string_tensor`` may be the result of :func:`match_filenames_once`.

    Raises:
        ValueError: an empty list ("string_input_producer requires a non-null
            input tensor"), or strings that are not 1-D.
        NotFoundError: a :func:`match_filenames_once` pattern matched nothing.
    """
    if string_tensor is None or (hasattr(string_tensor, "__len__") and len(string_tensor) == 0):
        raise ValueError("string_input_producer requires a non-null input tensor")
    if isinstance(string_tensor, (str, bytes)):
        string_tensor = [string_tensor]
    strings = [s if isinstance(s, (str, bytes)) else str(s) for s in string_tensor]
    arr = _as_array(strings, "string_input_producer")
    if arr.ndim != 1:
        raise ValueError(f"string_input_producer expects a 1-D list of strings, got shape {list(arr.shape)}")
    shard = getattr(string_tensor, "feedq_shard", None)  # from distributed.shard_files
    return _producer(arr, element_shape=None, num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                     capacity=capacity, shared_name=shared_name, name=name or "input_producer",
                     cancel_op=cancel_op, kind="string",
                     shard=None if shard is None else dict(shard))  # saved in the state, for reshard_states


class _MatchedFiles(Sequence[str]):
    """The sorted file names matching glob patterns, listed once, on first
    use (what :func:`match_filenames_once` returns)."""

    def __init__(self, patterns: list[str], name: str | None) -> None:
        self._patterns = patterns
        self.name = name or "matching_filenames"
        self._lock = threading.Lock()
        self._matched: list[str] | None = None  # guarded by self._lock

    @property
    def patterns(self) -> list[str]:
        """The glob patterns."""
        return list(self._patterns)

    def _files(self) -> list[str]:
        with self._lock:
            if self._matched is None:
                found: list[str] = []
                for pattern in self._patterns:
                    if storage.is_remote(pattern):
                        found.extend(storage.glob(pattern))  # a store's listing, paged
                    else:
                        found.extend(glob.glob(storage.local_path(pattern)))
                self._matched = sorted(found)
            matched = self._matched
        if not matched:
            shown = ", ".join(repr(p) for p in self._patterns)
            raise NotFoundError(f"match_filenames_once: no files match {shown}")
        return matched

    def __len__(self) -> int:
        return len(self._files())

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._files()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files())

    def __repr__(self) -> str:
        with self._lock:
            state = "not listed yet" if self._matched is None else f"{len(self._matched)} files"
        return f"match_filenames_once({self._patterns!r}: {state})"


def match_filenames_once(pattern: Any, name: str | None = None) -> Sequence[str]:
    """The files matching ``pattern``, listed once (TF1 ``match_filenames_once``).

    The glob runs on first use (TF1 ran it when local variables were
    initialized, before the pipeline started), and its sorted result is kept:
    files created later are not seen. Pass the result to
    :func:`string_input_producer`.

    Args:
        pattern: a glob pattern (``*``, ``?``, ``[...]``), or a list of them;
            a URL pattern (``s3://bucket/train/*.tfrecord``) lists the store
            (their matches are sorted together).
        name: a name for the result.

    Returns:
        A sequence of file names.

    Raises:
        NotFoundError: on first use, when nothing matches; the message names
            the patterns.
    """
    items = [pattern] if isinstance(pattern, (str, bytes, os.PathLike)) else list(pattern)
    if not items:
        raise ValueError("match_filenames_once needs at least one pattern")
    patterns = [os.fsdecode(p) for p in items]
    return _MatchedFiles(patterns, name)


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
                      cancel_op=None, kind="slice",
                      extra=_arrays_fingerprint(tensors) if _resumable() else None)
    return _SliceStage(index, tensors, names, single=False)


def _resumable() -> bool:
    pipe = _scope.current_pipeline()
    return pipe is not None and pipe.resumable


def _arrays_fingerprint(tensors: list[np.ndarray[Any, Any]]) -> dict[str, Any]:
    """Shapes, dtypes and a cheap checksum (first 16 MiB) of sliced arrays."""
    crcs = []
    for t in tensors:
        if t.dtype == object:
            crcs.append(zlib.crc32(repr(t[:1000].tolist()).encode()))
        else:
            crcs.append(zlib.crc32(np.ascontiguousarray(t).view(np.uint8).reshape(-1)[: 1 << 24].tobytes()))
    return {"shapes": [list(t.shape) for t in tensors], "dtypes": [str(t.dtype) for t in tensors],
            "crc32": crcs}


class _SliceStage(Stage):
    """slice_input_producer: a queue of row indices, gathered from arrays."""

    def __init__(self, index: Stage, tensors: list[np.ndarray[Any, Any]], names: list[str] | None, single: bool) -> None:
        super().__init__(index.queue, index.runner, names=names, single=single, epochs=index._epochs,
                         resumption=index._resumption)
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
