"""Slot lifetime on the consumer side of a process stage: the
:class:`SlotRing` a :class:`~feedq.process.ProcessStage` owns maps the
workers' segments, knows which batches the consumer still holds, gives
their slots back, and retains the ones a worker cannot spare.

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

import contextlib
import sys
import weakref

import numpy as np

from feedq.errors import DataLossError
from feedq.process._launch import WorkerHandle
from feedq.process._shm import Segment, unlink
from feedq.process._worker import EXTRA_SLOTS

__all__ = ["Held", "SlotRing"]


class Held:
    """A batch the consumer took: its worker and slot, and the array its views share."""

    __slots__ = ("handle", "slot", "seg", "raw", "weak", "serial", "retained")

    def __init__(self, handle: WorkerHandle, slot: int, seg: Segment, raw: np.ndarray,
                 serial: int) -> None:
        self.handle = handle
        self.slot = slot
        self.seg = seg
        self.raw: np.ndarray | None = raw
        # Once the workers are gone (SlotRing.let_go): a weak reference instead.
        self.weak: weakref.ref[np.ndarray] | None = None
        self.serial = serial
        self.retained = False


class SlotRing:
    """The consumer's side of the workers' shared-memory rings.

    Invariants: a slot goes back to its worker once per batch, and only when
    no array of the batch is referenced (or at once with ``copy=True``); a
    segment is unmapped only when no batch taken from it is held; a segment
    a worker replaced (it grew, or the slot was retained) is never given
    back. Used by the consumer's thread only (under the stage's take lock).
    """

    def __init__(self) -> None:
        self.held: list[Held] = []  # batches taken earlier, maybe still referenced
        self.current: Held | None = None  # the last batch taken (its loop variables hold it)
        self.retained = 0  # slots the worker was told to replace (statistics)
        self._serial = 0

    def map(self, h: WorkerHandle, slot: int, name: str) -> Segment:
        """The segment of ``h``'s ``slot`` named ``name``: mapped (and its name
        unlinked) the first time, replacing the slot's previous segment."""
        seg = h.slot_seg.get(slot)
        if seg is not None and seg.name == name:
            return seg
        if seg is not None:
            self._detach(seg)
        try:
            seg = Segment.open(name)
        except OSError as exc:
            raise DataLossError(
                f"process stage worker {h.index} (pid {h.pid}): cannot map its shared "
                f"memory segment {name!r}: {exc}"
            ) from None
        with contextlib.suppress(OSError):
            unlink(name)  # both sides have it mapped: it needs no name any more
        h.slot_seg[slot] = seg
        return seg

    def _detach(self, seg: Segment) -> None:
        """The worker replaced ``seg``: close it once no batch uses it."""
        if seg.users == 0:
            seg.close()
        else:
            seg.detached = True

    def took(self, h: WorkerHandle, slot: int, seg: Segment, raw: np.ndarray,
             give_back: bool) -> None:
        """The consumer took a batch of ``h`` in ``slot``, whose views share
        ``raw``; ``give_back``: its arrays are private copies (slot back now)."""
        self._serial += 1
        seg.users += 1
        rec = Held(h, slot, seg, raw, self._serial)
        if give_back:
            self._give_back(rec)
        else:
            self.current = rec

    def release_current(self) -> None:
        """The consumer moves on from its current batch (it may still hold it)."""
        if self.current is not None:
            self.held.append(self.current)
            self.current = None

    def reclaim(self) -> None:
        """Give back the slots of batches nobody references; retain (have the
        worker replace) the oldest ones a worker cannot spare."""
        if not self.held:
            return
        still: list[Held] = []
        for rec in self.held:
            if rec.weak is not None:  # let go of: only the user's arrays keep it
                if rec.weak() is not None:
                    still.append(rec)
                continue
            # 2 references: rec.raw and getrefcount's argument. Any array
            # viewing the batch (or object holding one) adds one.
            if sys.getrefcount(rec.raw) <= 2:
                self._give_back(rec)
            else:
                still.append(rec)
        self.held = still
        pinned: dict[int, list[Held]] = {}
        for rec in still:
            if not rec.retained and rec.weak is None:
                pinned.setdefault(rec.handle.index, []).append(rec)
        for recs in pinned.values():
            if recs[0].handle.stopped:
                continue  # nothing to retain for a worker that is gone
            spare = recs[0].handle.slots - EXTRA_SLOTS
            while len(recs) > spare:
                self._retain(recs.pop(0))

    def _give_back(self, rec: Held) -> None:
        rec.raw = None
        seg = rec.seg
        seg.users -= 1
        h = rec.handle
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
        self.retained += 1
        h = rec.handle
        if h.slot_seg.get(rec.slot) is rec.seg:
            del h.slot_seg[rec.slot]
        rec.seg.detached = True
        h.returns.put(rec.slot, retain=True)

    def let_go(self) -> None:
        """The workers were stopped while the stage lives on (after its last
        epoch): forget the batches nobody references, and keep only weak
        references to those the consumer still holds, so that each one's
        memory goes with its last array (:attr:`holding` counts them
        meanwhile)."""
        self.release_current()
        self.reclaim()
        for rec in self.held:
            if rec.raw is not None:
                rec.weak = weakref.ref(rec.raw)
                rec.raw = None

    def drop(self) -> None:
        """Forget every batch (the workers are stopped): our references only;
        arrays the user still holds keep their mappings alive until they go."""
        for rec in self.held:
            rec.raw = None
        self.held.clear()
        self.current = None

    @property
    def holding(self) -> int:
        """Batches whose arrays may still be referenced by the consumer."""
        return (sum(1 for rec in self.held if rec.weak is None or rec.weak() is not None)
                + (self.current is not None))
