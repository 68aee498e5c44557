"""parse_example / parse_single_example (P1-P4) with a vectorised fast path.

Two paths, one result:

* The **vectorised walker** reads the protobuf wire format of a whole batch
  at once with NumPy: every step (read a tag, a varint length, compare a key)
  is one array operation over all records, so the Python work grows with the
  number of FEATURES per Example, not the number of records. It handles the
  layout TensorFlow and protobuf write: one ``features`` field, map entries as
  ``key`` then ``value``, one kind per Feature, packed float/int64 lists and
  single-element bytes lists. Packed floats are gathered straight into a
  ``[B, n]`` float32 array; varints are decoded for the whole batch with a
  few array operations.
* Every record the walker cannot vouch for (any other encoding, unknown
  fields, a malformed message, a non-ASCII key) is parsed by **protobuf**,
  one record at a time, and merged back in order.

Both paths produce the same per-feature intermediate (kind and value count
per record plus the flat values), and ONE assembly step turns it into the
outputs and raises the errors, so results and messages are identical
whichever path a record took.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers._base import RecordBlock
from feedq.readers._example_pb import example_class

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "SparseTensorValue",
    "VarLenFeature",
    "parse_example",
    "parse_single_example",
]


class FixedLenFeature(NamedTuple):
    """A feature with a fixed number of values (P2): output ``[B] + shape``.

    Attributes:
        shape: the output shape per record (a list of ints; ``[]`` = scalar).
        dtype: float32, int64 or string.
        default_value: used when the feature is missing; None = required.
    """

    shape: Sequence[int]
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A variable-length feature (P3), returned as a :class:`SparseTensorValue`.

    Attributes:
        dtype: float32, int64 or string.
    """

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """Variable count of fixed-shape groups (P4): output ``[B, max_len] + shape``.

    Attributes:
        shape: the shape of one group.
        dtype: float32, int64 or string.
        allow_missing: must be True in these parsers.
        default_value: the padding value (default 0 or ``b""``).
    """

    shape: Sequence[int]
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class SparseTensorValue(NamedTuple):
    """A sparse result (TF1's ``tf.SparseTensorValue``).

    Attributes:
        indices: int64 ``[N, rank]`` coordinates.
        values: ``[N]`` values in row-major order.
        dense_shape: int64 ``[rank]``.
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


_BYTES, _FLOAT, _INT64 = 1, 2, 3  # Feature.kind field numbers
_KIND_NAME = {_BYTES: "string", _FLOAT: "float", _INT64: "int64"}
_KIND_DTYPE = {_BYTES: np.dtype(object), _FLOAT: np.dtype(np.float32), _INT64: np.dtype(np.int64)}
_ONEOF = {"bytes_list": _BYTES, "float_list": _FLOAT, "int64_list": _INT64}


def _kind_of(dtype: Any) -> int:
    dt = getattr(dtype, "as_numpy_dtype", dtype)  # accept tf.float32 & co.
    if dt in ("string", str, bytes, object, np.bytes_, np.str_):
        return _BYTES
    try:
        nd = np.dtype(dt)
    except TypeError:
        raise TypeError(f"Unsupported feature dtype {dtype!r}") from None
    if nd.kind in "OSU":
        return _BYTES
    if nd == np.float32:
        return _FLOAT
    if nd == np.int64:
        return _INT64
    raise TypeError(f"Unsupported feature dtype {nd}: use float32, int64 or string")


class _Spec:
    __slots__ = ("cls", "default", "kb", "key", "kind", "n", "shape")

    def __init__(self, key: str, feat: Any) -> None:
        self.key = key
        self.kb = key.encode()
        if isinstance(feat, VarLenFeature):
            self.cls = "var"
            self.kind = _kind_of(feat.dtype)
            self.shape: tuple[int, ...] = ()
            self.n = 1
            self.default = None
            return
        if not isinstance(feat, (FixedLenFeature, FixedLenSequenceFeature)):
            raise TypeError(f"Unsupported feature type for {key!r}: {type(feat).__name__}")
        self.kind = _kind_of(feat.dtype)
        shape = list(feat.shape) if feat.shape is not None else []
        if isinstance(feat, FixedLenSequenceFeature):
            if not feat.allow_missing:
                raise ValueError(
                    "Unsupported: FixedLenSequenceFeature requires allow_missing to be True."
                )
            self.cls = "seq"
            if any(d is None for d in shape):
                raise ValueError(f"Shape of feature {key} must be fully defined: {shape}")
            self.shape = tuple(int(d) for d in shape)
            self.n = int(np.prod(self.shape)) if self.shape else 1
            pad = feat.default_value
            if pad is None:
                pad = b"" if self.kind == _BYTES else 0
            self.default = _as_values([pad], self.kind)[0]
            return
        self.cls = "fixed"
        if any(d is None for d in shape):
            raise ValueError(
                f"First dimension of shape for feature {key} unknown. Consider using "
                f"FixedLenSequenceFeature. Received feature={feat!r}."
            )
        self.shape = tuple(int(d) for d in shape)
        self.n = int(np.prod(self.shape)) if self.shape else 1
        if feat.default_value is None:
            self.default = None
        else:
            d = _as_values(feat.default_value, self.kind)
            if d.size != self.n:
                raise InvalidArgumentError(
                    f"Input to reshape is a tensor with {d.size} values, but the requested "
                    f"shape has {self.n}"
                )
            self.default = d.reshape(self.shape)

    def shape_text(self) -> str:
        return "[" + ",".join(str(d) for d in self.shape) + "]"


def _as_values(v: Any, kind: int) -> np.ndarray:
    if kind == _BYTES:
        arr = np.asarray(v, dtype=object)
        flat = [x.encode() if isinstance(x, str) else bytes(x) for x in arr.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape)
    return np.asarray(v, dtype=_KIND_DTYPE[kind])


class _Parsed:
    """Per feature: kind (0 = missing) and value count per record, flat values."""

    __slots__ = ("count", "kind", "values")

    def __init__(self, kind: np.ndarray, count: np.ndarray, values: np.ndarray) -> None:
        self.kind = kind
        self.count = count
        self.values = values  # values of records whose kind is the expected one


# --------------------------------------------------------------------------- walker
_AR10 = np.arange(10, dtype=np.int64)
_SHIFTS = (np.arange(10, dtype=np.uint64) * np.uint64(7)).astype(np.uint64)


def _varint(u8: np.ndarray, pos: np.ndarray, lim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode one varint at each ``pos`` (not past ``lim``): (value, length, ok).

    Values are int64 (a 10-byte varint above 2**63 wraps negative, which
    every caller treats as not ok); 1- and 2-byte varints -- nearly all tags
    and lengths -- take a short path.
    """
    last = len(u8) - 1
    b0 = u8[np.minimum(pos, last)].astype(np.int64)
    val = b0
    ln = np.ones(len(pos), dtype=np.int64)
    multi = np.flatnonzero(b0 >= 128)
    ok = np.ones(len(pos), dtype=bool)
    if multi.size:
        b1 = u8[np.minimum(pos[multi] + 1, last)].astype(np.int64)
        val = b0.copy()
        val[multi] = (b0[multi] & 127) | ((b1 & 127) << 7)
        ln[multi] = 2
        longer = multi[b1 >= 128]
        if longer.size:
            w = u8[np.minimum(pos[longer, None] + _AR10, last)].astype(np.uint64)
            term = w < 128
            has = term.any(axis=1)
            L = term.argmax(axis=1) + 1
            keep = _AR10 < L[:, None]
            v = np.bitwise_or.reduce(((w & np.uint64(127)) << _SHIFTS) * keep, axis=1)
            val[longer] = v.view(np.int64)
            ln[longer] = L
            ok[longer] = has
    ok &= pos + ln <= lim
    return val, ln, ok


def _length(u8: np.ndarray, pos: np.ndarray, lim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A length-delimited field body at ``pos`` (after the tag): (start, end, ok)."""
    v, ln, ok = _varint(u8, pos, lim)
    start = pos + ln
    ok &= (v >= 0) & (v <= lim - start)
    end = start + np.where(ok, v, 0)
    return start, end, ok


def _walk(
    u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, specs: list[_Spec]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Locate each requested feature's payload in every record, vectorised.

    Returns (slow, kind[F,B], pstart[F,B], pend[F,B], nonempty[F,B]); records
    marked ``slow`` must go to protobuf.
    """
    B, F = len(starts), len(specs)
    last = max(len(u8) - 1, 0)
    slow = np.zeros(B, dtype=bool)
    kind = np.zeros((F, B), dtype=np.int8)
    ps = np.zeros((F, B), dtype=np.int64)
    pe = np.zeros((F, B), dtype=np.int64)
    ne = np.zeros((F, B), dtype=bool)
    if B == 0 or len(u8) == 0:
        return slow, kind, ps, pe, ne
    nz = np.flatnonzero(ends > starts)  # b"" is a valid empty Example (P1)
    c, e = starts[nz], ends[nz]
    ok = u8[np.minimum(c, last)] == 0x0A
    fs, fe, ok2 = _length(u8, c + 1, e)
    ok &= ok2 & (fe == e)
    slow[nz[~ok]] = True
    cur = np.array(ends, copy=True)
    cur[nz[ok]] = fs[ok]
    names = [np.frombuffer(s.kb, dtype=np.uint8) for s in specs]
    active = np.flatnonzero(cur < ends)
    while active.size:
        c, lim = cur[active], ends[active]
        ok = u8[np.minimum(c, last)] == 0x0A  # map entry: field 1, length-delimited
        es, ee, o = _length(u8, c + 1, lim)
        ok &= o
        ok &= (es < ee) & (u8[np.minimum(es, last)] == 0x0A)  # entry.key
        ks, ke, o = _length(u8, es + 1, ee)
        ok &= o
        ok &= (ke < ee) & (u8[np.minimum(ke, last)] == 0x12)  # entry.value
        vs, ve, o = _length(u8, ke + 1, ee)
        ok &= o & (ve == ee)
        ft = u8[np.minimum(vs, last)]
        fk = (ft >> 3).astype(np.int8)
        ok &= (vs < ve) & ((ft & 7) == 2) & (fk >= 1) & (fk <= 3)  # one Feature.kind
        ls, le, o = _length(u8, vs + 1, ve)
        ok &= o & (le == ve)
        nonempty = ls < le
        ps_, pe_, o = _length(u8, ls + 1, le)  # one packed run / one bytes element
        ok &= ~nonempty | ((u8[np.minimum(ls, last)] == 0x0A) & o & (pe_ == le))
        ps_ = np.where(nonempty, ps_, ls)
        pe_ = np.where(nonempty, pe_, ls)
        klen = ke - ks
        matched = np.zeros(len(active), dtype=bool)
        for fi, nm in enumerate(names):
            cand = np.flatnonzero(ok & (klen == len(nm)))
            if not cand.size:
                continue
            if len(nm):
                eq = np.all(u8[ks[cand, None] + np.arange(len(nm))] == nm, axis=1)
                cand = cand[eq]
            rows = active[cand]
            # A repeated key: the last entry wins, as in protobuf's map parsing.
            kind[fi, rows] = fk[cand]
            ps[fi, rows] = ps_[cand]
            pe[fi, rows] = pe_[cand]
            ne[fi, rows] = nonempty[cand]
            matched[cand] = True
        # proto3 checks that keys are UTF-8: leave non-ASCII keys to protobuf.
        other = np.flatnonzero(ok & ~matched & (klen > 0))
        if other.size:
            lens = klen[other]
            idx = np.repeat(ks[other] - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
            hi = np.flatnonzero(u8[idx] >= 128)
            if hi.size:
                owner = np.searchsorted(np.cumsum(lens), hi, side="right")
                ok[other[np.unique(owner)]] = False
        slow[active[~ok]] = True
        cur[active] = np.where(ok, ee, lim)
        active = active[ok & (ee < lim)]
    return slow, kind, ps, pe, ne


def _gather_ranges(u8: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    lens = e - s
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    idx = np.repeat(s - np.cumsum(lens) + lens, lens) + np.arange(total, dtype=np.int64)
    return u8[idx]


def _fast_values(
    u8: np.ndarray,
    data: bytes,
    kind: int,
    rows: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    nonempty: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts and flat values of the records ``rows``, whose Features are of ``kind``.

    Returns (counts, values, bad) where ``bad`` marks records protobuf must
    judge (a malformed packed payload).
    """
    lens = e - s
    bad = np.zeros(len(rows), dtype=bool)
    vals: np.ndarray
    if kind == _FLOAT:
        bad = (lens % 4) != 0
        counts = lens // 4
        good = ~bad
        if bad.any():
            s, e, lens, counts = s[good], e[good], lens[good], counts[good]
        if len(s) and np.all(lens == lens[0]):
            w = int(lens[0])
            if w == 0:
                vals = np.zeros(0, dtype=np.float32)
            else:
                win = np.lib.stride_tricks.sliding_window_view(u8, w)
                vals = np.ascontiguousarray(win[s]).view("<f4").reshape(-1)
        else:
            vals = _gather_ranges(u8, s, e).view("<f4")
        full = np.zeros(len(rows), dtype=np.int64)
        full[good] = counts
        return full, vals.astype(np.float32, copy=False), bad
    if kind == _BYTES:
        counts = nonempty.astype(np.int64)
        sel = np.flatnonzero(nonempty)
        vals = np.empty(len(sel), dtype=object)
        vals[:] = [data[a:b] for a, b in zip(s[sel].tolist(), e[sel].tolist())]
        return counts, vals, bad
    # int64: packed varints of the whole batch decoded at once
    b = _gather_ranges(u8, s, e)
    if b.size == 0:
        return np.zeros(len(rows), dtype=np.int64), np.zeros(0, dtype=np.int64), bad
    term = b < 128
    cum = np.concatenate([[0], np.cumsum(term)])
    off = np.concatenate([[0], np.cumsum(lens)])
    counts = cum[off[1:]] - cum[off[:-1]]
    # Each record's payload must end on a varint's last byte.
    last_ok = (lens == 0) | term[np.maximum(off[1:] - 1, 0)]
    bad = ~last_ok
    if not term.all() and not bad.any() and not np.any(~term[:-1] & ~term[1:]):
        # Every varint has 1 or 2 bytes (values < 16384, the common case):
        # decode from the last bytes, no per-varint segmentation.
        ends_i = np.flatnonzero(term)
        ivals = b[ends_i].astype(np.int64)
        two = np.flatnonzero((ends_i > 0) & ~term[np.maximum(ends_i - 1, 0)])
        ivals[two] = (ivals[two] << 7) | (b[ends_i[two] - 1] & 127).astype(np.int64)
        vals = ivals
    elif not term.all():
        ends_i = np.flatnonzero(term)
        starts_i = np.concatenate([[0], ends_i[:-1] + 1])
        vlen = ends_i - starts_i + 1
        if bad.any() or (vlen > 10).any():
            # Leave the odd records to protobuf; decode the rest.
            bad |= _rows_with_long_varints(term, off, vlen, ends_i)
            keep = ~bad
            if bad.all():
                return np.zeros(len(rows), dtype=np.int64), np.zeros(0, dtype=np.int64), bad
            c2, v2, _ = _fast_values(u8, data, kind, rows[keep], s[keep], e[keep], nonempty[keep])
            full = np.zeros(len(rows), dtype=np.int64)
            full[keep] = c2
            return full, v2, bad
        pos_in = np.arange(b.size, dtype=np.int64) - np.repeat(starts_i, vlen)
        parts = (b & 127).astype(np.uint64) << (pos_in.astype(np.uint64) * np.uint64(7))
        vals = np.bitwise_or.reduceat(parts, starts_i).view(np.int64)
    else:
        vals = b.astype(np.int64)
    return counts, vals, bad


def _rows_with_long_varints(term: np.ndarray, off: np.ndarray, vlen: np.ndarray, ends_i: np.ndarray) -> np.ndarray:
    nrows = len(off) - 1
    bad = np.zeros(nrows, dtype=bool)
    long_v = np.flatnonzero(vlen > 10)
    if long_v.size:
        owner = np.searchsorted(off[1:], ends_i[long_v], side="right")
        bad[np.minimum(owner, nrows - 1)] = True
    return bad


def _uniform(rows: np.ndarray, specs: list[_Spec]) -> list[_Parsed] | None:
    """The one-layout shortcut: ``rows`` is ``[B, L]``, records of equal length.

    Walk the first record alone; if every other record has the same bytes
    everywhere except inside the requested value payloads (where varints
    must also keep their continuation bits), all records share its layout
    and each feature is a column slice of ``rows``. Else None.
    """
    B, L = rows.shape
    t = np.ascontiguousarray(rows[0])
    z = np.zeros(1, dtype=np.int64)
    slow, kinds, ps, pe, ne = _walk(t, z, z + L, specs)
    if slow[0]:
        return None
    struct = np.ones(L, dtype=bool)
    varint = np.zeros(L, dtype=bool)
    for fi in range(len(specs)):
        k, a, b = int(kinds[fi, 0]), int(ps[fi, 0]), int(pe[fi, 0])
        if k == _FLOAT and (b - a) % 4:
            return None
        if k == _INT64 and b > a and t[b - 1] >= 128:
            return None
        if k:
            struct[a:b] = False
            varint[a:b] = k == _INT64
    si = np.flatnonzero(struct)
    if not np.array_equal(rows[:, si], np.broadcast_to(t[si], (B, len(si)))):
        return None
    vi = np.flatnonzero(varint)
    if vi.size and not np.array_equal(rows[:, vi] & 128, np.broadcast_to(t[vi] & 128, (B, len(vi)))):
        return None
    out = []
    for fi, sp in enumerate(specs):
        k, a, b = int(kinds[fi, 0]), int(ps[fi, 0]), int(pe[fi, 0])
        kind = np.full(B, k, dtype=np.int8)
        if k == _FLOAT:
            count = (b - a) // 4
        elif k == _INT64:
            count = int(np.count_nonzero(t[a:b] < 128))
        elif k == _BYTES:
            count = int(ne[fi, 0])
        else:
            count = 0
        vals = np.zeros(0, dtype=_KIND_DTYPE[sp.kind])
        if k == sp.kind and count:
            payload = rows[:, a:b]
            if k == _FLOAT:
                vals = np.ascontiguousarray(payload).view("<f4").reshape(-1)
            elif k == _INT64:
                if b - a == count:  # all 1-byte varints
                    vals = payload.astype(np.int64).reshape(-1)
                else:
                    tt = t[a:b]
                    ends = np.flatnonzero(tt < 128)
                    vst = np.concatenate([[0], ends[:-1] + 1])
                    if np.any(ends - vst >= 10):
                        return None
                    posin = np.arange(b - a) - np.repeat(vst, ends - vst + 1)
                    parts = (payload & 127).astype(np.uint64) << (posin.astype(np.uint64) * np.uint64(7))
                    vals = np.bitwise_or.reduceat(parts, vst, axis=1).view(np.int64).reshape(-1)
            else:
                vals = np.empty(B, dtype=object)
                vals[:] = [r.tobytes() for r in payload]
        out.append(_Parsed(kind, np.full(B, count, dtype=np.int64), vals))
    return out


# --------------------------------------------------------------------------- protobuf path
def _parse_slow(recs: list[bytes], specs: list[_Spec]) -> list[list[tuple[int, Any]]]:
    """Parse records with protobuf: per record, per feature (kind, values)."""
    from google.protobuf.message import DecodeError

    cls = example_class()
    out = []
    for rec in recs:
        ex = cls()
        try:
            ex.ParseFromString(rec)
        except (DecodeError, ValueError, RuntimeError):
            shown = repr(rec[:512])[2:-1]
            raise InvalidArgumentError(
                f"Could not parse example input, value: '{shown}'"
            ) from None
        fmap = ex.features.feature
        row = []
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
        out.append(row)
    return out


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


def _parse(serialized: Any, features: Mapping[str, Any]) -> tuple[list[_Spec], list[_Parsed], int, tuple[int, ...]]:
    specs = [_Spec(k, f) for k, f in features.items()]
    data, starts, ends, fixed, shape = _records(serialized)
    B = len(starts)
    u8 = np.frombuffer(data, dtype=np.uint8)
    if fixed is None and B > 1 and len(data) == B * int(ends[0] - starts[0]):
        fixed = u8.reshape(B, -1)  # joined records of one length
    if fixed is not None and B > 1 and fixed.shape[1]:
        uniform = _uniform(fixed, specs)
        if uniform is not None:
            return specs, uniform, B, shape
    slow, kinds, ps, pe, ne = _walk(u8, starts, ends, specs)
    fast_rows = np.flatnonzero(~slow)
    parsed_fast: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for fi, sp in enumerate(specs):
        k = kinds[fi]
        rows = fast_rows[k[fast_rows] == sp.kind]
        counts = np.zeros(B, dtype=np.int64)
        c, vals, bad = _fast_values(u8, data, sp.kind, rows, ps[fi, rows], pe[fi, rows], ne[fi, rows])
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
                    oc, _v, obad = _fast_values(u8, data, okind, sel, ps[fi, sel], pe[fi, sel], ne[fi, sel])
                    counts[sel] = oc
                    slow[sel[obad]] = True
    slow_rows = np.flatnonzero(slow)
    slow_parsed = (
        _parse_slow([data[a:b] for a, b in zip(starts[slow_rows].tolist(), ends[slow_rows].tolist())], specs)
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
    return specs, out, B, shape


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


def _assemble(specs: list[_Spec], parsed: list[_Parsed], B: int, single: bool) -> dict[str, Any]:
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
            errors.append((i, fi, _key(sp, i, single) + detail))
        ok_kind = present & (p.kind == sp.kind)
        if sp.cls == "fixed":
            cnt = np.flatnonzero(ok_kind & (p.count != sp.n))
            if cnt.size:
                i = int(cnt[0])
                errors.append((i, fi, _key(sp, i, single)
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
                errors.append((i, fi, _key(sp, i, single)
                               + f"Number of {_KIND_NAME[sp.kind]} values is not a multiple of "
                               f"stride length. Saw {int(p.count[i])} values but output shape is: "
                               f"[?,{sp.shape_text()[1:]}"))
    if errors:
        raise InvalidArgumentError(min(errors)[2])
    out: dict[str, Any] = {}
    for sp, p in zip(specs, parsed):
        ok_kind = (p.kind == sp.kind)
        counts = np.where(ok_kind, p.count, 0)
        dt = _KIND_DTYPE[sp.kind]
        if sp.cls == "fixed":
            res = np.empty((B,) + sp.shape, dtype=dt)
            flat = res.reshape(B, sp.n)
            rows = np.flatnonzero(ok_kind)
            if rows.size:
                flat[rows] = p.values.reshape(rows.size, sp.n)
            miss = np.flatnonzero(~ok_kind)
            if miss.size:
                flat[miss] = np.asarray(sp.default, dtype=dt).reshape(sp.n)
            out[sp.key] = res[0] if single else res
        elif sp.cls == "var":
            rows = np.repeat(np.arange(B, dtype=np.int64), counts)
            starts = np.repeat(np.cumsum(counts) - counts, counts)
            pos = np.arange(len(rows), dtype=np.int64) - starts
            width = int(counts.max()) if B else 0
            vals = p.values if len(p.values) == len(rows) else np.zeros(0, dtype=dt)
            if single:
                out[sp.key] = SparseTensorValue(pos.reshape(-1, 1), vals, np.array([width], dtype=np.int64))
            else:
                out[sp.key] = SparseTensorValue(
                    np.stack([rows, pos], axis=1) if len(rows) else np.zeros((0, 2), dtype=np.int64),
                    vals,
                    np.array([B, width], dtype=np.int64),
                )
        else:
            groups = counts // sp.n
            G = int(groups.max()) if B else 0
            res = np.empty((B, G * sp.n), dtype=dt)
            res[...] = sp.default
            if len(p.values):
                rows = np.repeat(np.arange(B, dtype=np.int64), counts)
                pos = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
                res[rows, pos] = p.values
            res = res.reshape((B, G) + sp.shape)
            out[sp.key] = res[0] if single else res
    return out


def _key(sp: _Spec, i: int, single: bool) -> str:
    return f"Key: {sp.key}.  " if single else f"Key: {sp.key}, Index: {i}.  "


def parse_example(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse a batch of serialized ``tf.train.Example`` records (P1-P4).

    Args:
        serialized: a ``[B]`` array/list of bytes, or a :class:`RecordBlock`
            from :class:`TFRecordReader` (parsed straight from its buffer).
        features: name -> :class:`FixedLenFeature` (output ``[B]+shape``),
            :class:`VarLenFeature` (a :class:`SparseTensorValue` with
            ``[N, 2]`` indices and dense shape ``[B, max_len]``) or
            :class:`FixedLenSequenceFeature` (``[B, max_len]+shape``, padded).

    Returns:
        name -> output. float32, int64, or object arrays of bytes.

    Raises:
        InvalidArgumentError: bytes that are not an Example ("Could not parse
            example input, value: ..."), a missing required feature, a wrong
            value count, a type mismatch (messages as TF's, naming key and
            record index).
        TypeError: an unsupported dtype (e.g. int32).
        ValueError: a bad feature configuration.
    """
    specs, parsed, B, shape = _parse(serialized, features)
    if len(shape) != 1:
        raise InvalidArgumentError(f"parse_example expects a vector of records, got shape {shape}")
    return _assemble(specs, parsed, B, single=False)


def parse_single_example(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse one serialized Example: :func:`parse_example` without the batch dimension.

    VarLen indices are ``[N, 1]``; errors name the key without an index.

    Raises:
        Same as :func:`parse_example`.
    """
    if isinstance(serialized, np.ndarray):
        serialized = serialized.item()
    rec = serialized.encode() if isinstance(serialized, str) else bytes(serialized)
    specs, parsed, B, _ = _parse([rec], features)
    return _assemble(specs, parsed, B, single=True)
