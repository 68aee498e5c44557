"""The feeder thread's side of a DeviceFeeder: read, stage, copy, hand over.

Each turn waits until the next staging slot's earlier copies are done, reads
a batch (into the slot when staged), issues its copies to every replica and
puts the result in the buffer the consumer reads (at most ``prefetch``
items). Errors, the end of the source and a coordinator stop reach the
consumer after the batches read before them. :class:`DeviceFeeder` (in
``feeder``) owns the state this mixin works on.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq._devices.engines import HostEngine, Slot
from feedq._devices.handoff import _END, _Item, _State
from feedq._devices.placement import Placement
from feedq._devices.source import BatchSource, stage
from feedq._devices.structure import Structure, split_bounds
from feedq._devices.targets import Targets
from feedq.errors import CancelledError
from feedq.queues import CancelToken

if TYPE_CHECKING:
    from feedq._devices.feeder import ReplicaMode
    from feedq.coordinator import Coordinator

# How long close() waits for the feeder and copy threads to stop.
_JOIN_S = 5.0


class _FeederThread:
    """The methods :class:`DeviceFeeder` runs in its feeder thread."""

    # Set by DeviceFeeder.__init__ (see there for what each one guards).
    name: str
    _mode: ReplicaMode | None
    _prefetch: int
    _staged: bool
    _source: BatchSource
    _targets: Targets
    _structure: Structure | None
    _placements: list[list[Placement]]
    _engine: Any
    _slots: list[Slot]
    _mutex: threading.Lock
    _not_empty: threading.Condition
    _not_full: threading.Condition
    _items: deque[Any]
    _buffered: int
    _state: _State
    _stop: threading.Event
    _cancel: CancelToken
    _coord: Coordinator | None
    _batches_read: int
    _slot_waits: int
    _waiting_for_slot: bool
    _waiting_for_room: bool

    def _setup(self, structure: Structure, dtypes: list[np.dtype[Any]]) -> None:
        raise NotImplementedError

    def _new_engine(self) -> Any:
        raise NotImplementedError

    def _on_coord_stop(self, cause: BaseException | None) -> None:
        raise NotImplementedError

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
        if self._source.queue is not None and structure is not None:
            return self._source.read_queue(structure, slot, self._engine, self._cancel)
        more, batch = self._source.next_item(self._cancel)
        if not more:
            return None
        where = f"{self.name}: batch {self._batches_read}"
        if structure is None:
            structure = Structure.of(batch)
            arrays = structure.flatten(batch, where)
            self._setup(structure, [a.dtype for a in arrays])
            if self._slots:
                slot = self._slots[0]  # the slots were made just now
        else:
            arrays = structure.flatten(batch, where)
        return arrays if slot is None else stage(arrays, slot, self._engine)

    def _deliver(self, comps: list[np.ndarray[Any, Any]], slot: Slot | None,
                 index: int) -> _Item:
        rows = int(comps[0].shape[0])
        n = len(self._placements)
        if self._mode is None:
            plan = [(0, 0, rows)]
        elif self._mode == "split":
            plan = [(r, a, b) for r, (a, b) in enumerate(split_bounds(rows, n))]
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
            if self._staged:
                self._engine = self._new_engine()
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
            self._put(self._stop_error(exc))
        finally:
            # No more copies will be issued; the copy thread (if any) finishes the
            # scheduled ones and stops, so a feeder read to its end leaves no thread.
            if self._engine is not None:
                self._engine.close(_JOIN_S)
