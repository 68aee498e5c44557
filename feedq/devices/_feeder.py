"""DeviceFeeder: batches from a queue or an iterable, delivered on devices.

The feeder thread dequeues each batch straight into a staging slot
(``queue.dequeue_many(n, out=slot)``: the only host copy, from the queue's ring
into pinned memory), issues asynchronous copies of it to every target device,
records events, and hands the batch to the consumer through a channel that
holds at most ``prefetch`` batches. A slot is refilled only after its copy
events have completed, so recycling never races a copy.

An iterable's batches and a padding queue's (whose shapes change from batch
to batch) are copied into the slot instead: the one host copy there too.
On a host-only placement nothing is staged: the batch the queue (or the
iterable) produced is the batch the consumer gets.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from feedq._defaults import resolve_timeout
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)

from ._engines import CudaEngine, HostEngine, Slot
from ._extras import require
from ._placement import (
    _DEVICE_KINDS,
    DeviceConfig,
    Placement,
    PlacementRequest,
    current_device,
    get_device_config,
    place,
)
from ._spec import DeviceLike, DeviceSpec

__all__ = ["DeviceFeeder", "FeederStatistics", "ReplicaMode"]

logger = logging.getLogger("feedq.devices")

ReplicaMode = Literal["split", "round_robin", "broadcast"]
_MODES = ("split", "round_robin", "broadcast")
_OUTPUTS = ("numpy", "torch", "cupy")

# How long the feeder thread blocks in one dequeue before it looks at its stop
# flag again: close() is never slower than this.
_POLL_S = 0.05
_JOIN_S = 5.0

_ids = itertools.count(1)


# ---------------------------------------------------------------------------
# Batch structure: bare array, list/tuple of arrays, or dict of arrays.


@dataclasses.dataclass(frozen=True)
class _Structure:
    kind: Literal["bare", "list", "tuple", "dict"]
    keys: tuple[Any, ...]

    @classmethod
    def of(cls, batch: Any) -> _Structure:
        """The structure of an iterable's (first) batch."""
        if isinstance(batch, Mapping):
            return cls("dict", tuple(batch.keys()))
        if isinstance(batch, (list, tuple)):
            return cls("tuple" if isinstance(batch, tuple) else "list", tuple(range(len(batch))))
        return cls("bare", (0,))

    @classmethod
    def of_queue(cls, queue: Any) -> _Structure:
        """The structure a queue's dequeue_many returns (Q4)."""
        names = getattr(queue, "names", None)
        if names:
            return cls("dict", tuple(names))
        count = len(queue.dtypes)
        return cls("bare", (0,)) if count == 1 else cls("list", tuple(range(count)))

    def flatten(self, batch: Any, where: str) -> list[np.ndarray[Any, Any]]:
        """The batch's components as arrays, checked against this structure.

        Raises:
            InvalidArgumentError: another structure, or unequal leading dimensions.
        """
        if self.kind == "bare":
            if isinstance(batch, (Mapping, list, tuple)):
                raise InvalidArgumentError(f"{where}: expected one array like the first batch, "
                                           f"got a {type(batch).__name__}")
            comps = [batch]
        elif self.kind == "dict":
            if not isinstance(batch, Mapping) or tuple(batch.keys()) != self.keys:
                got = list(batch.keys()) if isinstance(batch, Mapping) else type(batch).__name__
                raise InvalidArgumentError(
                    f"{where}: expected a dict with keys {list(self.keys)}, got {got}")
            comps = [batch[k] for k in self.keys]
        else:
            if (isinstance(batch, Mapping) or not isinstance(batch, (list, tuple))
                    or len(batch) != len(self.keys)):
                raise InvalidArgumentError(
                    f"{where}: expected a {self.kind} of {len(self.keys)} arrays like the first "
                    f"batch, got {type(batch).__name__}")
            comps = list(batch)
        arrays = [c if isinstance(c, np.ndarray) else np.asarray(c) for c in comps]
        rows = {a.shape[0] if a.ndim else None for a in arrays}
        if None in rows or len(rows) != 1:
            raise InvalidArgumentError(
                f"{where}: every component needs the same leading (batch) dimension, got shapes "
                f"{[list(a.shape) for a in arrays]}")
        return arrays

    def pack(self, comps: Sequence[Any]) -> Any:
        """Components back into this structure."""
        if self.kind == "bare":
            return comps[0]
        if self.kind == "dict":
            return dict(zip(self.keys, comps))
        return tuple(comps) if self.kind == "tuple" else list(comps)


def _split_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    # np.array_split's sizes: the first rows % parts shards get one extra row.
    q, r = divmod(rows, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + q + (1 if i < r else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# ---------------------------------------------------------------------------
# Statistics and state


class _State(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    #: the source ended or failed; what is buffered can still be read
    FINISHED = "finished"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True)
class FeederStatistics:
    """A snapshot of a :class:`DeviceFeeder`.

    Attributes:
        state: ``"created"``, ``"running"``, ``"finished"`` or ``"closed"``.
        staged: True when batches go through staging slots and a copy engine.
        prefetch: most batches buffered for the consumer.
        buffered: batches buffered now (copied or being copied).
        slots: staging slots (0 when not staged).
        batches_read: batches taken from the source.
        batches_delivered: items returned to the consumer.
        rows_delivered: rows returned, counted once per row of the source
            (a broadcast row reaching N replicas counts once).
        slot_waits: times the feeder thread had to wait for a slot's copies.
        waiting_for_slot: True while the feeder thread waits for a slot.
        waiting_for_room: True while the feeder thread waits for the consumer.
        waiting_consumers: consumers blocked in :meth:`DeviceFeeder.get`.
    """

    state: str
    staged: bool
    prefetch: int
    buffered: int
    slots: int
    batches_read: int
    batches_delivered: int
    rows_delivered: int
    slot_waits: int
    waiting_for_slot: bool
    waiting_for_room: bool
    waiting_consumers: int


@dataclasses.dataclass
class _Item:
    deliveries: list[tuple[int, list[Any]]]  # (replica, per-component arrays)
    events: list[Any]
    rows: int


_END = object()


class DeviceFeeder:
    """Feeds batches from a queue or an iterable to one device or to model replicas.

    The source is a feedq queue (with ``batch_size``: each batch is one
    ``dequeue_many``, or ``dequeue_up_to`` with ``allow_smaller_final_batch``)
    or any iterable of batches (an ndarray, a list/tuple of ndarrays or a dict
    of ndarrays, all with the same leading dimension). Batches come out in
    source order with the source's structure.

    Where they go:

    * ``device=``: one device (a TF or PyTorch name, ``None`` = the enclosing
      ``feedq.device(...)`` contexts), or a per-component map for a
      model-parallel model, ``{"image": "cuda:0", "label": "cuda:3"}`` (keys
      are component names, or indices for list batches). Each item is a batch.
    * ``replicas=[dev0, dev1, ...]`` (each a device or a map) and ``mode``:

      - ``"split"``: each batch is split along axis 0 across the replicas
        (``np.array_split`` sizes; in-graph data parallelism). Each item is a
        list with one shard per replica.
      - ``"round_robin"``: whole batches go to each replica in turn
        (between-graph style). Each item is ``(replica_index, batch)``.
      - ``"broadcast"``: every replica gets the whole batch (one model per
        device). Each item is a list with one copy per replica; on the host
        the replicas share the same arrays.

    Targets are placed when the feeder is created, in the creating thread's
    device contexts (see :func:`feedq.device`), under the installed
    :class:`DeviceConfig` (soft placement, placement log, memory fraction).
    A string component placed on a GPU is placed again alone: soft placement
    sends it to the host, else ``InvalidArgumentError``.

    On a GPU, each batch is dequeued straight into a pinned staging slot,
    copied asynchronously on a side stream per device, and the slot is
    recycled only when its copy events have completed; ``prefetch`` batches
    are in flight. The consumer's current stream waits on the copy events, so
    tensors are safe to use on it without a host sync. On the host nothing is
    copied: queue batches are the arrays ``dequeue_many`` returns, iterable
    batches are passed through; ``staging=True`` forces the staged path there
    (a copy thread stands in for the side stream), which is how its
    recycling is tested without CUDA.

    ``output`` picks the array type: ``"numpy"`` (host only), ``"torch"``
    (``torch.from_numpy`` on the host, no copy) or ``"cupy"`` (GPU tensors
    through DLPack, no copy). ``None`` means NumPy when every target is the
    host and torch otherwise. String components stay NumPy object arrays.

    Usage::

        with DeviceFeeder(queue, batch_size=64, replicas=["cuda:0", "cuda:1"],
                          mode="split", output="torch") as feeder:
            for shard0, shard1 in feeder:
                ...

    One consumer thread at a time. Errors from the source reach the consumer
    after the batches read before them. End of data ends iteration
    (:meth:`get` raises ``OutOfRangeError``).
    """

    def __init__(
        self,
        source: Any,
        batch_size: int | None = None,
        *,
        device: DeviceLike | Mapping[Any, DeviceLike] = None,
        replicas: Sequence[DeviceLike | Mapping[Any, DeviceLike]] | None = None,
        mode: ReplicaMode = "split",
        prefetch: int = 2,
        output: Literal["numpy", "torch", "cupy"] | None = None,
        allow_smaller_final_batch: bool = False,
        staging: bool | None = None,
        config: DeviceConfig | None = None,
        name: str | None = None,
    ) -> None:
        """Creates the feeder and places its targets; the thread starts on first use.

        Args:
            source: a feedq queue or an iterable of batches.
            batch_size: rows per ``dequeue_many`` (queues only; required there).
            device: the one target device, or a per-component device map.
            replicas: several targets, each a device or a map (excludes ``device``).
            mode: how batches reach replicas: ``"split"``, ``"round_robin"``,
                ``"broadcast"``.
            prefetch: most batches buffered ahead of the consumer (>= 1).
            output: ``"numpy"``, ``"torch"``, ``"cupy"`` or ``None`` (see above).
            allow_smaller_final_batch: use ``dequeue_up_to`` so the last batch
                of a closed queue may be short.
            staging: force (True) or forbid (False) staging slots; ``None``
                stages exactly when a target is a GPU.
            config: placement options; defaults to the installed config.
            name: for the thread name, placement log and errors.

        Raises:
            InvalidArgumentError: a target cannot be placed (no soft placement),
                a device map names no component, queue shapes are not defined.
            ValueError: a bad argument value.
            MissingExtraError: ``output`` needs torch or CuPy and it is missing.
        """
        self.name = name or f"feeder_{next(_ids)}"
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be an int >= 1, got {prefetch!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if output is not None and output not in _OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(_OUTPUTS)} or None, got {output!r}")
        if replicas is not None and device is not None:
            raise ValueError("give either device= or replicas=, not both")
        if replicas is not None and (isinstance(replicas, (str, Mapping)) or not replicas):
            raise ValueError("replicas must be a non-empty sequence of devices or device maps")
        self._mode: ReplicaMode | None = None if replicas is None else mode
        self._targets = [device] if replicas is None else list(replicas)
        self._prefetch = prefetch
        self._config = get_device_config() if config is None else config
        self._staging = staging

        self._is_queue = hasattr(source, "dequeue_many") and hasattr(source, "dtypes")
        self._dense = True
        if self._is_queue:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ValueError(f"a queue source needs batch_size >= 1, got {batch_size!r}")
            shapes = source.shapes
            if any(s is None for s in shapes):
                raise InvalidArgumentError(
                    f"{self.name}: the queue's components need shapes to be dequeued in "
                    f"batches (Q6), got {shapes}")
            # A padding queue's batches change shape: they cannot be dequeued into
            # fixed slots, so they are staged like an iterable's (one more copy).
            self._dense = all(d is not None for s in shapes for d in s)
            self._queue: Any = source
            self._iter: Iterator[Any] | None = None
        else:
            if batch_size is not None:
                raise ValueError("batch_size is for queue sources; an iterable yields batches")
            if not isinstance(source, Iterable):
                raise TypeError(f"source must be a feedq queue or an iterable of batches, "
                                f"got {type(source).__name__}")
            self._queue = None
            self._iter = iter(source)
        self._batch_size = batch_size
        self._up_to = allow_smaller_final_batch

        # Contexts are thread-local: read them here, in the creating thread.
        self._requested: list[dict[Any, DeviceSpec]] = []
        for r, target in enumerate(self._targets):
            entries = target.items() if isinstance(target, Mapping) else [(None, target)]
            specs = {}
            for key, dev in entries:
                request = PlacementRequest(self._target_name(r, key), "DeviceFeeder",
                                           device=DeviceSpec.parse(dev).to_string())
                specs[key] = current_device(request)
            self._requested.append(specs)
        self._output_arg = output
        self._output: str = "numpy"
        self._staged = False
        self._structure: _Structure | None = None
        self._placements: list[list[Placement]] = []
        self._engine: Any = None
        self._slots: list[Slot] = []
        self._gpus: list[int] = []
        if self._is_queue:
            structure = _Structure.of_queue(source)
            dtypes = [np.dtype(dt) for dt in source.dtypes]
            self._place_targets(structure, dtypes)
            self._setup(structure, dtypes)
        else:
            self._place_targets(None, [])

        self._mutex = threading.Lock()
        # not_empty: notified by the feeder thread on put and at finish, by close()
        self._not_empty = threading.Condition(self._mutex)
        # not_full: notified by get() when it takes an item, by close()
        self._not_full = threading.Condition(self._mutex)
        # batches (_Item), then possibly _END or the source's exception
        self._items: deque[Any] = deque()  # guarded by self._mutex
        self._buffered = 0  # _Items in self._items; guarded by self._mutex
        self._state = _State.CREATED  # guarded by self._mutex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._batches_read = 0  # written by the feeder thread only
        self._slot_waits = 0  # written by the feeder thread only
        self._waiting_for_slot = False
        self._waiting_for_room = False  # guarded by self._mutex
        self._waiting_consumers = 0  # guarded by self._mutex
        self._delivered = 0  # guarded by self._mutex
        self._rows = 0  # guarded by self._mutex
        self._consumer_lock = threading.Lock()

    # -- placement ---------------------------------------------------------

    def _target_name(self, replica: int, key: Any) -> str:
        name = self.name if self._mode is None else f"{self.name}/replica_{replica}"
        return name if key is None else f"{name}/{key}"

    def _place_targets(self, structure: _Structure | None,
                       dtypes: list[np.dtype[Any]]) -> None:
        """Places each replica's device (or each entry of its map) and decides
        how batches travel: staged or not, through which engine, as what output."""
        self._target_placements: list[dict[Any, Placement]] = []
        for r, specs in enumerate(self._requested):
            row = {}
            for key, spec in specs.items():
                held = [dt for k, dt in zip(structure.keys, dtypes)
                        if key is None or k == key] if structure is not None else []
                # Strings never go to a GPU: they are placed alone in _setup.
                fits = tuple(dt for dt in held if dt.kind in _DEVICE_KINDS) or tuple(held[:1])
                request = PlacementRequest(self._target_name(r, key), "DeviceFeeder", fits)
                row[key] = place(request, self._config, requested=spec)
            self._target_placements.append(row)
        gpus = sorted({int(p.torch_device.split(":")[1])
                       for row in self._target_placements for p in row.values() if p.is_gpu})
        if self._staging is False and gpus:
            raise InvalidArgumentError(f"{self.name}: staging=False but targets are on "
                                       f"{', '.join(f'cuda:{i}' for i in gpus)}")
        output = self._output_arg
        if output is None:
            output = "torch" if gpus else "numpy"
        if output == "numpy" and gpus:
            raise InvalidArgumentError(f"{self.name}: output='numpy' cannot hold batches on "
                                       f"a GPU; use output='torch' or 'cupy'")
        if output == "torch":
            self._torch = require("torch", "DeviceFeeder(output='torch')")
        elif output == "cupy":
            self._cupy = require("cupy", "DeviceFeeder(output='cupy')")
        self._output = output
        self._gpus = gpus
        self._staged = bool(gpus) or bool(self._staging)

    def _setup(self, structure: _Structure, dtypes: list[np.dtype[Any]]) -> None:
        """Places every (replica, component) once the batch structure is known."""
        placements = []
        for r, specs in enumerate(self._requested):
            if None not in specs:
                unknown = set(specs) - set(structure.keys)
                missing = set(structure.keys) - set(specs)
                if structure.kind == "bare" or unknown or missing:
                    raise InvalidArgumentError(
                        f"{self.name}: the device map of replica {r} has keys "
                        f"{sorted(map(str, specs))} but the batch components are "
                        f"{[str(k) for k in structure.keys]}")
            row = []
            for key, dtype in zip(structure.keys, dtypes):
                spec_key = None if None in specs else key
                placement = self._target_placements[r][spec_key]
                if placement.is_gpu and dtype.kind not in _DEVICE_KINDS:
                    # Only this component cannot live there: place it alone.
                    request = PlacementRequest(self._target_name(r, key), "DeviceFeeder",
                                               (dtype,))
                    placement = place(request, self._config, requested=specs[spec_key])
                row.append(placement)
            placements.append(row)
        self._placements = placements
        if self._staged:
            self._slots = [Slot(len(structure.keys)) for _ in range(self._prefetch + 1)]
        self._structure = structure

    @property
    def placements(self) -> list[list[Placement]]:
        """Per replica, per component, where batches go.

        Empty until an iterable source has produced its first batch (its
        components are not known before).
        """
        return [list(row) for row in self._placements]

    # -- life cycle --------------------------------------------------------

    def start(self) -> DeviceFeeder:
        """Starts the feeder thread (idempotent); returns ``self``.

        Raises:
            CancelledError: the feeder was closed.
        """
        with self._mutex:
            if self._state is _State.CLOSED:
                raise CancelledError(f"{self.name}: feeder is closed")
            if self._state is not _State.CREATED:
                return self
            self._state = _State.RUNNING
            self._thread = threading.Thread(target=self._run, name=f"feedq-feeder-{self.name}",
                                            daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = _JOIN_S) -> None:
        """Stops the feeder thread, drops buffered batches, joins the threads.

        Does not close the source queue. Idempotent. A thread still alive after
        ``timeout`` seconds (blocked inside a user iterable) is logged and left
        as a daemon.
        """
        with self._mutex:
            self._state = _State.CLOSED
            self._items.clear()
            self._buffered = 0
            self._stop.set()
            self._not_empty.notify_all()
            self._not_full.notify_all()
        deadline = time.monotonic() + timeout
        alive = []
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                alive.append(self._thread.name)
        if self._engine is not None and not self._engine.close(
                max(0.0, deadline - time.monotonic())):
            alive.append(f"{self.name} copy thread")
        if alive:
            logger.warning("%s: thread(s) %s did not stop within %.1fs", self.name,
                           ", ".join(alive), timeout)

    def __enter__(self) -> DeviceFeeder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def statistics(self) -> FeederStatistics:
        """A snapshot (see :class:`FeederStatistics`)."""
        with self._mutex:
            return FeederStatistics(
                state=self._state.value, staged=self._staged, prefetch=self._prefetch,
                buffered=self._buffered,
                slots=len(self._slots), batches_read=self._batches_read,
                batches_delivered=self._delivered, rows_delivered=self._rows,
                slot_waits=self._slot_waits, waiting_for_slot=self._waiting_for_slot,
                waiting_for_room=self._waiting_for_room,
                waiting_consumers=self._waiting_consumers)

    # -- consumer side -----------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return self.get()
        except OutOfRangeError:
            raise StopIteration from None

    def get(self, timeout: float | None = None) -> Any:
        """The next item (see the class docstring for its form per mode).

        Args:
            timeout: seconds to wait; ``None`` = the process default
                (``feedq.set_default_timeout``), ``0`` = do not wait,
                ``math.inf`` = forever.

        Raises:
            OutOfRangeError: the source is exhausted.
            DeadlineExceededError: nothing arrived within ``timeout``; nothing is lost.
            CancelledError: the feeder was closed.
            Exception: whatever the source raised, after the batches before it.
        """
        wait = resolve_timeout(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        self.start()
        with self._consumer_lock:
            with self._mutex:
                self._waiting_consumers += 1
                try:
                    while not self._items and self._state is not _State.CLOSED:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise DeadlineExceededError(
                                f"{self.name}: no batch within {wait:g}s")
                        self._not_empty.wait(remaining)
                finally:
                    self._waiting_consumers -= 1
                if self._state is _State.CLOSED:
                    raise CancelledError(f"{self.name}: feeder is closed")
                item = self._items[0]
                if item is _END:
                    raise OutOfRangeError(f"{self.name}: end of data")
                if isinstance(item, BaseException):
                    raise item
                self._items.popleft()
                self._buffered -= 1
                self._delivered += 1
                self._rows += item.rows
                if self._buffered <= self._prefetch // 2:
                    # Wake the feeder thread at half empty, not after every batch: it
                    # refills in a burst, with fewer thread switches per batch.
                    self._not_full.notify()
            if self._engine is not None:
                # Never times out: the copies were issued and always complete, and
                # the item has left the buffer (a timeout here would lose it).
                outputs = [a for _, comps in item.deliveries for a in comps]
                self._engine.hand_over(item.events, outputs)
            return self._assemble(item)

    def _convert(self, array: Any) -> Any:
        if isinstance(array, np.ndarray):
            if self._output == "torch" and array.dtype.kind in _DEVICE_KINDS:
                return self._torch.from_numpy(array)
            return array
        if self._output == "cupy":
            return self._cupy.from_dlpack(array)
        return array

    def _assemble(self, item: _Item) -> Any:
        structure = self._structure
        if structure is None:
            raise RuntimeError("item before structure")
        batches = [(r, structure.pack([self._convert(a) for a in comps]))
                   for r, comps in item.deliveries]
        if self._mode is None:
            return batches[0][1]
        if self._mode == "round_robin":
            return batches[0]
        return [b for _, b in batches]

    # -- feeder thread -----------------------------------------------------

    def _put(self, item: Any) -> bool:
        """Hands an item to the consumer; False when closed meanwhile."""
        with self._mutex:
            self._waiting_for_room = True
            try:
                while self._buffered >= self._prefetch and not self._stop.is_set():
                    self._not_full.wait()
            finally:
                self._waiting_for_room = False
            if self._stop.is_set():
                return False
            self._items.append(item)
            if isinstance(item, _Item):
                self._buffered += 1
            if not isinstance(item, _Item) and self._state is _State.RUNNING:
                self._state = _State.FINISHED
            self._not_empty.notify()
            return True

    def _read(self, slot: Slot | None) -> list[np.ndarray[Any, Any]] | None:
        """The next batch's components, in ``slot`` when given; None at the end."""
        structure = self._structure
        if self._queue is not None and structure is not None:
            into = slot if self._dense else None
            out = None if into is None else structure.pack(self._queue_slot_buffers(into))
            op = self._queue.dequeue_up_to if self._up_to else self._queue.dequeue_many
            while not self._stop.is_set():
                try:
                    batch = op(self._batch_size, timeout=_POLL_S, out=out)
                except DeadlineExceededError:
                    continue  # nothing lost: the queue puts a partial batch back
                except OutOfRangeError:
                    return None
                arrays = structure.flatten(batch, self.name)
                return arrays if slot is None or into is not None else self._stage(arrays, slot)
            return None
        if self._iter is None:
            raise RuntimeError("feeder has neither a queue nor an iterator")
        try:
            batch = next(self._iter)
        except StopIteration:
            return None
        where = f"{self.name}: batch {self._batches_read}"
        if structure is None:
            structure = _Structure.of(batch)
            arrays = structure.flatten(batch, where)
            self._setup(structure, [a.dtype for a in arrays])
            if self._slots:
                slot = self._slots[0]  # the slots were made just now
        else:
            arrays = structure.flatten(batch, where)
        return arrays if slot is None else self._stage(arrays, slot)

    def _stage(self, arrays: list[np.ndarray[Any, Any]], slot: Slot) -> list[np.ndarray[Any, Any]]:
        """Copies an iterable's batch into ``slot`` (it is not in staging memory yet)."""
        views = []
        for c, array in enumerate(arrays):
            host = slot.host[c]
            if (host is None or host.dtype != array.dtype or host.shape[1:] != array.shape[1:]
                    or host.shape[0] < array.shape[0]):
                host, slot.pinned[c] = self._engine.alloc(array.shape, array.dtype)
                slot.host[c] = host
            view = host[: array.shape[0]]
            np.copyto(view, array)
            views.append(view)
        return views

    def _queue_slot_buffers(self, slot: Slot) -> list[np.ndarray[Any, Any]]:
        buffers = []
        for c, (dtype, shape) in enumerate(zip(self._queue.dtypes, self._queue.shapes)):
            host = slot.host[c]
            if host is None:
                host, slot.pinned[c] = self._engine.alloc((self._batch_size, *shape),
                                                          np.dtype(dtype))
                slot.host[c] = host
            buffers.append(host)
        return buffers

    def _deliver(self, comps: list[np.ndarray[Any, Any]], slot: Slot | None,
                 index: int) -> _Item:
        rows = int(comps[0].shape[0])
        n = len(self._placements)
        if self._mode is None:
            plan = [(0, 0, rows)]
        elif self._mode == "split":
            plan = [(r, a, b) for r, (a, b) in enumerate(_split_bounds(rows, n))]
        elif self._mode == "broadcast":
            plan = [(r, 0, rows) for r in range(n)]
        else:
            plan = [(index % n, 0, rows)]
        host_engine = isinstance(self._engine, HostEngine)
        deliveries = []
        for r, a, b in plan:
            out = []
            for c, comp in enumerate(comps):
                if slot is None:
                    out.append(comp if (a, b) == (0, rows) else comp[a:b])
                elif self._placements[r][c].is_gpu or host_engine:
                    out.append(self._engine.copy(slot, c, a, b,
                                                 self._placements[r][c].torch_device))
                else:
                    # A host component of a CUDA-staged feeder: the slot will be reused.
                    out.append(comp[a:b].copy())
            deliveries.append((r, out))
        events: list[Any] = []
        if slot is not None:
            events = slot.events = self._engine.record()
        return _Item(deliveries, events, rows)

    def _run(self) -> None:
        try:
            if self._staged:
                self._engine = (CudaEngine(self.name, self._gpus) if self._gpus
                                else HostEngine(f"feedq-feeder-{self.name}"))
                self._engine.thread_init()
            index = 0
            while not self._stop.is_set():
                slot = self._slots[index % len(self._slots)] if self._slots else None
                if slot is not None and slot.events:
                    # Refill only once the copies out of this slot are done.
                    self._waiting_for_slot = True
                    if not self._engine.done(slot.events):
                        self._slot_waits += 1
                    self._engine.wait(slot.events, None)
                    self._waiting_for_slot = False
                    slot.events = []
                comps = self._read(slot)
                if comps is None:
                    if not self._stop.is_set():
                        self._put(_END)
                    return
                if slot is None and self._slots:
                    slot = self._slots[0]  # an iterable's first batch was staged in _read
                item = self._deliver(comps, slot, index)
                self._batches_read += 1
                index += 1
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - every error must reach the consumer
            self._put(exc)
        finally:
            # No more copies will be issued; the copy thread (if any) finishes the
            # scheduled ones and stops, so a feeder read to its end leaves no thread.
            if self._engine is not None:
                self._engine.close(_JOIN_S)
