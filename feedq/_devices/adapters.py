"""Framework adapters: a torch ``IterableDataset``, a ``tf.data.Dataset``, CuPy arrays.

Each adapter imports its framework on first call; a missing one raises
:class:`MissingExtraError` naming the pip extra.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from feedq._devices.extras import require
from feedq._devices.feeder import DeviceFeeder, resumable_source
from feedq._devices.source import is_queue
from feedq._devices.spec import DeviceLike, DeviceSpec
from feedq._devices.structure import Structure
from feedq._devices.torch_build import build_dataset, is_build_function
from feedq.errors import FailedPreconditionError, InvalidArgumentError

__all__ = ["as_tf_dataset", "as_torch_dataset", "tf_signature", "to_cupy", "to_torch"]

#: The state of ``as_torch_dataset(source)``: the source's state as of the
#: batches yielded, under a format tag.
_FORMAT = "feedq.torch_source/1"
_FORMAT_KEY = "format"
_SOURCE = "source"


def _feeder_state(feeder: DeviceFeeder) -> dict[str, Any]:
    return {_FORMAT_KEY: _FORMAT, _SOURCE: feeder.state_dict()}


@functools.lru_cache(maxsize=1)
def _torch_dataset_class() -> type:
    torch = require("torch", "feedq.as_torch_dataset")

    class FeedqIterableDataset(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """A torch ``IterableDataset`` whose every ``__iter__`` runs a DeviceFeeder.

        Use with ``DataLoader(ds, batch_size=None)`` (feedq already batches) and
        ``num_workers=0``: the feeder has its own thread, and a feedq queue
        lives in this process, so a worker process would read a copy of it.

        ``state_dict`` / ``load_state_dict`` (the protocol torchdata's
        ``StatefulDataLoader`` calls) save the source's position as of the
        batches yielded (:meth:`DeviceFeeder.state_dict`); the source must
        be a resumable stage, not a queue.
        """

        def __init__(self, source: Any, feeder_kwargs: dict[str, Any]) -> None:
            super().__init__()
            self.source = source
            self.feeder_kwargs = feeder_kwargs
            self.positions = _Positions(source, "as_torch_dataset")

        def __iter__(self) -> Iterator[Any]:
            if torch.utils.data.get_worker_info() is not None:
                raise FailedPreconditionError(
                    "a feedq dataset must be read in the main process: use "
                    "DataLoader(ds, batch_size=None, num_workers=0)")
            feeder = DeviceFeeder(self.source, **self.feeder_kwargs)
            try:
                self.positions.begin(feeder)
                yield from feeder
            finally:
                self.positions.end(feeder)
                feeder.close()

        def state_dict(self) -> dict[str, Any]:
            """The source's position as of the batches yielded (plain data).

            Raises:
                FailedPreconditionError: the source is a queue or another
                    source without ``state_dict(upto=)`` / ``load_state_dict``.
            """
            return self.positions.state_dict()

        def load_state_dict(self, state: dict[str, Any]) -> None:
            """Continue from ``state`` (from :meth:`state_dict`) at the next pass.

            Raises:
                InvalidArgumentError: not a state of this dataset.
                FailedPreconditionError: the source has no positions.
            """
            self.positions.load_state_dict(state)

    FeedqIterableDataset.__module__ = "feedq.devices"
    return FeedqIterableDataset


def as_torch_dataset(source: Any, batch_size: int | None = None, *,
                     device: DeviceLike = "cpu", **feeder_kwargs: Any) -> Any:
    """Wraps a queue or an iterable of batches as a torch ``IterableDataset``.

    Each iteration (each epoch) runs a :class:`DeviceFeeder` with
    ``output="torch"``: host batches become tensors through
    ``torch.from_numpy`` (no copy), GPU batches arrive through pinned memory.
    Iterating a queue again continues where the last epoch stopped; iterating
    an iterable again calls its ``__iter__`` (a generator is exhausted once).

    ``source`` may also be a ``build(worker_index, num_workers)`` function
    (the one :func:`feedq.process_stage` takes): then each DataLoader worker
    builds its own pipeline (``num_workers=0``: one, in this process), each
    DataLoader pass is one epoch, and ``DataLoader(ds, batch_size=None)`` is
    required (see ``feedq._devices.torch_build``); only ``seed=`` and
    ``resumable=`` (build each pipeline in ``feedq.Pipeline(resumable=True)``)
    apply.

    Resumption: the dataset implements ``state_dict()`` /
    ``load_state_dict()``, the protocol torchdata's ``StatefulDataLoader``
    calls (in each DataLoader worker for a build function): the position as
    of the batches yielded. A queue source has none
    (``FailedPreconditionError``); a stage or process stage source does.

    Usage::

        ds = feedq.as_torch_dataset(queue, batch_size=32)
        for x, y in torch.utils.data.DataLoader(ds, batch_size=None):
            ...

    Args:
        source: a feedq queue or an iterable of batches.
        batch_size: rows per batch (queues only).
        device: where the tensors go; ``"cpu"`` by default.
        **feeder_kwargs: more :class:`DeviceFeeder` arguments (``prefetch``,
            ``allow_smaller_final_batch``, ``replicas``, ``mode``...).

    Raises:
        MissingExtraError: torch is not installed.
    """
    if is_build_function(source):
        return _build_dataset(source, batch_size, device, feeder_kwargs)
    kwargs = dict(feeder_kwargs, batch_size=batch_size, output="torch")
    if "replicas" not in kwargs:
        kwargs["device"] = device
    return _torch_dataset_class()(source, kwargs)


def _build_dataset(build: Any, batch_size: int | None, device: DeviceLike,
                   options: dict[str, Any]) -> Any:
    """``as_torch_dataset(build)``: see :mod:`feedq._devices.torch_build`."""
    if batch_size is not None:
        raise InvalidArgumentError(
            f"as_torch_dataset(build, batch_size={batch_size}): build() makes the batches; set "
            "the batch size in its pipeline and iterate with DataLoader(dataset, batch_size=None)")
    extra = sorted(set(options) - {"seed", "resumable"})
    if extra or DeviceSpec.parse(device).device_type not in (None, "CPU"):
        got = ", ".join(extra) or f"device={device!r}"
        raise TypeError(
            f"as_torch_dataset(build) takes only seed= and resumable= (got {got}): "
            "it yields CPU tensors; move them with pin_memory=True and .to(device) in the loop")
    return build_dataset(build, seed=options.get("seed"),
                         resumable=bool(options.get("resumable", False)))


def tf_signature(queue: Any, batch_size: int | None = None) -> Any:
    """The output structure of a queue's batches as ``(dtype, shape)`` pairs.

    The leading dimension is ``batch_size`` (``None`` for "any", as with
    ``allow_smaller_final_batch``). Strings are ``np.dtype(object)``.
    The structure is the queue's: one pair, a tuple of pairs, or a dict.
    """
    structure = Structure.of_queue(queue)
    pairs = [(np.dtype(dt), (batch_size, *shape))
             for dt, shape in zip(queue.dtypes, queue.shapes)]
    if structure.kind == "list":
        return tuple(pairs)
    return structure.pack(pairs)


def as_tf_dataset(source: Any, batch_size: int | None = None, *,
                  output_signature: Any = None, resumable: bool = False,
                  **feeder_kwargs: Any) -> Any:
    """A ``tf.data.Dataset`` of the source's batches (NumPy through a host feeder).

    For a queue the output signature comes from its dtypes and shapes (the
    batch dimension is ``None`` with ``allow_smaller_final_batch``); for a
    process stage from its first batch (``peek``: the batch dimension
    ``None``); for another iterable pass ``output_signature`` as
    ``tf.data.Dataset.from_generator`` expects it. TensorFlow copies each
    batch into its own tensors. Each pass over the dataset iterates the
    source again: one epoch of a process stage, so Keras ``fit(epochs=N)``
    needs no ``steps_per_epoch`` on a stage made with ``epochs=N``.

    Resumption: a ``tf.train.Checkpoint`` of the iterator cannot save the
    generator's Python state, so the returned dataset carries
    ``dataset.state_dict()`` / ``dataset.load_state_dict(state)`` (a resumable
    source: a stage or process stage, not a queue): the source's position as
    of the batches TensorFlow took; load before the next pass. With
    ``resumable=True`` tf.data's injected prefetch is turned off
    (``inject_prefetch=False``), so TensorFlow takes a batch only when its
    consumer asks for one and the state is exact; without it
    ``state_dict`` refuses (batches prefetched by tf.data would count as
    delivered). Transformations that buffer (``.prefetch``, ``.shuffle``,
    ``.batch``) after the dataset hold batches that count as delivered: save
    where the state is taken from the dataset itself.

    Raises:
        MissingExtraError: TensorFlow is not installed.
        ValueError: an iterable source without ``output_signature``.
    """
    tf = require("tensorflow", "feedq.as_tf_dataset")
    queue = is_queue(source)
    if output_signature is None and not queue and callable(getattr(source, "peek", None)):
        output_signature = _signature_of_batch(tf, source.peek())  # a process stage
    if output_signature is None:
        if not queue:
            raise ValueError("an iterable source needs output_signature=")
        rows = None if feeder_kwargs.get("allow_smaller_final_batch") else batch_size
        sig = tf_signature(source, rows)

        def spec(pair: tuple[np.dtype[Any], tuple[int | None, ...]]) -> Any:
            dtype = tf.string if pair[0].kind == "O" else tf.as_dtype(pair[0])
            return tf.TensorSpec(shape=pair[1], dtype=dtype)

        if isinstance(sig, Mapping):
            output_signature = {k: spec(v) for k, v in sig.items()}
        elif isinstance(sig, tuple) and sig and isinstance(sig[0], tuple):
            output_signature = tuple(spec(p) for p in sig)
        else:
            output_signature = spec(sig)

    positions = _Positions(source, "as_tf_dataset", None if resumable else (
        "as_tf_dataset(...) reads ahead (tf.data injects a prefetch), so its state would count "
        "prefetched batches as delivered: make it with as_tf_dataset(..., resumable=True)"))

    def generate() -> Iterator[Any]:
        feeder = DeviceFeeder(source, batch_size, device="cpu", output="numpy",
                              **feeder_kwargs)
        try:
            positions.begin(feeder)
            for batch in feeder:
                yield tuple(batch) if isinstance(batch, list) else batch
        finally:
            positions.end(feeder)
            feeder.close()

    dataset = tf.data.Dataset.from_generator(generate, output_signature=output_signature)
    if resumable:
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        dataset = dataset.with_options(options)
    # Python state a tf.data checkpoint cannot hold: offered beside it.
    dataset.state_dict = positions.state_dict
    dataset.load_state_dict = positions.load_state_dict
    return dataset


class _Positions:
    """The source position of an adapter's passes: the feeder being read,
    the state when the last pass ended, a state loaded for the next pass.

    ``as_torch_dataset(source)`` and ``as_tf_dataset`` keep one; its
    ``state_dict`` is the source's state as of the batches the feeder handed
    out (see :meth:`DeviceFeeder.state_dict`), under a format tag.
    """

    def __init__(self, source: Any, name: str, refusal: str | None = None) -> None:
        self.source = source
        self.name = name
        self.refusal = refusal  # why state_dict cannot be exact here, if it cannot
        self.lock = threading.Lock()
        self.feeder: DeviceFeeder | None = None  # guarded by self.lock
        self.last: dict[str, Any] | None = None  # guarded by self.lock
        self.pending: dict[str, Any] | None = None  # guarded by self.lock

    def begin(self, feeder: DeviceFeeder) -> None:
        """A pass starts reading ``feeder`` (restored first when a state is pending)."""
        with self.lock:
            pending, self.pending = self.pending, None
        if pending is not None:
            feeder.load_state_dict(pending[_SOURCE])
        with self.lock:
            self.feeder, self.last = feeder, None

    def end(self, feeder: DeviceFeeder) -> None:
        """The pass reading ``feeder`` ended (before the feeder closes)."""
        with self.lock:
            if self.feeder is not feeder:
                return
            self.feeder = None
        with contextlib.suppress(Exception):  # a source without positions
            state = _feeder_state(feeder)
            with self.lock:
                self.last = state

    def state_dict(self) -> dict[str, Any]:
        """The source's position as of the batches handed out (plain data).

        Raises:
            FailedPreconditionError: the source is a queue or another
                source without ``taken`` / ``state_dict(upto=)`` /
                ``load_state_dict``; an adapter that reads ahead.
        """
        if self.refusal is not None:
            raise FailedPreconditionError(self.refusal)
        with self.lock:
            pending, feeder, last = self.pending, self.feeder, self.last
        if pending is not None:
            return dict(pending)
        if feeder is not None:
            return _feeder_state(feeder)
        if last is not None:
            return dict(last)
        source = resumable_source(self.source, self.name)
        return {_FORMAT_KEY: _FORMAT, _SOURCE: dict(source.state_dict())}  # not read yet

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict`) at the next pass.

        Raises:
            InvalidArgumentError: not a state of this adapter.
            FailedPreconditionError: the source has no positions.
        """
        if not isinstance(state, dict) or state.get(_FORMAT_KEY) != _FORMAT:
            got = state.get(_FORMAT_KEY) if isinstance(state, dict) else type(state).__name__
            raise InvalidArgumentError(
                f"not a state of {self.name}(source) (format {got!r}, expected {_FORMAT!r})")
        resumable_source(self.source, self.name)
        with self.lock:
            self.pending = dict(state)


def _signature_of_batch(tf: Any, batch: Any) -> Any:
    """TensorSpecs of a batch's structure, the batch dimension left open."""
    def spec(x: Any) -> Any:
        x = np.asarray(x)
        dtype = tf.string if x.dtype.kind in "OSU" else tf.as_dtype(x.dtype)
        return tf.TensorSpec(shape=(None, *x.shape[1:]) if x.ndim else (), dtype=dtype)

    if isinstance(batch, Mapping):
        return {k: spec(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return tuple(spec(v) for v in batch)
    return spec(batch)


def to_cupy(batch: Any, device: DeviceLike = None) -> Any:
    """Turns a batch's arrays into CuPy arrays, without a copy where possible.

    CUDA torch tensors (and anything with ``__dlpack__`` on a GPU) go through
    DLPack, no copy; NumPy arrays are copied to ``device`` (default: CuPy's
    current device). The structure (array, list, tuple, dict) is kept; string
    arrays stay NumPy.

    Raises:
        MissingExtraError: CuPy is not installed.
    """
    cupy = require("cupy", "feedq.to_cupy")
    spec = DeviceSpec.parse(device)
    if spec.device_type not in (None, "GPU"):
        raise ValueError(f"CuPy arrays live on a GPU, not {spec}")

    def convert(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            if x.dtype.kind == "O":
                return x
            if spec.device_index is None:
                return cupy.asarray(x)
            with cupy.cuda.Device(spec.device_index):
                return cupy.asarray(x)
        return cupy.from_dlpack(x)

    if isinstance(batch, Mapping):
        return {k: convert(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(convert(v) for v in batch)
    return convert(batch)


def to_torch(batch: Any) -> Any:
    """Turns a batch's NumPy arrays into CPU torch tensors without a copy.

    ``torch.from_numpy`` shares memory with the array (a dequeued batch is
    owned by the caller, so this is safe). The structure (array, list, tuple,
    dict) is kept; string (object) arrays and scalars stay as they are.
    Read-only arrays are copied, since torch tensors are always writable.

    Raises:
        MissingExtraError: torch is not installed.
    """
    torch = require("torch", "feedq.to_torch")

    def convert(x: Any) -> Any:
        if isinstance(x, np.ndarray) and x.dtype.kind != "O":
            return torch.from_numpy(x if x.flags.writeable else x.copy())
        return x

    if isinstance(batch, Mapping):
        return {k: convert(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(convert(v) for v in batch)
    return convert(batch)
