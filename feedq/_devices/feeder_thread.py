"""The feeder thread's side of a DeviceFeeder: read, stage, copy, hand over.

Each turn waits until the next staging slot's earlier copies are done, reads
a batch (into the slot when staged), issues its copies to every replica and
puts the result in the buffer the consumer reads (at most ``prefetch``
items). Errors, the end of the source and a coordinator stop reach the
consumer after the batches read before them. A :class:`DeviceFeeder` (in
``feeder``) owns one :class:`FeederThread`: the thread, what it stages into
(slots, copy engine) and where batches go (structure, placements); the
feeder itself owns the buffer and the consumer's side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq._devices.engines import CudaEngine, HostEngine, Slot
from feedq._devices.handoff import _END, _Item
from feedq._devices.placement import Placement
from feedq._devices.source import BatchSource, stage
from feedq._devices.structure import Structure, split_bounds
from feedq._devices.targets import Targets
from feedq.errors import CancelledError, InvalidArgumentError
from feedq.queues import CancelToken

if TYPE_CHECKING:
    from feedq._devices.feeder import ReplicaMode
    from feedq.coordinator import Coordinator

#: A device transform: a batch component in, its replacement out.
Transform = Callable[[Any], Any]

# How long close() waits for the feeder and copy threads to stop.
_JOIN_S = 5.0


class FeederThread:
    """The producer side of a :class:`DeviceFeeder`: one named thread that
    reads the source, stages and copies each batch, and puts it in the
    feeder's buffer (``put``).

    Invariants: a slot is refilled only after the copies out of it have
    completed; ``structure``, ``placements`` and ``slots`` are set once (at
    creation for a queue, at the first batch for an iterable), before the
    first item is put, and read by the consumer only after it took an item;
    the counters are written by this thread only.
    """

    def __init__(
        self,
        name: str,
        *,
        mode: ReplicaMode | None,
        prefetch: int,
        targets: Targets,
        source: BatchSource,
        put: Callable[[Any], bool],
        stop: threading.Event,
        cancel: CancelToken,
        coord: Coordinator | None,
        on_coord_stop: Callable[[BaseException | None], None],
        transform: Transform | Mapping[Any, Transform] | None = None,
        convert: Callable[[Any], Any] = lambda a: a,
    ) -> None:
        self.name = name
        self.source = source  # replaced by the feeder's load_state_dict, before the start
        self.staged = False  # set by the feeder once its targets are placed
        self.structure: Structure | None = None
        self.placements: list[list[Placement]] = []
        self.engine: Any = None
        self.slots: list[Slot] = []
        self.thread: threading.Thread | None = None
        self.batches_read = 0
        self.bytes_copied = 0
        self.slot_waits = 0
        self.waiting_for_slot = False
        self._mode = mode
        self._prefetch = prefetch
        self._targets = targets
        self._put = put
        self._stop = stop
        self._cancel = cancel
        self._coord = coord
        self._on_coord_stop = on_coord_stop
        self._transform = transform
        self._convert = convert
        # Per component, its device transform or None (set with the structure).
        self.transforms: list[Transform | None] = []

    def setup(self, structure: Structure, dtypes: list[np.dtype[Any]]) -> None:
        """Places every (replica, component) once the batch structure is known."""
        self.transforms = self._resolve_transforms(structure)
        self.placements = self._targets.place_components(structure, dtypes)
        if self.staged:
            self.slots = [Slot(len(structure.keys)) for _ in range(self._prefetch + 1)]
        self.structure = structure

    def _resolve_transforms(self, structure: Structure) -> list[Transform | None]:
        """Per component, the device transform that applies to it.

        Raises:
            InvalidArgumentError: one callable for a batch of several
                components, or a map naming a component the batch lacks.
        """
        transform = self._transform
        if transform is None:
            return [None] * len(structure.keys)
        if not isinstance(transform, Mapping):
            if structure.kind != "bare":
                raise InvalidArgumentError(
                    f"{self.name}: device_transform is one callable but the batch has "
                    f"components {[str(k) for k in structure.keys]}: give a dict "
                    f"{{component: callable}}")
            return [transform]
        unknown = [k for k in transform if k not in structure.keys]
        if unknown:
            raise InvalidArgumentError(
                f"{self.name}: device_transform names {[str(k) for k in unknown]}, not "
                f"components of the batch {[str(k) for k in structure.keys]}")
        return [transform.get(k) for k in structure.keys]

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"feedq-feeder-{self.name}",
                                       daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> list[str]:
        """Wait for the thread, then the copy thread; the names of those still alive."""
        deadline = time.monotonic() + timeout
        alive = []
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
            if self.thread.is_alive():
                alive.append(self.thread.name)
        if self.engine is not None and not self.engine.close(
                max(0.0, deadline - time.monotonic())):
            alive.append(f"{self.name} copy thread")
        return alive

    def _new_engine(self) -> Any:
        """The copy engine of a staged feeder, made in the feeder thread."""
        return (CudaEngine(self.name, self._targets.gpus) if self._targets.gpus
                else HostEngine(f"feedq-feeder-{self.name}"))

    def _read(self, slot: Slot | None) -> list[np.ndarray[Any, Any]] | None:
        """The next batch's components, in ``slot`` when given; None at the end."""
        structure = self.structure
        if self.source.queue is not None and structure is not None:
            return self.source.read_queue(structure, slot, self.engine, self._cancel)
        more, batch = self.source.next_item(self._cancel)
        if not more:
            return None
        where = f"{self.name}: batch {self.batches_read}"
        if structure is None:
            structure = Structure.of(batch)
            arrays = structure.flatten(batch, where)
            self.setup(structure, [a.dtype for a in arrays])
            if self.slots:
                slot = self.slots[0]  # the slots were made just now
        else:
            arrays = structure.flatten(batch, where)
        return arrays if slot is None else stage(arrays, slot, self.engine)

    def _deliver(self, comps: list[np.ndarray[Any, Any]], slot: Slot | None,
                 index: int) -> _Item:
        rows = int(comps[0].shape[0])
        n = len(self.placements)
        if self._mode is None:
            plan = [(0, 0, rows)]
        elif self._mode == "split":
            plan = [(r, a, b) for r, (a, b) in enumerate(split_bounds(rows, n))]
        elif self._mode == "broadcast":
            plan = [(r, 0, rows) for r in range(n)]
        else:
            plan = [(index % n, 0, rows)]
        host_engine = isinstance(self.engine, HostEngine)
        deliveries = []
        for r, a, b in plan:
            out = []
            for c, comp in enumerate(comps):
                if slot is None:
                    out.append(comp if (a, b) == (0, rows) else comp[a:b])
                elif self.placements[r][c].is_gpu or host_engine:
                    out.append(self.engine.copy(slot, c, a, b,
                                                 self.placements[r][c].torch_device))
                    self.bytes_copied += comp[a:b].nbytes
                else:
                    # A host component of a CUDA-staged feeder: the slot will be reused.
                    out.append(comp[a:b].copy())
            deliveries.append((r, out))
        if any(self.transforms):
            self._transform_all(deliveries, index)
        events: list[Any] = []
        if slot is not None:
            # After the transforms: the consumer waits for them too, and the slot
            # is refilled only once they (and the copies) are done.
            events = slot.events = self.engine.record()
        return _Item(deliveries, events, rows)

    def _transform_all(self, deliveries: list[tuple[int, list[Any]]], index: int) -> None:
        """Runs the device transforms on each replica's copies, in place in
        ``deliveries``: on a CUDA device on its copy stream (after the copy,
        before the event the consumer waits on), on the host copy engine once
        its copies are done, elsewhere at once.

        Raises:
            Exception: what a transform raised, with a note naming the
                feeder, the component, the replica and the batch.
        """
        structure = self.structure
        if structure is None:
            raise RuntimeError("transform before structure")
        for r, out in deliveries:
            for c, fn in enumerate(self.transforms):
                if fn is None:
                    continue
                placement = self.placements[r][c]
                value = self._convert(out[c])
                try:
                    if self.engine is None:
                        out[c] = fn(value)
                    else:
                        out[c] = self.engine.transform(fn, value, placement.torch_device)
                except Exception as exc:
                    exc.add_note(
                        f"{self.name}: in the device_transform of component "
                        f"{structure.keys[c]!r} (replica {r}, on {placement.torch_device}), "
                        f"batch {index} of the feeder")
                    raise

    def _stop_error(self, exc: BaseException) -> BaseException:
        """What the consumer gets for ``exc``, raised by the source.

        After a coordinator stop, a ``CancelledError`` from a queue that the
        stop cancelled before it fired our token (a runner's queue) becomes the
        stop itself, so the consumer sees the same error either way.
        """
        if not isinstance(exc, CancelledError) or self._coord is None:
            return exc
        if self._coord.should_stop():
            # Already stopped: this runs _on_coord_stop now, here, if its own
            # call has not fired the token yet (fire() is idempotent).
            self._coord.add_stop_callback(self._on_coord_stop)
        return self._cancel.error() if self._cancel.fired else exc

    def _run(self) -> None:
        try:
            if self.staged:
                self.engine = self._new_engine()
                self.engine.thread_init()
            index = 0
            while not self._stop.is_set():
                slot = self.slots[index % len(self.slots)] if self.slots else None
                if slot is not None and slot.events:
                    # Refill only once the copies out of this slot are done.
                    self.waiting_for_slot = True
                    if not self.engine.done(slot.events):
                        self.slot_waits += 1
                    self.engine.wait(slot.events, None)
                    self.waiting_for_slot = False
                    slot.events = []
                comps = self._read(slot)
                if comps is None:
                    if not self._stop.is_set():
                        self._put(_END)
                    return
                if slot is None and self.slots:
                    slot = self.slots[0]  # an iterable's first batch was staged in _read
                self.batches_read += 1  # taken from the source, even if delivering fails
                item = self._deliver(comps, slot, index)
                index += 1
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - every error must reach the consumer
            self._put(self._stop_error(exc))
        finally:
            # No more copies will be issued; the copy thread (if any) finishes the
            # scheduled ones and stops, so a feeder read to its end leaves no thread.
            if self.engine is not None:
                self.engine.close(_JOIN_S)
