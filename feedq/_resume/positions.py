"""Positions: where a row comes from, in one int64.

A resumable pipeline (``feedq.Pipeline(resumable=True)``) tags every row
that enters its batcher with a *position*: ``unit << UNIT_SHIFT | record``,
where ``unit`` is the producer's element ordinal (``epoch * n + index in
that epoch's order``, or a work-list id at or above :data:`WORKLIST_BASE`
after an elastic re-shard) and ``record`` the record's index in that unit
(0 for producers whose elements are the data). A :class:`UnitFilter` says
which records of a unit to return when it is re-read after a restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__: list[str] = []

#: Bits of a position holding the record index in its unit.
UNIT_SHIFT = 32
#: Mask of the record bits of a position.
RECORD_MASK = (1 << UNIT_SHIFT) - 1
#: Work units of an explicit work list (after an elastic re-shard) get ids from here.
WORKLIST_BASE = 1 << 30
#: Largest unit id a position can hold.
MAX_UNIT = (1 << 31) - 1


@dataclass
class UnitFilter:
    """Which records of a unit to return on a re-read (``feedq._core.positions.UnitFilter``).

    Attributes:
        skip: int64 ``[k, 2]`` half-open ranges of record indices to drop
            (records already delivered), or None.
        only: sorted int64 record indices to keep (and nothing else), or None.
    """

    skip: np.ndarray[Any, Any] | None = None
    only: np.ndarray[Any, Any] | None = None

    def keep(self, records: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Bool mask over ``records`` (record indices) of those to return."""
        mask = np.ones(records.shape[0], dtype=bool)
        if self.skip is not None and self.skip.shape[0]:
            starts, ends = self.skip[:, 0], self.skip[:, 1]
            pos = np.searchsorted(starts, records, side="right") - 1
            inside = (pos >= 0) & (records < ends[np.maximum(pos, 0)])
            mask &= ~inside
        if self.only is not None:
            mask &= np.isin(records, self.only)
        return mask
