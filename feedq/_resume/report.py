"""Where the rows a batcher enqueues come from: positions for resumption.

A resumable pipeline (``feedq.Pipeline(resumable=True)``) tags every element
that enters its batcher with a *position*: one int64,
``unit << UNIT_SHIFT | record``, where ``unit`` is the producer's element
ordinal (``epoch * n + index in that epoch's order``, or a work-list id at
or above ``WORKLIST_BASE`` after an elastic re-shard) and ``record`` the
record's index in that unit (0 for producers whose elements are the data).

The tags are gathered per runner thread, without changing any API between
the parts: while a batcher's enqueue op evaluates its source
(:func:`begin` .. :func:`end`), a producer stage's take notes the units it hands out
(:func:`note_taken`), a reader claims the unit it just dequeued
(:func:`claim_unit`), reports the positions of the records it returns
(:func:`report_range`; :func:`report_rows` after a re-read filter) and the
size of each unit it finishes (:func:`report_size`). The batcher then reads one :class:`Report`.

This module imports nothing from feedq: readers (below ``input`` in the
layers) and ``input`` both use it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__: list[str] = []

#: Bits of a position holding the record index in its unit.
UNIT_SHIFT = 32
#: Work units of an explicit work list (after an elastic re-shard) get ids from here.
WORKLIST_BASE = 1 << 30
#: Largest unit id a position can hold.
MAX_UNIT = (1 << 31) - 1


@dataclass
class UnitFilter:
    """Which records of a unit to return on a re-read.

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


@dataclass
class Unit:
    """A work unit handed to a reader: its id and the records to return."""

    unit: int
    filter: UnitFilter | None


class Report:
    """What one evaluation of a batcher's source saw.

    (A plain class with slots, not a dataclass: one is made per evaluation.)

    Attributes:
        handed: int64 unit ids the producer handed out.
        tags: int64 positions of the records readers returned, in order.
        sizes: ``(unit, records)`` of units read to their end.
        unclaimed: unit ids taken from the producer that no reader claimed:
            the producer's elements are themselves the rows.
        reader_rows: a reader reported records.
        producers: the producer objects that handed out units.
    """

    __slots__ = ("handed", "tags", "sizes", "unclaimed", "reader_rows", "producers")

    def __init__(self) -> None:
        self.handed: list[np.ndarray[Any, Any]] = []
        self.tags: list[np.ndarray[Any, Any]] = []
        self.sizes: list[tuple[int, int]] = []
        self.unclaimed: list[np.ndarray[Any, Any]] = []
        self.reader_rows = False
        self.producers: list[Any] = []

    def foreign(self, producer: Any) -> bool:
        """Whether a producer other than ``producer`` handed out units."""
        return any(p is not producer for p in self.producers)

    def row_tags(self) -> np.ndarray[Any, Any] | None:
        """The positions of the rows, or None when both readers and a
        producer's elements gave rows (no single order)."""
        if self.reader_rows:
            if self.unclaimed:
                return None
            parts = self.tags
        else:
            parts = [u << UNIT_SHIFT for u in self.unclaimed]
        if len(parts) == 1:  # the usual case: no copy
            return parts[0].astype(np.int64, copy=False)
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(parts).astype(np.int64, copy=False)


class _State(threading.local):
    report: Report | None = None
    # (unit ids, filters by unit id) of producer elements taken and not
    # claimed by a reader, most recent last.
    pending: list[tuple[np.ndarray[Any, Any], dict[int, UnitFilter]]]

    def __init__(self) -> None:
        self.pending = []


_state = _State()


def begin() -> tuple[Report, Any]:
    """Start gathering what this thread reports; pass the result to :func:`end`.

    (Two plain calls rather than a context manager: this runs once per
    evaluation of a batcher's source.)
    """
    outer = (_state.report, _state.pending)
    report = Report()
    _state.report, _state.pending = report, []
    return report, outer


def end(token: tuple[Report, Any]) -> Report:
    """Stop gathering (see :func:`begin`); the report."""
    report, outer = token
    report.unclaimed = [ids for ids, _ in _state.pending]
    _state.report, _state.pending = outer
    return report



def active() -> bool:
    """True between :func:`begin` and :func:`end` in this thread."""
    return _state.report is not None


def note_taken(producer: Any, units: np.ndarray[Any, Any], filters: dict[int, UnitFilter]) -> None:
    """A producer stage handed out ``units`` (with re-read filters by unit)."""
    report = _state.report
    if report is None:
        return
    report.handed.append(units)
    producers = report.producers
    if not producers or (producers[0] is not producer and not any(p is producer for p in producers)):
        producers.append(producer)
    _state.pending.append((units, filters))


def claim_unit() -> Unit | None:
    """A reader claims the unit it just dequeued (the last one taken)."""
    if _state.report is None or not _state.pending:
        return None
    units, filters = _state.pending.pop()
    if units.shape[0] != 1:
        return None
    unit = int(units[0])
    return Unit(unit, filters.get(unit))


def report_rows(unit: Unit, records: np.ndarray[Any, Any]) -> None:
    """A reader returns these records (indices) of ``unit``."""
    report = _state.report
    if report is None:
        return
    report.reader_rows = True
    report.tags.append((np.int64(unit.unit) << UNIT_SHIFT) | records.astype(np.int64, copy=False))


def report_range(unit: Unit, first: int, count: int) -> None:
    """A reader returns records ``first .. first + count - 1`` of ``unit``."""
    report = _state.report
    if report is None:
        return
    report.reader_rows = True
    start = (unit.unit << UNIT_SHIFT) + first
    report.tags.append(np.arange(start, start + count, dtype=np.int64))


def report_size(unit: Unit, records: int) -> None:
    """A reader finished ``unit``: it holds ``records`` records."""
    report = _state.report
    if report is not None:
        report.sizes.append((unit.unit, int(records)))
