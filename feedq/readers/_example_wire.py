"""The vectorised protobuf wire walker behind parse_example (P1-P4, X10).

It reads the wire format of a whole batch of serialized ``tf.train.Example``
records at once with NumPy: every step (read a tag, a varint length, compare
a key) is one array operation over all records, so the Python work grows
with the number of FEATURES per Example, not the number of records. It
handles the layout TensorFlow and protobuf write: one ``features`` field,
map entries as ``key`` then ``value``, one kind per Feature, packed
float/int64 lists and single-element bytes lists. Packed floats are gathered
straight into a ``[B, n]`` float32 array; varints are decoded for the whole
batch with a few array operations.

A record the walker cannot vouch for (any other encoding, unknown fields, a
malformed message, a non-ASCII key, a repeated requested key) is marked
*slow*: the driver (:mod:`feedq.readers._example`) parses it with protobuf.
Entries of features nobody asked for are checked as protobuf checks them
(their wire structure, packed floats a multiple of 4 bytes, packed varints
complete and at most 10 bytes), so a corrupt unrequested feature sends the
record to protobuf, which rejects it: both paths accept and reject the same
records.

Everything here speaks in Feature kinds (the ``Feature.kind`` field numbers
``_BYTES``, ``_FLOAT``, ``_INT64``) and produces :class:`_Parsed`, the
per-feature intermediate that one assembly step turns into outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

_BYTES, _FLOAT, _INT64 = 1, 2, 3  # Feature.kind field numbers
_KIND_NAME = {_BYTES: "string", _FLOAT: "float", _INT64: "int64"}
_KIND_DTYPE = {_BYTES: np.dtype(object), _FLOAT: np.dtype(np.float32), _INT64: np.dtype(np.int64)}
_ONEOF = {"bytes_list": _BYTES, "float_list": _FLOAT, "int64_list": _INT64}


class _WireSpec(Protocol):
    """What the walker needs to know of a requested feature."""

    @property
    def kb(self) -> bytes: ...  # the key, UTF-8

    @property
    def kind(self) -> int: ...  # the expected Feature kind


class _Parsed:
    """Per feature: kind (0 = missing) and value count per record, flat values.

    ``values`` are the values of the records whose kind is the expected one,
    in record order. The native kernel may hand over more: ``dense``, a
    ``[B, n]`` column of a FixedLenFeature already holding the values of each
    record of kind ``wanted`` with ``n`` values (the default elsewhere;
    meaningful once the column's errors are checked), from which ``values``
    is derived on demand; ``splits``, the ``[B + 1]`` row splits of
    ``values``.
    """

    __slots__ = ("_values", "_wanted", "count", "dense", "kind", "splits")

    def __init__(
        self,
        kind: np.ndarray,
        count: np.ndarray,
        values: np.ndarray | None,
        *,
        dense: np.ndarray | None = None,
        wanted: int = 0,
        splits: np.ndarray | None = None,
    ) -> None:
        if values is None and (dense is None or not wanted):
            raise ValueError("_Parsed needs values, or a dense column and its kind")
        self.kind = kind
        self.count = count
        self._values = values
        self.dense = dense
        self._wanted = wanted  # the kind of the dense column's records
        self.splits = splits

    @property
    def values(self) -> np.ndarray:
        """Flat values of the records whose kind is the expected one (record order)."""
        if self._values is None:
            dense = self.dense
            assert dense is not None
            # Rows of the right kind and count hold their values.
            rows = np.flatnonzero((self.kind == self._wanted) & (self.count == dense.shape[1]))
            self._values = dense[rows].reshape(-1)
        return self._values

    @values.setter
    def values(self, v: np.ndarray) -> None:
        self._values = v



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
    u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, specs: Sequence[_WireSpec]
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
            # A repeated key: the last entry wins, as in protobuf's map
            # parsing, but the earlier entry's payload would go unchecked
            # here: let protobuf judge the record.
            slow[rows[kind[fi, rows] != 0]] = True
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
        # Unrequested entries: check their payloads as protobuf would.
        rest = np.flatnonzero(ok & ~matched)
        if rest.size:
            ok[rest[~_payloads_ok(u8, fk[rest], ps_[rest], pe_[rest])]] = False
        slow[active[~ok]] = True
        cur[active] = np.where(ok, ee, lim)
        active = active[ok & (ee < lim)]
    return slow, kind, ps, pe, ne


def _payloads_ok(u8: np.ndarray, kinds: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Which value payloads protobuf would accept (for features not decoded here).

    A BytesList element is any bytes; a packed FloatList is a multiple of 4
    bytes; a packed Int64List is whole varints of at most 10 bytes each.
    """
    good = np.ones(len(kinds), dtype=bool)
    fl = kinds == _FLOAT
    good[fl] = (e[fl] - s[fl]) % 4 == 0
    ints = np.flatnonzero((kinds == _INT64) & (e > s))
    if ints.size:
        a, b = s[ints], e[ints]
        last = u8[b - 1] < 128
        good[ints[~last]] = False
        whole = np.flatnonzero(last)
        if whole.size:
            byts = _gather_ranges(u8, a[whole], b[whole])
            term = byts < 128
            lens = b[whole] - a[whole]
            off = np.concatenate([[0], np.cumsum(lens)])
            ends_i = np.flatnonzero(term)
            vlen = ends_i - np.concatenate([[-1], ends_i[:-1]])
            good[ints[whole[_rows_with_long_varints(term, off, vlen, ends_i)]]] = False
    return good


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


def _uniform(rows: np.ndarray, specs: Sequence[_WireSpec]) -> list[_Parsed] | None:
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

