"""DeviceFeeder: batches from a queue, a stage or an iterable, delivered on devices.

The feeder thread dequeues each batch straight into a staging slot
(``queue.dequeue_many(n, out=slot)``, or a batcher stage's
``dequeue_many(batch_size, out=slot)``: the only host copy, from the queue's
ring into pinned memory), issues asynchronous copies of it to every target device,
records events, and hands the batch to the consumer through a channel that
holds at most ``prefetch`` batches. A slot is refilled only after its copy
events have completed, so recycling never races a copy.

An iterable's batches and a padding queue's (whose shapes change from batch
to batch) are copied into the slot instead: the one host copy there too.
On a host-only placement nothing is staged: the batch the queue (or the
iterable) produced is the batch the consumer gets.

Where things live: this module holds :class:`DeviceFeeder`'s set-up,
placement, life cycle, buffer and consumer side; ``feeder_thread`` the
:class:`FeederThread` it owns (the thread, its staging slots and copy
engine, the batch structure and placements: the producer side); ``handoff``
what passes between the two (items, the end marker, the state) and
:class:`FeederStatistics` (re-exported here).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from feedq._core import scope as _scope
from feedq._core.timeouts import resolve_timeout
from feedq._devices.extras import require
from feedq._devices.feeder_thread import _JOIN_S, FeederThread, Transform
from feedq._devices.handoff import _END, FeederStatistics, _Item, _State
from feedq._devices.placement import _DEVICE_KINDS, DeviceConfig, Placement, get_device_config
from feedq._devices.source import BatchSource, is_queue
from feedq._devices.spec import DeviceLike
from feedq._devices.structure import Structure
from feedq._devices.targets import Targets
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.pipeline import current_pipeline
from feedq.queues import CancelToken

if TYPE_CHECKING:
    from typing_extensions import Self

    from feedq.coordinator import Coordinator

__all__ = ["DeviceFeeder", "FeederStatistics", "ReplicaMode", "resumable_source"]

logger = logging.getLogger("feedq.devices")

ReplicaMode = Literal["split", "round_robin", "broadcast"]
_MODES = ("split", "round_robin", "broadcast")
_OUTPUTS = ("numpy", "torch", "cupy")

_ids = itertools.count(1)


def resumable_source(source: Any, name: str) -> Any:
    """``source`` if it saves and restores positions (``taken``,
    ``state_dict(upto=)``, ``load_state_dict``: a feedq stage or process stage).

    Raises:
        FailedPreconditionError: a queue, or another source without them.
    """
    if is_queue(source):
        raise FailedPreconditionError(
            f"{name}: the source is a queue, which holds no positions: save the state "
            "of the pipeline stage that fills it (or feed from that stage)")
    if not (callable(getattr(source, "state_dict", None))
            and callable(getattr(source, "load_state_dict", None))
            and hasattr(source, "taken")):
        raise FailedPreconditionError(
            f"{name}: the source ({type(source).__name__}) is not resumable: it needs "
            "taken, state_dict(upto=) and load_state_dict (a feedq stage or process stage)")
    return source


class DeviceFeeder:
    """Feeds batches from a queue or an iterable to one device or to model replicas.

    The source is a feedq queue (with ``batch_size``: each batch is one
    ``dequeue_many``, or ``dequeue_up_to`` with ``allow_smaller_final_batch``),
    a batcher :class:`~feedq.Stage` (no ``batch_size``: each batch is one
    ``stage.dequeue_many(stage.batch_size, out=)``, the batch iterating the
    stage gives), or any iterable of batches (an ndarray, a list/tuple of
    ndarrays or a dict of ndarrays, all with the same leading dimension).
    Batches come out in source order with the source's structure.

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

    Device transforms: ``device_transform=`` converts components where they
    arrive, so the host and the copy keep the source's (small) dtype, e.g.
    uint8 NHWC images on the host, normalised float NCHW on the GPU with
    ``device_transform={"image": feedq.image.ToDeviceFloat(mean=..., std=...)}``.
    A transform gets one replica's component as the consumer would (a torch
    tensor for ``output="torch"``) and returns its replacement; it runs in
    the feeder thread, once per replica per batch: on a GPU on the copy
    stream, right after the copy and before the event the consumer waits
    on; on the host after the copy is done (staged) or on the source's array
    (not staged: make a new array, do not modify it in place). An error in
    it reaches the consumer like a source error, after the batches before
    it, with a note naming the component, replica and batch; the batch it
    failed on counts as not delivered (a restored state delivers it again).

    One consumer thread at a time. Errors from the source reach the consumer
    after the batches read before them. End of data ends iteration
    (:meth:`get` raises ``OutOfRangeError``).

    Stopping: the feeder thread waits on a queue source with the feeder's own
    :class:`~feedq.CancelToken` (no timeout, no polling). :meth:`close` fires
    it, and so does a stop of the coordinator (``coord=``, by default the one
    of the :class:`~feedq.Pipeline` current where the feeder is created; X5):
    the blocked dequeue is withdrawn at once and the rows it had collected go
    back to the front of the queue in order (T3), so nothing is lost. After a
    coordinator stop the consumer gets the batches already read, then the
    stop: the error the coordinator recorded (X3), or on a clean stop a
    ``CancelledError``, which ends iteration quietly (as iterating a pipeline
    stage does). The feeder does not restart after ``coord.clear_stop()``.

    Resumption: with a resumable source (a feedq stage or a process stage:
    ``taken``, ``state_dict(upto=)``, ``load_state_dict``), :meth:`state_dict`
    is the source's state as of the batches the consumer received from the
    feeder; batches prefetched (read, staged or being copied) count as not
    delivered and come again after a restore. A queue knows no positions:
    save the state of the stage that fills it instead.
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
        coord: Coordinator | None = None,
        device_transform: Transform | Mapping[Any, Transform] | None = None,
    ) -> None:
        """Creates the feeder and places its targets; the thread starts on first use.

        Args:
            source: a feedq queue, a batcher stage or an iterable of batches.
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
            coord: a coordinator whose stop stops the feeder (see above);
                ``None``: the coordinator of the current pipeline, if any.
            device_transform: ``f(component) -> component`` run on each
                replica's copy (see above): one callable for a bare-array
                batch, or ``{component: callable}`` (names, or indices for
                list batches).

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
        if device_transform is not None and not (
                callable(device_transform) if not isinstance(device_transform, Mapping)
                else all(callable(f) for f in device_transform.values())):
            raise TypeError(f"device_transform must be a callable or a dict of callables, "
                            f"got {device_transform!r}")
        self._mode: ReplicaMode | None = None if replicas is None else mode
        targets = [device] if replicas is None else list(replicas)
        self._prefetch = prefetch
        self._config = get_device_config() if config is None else config
        self._staging = staging

        self._origin = source
        source_ = BatchSource(source, batch_size, allow_smaller_final_batch, self.name)

        # Contexts are thread-local: read them here, in the creating thread.
        self._targets = Targets(self.name, targets, replicas is not None, self._config)
        self._output_arg = output
        self._output: str = "numpy"
        self._staged = False

        self._mutex = threading.Lock()
        # not_empty: notified by the feeder thread on put and at finish, by close()
        self._not_empty = threading.Condition(self._mutex)
        # not_full: notified by get() when it takes an item, by close()
        self._not_full = threading.Condition(self._mutex)
        # batches (_Item), then possibly _END or the source's exception
        self._items: deque[Any] = deque()  # guarded by self._mutex
        self._buffered = 0  # _Items in self._items; guarded by self._mutex
        self._state = _State.CREATED  # guarded by self._mutex
        # Set by close(): the feeder thread hands nothing more to the consumer.
        self._stop = threading.Event()
        # Fired by close() and by a coordinator stop; the feeder thread's
        # blocking source calls wait with it (one-shot, like the feeder).
        self._cancel = CancelToken()
        # What a clean coordinator stop makes get() raise; __next__ recognises it.
        self._clean_stop = CancelledError(f"{self.name}: the pipeline was stopped")
        self._waiting_for_room = False  # guarded by self._mutex
        self._waiting_consumers = 0  # guarded by self._mutex
        self._delivered = 0  # guarded by self._mutex
        self._rows = 0  # guarded by self._mutex
        # The source's ``taken`` when the feeder thread started (resumable
        # sources; state_dict counts from it); guarded by self._mutex.
        self._base_taken: int | None = None
        # held by the one consumer inside get(); others wait for it with their timeout
        self._consumer_lock = threading.Lock()
        pipe = current_pipeline()
        if coord is None:
            coord = None if pipe is None else pipe.coord
        self._coord = coord
        # The producer side: the thread, its staging slots and copy engine,
        # the batch structure and placements.
        self._feed = FeederThread(
            self.name, mode=self._mode, prefetch=prefetch, targets=self._targets,
            source=source_, put=self._put, stop=self._stop, cancel=self._cancel, coord=coord,
            on_coord_stop=self._on_coord_stop, transform=device_transform,
            convert=self._convert)
        if source_.queue is not None:
            structure = Structure.of_queue(source)
            dtypes = [np.dtype(dt) for dt in source.dtypes]
            self._place_targets(structure, dtypes)
            self._feed.setup(structure, dtypes)
        else:
            self._place_targets(None, [])

        # Created inside `with feedq.Pipeline()`: the pipeline closes it at shutdown,
        # and its state counts what this feeder handed on, not what it read ahead.
        _scope.register_closeable(self)
        if pipe is not None and hasattr(self._origin, "state_dict"):
            pipe.resumption.add_consumer(self._origin, self._delivered_upto)
        if coord is not None:
            # Runs now if the coordinator is already stopped; close() removes it.
            coord.add_stop_callback(self._on_coord_stop)

    # -- placement ---------------------------------------------------------

    def _place_targets(self, structure: Structure | None,
                       dtypes: list[np.dtype[Any]]) -> None:
        """Places the targets and decides how batches travel: staged or not,
        through which engine, as what output."""
        gpus = self._targets.place(structure, dtypes)
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
        self._staged = self._feed.staged = bool(gpus) or bool(self._staging)

    @property
    def placements(self) -> list[list[Placement]]:
        """Per replica, per component, where batches go.

        Empty until an iterable source has produced its first batch (its
        components are not known before).
        """
        return [list(row) for row in self._feed.placements]

    # -- life cycle --------------------------------------------------------

    def start(self) -> Self:
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
            taken = getattr(self._origin, "taken", None)
            self._base_taken = taken if isinstance(taken, int) else None
        self._feed.start()
        return self

    def _delivered_upto(self) -> int | None:
        """The source's evaluations handed on to the consumer (None before
        the feeder read any)."""
        with self._mutex:
            base, delivered = self._base_taken, self._delivered
        return None if base is None else base + delivered

    def _resumable_source(self) -> Any:
        return resumable_source(self._origin, self.name)

    def state_dict(self) -> dict[str, Any]:
        """The source's state as of the batches the consumer received.

        Batches read from the source but not returned by :meth:`get` yet
        (prefetched, staged, being copied) count as not delivered: a feeder
        restored from the state delivers them again. Call it between
        batches, from the consumer's thread.

        Raises:
            FailedPreconditionError: the source is a queue, or an iterable
                without ``taken`` / ``state_dict(upto=)`` / ``load_state_dict``.
            CancelledError: the feeder was closed.
            Exception: whatever the source's ``state_dict`` raises.
        """
        source = self._resumable_source()
        with self._mutex:
            if self._state is _State.CLOSED:
                raise CancelledError(f"{self.name}: feeder is closed")
            base, delivered = self._base_taken, self._delivered
        if base is None:
            return dict(source.state_dict())  # nothing read yet
        return dict(source.state_dict(upto=base + delivered))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the source from ``state`` (see :meth:`state_dict`),
        before the feeder starts (before the first :meth:`get`).

        Raises:
            FailedPreconditionError: the feeder already started, or the
                source is not resumable (see :meth:`state_dict`).
            Exception: whatever the source's ``load_state_dict`` raises
                (``InvalidArgumentError`` for a state of another pipeline).
        """
        source = self._resumable_source()
        with self._mutex:
            if self._state is not _State.CREATED:
                raise FailedPreconditionError(
                    f"{self.name}: load_state_dict must come before the feeder starts")
        source.load_state_dict(state)
        # Iterate the restored source from its new position.
        self._feed.source = BatchSource(source, None, False, self.name)

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
        # Outside the mutex: firing wakes the queue's waiter under the queue's lock.
        # A dequeue it cancels puts its rows back; the thread then sees _stop.
        self._cancel.fire(CancelledError(f"{self.name}: feeder is closed"))
        if self._coord is not None:
            self._coord.remove_stop_callback(self._on_coord_stop)
        alive = self._feed.join(timeout)
        if alive:
            logger.warning("%s: thread(s) %s did not stop within %.1fs", self.name,
                           ", ".join(alive), timeout)

    def _put(self, item: Any) -> bool:
        """The feeder thread hands an item to the consumer; False when closed meanwhile."""
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

    def _on_coord_stop(self, cause: BaseException | None) -> None:
        """Coordinator stop callback: cancel the feeder thread's wait (never blocks)."""
        self._cancel.fire(self._clean_stop if cause is None else cause)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def statistics(self) -> FeederStatistics:
        """A snapshot (see :class:`FeederStatistics`)."""
        feed = self._feed
        with self._mutex:
            return FeederStatistics(
                state=self._state.value, staged=self._staged, prefetch=self._prefetch,
                buffered=self._buffered,
                slots=len(feed.slots), batches_read=feed.batches_read,
                batches_delivered=self._delivered, rows_delivered=self._rows,
                bytes_copied=feed.bytes_copied,
                slot_waits=feed.slot_waits, waiting_for_slot=feed.waiting_for_slot,
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
        except CancelledError as exc:
            if exc is self._clean_stop:
                raise StopIteration from None  # a clean stop of the pipeline
            raise

    def get(self, timeout: float | None = None) -> Any:
        """The next item (see the class docstring for its form per mode).

        Args:
            timeout: seconds to wait; ``None`` = the process default
                (``feedq.set_default_timeout``), ``0`` = do not wait,
                ``math.inf`` = forever.

        Raises:
            OutOfRangeError: the source is exhausted.
            DeadlineExceededError: nothing arrived within ``timeout``; nothing is lost.
            CancelledError: the feeder was closed, or the coordinator stopped
                cleanly (after the batches read before the stop).
            Exception: whatever the source raised, or the error a coordinator
                stop recorded, after the batches read before it.
        """
        wait = resolve_timeout(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        self.start()
        with self._mutex:
            self._waiting_consumers += 1
        counted = True  # this call is in waiting_consumers
        try:
            # Another consumer inside get() holds the lock: wait for it with the
            # same deadline, never unbounded.
            if deadline is None:
                held = self._consumer_lock.acquire()
            else:
                left = deadline - time.monotonic()
                held = (self._consumer_lock.acquire(timeout=left) if left > 0
                        else self._consumer_lock.acquire(blocking=False))
            if not held:
                raise DeadlineExceededError(
                    f"{self.name}: no batch within {wait:g}s (another consumer was in get())")
            try:
                with self._mutex:
                    try:
                        while not self._items and self._state is not _State.CLOSED:
                            remaining = None if deadline is None else deadline - time.monotonic()
                            if remaining is not None and remaining <= 0:
                                raise DeadlineExceededError(
                                    f"{self.name}: no batch within {wait:g}s")
                            self._not_empty.wait(remaining)
                    finally:
                        self._waiting_consumers -= 1
                        counted = False
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
                engine = self._feed.engine
                if engine is not None:
                    # Never times out: the copies were issued and always complete, and
                    # the item has left the buffer (a timeout here would lose it).
                    outputs = [a for _, comps in item.deliveries for a in comps]
                    engine.hand_over(item.events, outputs)
                return self._assemble(item)
            finally:
                self._consumer_lock.release()
        finally:
            if counted:
                with self._mutex:
                    self._waiting_consumers -= 1

    def _convert(self, array: Any) -> Any:
        if isinstance(array, np.ndarray):
            if self._output == "torch" and array.dtype.kind in _DEVICE_KINDS:
                return self._torch.from_numpy(array)
            return array
        if self._output == "cupy":
            return self._cupy.from_dlpack(array)
        return array

    def _assemble(self, item: _Item) -> Any:
        structure = self._feed.structure
        if structure is None:
            raise RuntimeError("item before structure")
        batches = [(r, structure.pack([self._convert(a) for a in comps]))
                   for r, comps in item.deliveries]
        if self._mode is None:
            return batches[0][1]
        if self._mode == "round_robin":
            return batches[0]
        return [b for _, b in batches]
