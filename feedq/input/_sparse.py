"""Sparse components in batchers (B12: SparseTensor inputs).

A component of a batcher's input may be a sparse value: a
:class:`feedq.readers.SparseTensorValue` (what ``parse_single_example``
returns for a ``VarLenFeature``) or anything with ``indices``, ``values``
and ``dense_shape``. One element's value has ``indices`` ``[N, rank]``,
``values`` ``[N]`` and ``dense_shape`` ``[rank]``; with ``enqueue_many`` a
value holds a block of rows (rank + 1, the first index is the row).

How it travels: as in TF1 (B12), each element's sparse value is kept in a
side table of its stage and an int64 *handle* goes through the queue in its
place. The queues stay dense, so every queue kind, ``dynamic_pad`` and the
shuffle buffer work unchanged, and a shuffled batch takes its values with
its handles. The stage turns a batch of handles back into ONE sparse value,
TF's SparseTensor batching: every index gains the element's position in the
batch as its first coordinate, values are concatenated in batch order, and
``dense_shape`` is ``[batch, max over the elements of each dimension]``.

A handle's value leaves the table when its element is dequeued; elements
never dequeued (a stop mid-way, leftovers dropped at the end, X4) stay in
the table until the stage is garbage collected.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedq._core.arrays import as_dtype
from feedq.errors import InvalidArgumentError
from feedq.queues import STRING
from feedq.readers import SparseTensorValue, VarLenFeature

__all__ = [
    "SparseCodec",
    "SparseTable",
    "batch_sparse",
    "check_sparse",
    "is_sparse",
    "is_sparse_spec",
    "sparse_dtype",
    "split_rows",
]


def is_sparse(value: Any) -> bool:
    """True for a sparse value (``indices``, ``values`` and ``dense_shape``)."""
    return all(hasattr(value, a) for a in ("indices", "values", "dense_shape")) and not isinstance(
        value, np.ndarray
    )


def is_sparse_spec(dtype: Any) -> bool:
    """True for a ``dtypes=`` entry declaring a sparse component: a
    :class:`feedq.readers.VarLenFeature` (its ``dtype`` is the values' dtype)."""
    return isinstance(dtype, VarLenFeature)


def check_sparse(value: Any, rank: int, dtype: np.dtype[Any], where: str) -> SparseTensorValue:
    """Validate one sparse value of ``rank`` dense dimensions.

    Returns:
        The value as a SparseTensorValue of int64 indices ``[N, rank]``,
        values ``[N]`` of ``dtype`` and int64 ``dense_shape`` ``[rank]``.

    Raises:
        InvalidArgumentError: not a sparse value, or parts that do not fit.
        TypeError: values of another dtype that cannot be cast without loss.
    """
    if not is_sparse(value):
        raise InvalidArgumentError(
            f"{where} is sparse: expected a SparseTensorValue, got {type(value).__name__}"
        )
    indices = np.asarray(value.indices)
    values = np.asarray(value.values, dtype=object if dtype is STRING else None)
    dense_shape = np.asarray(value.dense_shape)
    if dense_shape.shape != (rank,):
        raise InvalidArgumentError(
            f"{where} is sparse of rank {rank}: dense_shape must have shape [{rank}], "
            f"got {list(dense_shape.shape)}"
        )
    if values.ndim != 1:
        raise InvalidArgumentError(f"{where}: sparse values must be a vector, got shape {list(values.shape)}")
    if indices.size == 0:
        indices = indices.reshape(0, rank)
    if indices.shape != (len(values), rank):
        raise InvalidArgumentError(
            f"{where}: sparse indices must have shape [{len(values)}, {rank}] for {len(values)} "
            f"values, got {list(indices.shape)}"
        )
    if indices.dtype.kind not in "iu" or dense_shape.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{where}: sparse indices and dense_shape must be integers")
    if dtype is not STRING and values.dtype != dtype:
        if values.size and not np.can_cast(values.dtype, dtype, "safe"):
            raise TypeError(
                f"{where} has dtype {dtype}; cannot convert sparse values of dtype {values.dtype} "
                "without loss"
            )
        values = values.astype(dtype)
    return SparseTensorValue(indices.astype(np.int64, copy=False), values,
                             dense_shape.astype(np.int64, copy=False))


def split_rows(value: SparseTensorValue) -> np.ndarray[Any, Any]:
    """Cut a block of rows (``enqueue_many``) into one sparse value per row.

    Row ``r`` keeps the indices whose first coordinate is ``r``, without it,
    and ``dense_shape[1:]`` (as TF1's ``AddManySparseToTensorsMap``).

    Returns:
        An object array of ``dense_shape[0]`` SparseTensorValues.
    """
    rows = int(value.dense_shape[0])
    first = value.indices[:, 0]
    order = np.argsort(first, kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        first = first[order]
        value = SparseTensorValue(value.indices[order], value.values[order], value.dense_shape)
    if len(first) and (first[0] < 0 or first[-1] >= rows):
        raise InvalidArgumentError(
            f"sparse index {int(first[-1] if first[-1] >= rows else first[0])} is out of the "
            f"{rows} rows of dense_shape {value.dense_shape.tolist()}"
        )
    bounds = np.searchsorted(first, np.arange(rows + 1))
    inner = value.indices[:, 1:]
    shape = value.dense_shape[1:]
    out = np.empty(rows, dtype=object)
    for r in range(rows):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        out[r] = SparseTensorValue(inner[lo:hi], value.values[lo:hi], shape)
    return out


def batch_sparse(values: list[SparseTensorValue], rank: int, dtype: np.dtype[Any]) -> SparseTensorValue:
    """One sparse value for a batch of per-element values (TF's SparseTensor
    batching): indices ``[N, 1 + rank]`` with the element's batch position
    first, values concatenated in batch order, ``dense_shape`` ``[batch] +
    max of each dimension``."""
    count = len(values)
    lengths = np.fromiter((len(v.values) for v in values), dtype=np.int64, count=count)
    if count:
        inner = np.concatenate([v.indices for v in values]).reshape(-1, rank)
        flat = np.concatenate([v.values for v in values])
        dims = np.max(np.stack([v.dense_shape for v in values]), axis=0)
    else:
        inner = np.zeros((0, rank), dtype=np.int64)
        flat = np.empty(0, dtype=dtype)
        dims = np.zeros(rank, dtype=np.int64)
    lead = np.repeat(np.arange(count, dtype=np.int64), lengths)
    indices = np.concatenate([lead[:, None], inner.astype(np.int64, copy=False)], axis=1)
    if flat.dtype != dtype:
        flat = flat.astype(dtype)
    dense_shape = np.concatenate([np.array([count], dtype=np.int64), dims.astype(np.int64)])
    return SparseTensorValue(indices, flat, dense_shape)


class SparseTable:
    """The side table of a stage's sparse values, keyed by int64 handles.

    Runner threads :meth:`put` values and enqueue the handles; the stage
    :meth:`take` s them back when it dequeues the handles. Thread safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0  # guarded by self._lock
        self._values: dict[int, SparseTensorValue] = {}  # guarded by self._lock

    def __len__(self) -> int:
        """Values stored and not yet taken."""
        with self._lock:
            return len(self._values)

    def put(self, value: SparseTensorValue) -> np.int64:
        """Store one value; its handle."""
        with self._lock:
            handle = self._next
            self._next += 1
            self._values[handle] = value
        return np.int64(handle)

    def put_rows(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Store one value per row; their handles, an int64 vector."""
        with self._lock:
            start = self._next
            self._next += len(rows)
            for i, value in enumerate(rows):
                self._values[start + i] = value
        return np.arange(start, start + len(rows), dtype=np.int64)

    def take(self, handles: Any) -> list[SparseTensorValue]:
        """Remove and return the values of ``handles`` (a vector), in order."""
        with self._lock:
            return [self._values.pop(int(h)) for h in np.asarray(handles).reshape(-1)]


def sparse_dtype(spec: Any) -> np.dtype[Any]:
    """The values' dtype of a sparse ``dtypes=`` entry (a VarLenFeature)."""
    dtype = getattr(spec, "dtype", spec)
    return as_dtype(getattr(dtype, "as_numpy_dtype", dtype))  # tf.int64 & co. too


class SparseCodec:
    """What a batcher's runner threads do with the sparse components of the
    values a source gives: validate them, cut blocks into rows, and swap
    each element's value for a handle in ``table``.

    Args:
        sparse: per component, whether it is sparse.
        ranks: per component, the rank of one element (sparse ones only).
        dtypes: per component, the values' dtype.
        labels: per component, how errors name it.
        table: where the values go.
    """

    def __init__(
        self,
        sparse: list[bool],
        ranks: list[int],
        dtypes: list[np.dtype[Any]],
        labels: list[str],
        table: SparseTable,
    ) -> None:
        self._which = [i for i, sp in enumerate(sparse) if sp]
        self._ranks = ranks
        self._dtypes = dtypes
        self._labels = labels
        self.table = table

    def rows(self, values: list[Any], many: bool) -> list[Any]:
        """Validated values; with ``many``, each sparse block as an object
        array of per-row values (so masks and slices apply to it as to a
        dense component)."""
        out = list(values)
        for i in self._which:
            rank = self._ranks[i] + (1 if many else 0)
            value = check_sparse(values[i], rank, self._dtypes[i], self._labels[i])
            out[i] = split_rows(value) if many else value
        return out

    def encode(self, values: list[Any], many: bool) -> list[Any]:
        """The values with each sparse one (from :meth:`rows`) replaced by its handle(s)."""
        out = list(values)
        for i in self._which:
            out[i] = self.table.put_rows(values[i]) if many else self.table.put(values[i])
        return out
