"""What a DeviceFeeder's thread hands to its consumer, and the feeder's state.

:class:`_Item` is one delivered batch (per-replica arrays and the copy events
to wait on), ``_END`` marks the end of the source, :class:`_State` is the
feeder's life cycle and :class:`FeederStatistics` a snapshot of all of it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["FeederStatistics"]


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
        bytes_copied: bytes the copy engine moved from the staging slots to
            the targets (host to device on a GPU), summed over replicas (a
            broadcast batch reaching N replicas counts N times), as staged:
            before any ``device_transform`` (uint8 images count one byte per
            value). 0 when nothing is staged.
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
    bytes_copied: int
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
