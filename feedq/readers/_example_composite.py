"""SparseFeature and RaggedFeature outputs, built from checked var columns.

Both work on :class:`_Parsed` columns over ``R`` *rows* -- the records of a
batch, or the time steps of SequenceExample feature lists -- with NumPy
operations over all rows at once. A builder returns ``(output, None)`` or
``(None, (row, detail))`` for the first bad row; the caller words the
error ("Key: k, Index: i.  " + detail).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq.readers._example_spec import (
    RaggedTensorValue,
    SparseTensorValue,
    _RaggedOut,
    _SparseOut,
    _Spec,
)
from feedq.readers._example_wire import _Parsed

_RowError = tuple[int, str]

_LABEL = {"splits": "Row splits", "lengths": "Row lengths", "starts": "Row starts", "limits": "Row limits"}


def _column(sp: _Spec, p: _Parsed) -> tuple[np.ndarray, np.ndarray]:
    """(flat values, count per row) of a var column whose kinds were checked."""
    return p.values, np.where(p.kind == sp.kind, p.count, 0).astype(np.int64)


def _rows_of(counts: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _first(err: _RowError | None, row: int, detail: str) -> _RowError:
    return (row, detail) if err is None or row < err[0] else err


def _sparse_output(
    o: _SparseOut, specs: list[_Spec], parsed: list[_Parsed], R: int, single: bool
) -> tuple[SparseTensorValue | None, _RowError | None]:
    """A SparseFeature: indices (row, index...) sorted row-major unless already sorted.

    Every index feature must hold as many values as the value feature, each
    in ``[0, size)`` (TF documents both; feedq checks them).
    """
    vs = specs[o.value]
    vals, cv = _column(vs, parsed[o.value])
    err: _RowError | None = None
    cols = [_rows_of(cv)]
    for ci, size in zip(o.indices, o.size):
        isp = specs[ci]
        iv, ic = _column(isp, parsed[ci])
        bad = np.flatnonzero(ic != cv)
        if bad.size:
            r = int(bad[0])
            err = _first(err, r, f"Index feature {isp.key} has {int(ic[r])} values but value "
                                 f"feature {vs.key} has {int(cv[r])}.")
        oob = np.flatnonzero((iv < 0) | (iv >= size))
        if oob.size:
            j = int(oob[0])
            err = _first(err, int(_rows_of(ic)[j]),
                         f"Index feature {isp.key} value {int(iv[j])} is out of range [0, {size}).")
        cols.append(iv)
    if err is not None:
        return None, err
    if not o.already_sorted and len(vals) > 1:
        order = np.lexsort(cols[::-1])  # the last key sorts first: row, then index 0, ...
        cols = [c[order] for c in cols]
        vals = vals[order]
    if single:
        cols = cols[1:]
    shape = ([] if single else [R]) + list(o.size)
    indices = np.stack(cols, axis=1).astype(np.int64, copy=False)
    return SparseTensorValue(indices, vals, np.array(shape, dtype=np.int64)), None


def _ragged_output(
    o: _RaggedOut, specs: list[_Spec], parsed: list[_Parsed], R: int, single: bool
) -> tuple[Any, _RowError | None]:
    """A RaggedFeature: ``[R, (rows)...]``, or without the row level when ``single``."""
    inner, top, err = _ragged_rows(o, specs, parsed, R)
    if err is not None:
        return None, err
    if single:
        return inner, None
    return RaggedTensorValue(inner, _splits(top, o.splits_dtype)), None


def _splits(lengths: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out.astype(dtype, copy=False)


def _ragged_rows(
    o: _RaggedOut, specs: list[_Spec], parsed: list[_Parsed], R: int
) -> tuple[Any, np.ndarray, _RowError | None]:
    """Each row's values cut by ``o.partitions``: (nested values, top-level items per row, error).

    Partitions are applied innermost first; each turns the count of items
    below it (values, or rows of the next partition) into a count of rows,
    and is checked to cover exactly those items. Trailing uniform partitions
    become inner dimensions of the values array (as TF's flat_values).
    """
    vals, items = _column(specs[o.value], parsed[o.value])
    bad = np.zeros(R, dtype=bool)  # rows with an error already: later checks skip them
    err: _RowError | None = None
    levels: list[tuple[np.ndarray, int]] = []  # (row lengths, uniform length or 0), innermost first
    for kind, arg in reversed(o.partitions):
        if kind == "uniform":
            b = np.flatnonzero((items % arg != 0) & ~bad)
            if b.size:
                r = int(b[0])
                err = _first(err, r, f"UniformRowLength({arg}) does not divide the {int(items[r])} "
                                     "items below it.")
                bad[b] = True
            nrows = items // arg
            levels.append((np.full(int(nrows.sum()), arg, dtype=np.int64), arg))
            items = nrows
            continue
        sp = specs[arg]
        pv, pc = _column(sp, parsed[arg])
        nrows, lengths, wrong = _partition(kind, pv, pc, items)
        b = np.flatnonzero(wrong & ~bad)
        if b.size:
            r = int(b[0])
            shown = pv[int(pc[:r].sum()):int(pc[: r + 1].sum())][:10].tolist()
            err = _first(err, r, f"{_LABEL[kind]} feature {sp.key} does not partition the "
                                 f"{int(items[r])} items below it: {shown}.")
            bad[b] = True
        levels.append((lengths, 0))
        items = nrows
    if err is not None:
        return None, items, err
    t = 0
    while t < len(levels) and levels[t][1]:
        t += 1
    inner_dims = tuple(L for _, L in reversed(levels[:t]))
    out: Any = vals.reshape((-1,) + inner_dims) if inner_dims else vals
    for lengths, _ in levels[t:]:
        out = RaggedTensorValue(out, _splits(lengths, o.splits_dtype))
    return out, items, None


def _partition(
    kind: str, pv: np.ndarray, pc: np.ndarray, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One keyed partition over all rows: (rows per row, flat row lengths, bad row mask).

    ``pv`` / ``pc``: the partition feature's flat values and count per row;
    ``items``: how many items each row's partition must cover.
    """
    R = len(pc)
    rid = _rows_of(pc)
    off = np.concatenate([[0], np.cumsum(pc)])
    has = pc > 0
    first_i = off[:-1][has]
    last_i = off[1:][has] - 1
    wrong = np.zeros(R, dtype=bool)
    if kind == "lengths":
        # Each length within [0, items] keeps the sums from overflowing.
        wrong[rid[(pv < 0) | (pv > items[rid])]] = True
        csum = np.concatenate([[0], np.cumsum(np.clip(pv, 0, None))])
        wrong |= (csum[off[1:]] - csum[off[:-1]]) != items
        return pc, pv, wrong
    if kind == "splits":
        same = rid[1:] == rid[:-1]
        lengths = (pv[1:] - pv[:-1])[same]
        wrong[rid[1:][same][lengths < 0]] = True
        wrong[has] |= (pv[first_i] != 0) | (pv[last_i] != items[has])
        wrong[~has] |= items[~has] != 0  # no splits: no rows, so no items
        return np.maximum(pc - 1, 0), lengths, wrong
    nxt_or_prev = np.empty_like(pv)
    if kind == "starts":  # row i is [starts[i], starts[i+1]) and the last ends at items
        nxt_or_prev[:-1] = pv[1:]
        nxt_or_prev[last_i] = items[has]
        lengths = nxt_or_prev - pv
        wrong[has] |= pv[first_i] != 0
    else:  # "limits": row i is [limits[i-1], limits[i]), the first starts at 0
        nxt_or_prev[1:] = pv[:-1]
        nxt_or_prev[first_i] = 0
        lengths = pv - nxt_or_prev
        wrong[has] |= pv[last_i] != items[has]
    wrong[rid[lengths < 0]] = True
    wrong[~has] |= items[~has] != 0
    return pc, lengths, wrong
