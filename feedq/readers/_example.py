"""parse_example / parse_single_example (P1-P4): the parse driver.

Two ways to read the wire format, one result:

* with the compiled core (``feedq._native.CORE == "native"``), **the
  kernel** :func:`feedq._native.parse_examples` parses every record of a
  batch (a whole :class:`RecordBlock`, whatever the records' lengths) in one
  call with the GIL released, validating each record as protobuf does;
  FixedLenFeature columns come back filled (defaults included) and
  FixedLenSequenceFeature rows are padded by :func:`feedq._native.pad_ragged`;
* without it, the **vectorised walker** (:mod:`feedq.readers._example_wire`)
  reads the wire format of a whole batch at once with NumPy, and every
  record the walker cannot vouch for is parsed by **protobuf**
  (:func:`_parse_slow`), one record at a time, and merged back in order.
  The core's pure-Python twin is exact, and what the differential tests hold
  the kernel to, but without the compiled core this walker is what a user
  wants: measured on one batch of 4096 records (``FEEDQ_PURE_PYTHON=1``), the
  walker parses 13x the twin's records/s on ``make-data --layout realistic``
  Examples (64k vs 4.9k records/s) and 30x on the TF-layout {x[32], label}
  benchmark records (540k vs 18k; the C kernel: 450k and 1.27M).

All produce the same per-column intermediate (kind and value count per
record plus the flat values, :class:`_Parsed`), and ONE assembly step
(:func:`_assemble`) turns it into the outputs and raises the errors, so
results and messages are identical whichever path a record took. Feature
configurations compile to a :class:`_Plan` (:mod:`feedq.readers._example_spec`);
SparseFeature and RaggedFeature outputs are built from var columns by
:mod:`feedq.readers._example_composite`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feedq import _native
from feedq.errors import InvalidArgumentError
from feedq.readers import _example_wire as _wire
from feedq.readers._base import RecordBlock
from feedq.readers._example_composite import _ragged_output, _sparse_output
from feedq.readers._example_pb import example_class
from feedq.readers._example_spec import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    SparseTensorValue,
    VarLenFeature,
    _Plan,
    _RaggedOut,
    _SparseOut,
    _Spec,
)
from feedq.readers._example_wire import (
    _BYTES,
    _FLOAT,
    _INT64,
    _KIND_DTYPE,
    _KIND_NAME,
    _ONEOF,
    _Parsed,
)

__all__ = ["parse_example", "parse_single_example"]

#: What parse_example takes (P1-P4, SparseFeature, RaggedFeature).
_EXAMPLE_FEATURES = (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature, SparseFeature, RaggedFeature)

#: Parse with the compiled kernel (True when the native core is active; tests
#: set it to False to compare with the walker + protobuf path).
_KERNEL: bool = _native.CORE == "native"


def _not_an_example(rec: bytes, index: int) -> InvalidArgumentError:
    """TF's error for bytes that are not a serialized Example (P1); record
    ``index`` of the batch (kept on the error for :func:`_named`)."""
    shown = repr(rec[:512])[2:-1]
    err = InvalidArgumentError(f"Could not parse example input, value: '{shown}'")
    setattr(err, _INDEX_ATTR, index)
    return err


_INDEX_ATTR = "_feedq_record_index"


def _named(err: InvalidArgumentError, block: RecordBlock) -> InvalidArgumentError:
    """``err`` from parsing ``block``, naming the bad record by its key
    (``file:offset``, R13) the way the readers name it."""
    index = getattr(err, _INDEX_ATTR, None)
    if index is None or not 0 <= index < len(block):
        where = block.work_unit.decode("utf-8", "backslashreplace")
    else:
        where = block.keys()[index].decode("utf-8", "backslashreplace")
    return InvalidArgumentError(f"{where}: {err.message}")


# --------------------------------------------------------------------------- protobuf path
def _fmap_row(fmap: Any, specs: list[_Spec]) -> list[tuple[int, Any]]:
    """Per column (kind, values) of one protobuf ``Features.feature`` map; kind 0 = missing."""
    row: list[tuple[int, Any]] = []
    for sp in specs:
        if sp.key in fmap:
            f = fmap[sp.key]
            which = f.WhichOneof("kind")
            if which is None:  # a Feature with no kind counts as missing
                row.append((0, None))
            else:
                row.append((_ONEOF[which], getattr(f, which).value))
        else:
            row.append((0, None))
    return row


def _parse_slow(
    recs: list[bytes], specs: list[_Spec], rows: list[int] | None = None
) -> list[list[tuple[int, Any]]]:
    """Parse records with protobuf: per record, per feature (kind, values);
    ``rows``: the records' indices in the batch (for errors)."""
    from google.protobuf.message import DecodeError

    cls = example_class()
    out = []
    for i, rec in enumerate(recs):
        ex = cls()
        try:
            ex.ParseFromString(rec)
        except (DecodeError, ValueError, RuntimeError):
            raise _not_an_example(rec, rows[i] if rows is not None else i) from None
        out.append(_fmap_row(ex.features.feature, specs))
    return out


def _parsed_from_rows(rows: list[list[tuple[int, Any]]], specs: list[_Spec]) -> list[_Parsed]:
    """The :class:`_Parsed` columns of records parsed by protobuf alone."""
    B = len(rows)
    out = []
    for fi, sp in enumerate(specs):
        kind = np.zeros(B, dtype=np.int8)
        count = np.zeros(B, dtype=np.int64)
        chunks: list[Any] = []
        for r, row in enumerate(rows):
            kd, v = row[fi]
            if kd:
                kind[r] = kd
                count[r] = len(v)
                if kd == sp.kind and len(v):
                    chunks.append(v)
        out.append(_Parsed(kind, count, _concat(chunks, sp.kind)))
    return out


def _concat(chunks: list[Any], kind: int) -> np.ndarray:
    """Flat values of several protobuf repeated fields, as one array of ``kind``."""
    dt = _KIND_DTYPE[kind]
    if kind == _BYTES:
        flat = [bytes(x) for c in chunks for x in c]
        vals = np.empty(len(flat), dtype=object)
        vals[:] = flat
        return vals
    if not chunks:
        return np.zeros(0, dtype=dt)
    return np.concatenate([np.asarray(c, dtype=dt) for c in chunks])


# --------------------------------------------------------------------------- driver
def _records(serialized: Any) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray | None, tuple[int, ...]]:
    """(buffer, starts, ends, [B, L] uint8 view or None, batch shape)."""
    if isinstance(serialized, RecordBlock):
        return serialized.data, serialized.starts, serialized.ends, serialized.fixed, (len(serialized),)
    arr = np.asarray(serialized, dtype=object)
    flat = [r.encode() if isinstance(r, str) else bytes(r) for r in arr.reshape(-1).tolist()]
    lens = np.fromiter((len(r) for r in flat), dtype=np.int64, count=len(flat))
    data = b"".join(flat)
    ends = np.cumsum(lens)
    return data, ends - lens, ends, None, arr.shape


def _parse(serialized: Any, specs: list[_Spec]) -> tuple[list[_Parsed], int, tuple[int, ...]]:
    """Every column of every record: the kernel's, or the walker's rows merged
    with protobuf's, in order."""
    data, starts, ends, fixed, shape = _records(serialized)
    B = len(starts)
    if _KERNEL:
        return _parse_kernel(data, starts, ends, specs), B, shape
    u8 = np.frombuffer(data, dtype=np.uint8)
    if fixed is None and B > 1 and len(data) == B * int(ends[0] - starts[0]):
        fixed = u8.reshape(B, -1)  # joined records of one length
    if fixed is not None and B > 1 and fixed.shape[1]:
        uniform = _wire._uniform(fixed, specs)
        if uniform is not None:
            return uniform, B, shape
    slow, kinds, ps, pe, ne = _wire._walk(u8, starts, ends, specs)
    fast_rows = np.flatnonzero(~slow)
    parsed_fast: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for fi, sp in enumerate(specs):
        k = kinds[fi]
        rows = fast_rows[k[fast_rows] == sp.kind]
        counts = np.zeros(B, dtype=np.int64)
        c, vals, bad = _wire._fast_values(u8, data, sp.kind, rows, ps[fi, rows], pe[fi, rows], ne[fi, rows])
        if bad.any():
            slow[rows[bad]] = True
        counts[rows] = c
        parsed_fast.append((counts, vals, rows[~bad] if bad.any() else rows))
        # Other kinds: counts matter only for errors; compute them per kind.
        other = fast_rows[(k[fast_rows] != 0) & (k[fast_rows] != sp.kind)]
        if other.size:
            for okind in (_BYTES, _FLOAT, _INT64):
                sel = other[k[other] == okind]
                if sel.size:
                    oc, _v, obad = _wire._fast_values(u8, data, okind, sel, ps[fi, sel], pe[fi, sel], ne[fi, sel])
                    counts[sel] = oc
                    slow[sel[obad]] = True
    slow_rows = np.flatnonzero(slow)
    slow_parsed = (
        _parse_slow([data[a:b] for a, b in zip(starts[slow_rows].tolist(), ends[slow_rows].tolist())], specs,
                    slow_rows.tolist())
        if slow_rows.size
        else []
    )
    out: list[_Parsed] = []
    for fi, sp in enumerate(specs):
        counts, vals, vrows = parsed_fast[fi]
        kind = kinds[fi].astype(np.int8, copy=True)
        if slow_rows.size:
            # Records judged by protobuf replace whatever the walker saw.
            kind[slow_rows] = 0
            counts = counts.copy()
            counts[slow_rows] = 0
            keep = ~slow[vrows]
            if not keep.all():
                vals = _drop_rows(vals, parsed_fast[fi][0][vrows], keep)
                vrows = vrows[keep]
            svals: list[Any] = []
            srows: list[int] = []
            for j, r in enumerate(slow_rows.tolist()):
                kd, v = slow_parsed[j][fi]
                kind[r] = kd
                if kd:
                    counts[r] = len(v)
                    if kd == sp.kind:
                        svals.append(v)
                        srows.append(r)
            vals, vrows = _merge(vals, vrows, counts, svals, np.array(srows, dtype=np.int64), sp.kind)
        out.append(_Parsed(kind, counts, vals))
    return out, B, shape


def _parse_kernel(data: bytes, starts: np.ndarray, ends: np.ndarray, specs: list[_Spec]) -> list[_Parsed]:
    """Every column of every record, by one call of the native kernel.

    One request per key: a FixedLenFeature of numbers read by nothing else
    gets a ``[B, n]`` column prefilled with its default (the kernel writes
    the records of the right kind and count); every other key is read as
    flat values + row splits, shared by the columns reading it. Bytes
    values come back as offsets into ``data``.

    Raises:
        InvalidArgumentError: the first record protobuf would reject, as
            :func:`_parse_slow` words it, before any other check.
    """
    B = len(starts)
    groups: dict[bytes, list[int]] = {}
    for i, sp in enumerate(specs):
        groups.setdefault(sp.kb, []).append(i)
    reqs: list[_native.FeatureRequest] = []
    cols: list[np.ndarray | None] = []
    for kb, idx in groups.items():
        sp = specs[idx[0]]
        if len(idx) == 1 and sp.cls == "fixed" and sp.kind != _BYTES:
            # Unwritten rows are missing records: they get the default, or
            # (no default) an error is raised before the column is used.
            col = np.empty((B, sp.n), dtype=_KIND_DTYPE[sp.kind])
            if sp.default is not None and sp.n:
                col[...] = np.asarray(sp.default, dtype=col.dtype).reshape(sp.n)
            reqs.append(_native.FeatureRequest(kb, sp.kind, sp.n))
            cols.append(col)
        else:
            reqs.append(_native.FeatureRequest(kb, sp.kind, -1))
            cols.append(None)
    res = _native.parse_examples(data, starts, ends - starts, reqs, out=cols)
    if res.error_index >= 0:
        i = res.error_index
        raise _not_an_example(data[int(starts[i]) : int(ends[i])], int(i))
    out: list[_Parsed | None] = [None] * len(specs)
    for g, idx in enumerate(groups.values()):
        req = reqs[g]
        p: _Parsed
        if cols[g] is not None:
            p = _Parsed(res.kinds[g], res.counts[g], None, dense=res.values[g], wanted=req.kind)
        else:
            vals = res.values[g]
            if req.kind == _BYTES:
                vals = _native.take_bytes(data, vals)
            p = _Parsed(res.kinds[g], res.counts[g], vals, splits=res.splits[g])
        for i in idx:
            out[i] = p
    return [p for p in out if p is not None]


def _drop_rows(vals: np.ndarray, counts: np.ndarray, keep: np.ndarray) -> np.ndarray:
    kept: np.ndarray = vals[np.repeat(keep, counts)]
    return kept


def _merge(
    vals: np.ndarray, vrows: np.ndarray, counts: np.ndarray, svals: list[Any], srows: np.ndarray, kind: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge the walker's values (rows ``vrows``) with protobuf's (rows ``srows``) in row order."""
    if not len(srows):
        return vals, vrows
    dt = _KIND_DTYPE[kind]
    rows = np.concatenate([vrows, srows])
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    seg_counts = counts[rows]
    total = int(seg_counts.sum())
    out = np.empty(total, dtype=dt)
    dest_off = np.concatenate([[0], np.cumsum(seg_counts)])
    pos = np.zeros(len(counts), dtype=np.int64)  # output offset of each record's values
    pos[rows] = dest_off[:-1]
    if len(vrows):
        vc = counts[vrows]
        src_off = np.concatenate([[0], np.cumsum(vc)[:-1]])
        dst = np.repeat(pos[vrows] - src_off, vc) + np.arange(int(vc.sum()), dtype=np.int64)
        out[dst] = vals
    for r, v in zip(srows.tolist(), svals):
        a = int(pos[r])
        if kind == _BYTES:
            out[a : a + len(v)] = [bytes(x) for x in v]
        else:
            out[a : a + len(v)] = np.asarray(v, dtype=dt)
    return out, rows


# --------------------------------------------------------------------------- assembly
def _column_errors(specs: list[_Spec], parsed: list[_Parsed], single: bool) -> list[tuple[int, int, str]]:
    """(record, column, message) of every column's first bad record (P2-P4)."""
    errors: list[tuple[int, int, str]] = []
    for fi, (sp, p) in enumerate(zip(specs, parsed)):
        present = p.kind != 0
        wrong = np.flatnonzero(present & (p.kind != sp.kind))
        if wrong.size:
            i = int(wrong[0])
            got = _KIND_NAME[int(p.kind[i])]
            want = _KIND_NAME[sp.kind]
            if sp.cls == "var":
                detail = f"Data types don't match. Expected type: {want}, Actual type: {got}"
            else:
                detail = f"Data types don't match. Data type: {got} but expected type: {want}"
            errors.append((i, fi, _key(sp.key, i, single) + detail))
        ok_kind = present & (p.kind == sp.kind)
        if sp.cls == "fixed":
            cnt = np.flatnonzero(ok_kind & (p.count != sp.n))
            if cnt.size:
                i = int(cnt[0])
                errors.append((i, fi, _key(sp.key, i, single)
                               + (f"Number of {_KIND_NAME[sp.kind]} values != expected.  "
                                  f"Values size: {int(p.count[i])} but output shape: {sp.shape_text()}")))
            if sp.default is None:
                miss = np.flatnonzero(~present)
                if miss.size:
                    errors.append((int(miss[0]), fi,
                                   (f"Feature: {sp.key} (data type: {_KIND_NAME[sp.kind]}) is "
                                    "required but could not be found.")))
        elif sp.cls == "seq":
            cnt = np.flatnonzero(ok_kind & (p.count % sp.n != 0))
            if cnt.size:
                i = int(cnt[0])
                errors.append((i, fi, _key(sp.key, i, single)
                               + f"Number of {_KIND_NAME[sp.kind]} values is not a multiple of "
                               f"stride length. Saw {int(p.count[i])} values but output shape is: "
                               f"[?,{sp.shape_text()[1:]}"))
    return errors


def _column_output(sp: _Spec, p: _Parsed, B: int, single: bool) -> Any:
    """A FixedLen (P2), VarLen (P3) or FixedLenSequence (P4) output of a checked column."""
    ok_kind = p.kind == sp.kind
    counts = np.where(ok_kind, p.count, 0)
    dt = _KIND_DTYPE[sp.kind]
    if sp.cls == "fixed" and p.dense is not None:
        res = p.dense.reshape((B,) + sp.shape)  # the kernel's column, defaults in place
        return res[0] if single else res
    if sp.cls == "fixed":
        res = np.empty((B,) + sp.shape, dtype=dt)
        flat = res.reshape(B, sp.n)
        rows = np.flatnonzero(ok_kind)
        if rows.size:
            flat[rows] = p.values.reshape(rows.size, sp.n)
        miss = np.flatnonzero(~ok_kind)
        if miss.size:
            flat[miss] = np.asarray(sp.default, dtype=dt).reshape(sp.n)
        return res[0] if single else res
    if sp.cls == "var":
        rows = np.repeat(np.arange(B, dtype=np.int64), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        pos = np.arange(len(rows), dtype=np.int64) - starts
        width = int(counts.max()) if B else 0
        vals = p.values if len(p.values) == len(rows) else np.zeros(0, dtype=dt)
        if single:
            return SparseTensorValue(pos.reshape(-1, 1), vals, np.array([width], dtype=np.int64))
        return SparseTensorValue(
            np.stack([rows, pos], axis=1) if len(rows) else np.zeros((0, 2), dtype=np.int64),
            vals,
            np.array([B, width], dtype=np.int64),
        )
    groups = counts // sp.n
    G = int(groups.max()) if B else 0
    if _KERNEL and sp.kind != _BYTES:
        # One pass over the values in C (rows copied whole, the pad after them).
        splits = p.splits
        if splits is None:
            splits = np.zeros(B + 1, dtype=np.int64)
            np.cumsum(counts, out=splits[1:])
        padded = _native.pad_ragged(p.values, splits, G * sp.n, sp.default)
        res = padded.reshape((B, G) + sp.shape)
        return res[0] if single else res
    res = np.empty((B, G * sp.n), dtype=dt)
    res[...] = sp.default
    if len(p.values):
        rows = np.repeat(np.arange(B, dtype=np.int64), counts)
        pos = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        res[rows, pos] = p.values
    res = res.reshape((B, G) + sp.shape)
    return res[0] if single else res


def _assemble(
    plan: _Plan, parsed: list[_Parsed], B: int, single: bool, later: Sequence[tuple[int, str]] = ()
) -> dict[str, Any]:
    """The outputs of ``plan``, or the error of the first bad record (TF's messages).

    ``later``: (record, message) errors found elsewhere in the same records
    (a SequenceExample's feature lists), reported after this plan's errors
    of the same record.
    """
    errors = [(r, 0, i, m) for r, i, m in _column_errors(plan.specs, parsed, single)]
    more = [(r, 2, i, m) for i, (r, m) in enumerate(later)]
    if errors:
        raise _record_error(*min(errors + more)[::3])
    out: dict[str, Any] = {}
    for oi, (name, o) in enumerate(plan.outputs):
        if isinstance(o, _SparseOut):
            res, err = _sparse_output(o, plan.specs, parsed, B, single)
        elif isinstance(o, _RaggedOut):
            res, err = _ragged_output(o, plan.specs, parsed, B, single)
        elif more:
            continue  # an error is raised anyway (and a failed parse may have left B at 0)
        else:
            res, err = _column_output(plan.specs[o], parsed[o], B, single), None
        if err is not None:
            errors.append((err[0], 1, oi, _key(name, err[0], single) + err[1]))
        out[name] = res
    if errors or more:
        raise _record_error(*min(errors + more)[::3])
    return out


def _record_error(record: int, message: str) -> InvalidArgumentError:
    """The error of record ``record`` of the batch (kept on it for :func:`_named`)."""
    err = InvalidArgumentError(message)
    setattr(err, _INDEX_ATTR, record)
    return err


def _key(key: str, i: int, single: bool) -> str:
    return f"Key: {key}.  " if single else f"Key: {key}, Index: {i}.  "


def _example_plan(features: Mapping[str, Any]) -> _Plan:
    for feat in features.values():
        if isinstance(feat, FixedLenSequenceFeature) and not feat.allow_missing:
            raise ValueError(
                "Unsupported: FixedLenSequenceFeature requires allow_missing to be True."
            )
    return _Plan(features, _EXAMPLE_FEATURES)


def parse_example(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse a batch of serialized ``tf.train.Example`` records (P1-P4).

    Args:
        serialized: a ``[B]`` array/list of bytes, or a :class:`RecordBlock`
            from :class:`TFRecordReader` (parsed straight from its buffer).
        features: name -> :class:`FixedLenFeature` (output ``[B]+shape``),
            :class:`VarLenFeature` (a :class:`SparseTensorValue` with
            ``[N, 2]`` indices and dense shape ``[B, max_len]``),
            :class:`FixedLenSequenceFeature` (``[B, max_len]+shape``, padded),
            :class:`SparseFeature` (a :class:`SparseTensorValue` with dense
            shape ``[B]+size``) or :class:`RaggedFeature` (a
            :class:`RaggedTensorValue` ``[B, (rows)...]``).

    Returns:
        name -> output. float32, int64, or object arrays of bytes.

    Raises:
        InvalidArgumentError: bytes that are not an Example ("Could not parse
            example input, value: ..."), a missing required feature, a wrong
            value count, a type mismatch (messages as TF's, naming key and
            record index), SparseFeature indices that do not match the values
            or fall outside ``size``, RaggedFeature partitions that do not fit.
            For a :class:`RecordBlock` the message starts with the bad
            record's key, ``<file>:<offset>: `` (R13).
        TypeError: an unsupported dtype (e.g. int32).
        ValueError: a bad feature configuration (P2, P4): a None or missing
            shape, a default with the wrong size, two readings of one key
            with different dtypes.
    """
    plan = _example_plan(features)
    try:
        parsed, B, shape = _parse(serialized, plan.specs)
        if len(shape) != 1:
            raise InvalidArgumentError(f"parse_example expects a vector of records, got shape {shape}")
        return _assemble(plan, parsed, B, single=False)
    except InvalidArgumentError as exc:
        if isinstance(serialized, RecordBlock):
            raise _named(exc, serialized) from None
        raise


def parse_single_example(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse one serialized Example: :func:`parse_example` without the batch dimension.

    VarLen and SparseFeature indices lose the record column (``[N, 1]`` for
    VarLen); a RaggedFeature loses its batch level (a plain array when no
    ragged level is left); errors name the key without an index.

    Raises:
        Same as :func:`parse_example`.
    """
    if isinstance(serialized, np.ndarray):
        serialized = serialized.item()
    rec = serialized.encode() if isinstance(serialized, str) else bytes(serialized)
    plan = _example_plan(features)
    parsed, B, _ = _parse([rec], plan.specs)
    return _assemble(plan, parsed, B, single=True)
