"""The consumer side of resumption: what was delivered, by position.

A :class:`Ledger` belongs to a resumable batcher's stage. Every evaluation
taken from the stage gets a ticket (``Stage.taken`` counts them) and its
rows' positions are filed; every ``_APPLY_EVERY`` tickets, and before any
state is read, the filed positions and the runner's reports are applied in
one batch, vectorised (no Python work per record, a few NumPy calls per
batch of tickets):

* units (producer elements) are *closed* once every record was delivered
  (their size is reported by the reader that read them to the end; an
  element that is itself the data is one record). Closed units live in one
  bitmap over unit ids, from the oldest unit not closed to the newest
  handed out;
* a unit not closed keeps a bitmap of its delivered records.

The state as of ticket ``upto`` is then: the stream position (one past the
newest unit handed out), the units not closed with their delivered records
as ranges (``skip``), and, for a deterministic batcher, the exact part (see
``feedq._resume.state``). Tickets in ``[upto, taken)`` count as not delivered; the last
:data:`WINDOW` tickets are kept for that.
"""

from __future__ import annotations

import base64
import threading
import zlib
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq._resume import positions as layout
from feedq._resume.report import Report
from feedq.errors import InvalidArgumentError

if TYPE_CHECKING:
    from feedq._resume.snapshot_log import SnapshotLog

__all__: list[str] = []

#: Tickets kept for ``state_dict(upto=...)`` (older ``upto`` is refused).
WINDOW = 1024
#: Shuffle-buffer snapshots kept for tickets already taken.
SNAPSHOT_WINDOW = 128
_MASK = layout.RECORD_MASK
# Reports noted and tickets delivered are applied in batches of this many.
_APPLY_EVERY = 32


def pack(arr: np.ndarray[Any, Any]) -> str:
    """An int64 array as text: little-endian bytes, zlib, base64.

    States hold str, not arrays or bytes, so that ``torch.load`` with
    ``weights_only=True`` (PyTorch's default) accepts them.
    """
    raw = np.ascontiguousarray(arr, dtype="<i8").tobytes()
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def unpack(data: str) -> np.ndarray[Any, Any]:
    """The int64 array :func:`pack` wrote.

    Raises:
        InvalidArgumentError: not what pack() writes.
    """
    try:
        raw = zlib.decompress(base64.b64decode(data.encode("ascii"), validate=True))
    except (ValueError, AttributeError, zlib.error) as exc:
        raise InvalidArgumentError(f"not a feedq state: a packed array is corrupt ({exc})") from None
    if len(raw) % 8:
        raise InvalidArgumentError("not a feedq state: a packed array is corrupt")
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)


def bits_to_ranges(bits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``[k, 2]`` half-open ranges of the True runs of a bool array."""
    if bits.shape[0] == 0:
        return np.zeros((0, 2), dtype=np.int64)
    padded = np.concatenate(([False], bits, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return edges.reshape(-1, 2).astype(np.int64)


def ranges_to_bits(ranges: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The bool array whose True runs are ``ranges``."""
    size = int(ranges[:, 1].max()) if ranges.shape[0] else 0
    delta = np.zeros(size + 1, dtype=np.int64)
    np.add.at(delta, ranges[:, 0], 1)
    np.add.at(delta, ranges[:, 1], -1)
    return np.cumsum(delta[:-1]) > 0


@dataclass
class _Records:
    """Delivered records of one unit not closed."""

    bits: np.ndarray[Any, Any]
    count: int
    last_ticket: int

    def add(self, recs: np.ndarray[Any, Any], ticket: int) -> None:
        top = int(recs.max()) + 1
        if top > self.bits.shape[0]:
            grown = np.zeros(max(top, 2 * self.bits.shape[0]), dtype=bool)
            grown[: self.bits.shape[0]] = self.bits
            self.bits = grown
        fresh = ~self.bits[recs]
        self.count += int(np.count_nonzero(fresh))
        self.bits[recs] = True
        self.last_ticket = ticket


@dataclass
class Snapshot:
    """A shuffle buffer right after a draw: positions in storage order, its
    generator's state, rows fed so far and the position of the last fed row."""

    buffer: np.ndarray[Any, Any]
    rng: dict[str, Any]
    fed: int
    last: int | None


@dataclass
class AnyView:
    """What remains to deliver, in any order: units not closed (with their
    delivered records) and the stream position."""

    next: int
    units: np.ndarray[Any, Any]
    skips: dict[int, np.ndarray[Any, Any]]


class Ledger:
    """Delivered positions of one stage (see the module docstring).

    Args:
        single: every unit is one record (the producer's elements are the data).
    """

    def __init__(self, single: bool) -> None:
        self.single = single
        self._lock = threading.Lock()
        self.taken = 0  # guarded by self._lock
        self._base = 0  # every unit id below is closed
        self._closed = np.zeros(0, dtype=bool)  # ids base.. ; guarded by self._lock
        self._next = 0  # one past the newest unit id handed out
        self._worklist_closed = np.zeros(0, dtype=bool)
        self._records: dict[int, _Records] = {}
        self._sizes: dict[int, int] = {}
        # (ticket, positions) of the last WINDOW tickets.
        self._window: deque[tuple[int, np.ndarray[Any, Any]]] = deque(maxlen=WINDOW)
        # (last ticket, smallest unit id) of each batch of tickets applied.
        self._lows: deque[tuple[int, int]] = deque()
        # Reports noted and positions delivered, not yet applied (see _apply).
        self._reports: list[Report] = []
        self._delivered: list[np.ndarray[Any, Any]] = []
        # Exact mode with a shuffle buffer: its snapshots by draw (set by the buffer).
        self.snapshots: SnapshotLog | None = None
        self.untraceable: str | None = None
        self.foreign_producer = False

    # -- runner side --------------------------------------------------------------

    def note(self, report: Report, producer: Any) -> None:
        """What one evaluation of the batcher's source handed out and finished
        (applied later, with others: see :meth:`_apply`)."""
        with self._lock:
            if report.foreign(producer):
                self.foreign_producer = True
            self._reports.append(report)
            if len(self._reports) >= _APPLY_EVERY:
                self._apply_reports()

    def untrace(self, why: str) -> None:
        """Rows without positions went through: state_dict() must refuse."""
        with self._lock:
            if self.untraceable is None:
                self.untraceable = why

    # -- consumer side ------------------------------------------------------------

    def deliver(self, taken: np.ndarray[Any, Any]) -> int:
        """Record one evaluation taken by the consumer; its ticket.

        This runs on every take, so it only files the positions: they are
        applied to the bitmaps every :data:`_APPLY_EVERY` tickets, and before
        any state is read (:meth:`_apply`), a few NumPy calls for them all.
        """
        positions = np.asarray(taken, dtype=np.int64).reshape(-1)
        with self._lock:
            ticket = self.taken
            self.taken = ticket + 1
            self._window.append((ticket, positions))
            self._delivered.append(positions)
            if len(self._delivered) >= _APPLY_EVERY:
                self._apply()
            return ticket

    # -- applying (lock held) -----------------------------------------------------

    def _apply(self) -> None:
        """Apply what was noted and delivered since the last call, then prune."""
        self._apply_reports()
        parts = self._delivered
        if parts:
            self._delivered = []
            self._apply_positions(np.concatenate(parts) if len(parts) > 1 else parts[0])
            self._prune()

    def _apply_reports(self) -> None:
        reports, self._reports = self._reports, []
        if not reports:
            return
        base = layout.WORKLIST_BASE
        handed = [ids for r in reports for ids in r.handed if ids.shape[0]]
        if handed:
            ids = np.concatenate(handed) if len(handed) > 1 else handed[0]
            top = int(ids.max()) + 1
            if top > base:  # work-list units among them
                normal = ids[ids < base]
                top = int(normal.max()) + 1 if normal.shape[0] else 0
            if top > self._next:
                self._next = top
                self._grow(top)
        for report in reports:
            if not self.single and not report.reader_rows:
                for ids in report.unclaimed:  # the producer's elements are the rows
                    for u in ids.tolist():
                        self._sizes[u] = 1
            for unit, size in report.sizes:
                self._sizes[unit] = size
                rec = self._records.get(unit)
                if size == 0 or (rec is not None and rec.count >= size):
                    self._close(np.array([unit], dtype=np.int64))

    def _apply_positions(self, positions: np.ndarray[Any, Any]) -> None:
        """Positions delivered by the tickets up to ``taken - 1``."""
        ticket = self.taken - 1
        if positions.shape[0] == 0:
            return
        lo = int(positions.min()) >> layout.UNIT_SHIFT
        self._lows.append((ticket, lo))
        if lo < 0:
            if self.untraceable is None:
                self.untraceable = "rows of unknown origin were delivered"
            return
        hi = int(positions.max()) >> layout.UNIT_SHIFT
        if self.single:
            units = positions >> layout.UNIT_SHIFT
            if hi < layout.WORKLIST_BASE and lo >= self._base:
                # Stream units only (the usual case): one scatter.
                top = hi + 1
                if top > self._next:  # delivered before its hand-out was noted
                    self._next = top
                self._grow(top)
                units -= self._base
                self._closed[units] = True
            else:
                self._close(units)
        elif lo == hi:
            self._add_records(lo, positions & _MASK, ticket)
        else:
            # Group by unit: one sort, then a slice per unit.
            positions = np.sort(positions)
            units = positions >> layout.UNIT_SHIFT
            cuts = (np.flatnonzero(units[1:] != units[:-1]) + 1).tolist()
            recs = positions & _MASK
            for a, b in zip([0, *cuts], [*cuts, positions.shape[0]]):
                self._add_records(int(units[a]), recs[a:b], ticket)

    def _add_records(self, unit: int, recs: np.ndarray[Any, Any], ticket: int) -> None:
        """Records ``recs`` of ``unit`` were delivered."""
        rec = self._records.get(unit)
        if rec is None:
            rec = self._records[unit] = _Records(np.zeros(0, dtype=bool), 0, ticket)
        rec.add(recs, ticket)
        size = self._sizes.get(unit)
        if size is not None and rec.count >= size:
            self._close(np.array([unit], dtype=np.int64))

    # -- state --------------------------------------------------------------------

    def check_upto(self, upto: int | None) -> int:
        """``upto`` checked against the tickets kept (None: all taken)."""
        with self._lock:
            self._apply()
            if self.untraceable is not None:
                raise InvalidArgumentError(f"this pipeline cannot be resumed: {self.untraceable}")
            if self.foreign_producer:
                raise InvalidArgumentError(
                    "this pipeline cannot be resumed: rows came from more than one producer"
                )
            taken = self.taken
            if upto is None:
                return taken
            if isinstance(upto, bool) or not isinstance(upto, (int, np.integer)) or upto < 0:
                raise InvalidArgumentError(f"upto must be an int >= 0, got {upto!r}")
            oldest = taken - len(self._window)
            if upto > taken or upto < oldest:
                raise InvalidArgumentError(
                    f"state_dict(upto={upto}): tickets {oldest}..{taken} are known "
                    f"(the last {WINDOW} evaluations taken)"
                )
            return int(upto)

    def last_position(self, upto: int) -> int | None:
        """The position of the last row of ticket ``upto - 1`` (None for 0)."""
        with self._lock:
            for ticket, positions in reversed(self._window):
                if ticket == upto - 1:
                    return int(positions[-1]) if positions.shape[0] else None
        return None

    def snapshot(self, upto: int) -> Snapshot:
        """The shuffle buffer as of ticket ``upto``.

        Raises:
            InvalidArgumentError: that snapshot is no longer kept.
        """
        log = self.snapshots
        snap = None if log is None else log.get(upto - 1)
        if snap is None:
            raise InvalidArgumentError(
                f"state_dict(upto={upto}): the shuffle buffer's snapshot for it is gone (kept for "
                f"the last {SNAPSHOT_WINDOW} evaluations taken)"
            )
        return snap

    def any_view(self, upto: int) -> AnyView:
        """Units not closed and their delivered records, as of ticket ``upto``."""
        with self._lock:
            self._apply()
            extra = [t for ticket, t in self._window if ticket >= upto and t.shape[0]]
            undo = np.concatenate(extra) if extra else np.zeros(0, dtype=np.int64)
            closed = self._closed[: self._next - self._base].copy()
            wl_closed = self._worklist_closed.copy()
            undo_units = undo >> layout.UNIT_SHIFT
            normal = undo_units[undo_units < layout.WORKLIST_BASE] - self._base
            closed[normal[(normal >= 0) & (normal < closed.shape[0])]] = False
            wl = undo_units[undo_units >= layout.WORKLIST_BASE] - layout.WORKLIST_BASE
            wl_closed[wl[wl < wl_closed.shape[0]]] = False
            units = np.concatenate((
                self._base + np.flatnonzero(~closed),
                layout.WORKLIST_BASE + np.flatnonzero(~wl_closed),
            )).astype(np.int64)
            skips: dict[int, np.ndarray[Any, Any]] = {}
            if not self.single:
                undo_recs = undo & _MASK
                for u in units.tolist():
                    rec = self._records.get(u)
                    if rec is None or rec.count == 0:
                        continue
                    bits = rec.bits
                    mine = undo_recs[undo_units == u]
                    if mine.shape[0]:
                        bits = bits.copy()
                        bits[mine] = False
                    ranges = bits_to_ranges(bits)
                    if ranges.shape[0]:
                        skips[u] = ranges
            return AnyView(self._next, units, skips)

    def load(self, view: AnyView, worklist_size: int) -> None:
        """Start from a saved view (before anything ran)."""
        with self._lock:
            normal = view.units[view.units < layout.WORKLIST_BASE]
            self._next = view.next
            self._base = int(normal.min()) if normal.shape[0] else view.next
            self._closed = np.ones(self._next - self._base, dtype=bool)
            self._closed[normal - self._base] = False
            self._worklist_closed = np.zeros(worklist_size, dtype=bool)
            for u, ranges in view.skips.items():
                bits = ranges_to_bits(ranges)
                self._records[u] = _Records(bits, int(np.count_nonzero(bits)), -1)

    # -- helpers (lock held) ------------------------------------------------------

    def _grow(self, top: int) -> None:
        need = top - self._base
        if need > self._closed.shape[0]:
            grown = np.zeros(max(need, 2 * self._closed.shape[0], 64), dtype=bool)
            grown[: self._closed.shape[0]] = self._closed
            self._closed = grown

    def _close(self, units: np.ndarray[Any, Any]) -> None:
        normal = units[units < layout.WORKLIST_BASE]
        if normal.shape[0]:
            top = int(normal.max()) + 1
            if top > self._next:  # delivered before its hand-out was noted
                self._next = top
            self._grow(top)
            idx = normal - self._base
            self._closed[idx[idx >= 0]] = True
        wl = units[units >= layout.WORKLIST_BASE] - layout.WORKLIST_BASE
        if wl.shape[0]:
            self._worklist_closed[wl[wl < self._worklist_closed.shape[0]]] = True

    def _prune(self) -> None:
        """Advance the closed prefix (not past a unit of a kept ticket) and
        forget closed units no kept ticket refers to."""
        oldest = self.taken - len(self._window)
        lows = self._lows
        while lows and lows[0][0] < oldest:
            lows.popleft()
        lo = min((low for _, low in lows), default=self._next)
        span = self._closed[: self._next - self._base]
        first_open = int(np.argmin(span)) if span.shape[0] and not span.all() else span.shape[0]
        shift = max(0, min(first_open, lo - self._base))
        if shift:
            self._closed = self._closed[shift:].copy()
            self._base += shift
        if self.snapshots is not None:
            self.snapshots.prune(self.taken - 1 - SNAPSHOT_WINDOW)
        for u in [u for u, r in self._records.items() if r.last_ticket < oldest]:
            if u < layout.WORKLIST_BASE and (u < self._base or self._closed[u - self._base]):
                del self._records[u]
                self._sizes.pop(u, None)
