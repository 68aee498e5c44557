"""Reports: the positions a batcher's source evaluation produced, gathered per thread.

The positions (``feedq._resume.positions``) of the rows a batcher enqueues
are gathered per runner thread, without changing any API between the
parts. While a batcher's enqueue op evaluates its source (:func:`begin` ..
:func:`end`):

* a producer stage's take notes the units it hands out (:func:`note_taken`);
* a reader claims the unit it just dequeued (``feedq._core.positions.claim_unit``,
  which this module fills: :func:`claim_unit`) and reports through that
  :class:`ClaimedUnit` the records it returns (``report_range``;
  ``report_rows`` after a re-read filter) and the size of a unit it
  finishes (``report_size``).

The batcher then reads one :class:`Report`: the rows' positions, the units
handed out and the sizes of the units finished.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedq._core import positions as _seam
from feedq._resume.positions import UNIT_SHIFT, UnitFilter

__all__: list[str] = []


class Report:
    """What one evaluation of a batcher's source saw.

    (A plain class with slots, not a dataclass: one is made per evaluation.)

    Attributes:
        handed: int64 unit ids the producer handed out.
        positions: int64 positions of the records readers returned, in order.
        sizes: ``(unit, records)`` of units read to their end.
        unclaimed: unit ids taken from the producer that no reader claimed:
            the producer's elements are themselves the rows.
        reader_rows: a reader reported records.
        producers: the producers' resumption parts that handed out units.
    """

    __slots__ = ("handed", "positions", "sizes", "unclaimed", "reader_rows", "producers")

    def __init__(self) -> None:
        self.handed: list[np.ndarray[Any, Any]] = []
        self.positions: list[np.ndarray[Any, Any]] = []
        self.sizes: list[tuple[int, int]] = []
        self.unclaimed: list[np.ndarray[Any, Any]] = []
        self.reader_rows = False
        self.producers: list[Any] = []

    def foreign(self, producer: Any) -> bool:
        """Whether a producer other than ``producer`` handed out units."""
        return any(p is not producer for p in self.producers)

    def row_positions(self) -> np.ndarray[Any, Any] | None:
        """The positions of the rows, or None when both readers and a
        producer's elements gave rows (no single order)."""
        if self.reader_rows:
            if self.unclaimed:
                return None
            parts = self.positions
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


class ClaimedUnit:
    """A work unit a reader claimed (``feedq._core.positions.Unit``): it
    reports to the report of the evaluation running in the reader's thread
    at the time of each call (a unit may span several evaluations).

    Attributes:
        unit: the unit id.
        filter: the records to return on a re-read, or None.
    """

    __slots__ = ("unit", "filter")

    def __init__(self, unit: int, filter: UnitFilter | None) -> None:  # noqa: A002 - the seam's word
        self.unit = unit
        self.filter = filter

    def report_range(self, first: int, count: int) -> None:
        """The reader returns records ``first .. first + count - 1``."""
        report = _state.report
        if report is None:
            return
        report.reader_rows = True
        start = (self.unit << UNIT_SHIFT) + first
        report.positions.append(np.arange(start, start + count, dtype=np.int64))

    def report_rows(self, records: np.ndarray[Any, Any]) -> None:
        """The reader returns these records (indices)."""
        report = _state.report
        if report is None:
            return
        report.reader_rows = True
        report.positions.append((np.int64(self.unit) << UNIT_SHIFT) | records.astype(np.int64, copy=False))

    def report_size(self, records: int) -> None:
        """The reader finished the unit: it holds ``records`` records."""
        report = _state.report
        if report is not None:
            report.sizes.append((self.unit, int(records)))


def claim_unit() -> ClaimedUnit | None:
    """A reader claims the unit it just dequeued (the last one taken), when
    this thread evaluates a resumable batcher's source."""
    if _state.report is None or not _state.pending:
        return None
    units, filters = _state.pending.pop()
    if units.shape[0] != 1:
        return None
    unit = int(units[0])
    return ClaimedUnit(unit, filters.get(unit))


_seam.install(claim_unit)
