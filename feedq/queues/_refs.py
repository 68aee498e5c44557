"""Dropping the references an object column holds to elements handed out
(a queue keeps no reference to an element it handed out): helpers of the
queue kinds' storage hooks."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["clear_refs", "clear_ring"]


def clear_ring(buf: np.ndarray[Any, Any], alloc: int, pos: int, k: int) -> None:
    """Drop the references in ``k`` slots of an object ring column from ``pos``."""
    first = min(k, alloc - pos)
    buf[pos : pos + first] = None
    if k > first:
        buf[: k - first] = None


def clear_refs(buf: np.ndarray[Any, Any], index: Any) -> None:
    """Drop references held by an object column (a queue keeps no reference
    to an element it handed out)."""
    if buf.dtype == object:
        buf[index] = None
