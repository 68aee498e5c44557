"""How readers report positions: the one seam between readers and resumption.

In a resumable pipeline every row a batcher enqueues carries a *position*
(``unit << 32 | record``; ``feedq._resume.report``). A reader knows the
record part: it claims the work unit it just dequeued from the filename
queue (:func:`claim_unit`) and, through the :class:`Unit` it got, reports
the records it returns and the unit's size when it reaches its end. It
knows nothing else of resumption: ``feedq._resume.report`` fills this seam
(:func:`install`) when it is imported; until then (or outside a resumable
pipeline's batcher) :func:`claim_unit` returns None and readers report
nothing.

This module imports nothing from feedq: readers sit below ``feedq._resume``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = ["Unit", "UnitFilter", "claim_unit", "install"]


class UnitFilter(Protocol):
    """Which records of a re-read unit a reader returns (the others were
    delivered before the state was saved)."""

    def keep(self, records: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Bool mask over ``records`` (record indices) of those to return."""


class Unit(Protocol):
    """A work unit a reader claimed: where it reports the records it reads.

    Attributes:
        filter: the records to return on a re-read after a restore, or None
            (all of them).
    """

    @property
    def filter(self) -> UnitFilter | None: ...

    def report_range(self, first: int, count: int) -> None:
        """The reader returns records ``first .. first + count - 1``."""

    def report_rows(self, records: np.ndarray[Any, Any]) -> None:
        """The reader returns these records (indices, after the filter)."""

    def report_size(self, records: int) -> None:
        """The reader finished the unit: it holds ``records`` records."""


def _no_unit() -> Unit | None:
    return None


_claim: Callable[[], Unit | None] = _no_unit


def claim_unit() -> Unit | None:
    """The unit a reader just dequeued, when this thread is evaluating a
    resumable batcher's source; None otherwise (report nothing)."""
    return _claim()


def install(claim: Callable[[], Unit | None]) -> None:
    """For ``feedq._resume.report``: what :func:`claim_unit` asks."""
    global _claim
    _claim = claim
