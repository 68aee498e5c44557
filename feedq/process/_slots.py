"""Slot lifetime on the consumer side of a process stage: which batches the
consumer still holds, giving their slots back, and retaining the ones a
worker cannot spare.

When a slot goes back to its worker
-----------------------------------
A batch's numeric arrays are views of its slot. The stage gives a slot back
to its worker only once nothing refers to the batch's memory any more: each
batch's arrays are views of one per-batch ``uint8`` array (NumPy collapses
every view's ``base`` onto it), so its reference count says whether any
array -- or any slice, ``torch.from_numpy`` tensor, or other object built on
one -- is alive. The previous batch of a ``for`` loop is typically still
bound to the loop variables when the next one is taken, so the check runs at
every take for every batch not yet given back.

A consumer that keeps more batches than the worker's ring can spare (for
example ``list(stage)``) does not stall the worker: the stage tells it to
*retain* the slot (the worker creates a new segment for it) and keeps the
old segment mapped until its arrays are gone. Memory then grows with what is
kept, never silently reused.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from feedq.process._launch import WorkerHandle
from feedq.process._shm import Segment
from feedq.process._worker import EXTRA_SLOTS

__all__ = ["Held", "SlotsMixin"]


class Held:
    """A batch the consumer took: its slot, and the array its views share."""

    __slots__ = ("worker", "slot", "seg", "raw", "serial", "retained")

    def __init__(self, worker: int, slot: int, seg: Segment, raw: np.ndarray, serial: int) -> None:
        self.worker = worker
        self.slot = slot
        self.seg = seg
        self.raw: np.ndarray | None = raw
        self.serial = serial
        self.retained = False


class SlotsMixin:
    """Giving slots back: the slot methods of :class:`ProcessStage`."""

    # Set by ProcessStage.__init__ (see there).
    _take_lock: threading.Lock
    _handles: list[WorkerHandle]
    _held: list[Held]
    _current: Held | None
    _retained: int

    def _reclaim(self) -> None:
        """Give back the slots of batches nobody references; retain (have the
        worker replace) the oldest ones a worker cannot spare."""
        if not self._held:
            return
        still: list[Held] = []
        for rec in self._held:
            # 2 references: rec.raw and getrefcount's argument. Any array
            # viewing the batch (or object holding one) adds one.
            if sys.getrefcount(rec.raw) <= 2:
                self._give_back(rec)
            else:
                still.append(rec)
        self._held = still
        for h in self._handles:
            pinned = [r for r in still if r.worker == h.index and not r.retained]
            while len(pinned) > h.slots - EXTRA_SLOTS:
                self._retain(pinned.pop(0))

    def _give_back(self, rec: Held) -> None:
        rec.raw = None
        seg = rec.seg
        seg.users -= 1
        h = self._handles[rec.worker]
        if rec.retained or seg.detached:
            if seg.users == 0:
                seg.close()
            return
        if h.exited or h.done or h.failed:
            if seg.users == 0 and h.slot_seg.get(rec.slot) is seg:
                del h.slot_seg[rec.slot]
                seg.close()
            return
        h.returns.put(rec.slot)

    def _retain(self, rec: Held) -> None:
        rec.retained = True
        self._retained += 1
        h = self._handles[rec.worker]
        if h.slot_seg.get(rec.slot) is rec.seg:
            del h.slot_seg[rec.slot]
        rec.seg.detached = True
        h.returns.put(rec.slot, retain=True)

    def release(self) -> None:
        """Done with the last batch taken: its slot goes back to its worker
        as soon as none of its arrays is referenced (at once if none is).

        Taking the next batch does the same; call this to give the slot back
        earlier (e.g. after copying the batch to a GPU, before a long step).
        Arrays still referenced stay valid: they only delay the slot.
        """
        with self._take_lock:
            self._release_current()
            self._reclaim()

    def _release_current(self) -> None:
        if self._current is not None:
            self._held.append(self._current)
            self._current = None
