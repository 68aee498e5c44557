"""PaddingFIFOQueue: a FIFOQueue whose components may have unknown
dimensions, padded at dequeue_many (Q34–Q38)."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq.queues._fifo import FIFOQueue
from feedq.queues._queue import QueueBase
from feedq.queues._spec import STRING, Component

__all__ = ["PaddingFIFOQueue"]


class PaddingFIFOQueue(FIFOQueue):
    """A FIFOQueue whose components may have unknown dimensions (Q34–Q38).

    ``shapes`` is required: one shape of known rank per component, with
    ``None`` for dimensions that vary. ``dequeue`` returns an element with its
    own shape (Q36); ``dequeue_many`` / ``dequeue_up_to`` pad every ``None``
    dimension at the end to the largest size in the batch (Q37) with 0,
    ``b""`` or False — or with ``padding_values`` (one scalar per component),
    a feedq addition.
    """

    _kind = "PaddingFIFOQueue"
    _default_name = "padding_fifo_queue"
    _partial_shapes = True

    def __init__(
        self,
        capacity: int,
        dtypes: Any,
        shapes: Any,
        names: Any = None,
        shared_name: str | None = None,
        name: str | None = None,
        padding_values: Any = None,
    ) -> None:
        QueueBase.__init__(
            self, capacity, dtypes, shapes, names, shared_name, name, padding_values=padding_values
        )

    def _validate_storage_args(
        self, capacity: int, components: list[Component], args: dict[str, Any]
    ) -> None:
        values = args.pop("padding_values")
        if values is None:
            pads = [b"" if c.dtype is STRING else c.dtype.type(0) for c in components]
        else:
            if not isinstance(values, (list, tuple)):
                values = [values]
            if len(values) != len(components):
                raise ValueError(
                    f"padding_values must have one value per component: {len(values)} != {len(components)}"
                )
            pads = [
                np.asarray(
                    Component(c.index, c.dtype, ()).convert_one(v, f"{self._kind} padding value {c.index}"),
                    dtype=c.dtype,
                )[()]
                for c, v in zip(components, values)
            ]
        args["padding_values"] = tuple(pads)
        super()._validate_storage_args(capacity, components, {})

    def _pad(self, comp: Component, parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        assert comp.shape is not None
        rows = [r for part in parts for r in part]
        fill = self._storage_args["padding_values"][comp.index]
        if len(comp.shape) == 1 and rows:
            # A vector of varying length (the common case): all rows at once.
            lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
            width = int(lens.max())
            if int(lens.min()) == width:  # rows of one enqueued block: no padding
                padded = np.empty((len(rows), width), dtype=comp.dtype)
                np.concatenate(rows, out=padded.reshape(-1))
                return padded
            padded = np.full((len(rows), width), fill, dtype=comp.dtype)
            padded[np.arange(width) < lens[:, None]] = np.concatenate(rows)
            return padded
        dims = [
            d if d is not None else max((r.shape[j] for r in rows), default=0)
            for j, d in enumerate(comp.shape)
        ]
        out = np.full((len(rows), *dims), fill, dtype=comp.dtype)
        for i, r in enumerate(rows):
            index: tuple[Any, ...] = (i, *(slice(0, s) for s in r.shape))
            out[index] = r
        return out
