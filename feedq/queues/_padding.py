"""PaddingFIFOQueue: a FIFOQueue whose components may have unknown
dimensions, padded at dequeue_many (Q34–Q38).

A component of shape ``[None]`` holding numbers or bools (a
FixedLenSequenceFeature's ids behind ``dynamic_pad``) is stored in blocks:
an ``enqueue_many`` keeps one copy of its batch (a :class:`_Block`: the
values, flat, and the rows' width) and its ring column holds, per element,
two references: the block and the row's index in it. No array and no int is
made per row. A ``dequeue_many`` whose rows are consecutive rows of one
block -- the common case -- is one slice copy of the block (rows of one
``enqueue_many`` share its width, Q38), or one ``pad_ragged`` call for a
block of rows of several lengths (a ``put_back`` of per-element rows). Other
batches (elements enqueued one at a time, rows of several blocks, rows put
back out of order) are gathered into one flat array and padded by one
``pad_ragged`` call. An element enqueued alone is stored as itself.
Strings and components of higher rank keep one array per element
(:class:`ElementCodec`'s storage), padded by NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq import _native
from feedq.queues._fifo import FIFOQueue
from feedq.queues._queue import QueueBase
from feedq.queues._spec import STRING, Component, ElementCodec

__all__ = ["PaddingFIFOQueue"]

# A block row's slot holds the block and the row's index in it (a Python
# int: the column holds references); an element enqueued alone is stored as
# itself (an ndarray, not a _Block) and its index slot is not read.
_SINGLE = -1
# Row indices 0..n-1 as Python ints, made once (a block column references
# them: no int made per row); blocks of more rows make their own.
_CACHED_ROWS = 1 << 16
_row_index: list[np.ndarray[Any, Any]] = [np.arange(8192).astype(object)]


def _row_indices(n: int) -> np.ndarray[Any, Any]:
    idx = _row_index[0]
    if n > len(idx):
        if n > _CACHED_ROWS:
            return np.arange(n).astype(object)
        idx = np.arange(min(_CACHED_ROWS, max(n, 2 * len(idx)))).astype(object)
        _row_index[0] = idx  # one reference swap: a racing thread builds its own
    return idx[:n]


class _Block:
    """The queue's copy of a batch's rows of one component (never changed).

    Row ``r`` is ``values[r * width : (r + 1) * width]`` when ``width >= 0``
    (every row of an enqueued batch has the batch's row shape, Q38), else
    ``values[splits[r] : splits[r + 1]]``.
    """

    __slots__ = ("splits", "values", "width")

    def __init__(self, values: np.ndarray[Any, Any], width: int, splits: np.ndarray[Any, Any] | None) -> None:
        self.values = values
        self.width = width
        self.splits = splits

    def row(self, r: int) -> np.ndarray[Any, Any]:
        """Row ``r`` (a view of the block)."""
        if self.width >= 0:
            return self.values[r * self.width : (r + 1) * self.width]
        assert self.splits is not None
        return self.values[int(self.splits[r]) : int(self.splits[r + 1])]

    def column(self, n: int) -> np.ndarray[Any, Any]:
        """The stored column of its ``n`` rows: (block, row index) each."""
        col = np.empty((n, 2), dtype=object)
        col[:, 0] = self
        col[:, 1] = _row_indices(n)
        return col


def _rows_block(rows: list[np.ndarray[Any, Any]], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """The stored column of per-element rows (converted, each its own copy)."""
    n = len(rows)
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    values = np.concatenate(rows) if n else np.empty(0, dtype)
    if n and int(lens.min()) == int(lens.max()):
        return _Block(values, int(lens[0]), None).column(n)
    splits = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=splits[1:])
    return _Block(values, -1, splits).column(n)


def _single_column(value: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    col = np.empty((1, 2), dtype=object)
    col[0, 0] = value
    col[0, 1] = _SINGLE
    return col


def _element(ref: Any, code: Any) -> np.ndarray[Any, Any]:
    """The element a stored (reference, row index) pair stands for."""
    if type(ref) is _Block:
        return ref.row(code)
    return ref  # type: ignore[no-any-return]


def _unpadded(col: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A stored block column as a 1-D object array of the elements."""
    out = np.empty(len(col), dtype=object)
    for j, (ref, code) in enumerate(col.tolist()):
        out[j] = _element(ref, code)
    return out


def _pad_blocks(col: np.ndarray[Any, Any], dtype: np.dtype[Any], fill: Any, in_order: bool) -> np.ndarray[Any, Any]:
    """A stored block column's elements padded at the end to the longest (Q37).

    ``in_order``: the rows were taken from a ring that holds its rows in
    enqueue order (no put-back ever), so a first and a last row ``k - 1``
    rows apart in one block have that block's rows between them.
    """
    k = len(col)
    if k == 0:
        return np.empty((0, 0), dtype=dtype)
    first, last = col[0], col[k - 1]
    if in_order and type(first[0]) is _Block and first[0] is last[0] and last[1] - first[1] == k - 1:
        # Consecutive rows of one block: one copy (or one pad_ragged call).
        blk: _Block = first[0]
        r0 = first[1]
        if blk.width >= 0:
            w = blk.width
            return blk.values[r0 * w : (r0 + k) * w].reshape(k, w).copy()
        assert blk.splits is not None
        return _native.pad_ragged(blk.values, blk.splits[r0 : r0 + k + 1], None, fill)
    # Runs of consecutive rows of one block and of single elements, found
    # from the codes and the blocks' identities: gathered into one flat
    # array, padded by one call.
    refs = col[:, 0]
    single = np.fromiter(map(type, refs), dtype=object, count=k) != _Block
    if single.all():
        bounds = [0, k]
    else:
        codes = np.where(single, _SINGLE, col[:, 1]).astype(np.int64)
        same = np.fromiter(map(id, refs), dtype=np.int64, count=k)
        same = same[1:] == same[:-1]
        breaks = (single[1:] != single[:-1]) | (~single[1:] & ((codes[1:] != codes[:-1] + 1) | ~same))
        bounds = [0, *(np.flatnonzero(breaks) + 1).tolist(), k]
    pieces: list[np.ndarray[Any, Any]] = []
    lens: list[np.ndarray[Any, Any]] = []
    for a, b in zip(bounds, bounds[1:]):
        n = b - a
        if single[a]:
            arrs = refs[a:b].tolist()
            pieces += arrs
            lens.append(np.fromiter(map(len, arrs), dtype=np.int64, count=n))
            continue
        blk = refs[a]
        r0 = int(col[a, 1])
        if blk.width >= 0:
            w = blk.width
            pieces.append(blk.values[r0 * w : (r0 + n) * w])
            lens.append(np.full(n, w, dtype=np.int64))
        else:
            assert blk.splits is not None
            sp = blk.splits[r0 : r0 + n + 1]
            pieces.append(blk.values[int(sp[0]) : int(sp[-1])])
            lens.append(np.diff(sp))
    splits = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lens), out=splits[1:])
    return _native.pad_ragged(np.concatenate(pieces), splits, None, fill)


class _PaddingCodec(ElementCodec):
    """An :class:`ElementCodec` that stores the ``[None]`` numeric
    components (``blocks``: their indices) in blocks (see the module
    docstring)."""

    __slots__ = ("blocks",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.blocks: frozenset[int] = frozenset(
            c.index for c in self.components
            if not c.dense and c.shape is not None and len(c.shape) == 1 and c.dtype is not STRING
        )

    def ragged_column(self, comp: Component, value: Any, where: str, rows: bool) -> np.ndarray[Any, Any]:
        if comp.index not in self.blocks:
            return super().ragged_column(comp, value, where, rows)
        if rows and (
            isinstance(value, (list, tuple))
            or (isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1)
        ):
            return _rows_block([comp.convert_one(v, where) for v in value], comp.dtype)
        arr = comp.convert_block(value, where)
        return _Block(arr.reshape(-1), arr.shape[1], None).column(arr.shape[0])

    def first_row(self, chunk: list[np.ndarray[Any, Any]]) -> list[Any]:
        row = super().first_row(chunk)
        for i in self.blocks:
            row[i] = _element(row[i][0], row[i][1])
        return row

    def row_to_cols(self, row: list[Any]) -> list[np.ndarray[Any, Any]]:
        cols = super().row_to_cols(row)
        for i in self.blocks:
            cols[i] = _single_column(row[i])
        return cols


class PaddingFIFOQueue(FIFOQueue):
    """A FIFOQueue whose components may have unknown dimensions (Q34–Q38).

    ``shapes`` is required: one shape of known rank per component, with
    ``None`` for dimensions that vary. ``dequeue`` returns an element with its
    own shape (Q36); ``dequeue_many`` / ``dequeue_up_to`` pad every ``None``
    dimension at the end to the largest size in the batch (Q37) with 0,
    ``b""`` or False — or with ``padding_values`` (one scalar per component),
    a feedq addition. The rows of an ``enqueue_many`` keep the batch's row
    shape (Q38): rows of a block padded to width ``w`` are elements of width
    ``w``.

    A ``[None]`` numeric component is stored in blocks, one copy per
    ``enqueue_many`` and no array per row, and a batch of it is padded by
    one copy or one native call (see the module docstring).
    """

    _kind = "PaddingFIFOQueue"
    _default_name = "padding_fifo_queue"
    _partial_shapes = True
    _codec_class = _PaddingCodec

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

    # -- storage: the block columns (see the module docstring) -----------------------

    def _init_storage(self) -> None:
        super()._init_storage()
        codec = self._codec
        assert isinstance(codec, _PaddingCodec)
        self._block_idx = sorted(codec.blocks)
        # One component, stored in blocks: the per-element hooks use a view
        # of its column's references (kept current by _grow).
        self._one_block = self._one_comp and bool(self._block_idx)
        self._refs0: np.ndarray[Any, Any] = np.empty(0, dtype=object)
        # False once rows were put back in front (an interrupted take, a
        # put_back): the ring may then hold a block's rows out of order.
        # Never set back, so a take that saw True may read it later.
        self._in_order = True

    def _new_column(self, comp: Component, alloc: int) -> np.ndarray[Any, Any]:
        if comp.index in self._block_idx:
            return np.empty((alloc, 2), dtype=object)
        return super()._new_column(comp, alloc)

    def _grow(self, alloc: int) -> None:
        super()._grow(alloc)
        if self._one_block:
            self._refs0 = self._cols[0][:, 0]

    def _put_one(self, value: Any) -> None:
        if not self._block_idx:
            super()._put_one(value)
            return
        pos = self._head + self._engine.size
        if pos >= self._alloc:
            pos -= self._alloc
        if self._one_block:
            self._refs0[pos] = value  # the element itself (its index slot is not read)
            return
        for i, (buf, v) in enumerate(zip(self._cols, value)):
            if i in self._block_idx:
                buf[pos, 0] = v
            else:
                buf[pos] = v

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        self._in_order = False
        super()._putback(chunk)

    def _take_one(self) -> Any:
        if self._one_block:
            # FIFOQueue's hook for one component, reading the element from
            # its slot's references.
            if self._claims:
                self._keep_busy(1)
            pos = self._head
            ref = self._refs0[pos]
            if type(ref) is _Block:
                ref = ref.row(self._cols[0][pos, 1])
            self._head = pos + 1 if pos + 1 < self._alloc else 0
            return ref
        row = super()._take_one()
        if not self._block_idx:
            return row
        # FIFOQueue's hook returns a block column's slot as a view of the
        # ring: read it before the take path clears the slot.
        for i in self._block_idx:
            row[i] = _element(row[i][0], row[i][1])
        return row

    def _stored_sample(self, i: int, n: int) -> list[Any]:
        if i not in self._block_idx:
            return super()._stored_sample(i, n)
        return [None if ref is None else _element(ref, code) for ref, code in self._cols[i][:n].tolist()]

    def _batch(
        self, chunks: list[list[np.ndarray[Any, Any]]], count: int,
        outs: list[np.ndarray[Any, Any]] | None, padded: bool,
    ) -> Any:
        if not padded and self._block_idx:
            # padded=False: each element's own array, as the other ragged
            # components come.
            chunks = [
                [_unpadded(c) if i in self._block_idx else c for i, c in enumerate(chunk)]
                for chunk in chunks
            ]
        return super()._batch(chunks, count, outs, padded)

    def _pad(self, comp: Component, parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        assert comp.shape is not None
        fill = self._storage_args["padding_values"][comp.index]
        if comp.index in self._block_idx:
            if len(parts) == 1:
                col = parts[0]
            elif parts:
                col = np.concatenate(parts)
            else:
                col = np.empty((0, 2), dtype=object)
            return _pad_blocks(col, comp.dtype, fill, self._in_order)
        rows = [r for part in parts for r in part]
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
