"""Batch structure: how a feeder's batch splits into components and back.

A batch is a bare array, a list or tuple of arrays, or a dict of arrays, all
with the same leading (batch) dimension. The feeder flattens each batch into
its components once, moves the components, and packs them back into the
source's structure for the consumer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from feedq.errors import InvalidArgumentError

__all__ = ["Structure", "split_bounds"]


@dataclasses.dataclass(frozen=True)
class Structure:
    kind: Literal["bare", "list", "tuple", "dict"]
    keys: tuple[Any, ...]

    @classmethod
    def of(cls, batch: Any) -> Structure:
        """The structure of an iterable's (first) batch."""
        if isinstance(batch, Mapping):
            return cls("dict", tuple(batch.keys()))
        if isinstance(batch, (list, tuple)):
            return cls("tuple" if isinstance(batch, tuple) else "list", tuple(range(len(batch))))
        return cls("bare", (0,))

    @classmethod
    def of_queue(cls, queue: Any) -> Structure:
        """The structure a queue's dequeue_many returns (Q4)."""
        names = getattr(queue, "names", None)
        if names:
            return cls("dict", tuple(names))
        count = len(queue.dtypes)
        return cls("bare", (0,)) if count == 1 else cls("list", tuple(range(count)))

    def flatten(self, batch: Any, where: str) -> list[np.ndarray[Any, Any]]:
        """The batch's components as arrays, checked against this structure.

        Raises:
            InvalidArgumentError: another structure, or unequal leading dimensions.
        """
        if self.kind == "bare":
            if isinstance(batch, (Mapping, list, tuple)):
                raise InvalidArgumentError(f"{where}: expected one array like the first batch, "
                                           f"got a {type(batch).__name__}")
            comps = [batch]
        elif self.kind == "dict":
            if not isinstance(batch, Mapping) or tuple(batch.keys()) != self.keys:
                got = list(batch.keys()) if isinstance(batch, Mapping) else type(batch).__name__
                raise InvalidArgumentError(
                    f"{where}: expected a dict with keys {list(self.keys)}, got {got}")
            comps = [batch[k] for k in self.keys]
        else:
            if (isinstance(batch, Mapping) or not isinstance(batch, (list, tuple))
                    or len(batch) != len(self.keys)):
                raise InvalidArgumentError(
                    f"{where}: expected a {self.kind} of {len(self.keys)} arrays like the first "
                    f"batch, got {type(batch).__name__}")
            comps = list(batch)
        arrays = [c if isinstance(c, np.ndarray) else np.asarray(c) for c in comps]
        rows = {a.shape[0] if a.ndim else None for a in arrays}
        if None in rows or len(rows) != 1:
            raise InvalidArgumentError(
                f"{where}: every component needs the same leading (batch) dimension, got shapes "
                f"{[list(a.shape) for a in arrays]}")
        return arrays

    def pack(self, comps: Sequence[Any]) -> Any:
        """Components back into this structure."""
        if self.kind == "bare":
            return comps[0]
        if self.kind == "dict":
            return dict(zip(self.keys, comps))
        return tuple(comps) if self.kind == "tuple" else list(comps)


def split_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    # np.array_split's sizes: the first rows % parts shards get one extra row.
    q, r = divmod(rows, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + q + (1 if i < r else 0)
        bounds.append((start, stop))
        start = stop
    return bounds
