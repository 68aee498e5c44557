"""The pure-Python twin of ``feedq._native._core``.

Same low-level functions, same arguments, same results and reason codes.
Example parsing is the C code transliterated, one record at a time; framing
finds the same records in bulk with NumPy (as the reader did before the
native core). It is the fallback when the extension is not built (or
``FEEDQ_PURE_PYTHON=1``) and what the differential tests hold the C code to. Slow by design where it has to be;
checksums use a C-backed package when one is installed (``crc32c`` or
``google-crc32c``; neither is a dependency of feedq), the same function as
:func:`crc32c_table` (checked by the tests), which is the fallback (about
2 MB/s: a pure-Python build reading TFRecord files wants ``pip install crc32c``).

Imports nothing from feedq.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

_POLY = 0x82F63B78
_MASK_DELTA = 0xA282EAD8
_U64 = (1 << 64) - 1


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()


def crc32c_table(data: Any, value: int = 0) -> int:
    """CRC32C one byte at a time (the definition; slow)."""
    t = _TABLE
    c = value ^ 0xFFFFFFFF
    for b in bytes(data):
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def _pick_crc() -> Callable[[Any, int], int]:
    try:
        import crc32c as _pkg
    except ImportError:
        try:
            import google_crc32c as _g
        except ImportError:
            return crc32c_table

        def google(data: Any, value: int = 0) -> int:
            return int(_g.extend(value, bytes(data)))

        return google

    def icrar(data: Any, value: int = 0) -> int:
        return int(_pkg.crc32c(data, value))

    return icrar


_picked: Callable[[Any, int], int] | None = None


def _crc(data: Any, value: int) -> int:
    # Picked on first use: importing ``crc32c`` costs ~0.15 s (it pulls in
    # importlib.metadata), which every ``import feedq`` paid even with the
    # compiled core built.
    global _picked
    if _picked is None:
        _picked = _pick_crc()
    return _picked(data, value)


def _check_value(value: Any) -> int:
    if not isinstance(value, int):
        raise TypeError("value must be an int")
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError("value must be in [0, 2**32)")
    return value


def crc32c(data: Any, value: int = 0) -> int:
    """CRC32C of ``data`` extending ``value``."""
    return _crc(data, _check_value(value))


def crc32c_sw(data: Any, value: int = 0) -> int:
    """The table implementation (the C module's test hook of the same name)."""
    return crc32c_table(data, _check_value(value))


def _mask(c: int) -> int:
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: Any) -> int:
    """TFRecord's masked CRC32C."""
    return _mask(_crc(data, 0))


def use_hardware_crc(on: bool) -> bool:
    """No hardware here: always False."""
    return False


def crc_implementation() -> str:
    """``"python"`` (``crc32c`` package or table)."""
    return "python"


# ----------------------------------------------------------------------- TFRecord
SCAN_OK, SCAN_INCOMPLETE, SCAN_BAD_LENGTH_CRC, SCAN_LENGTH_TOO_LARGE, SCAN_BAD_DATA_CRC = range(5)


def scan_tfrecords(
    buf: Any,
    start: int,
    max_records: int,
    max_record_bytes: int,
    check_data_crc: bool,
    out_starts: np.ndarray,
    out_lengths: np.ndarray,
) -> tuple[int, int, int]:
    """The framing loop: see ``_core.c`` ``py_scan_tfrecords``.

    Same results, found another way: records are first walked by their
    (unchecked) lengths, then every header CRC is checked at once with NumPy,
    then the data CRCs (one C call each); the first record failing a check,
    in the C core's order (length CRC, max_record_bytes, data CRC), ends the
    scan. When every walked record is good, the header after them is judged
    as the C loop would.
    """
    mv = memoryview(buf)
    end = len(mv)
    if start < 0 or start > end or max_records < 0:
        raise ValueError("start or max_records out of range")
    cap = min(max_records, len(out_starts), len(out_lengths))
    u8 = np.frombuffer(mv, dtype=np.uint8)
    starts, lengths, pos = _walk(mv, u8, start, cap)
    k = len(starts)
    limit = min(max_record_bytes, 1 << 62)  # walked lengths fit in the buffer
    first_bad, status = k, SCAN_OK
    if k:
        stored = _gather_u32(u8, starts + 8)
        if np.all(lengths == lengths[0]) and np.all(stored == stored[0]):
            # identical headers: one CRC decides for all of them
            hbad = np.arange(k) if _masked_crc8(u8, starts[:1])[0] != stored[0] else starts[:0]
        else:
            hbad = np.flatnonzero(_masked_crc8(u8, starts) != stored)
        big = np.flatnonzero(lengths > limit)
        kh = int(hbad[0]) if hbad.size else k
        kb = int(big[0]) if big.size else k
        if kh <= kb and kh < k:
            first_bad, status = kh, SCAN_BAD_LENGTH_CRC
        elif kb < kh:
            first_bad, status = kb, SCAN_LENGTH_TOO_LARGE
        if check_data_crc and first_bad:
            d0 = starts[:first_bad] + 12
            d1 = d0 + lengths[:first_bad]
            crc = _crc
            got = np.fromiter(
                (crc(mv[a:b], 0) for a, b in zip(d0.tolist(), d1.tolist())),
                dtype=np.uint32,
                count=first_bad,
            )
            dbad = np.flatnonzero(_mask_array(got) != _gather_u32(u8, d1))
            if dbad.size:
                first_bad, status = int(dbad[0]), SCAN_BAD_DATA_CRC
    if first_bad < k:
        stop = int(starts[first_bad])
    else:
        stop = pos
        status = SCAN_OK if k == cap else _judge(mv, pos, end, max_record_bytes)
    out_starts[:first_bad] = starts[:first_bad]
    out_lengths[:first_bad] = lengths[:first_bad]
    return first_bad, stop, status


def _judge(mv: memoryview, pos: int, end: int, max_record_bytes: int) -> int:
    """Status at a record the walk could not take whole (or at the end)."""
    rem = end - pos
    if rem == 0:
        return SCAN_OK
    if rem < 12:
        return SCAN_INCOMPLETE
    (length,) = struct.unpack_from("<Q", mv, pos)
    (lcrc,) = struct.unpack_from("<I", mv, pos + 8)
    if _mask(_crc(mv[pos : pos + 8], 0)) != lcrc:
        return SCAN_BAD_LENGTH_CRC
    if length > max_record_bytes:
        return SCAN_LENGTH_TOO_LARGE
    return SCAN_INCOMPLETE


_AR12 = np.arange(12, dtype=np.int64)
_AR4 = np.arange(4, dtype=np.int64)
_AR8 = np.arange(8, dtype=np.int64)


def _walk(mv: memoryview, u8: np.ndarray, pos: int, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Up to ``n`` records that lie whole in the buffer from ``pos``, by their
    unchecked lengths: (header offsets, data lengths, offset after them).

    A scalar loop walks records of varying length; once four in a row have
    the same length, the rest of that run is confirmed with NumPy (one
    comparison of all their headers) instead of a Python step per record.
    """
    end = len(mv)
    chunks_s: list[np.ndarray] = []
    chunks_l: list[np.ndarray] = []
    small_s: list[int] = []
    small_l: list[int] = []
    s_append, l_append = small_s.append, small_l.append
    count = 0
    prev, same = -1, 0
    unpack = struct.unpack_from
    while count < n and end - pos >= 12:
        (length,) = unpack("<Q", mv, pos)
        rec = length + 16
        if rec > end - pos:
            break  # not whole in the buffer (or a bad length): judged after
        if length == prev:
            same += 1
        else:
            prev, same = length, 0
        s_append(pos)
        l_append(length)
        count += 1
        pos += rec
        if same >= 3 and count < n:
            run_limit = min(n - count, (end - pos) // rec)
            ref = u8[pos - rec : pos - rec + 12]
            run, window = 0, 64
            while run < run_limit:
                k = min(window, run_limit - run)
                at = pos + rec * np.arange(run, run + k, dtype=np.int64)
                ok = np.all(u8[at[:, None] + _AR12] == ref, axis=1)
                if ok.all():
                    run += k
                    window *= 4
                else:
                    run += int(np.argmin(ok))
                    break
            if run:
                chunks_s.append(np.array(small_s, dtype=np.int64))
                chunks_l.append(np.array(small_l, dtype=np.int64))
                small_s.clear()
                small_l.clear()
                chunks_s.append(pos + rec * np.arange(run, dtype=np.int64))
                chunks_l.append(np.full(run, length, dtype=np.int64))
                count += run
                pos += rec * run
            same = 0
    chunks_s.append(np.array(small_s, dtype=np.int64))
    chunks_l.append(np.array(small_l, dtype=np.int64))
    return np.concatenate(chunks_s), np.concatenate(chunks_l), pos


def _gather_u32(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.ascontiguousarray(u8[at[:, None] + _AR4]).view("<u4")[:, 0]
    return out


_CRC_TABLE = np.array(_TABLE, dtype=np.uint32)


def _mask_array(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.uint32, copy=False)
    out: np.ndarray = ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)
    return out


def _masked_crc8(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Masked CRC32C of the 8 bytes at each offset, all at once."""
    b = u8[at[:, None] + _AR8]
    crc = np.full(len(at), 0xFFFFFFFF, dtype=np.uint32)
    for j in range(8):
        crc = _CRC_TABLE[(crc ^ b[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
    return _mask_array(crc ^ np.uint32(0xFFFFFFFF))


# ------------------------------------------------------------------------ Example
EX_OK = 0
EX_TRUNCATED = 1
EX_BAD_VARINT = 2
EX_BAD_TAG = 3
EX_BAD_WIRE_TYPE = 4
EX_BAD_LENGTH = 5
EX_BAD_PACKED = 6
EX_BAD_UTF8 = 7
EX_BAD_GROUP = 8
EX_TOO_DEEP = 9
EX_RECORD_RANGE = -1

K_BYTES, K_FLOAT, K_INT64 = 1, 2, 3
WT_VARINT, WT_FIXED64, WT_LEN, WT_SGROUP, WT_EGROUP, WT_FIXED32 = 0, 1, 2, 3, 4, 5
DEPTH_LIMIT = 100
LVL_EXAMPLE, LVL_FEATURES, LVL_ENTRY, LVL_FEATURE, LVL_LIST = 0, 1, 2, 3, 4


class _Err(Exception):
    """A record error: ``args[0]`` is the EX_* code."""


def _varint(d: bytes, p: int, end: int) -> tuple[int, int]:
    v = 0
    for i in range(10):
        if p >= end:
            raise _Err(EX_TRUNCATED)
        b = d[p]
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return v & _U64, p
    raise _Err(EX_BAD_VARINT)


def _varint5(d: bytes, p: int, end: int, too_long: int) -> tuple[int, int]:
    v = 0
    for i in range(5):
        if p >= end:
            raise _Err(EX_TRUNCATED)
        b = d[p]
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return v, p
    raise _Err(too_long)


def _tag(d: bytes, p: int, end: int) -> tuple[int, int, int]:
    """(field, wire type, new position)."""
    if p < end and d[p] < 0x80:
        v = d[p]
        p += 1
    else:
        v, p = _varint5(d, p, end, EX_BAD_TAG)
        if v > 0xFFFFFFFF:
            raise _Err(EX_BAD_TAG)
    field = v >> 3
    if field == 0:
        raise _Err(EX_BAD_TAG)
    return field, v & 7, p


def _len(d: bytes, p: int, end: int) -> tuple[int, int]:
    """(length, position after the length); the field must fit before ``end``."""
    if p < end and d[p] < 0x80:
        v = d[p]
        p += 1
    else:
        v, p = _varint5(d, p, end, EX_BAD_VARINT)
    if v >= 0x7FFFFFFF or v > end - p:
        raise _Err(EX_BAD_LENGTH)
    return v, p


def _skip(d: bytes, p: int, end: int, field: int, wt: int, depth: int) -> int:
    if wt == WT_VARINT:
        _, p = _varint(d, p, end)
    elif wt == WT_FIXED64:
        if end - p < 8:
            raise _Err(EX_TRUNCATED)
        p += 8
    elif wt == WT_LEN:
        n, p = _len(d, p, end)
        p += n
    elif wt == WT_FIXED32:
        if end - p < 4:
            raise _Err(EX_TRUNCATED)
        p += 4
    elif wt == WT_SGROUP:
        if depth + 1 > DEPTH_LIMIT:
            raise _Err(EX_TOO_DEEP)
        while True:
            if p >= end:
                raise _Err(EX_BAD_GROUP)
            f2, wt2, p = _tag(d, p, end)
            if wt2 == WT_EGROUP:
                if f2 != field:
                    raise _Err(EX_BAD_GROUP)
                break
            p = _skip(d, p, end, f2, wt2, depth + 1)
    elif wt == WT_EGROUP:
        raise _Err(EX_BAD_GROUP)
    else:
        raise _Err(EX_BAD_WIRE_TYPE)
    return p


def _utf8_valid(b: bytes) -> bool:
    # Python's codec is strict UTF-8: no overlong forms, surrogates or > U+10FFFF.
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _list_count(d: bytes, p: int, end: int, kind: int) -> int:
    c = 0
    while p < end:
        f, wt, p = _tag(d, p, end)
        if f == 1:
            if kind == K_FLOAT and wt == WT_LEN:
                n, p = _len(d, p, end)
                if n % 4:
                    raise _Err(EX_BAD_PACKED)
                c += n // 4
                p += n
                continue
            if kind == K_FLOAT and wt == WT_FIXED32:
                if end - p < 4:
                    raise _Err(EX_TRUNCATED)
                p += 4
                c += 1
                continue
            if kind == K_INT64 and wt == WT_LEN:
                n, p = _len(d, p, end)
                run = 0
                for b in d[p : p + n]:
                    if b & 0x80:
                        run += 1
                        if run >= 10:
                            raise _Err(EX_BAD_VARINT)
                    else:
                        run = 0
                        c += 1
                if run:
                    raise _Err(EX_BAD_PACKED)
                p += n
                continue
            if kind == K_INT64 and wt == WT_VARINT:
                _, p = _varint(d, p, end)
                c += 1
                continue
            if kind == K_BYTES and wt == WT_LEN:
                n, p = _len(d, p, end)
                p += n
                c += 1
                continue
        p = _skip(d, p, end, f, wt, LVL_LIST)
    return c


class _Merged:
    """The merged Feature of one entry (see ``merged_t`` in _core.c)."""

    __slots__ = ("count", "first", "kind", "nseg")

    def __init__(self) -> None:
        self.kind = 0
        self.count = 0
        self.first = 0
        self.nseg = 0


def _feature_walk(d: bytes, p: int, end: int, m: _Merged) -> None:
    while p < end:
        f, wt, p = _tag(d, p, end)
        if 1 <= f <= 3 and wt == WT_LEN:
            n, p = _len(d, p, end)
            c = _list_count(d, p, p + n, f)
            if f != m.kind:
                m.kind = f
                m.count = 0
                m.first = m.nseg
            m.count += c
            m.nseg += 1
            p += n
            continue
        p = _skip(d, p, end, f, wt, LVL_FEATURE)


def _example_walk(
    d: bytes, p: int, end: int, index: dict[bytes, int], won: list[tuple[int, int, _Merged] | None]
) -> None:
    """Pass 1: validate the record; ``won[f]`` = (entry start, entry end, merged)."""
    while p < end:
        f, wt, p = _tag(d, p, end)
        if not (f == 1 and wt == WT_LEN):
            p = _skip(d, p, end, f, wt, LVL_EXAMPLE)
            continue
        n, p = _len(d, p, end)
        q, qe = p, p + n
        p = qe
        while q < qe:
            f, wt, q = _tag(d, q, qe)
            if not (f == 1 and wt == WT_LEN):
                q = _skip(d, q, qe, f, wt, LVL_FEATURES)
                continue
            en, q = _len(d, q, qe)
            r, re_, ent = q, q + en, q
            key = b""
            unknown = False
            m = _Merged()
            q = re_
            while r < re_:
                f, wt, r = _tag(d, r, re_)
                if f == 1 and wt == WT_LEN:
                    kn, r = _len(d, r, re_)
                    key = d[r : r + kn]
                    if not _utf8_valid(key):
                        raise _Err(EX_BAD_UTF8)
                    r += kn
                elif f == 2 and wt == WT_LEN:
                    vn, r = _len(d, r, re_)
                    _feature_walk(d, r, r + vn, m)
                    r += vn
                else:
                    r = _skip(d, r, re_, f, wt, LVL_ENTRY)
                    unknown = True
            if unknown:
                continue
            fi = index.get(key)
            if fi is not None:
                won[fi] = (ent, re_, m)


def _emit(d: bytes, ent: int, ent_end: int, m: _Merged) -> list[Any]:
    """Pass 2: the values of the final run of lists (float: 4-byte chunks,
    int64: ints, bytes: (start, end))."""
    out: list[Any] = []
    kind = m.kind
    seg = 0
    r, re_ = ent, ent_end
    while r < re_:
        f, wt, r = _tag(d, r, re_)
        if not (f == 2 and wt == WT_LEN):
            r = _skip(d, r, re_, f, wt, LVL_ENTRY)
            continue
        n, r = _len(d, r, re_)
        q, qe = r, r + n
        r = qe
        while q < qe:
            f, wt, q = _tag(d, q, qe)
            if not (1 <= f <= 3 and wt == WT_LEN):
                q = _skip(d, q, qe, f, wt, LVL_FEATURE)
                continue
            n, q = _len(d, q, qe)
            s, se = q, q + n
            q = se
            seg += 1
            if seg - 1 < m.first:
                continue
            while s < se:
                lf, lwt, s = _tag(d, s, se)
                if lf == 1 and kind == K_FLOAT and lwt in (WT_LEN, WT_FIXED32):
                    if lwt == WT_LEN:
                        n, s = _len(d, s, se)
                    else:
                        n = 4
                    out.extend(d[s + k : s + k + 4] for k in range(0, n, 4))
                    s += n
                elif lf == 1 and kind == K_INT64 and lwt in (WT_LEN, WT_VARINT):
                    one = lwt == WT_VARINT
                    ve = se
                    if not one:
                        n, s = _len(d, s, se)
                        ve = s + n
                    while one or s < ve:
                        v, s = _varint(d, s, ve)
                        out.append(v - (1 << 64) if v >> 63 else v)
                        if one:
                            break
                elif lf == 1 and kind == K_BYTES and lwt == WT_LEN:
                    n, s = _len(d, s, se)
                    out.append((s, s + n))
                    s += n
                else:
                    s = _skip(d, s, se, lf, lwt, LVL_LIST)
    return out


def parse_examples(
    buf: Any,
    starts: np.ndarray,
    lengths: np.ndarray,
    names: tuple[bytes, ...],
    kinds: bytes,
    fixed: tuple[int, ...],
    cols: tuple[np.ndarray | None, ...],
    out_kinds: np.ndarray,
    out_counts: np.ndarray,
) -> tuple[int, int, tuple[bytearray | None, ...]]:
    """See ``_core.c`` ``py_parse_examples``."""
    d = bytes(memoryview(buf))
    B = len(starts)
    nf = len(names)
    ok = out_kinds.reshape(nf, B) if nf else out_kinds
    oc = out_counts.reshape(nf, B) if nf else out_counts
    index = {nm: i for i, nm in enumerate(names)}
    flats: list[list[Any]] = [[] for _ in range(nf)]
    err_index, err = -1, EX_OK
    colviews = [
        c.reshape(B, fixed[i]) if c is not None and fixed[i] >= 0 else None
        for i, c in enumerate(cols)
    ]
    for r in range(B):
        s, ln = int(starts[r]), int(lengths[r])
        for i in range(nf):
            ok[i, r] = 0
            oc[i, r] = 0
        if s < 0 or ln < 0 or s > len(d) or ln > len(d) - s:
            err_index, err = r, EX_RECORD_RANGE
            break
        won: list[tuple[int, int, _Merged] | None] = [None] * nf
        try:
            _example_walk(d, s, s + ln, index, won)
        except _Err as exc:
            err_index, err = r, exc.args[0]
            break
        for i in range(nf):
            w = won[i]
            if w is None or w[2].kind == 0:
                continue
            ent, ent_end, m = w
            ok[i, r] = m.kind
            oc[i, r] = m.count
            if m.kind != kinds[i] or (fixed[i] >= 0 and m.count != fixed[i]):
                continue
            if m.count == 0:
                continue
            vals = _emit(d, ent, ent_end, m)
            col = colviews[i]
            if col is not None:
                col[r] = _as_array(vals, m.kind)
            else:
                flats[i].extend(vals)
    result: list[bytearray | None] = []
    for i in range(nf):
        if fixed[i] >= 0:
            result.append(None)
        else:
            result.append(bytearray(_as_array(flats[i], kinds[i]).tobytes()))
    return err_index, err, tuple(result)


def _as_array(vals: list[Any], kind: int) -> np.ndarray:
    if kind == K_FLOAT:
        return np.frombuffer(b"".join(vals), dtype="<f4").astype(np.float32)
    if kind == K_INT64:
        return np.array(vals, dtype=np.int64)
    return np.array(vals, dtype=np.int64).reshape(-1, 2)


# ------------------------------------------------------------------------ padding
def pad_ragged(
    values: np.ndarray, itemsize: int, splits: np.ndarray, width: int, pad: bytes, out: np.ndarray
) -> None:
    """See ``_core.c`` ``py_pad_ragged`` (uint8 views in, rows copied)."""
    B = len(splits) - 1
    if itemsize <= 0 or width < 0 or B < 0 or len(pad) != itemsize or len(values) % itemsize:
        raise ValueError("pad_ragged: inconsistent argument sizes")
    nvals = len(values) // itemsize
    rows = out.reshape(B, width * itemsize) if B else out
    padrow = np.frombuffer(pad * width, dtype=np.uint8) if width else np.zeros(0, np.uint8)
    prev = int(splits[0])
    if prev < 0 or prev > nvals:
        raise ValueError("pad_ragged: bad row splits")
    for i in range(B):
        nxt = int(splits[i + 1])
        if nxt < prev or nxt > nvals or nxt - prev > width:
            raise ValueError("pad_ragged: bad row splits")
        n = (nxt - prev) * itemsize
        rows[i, :n] = values[prev * itemsize : nxt * itemsize]
        rows[i, n:] = padrow[n:]
        prev = nxt


def take_bytes(buf: Any, offsets: Any) -> list[bytes]:
    """See ``_core.c`` ``py_take_bytes``: ``buf[start:end]`` for each int64 pair."""
    mv = memoryview(buf).cast("B") if memoryview(buf).format != "B" else memoryview(buf)
    flat = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1)
    if len(flat) % 2:
        raise ValueError("take_bytes: offsets must be int64 (start, end) pairs")
    pairs = flat.reshape(-1, 2)
    bad = np.flatnonzero((pairs[:, 0] < 0) | (pairs[:, 1] < pairs[:, 0]) | (pairs[:, 1] > len(mv)))
    if bad.size:
        i = int(bad[0])
        a, b = (int(x) for x in pairs[i])
        raise ValueError(f"take_bytes: pair {i} ({a}, {b}) is outside the buffer of {len(mv)} bytes")
    return [bytes(mv[a:b]) for a, b in pairs.tolist()]


def find_byte(buf: Any, start: int, byte: int) -> np.ndarray:
    """See ``_core.c`` ``py_find_byte``: the int64 positions ``i >= start`` of ``byte``."""
    mv = memoryview(buf).cast("B") if memoryview(buf).format != "B" else memoryview(buf)
    if not 0 <= start <= len(mv):
        raise ValueError(f"find_byte: start {start} is outside the buffer of {len(mv)} bytes")
    if not 0 <= byte <= 255:
        raise ValueError(f"find_byte: byte {byte} is not in [0, 255]")
    u8 = np.frombuffer(mv, dtype=np.uint8)[start:]
    out: np.ndarray = np.flatnonzero(u8 == byte).astype(np.int64, copy=False)
    out += start
    return out


# ---------------------------------------------------------------- resampling
_RS_BITS = 22


def _rs_coeffs(in_size: int, in0: np.float32, in1: np.float32, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rs_coeffs`` of ``_core.c``: per output pixel the first input pixel,
    the number of taps and the 22-bit weights (zero past the taps)."""
    scale = float(np.float32(in1 - in0)) / out_size
    filterscale = max(scale, 1.0)
    support = filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    ss = 1.0 / filterscale
    start = float(in0)
    xmins = np.zeros(out_size, dtype=np.int64)
    ntaps = np.zeros(out_size, dtype=np.int64)
    kk = np.zeros((out_size, ksize), dtype=np.int64)
    for xx in range(out_size):
        center = start + (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        xmax = min(max(xmax, 0), ksize)
        ws = []
        ww = 0.0
        for x in range(xmax):
            t = abs((x + xmin - center + 0.5) * ss)
            v = 1.0 - t if t < 1.0 else 0.0
            ws.append(v)
            ww += v
        for x, v in enumerate(ws):
            if ww != 0.0:
                v = v / ww
            kk[xx, x] = int(-0.5 + v * (1 << _RS_BITS)) if v < 0 else int(0.5 + v * (1 << _RS_BITS))
        xmins[xx], ntaps[xx] = xmin, xmax
    return xmins, ntaps, kk


def _rs_pass(src: np.ndarray, xmins: np.ndarray, kk: np.ndarray, axis: int) -> np.ndarray:
    """One filter pass along ``axis`` (1: columns, 0: rows) of a uint8 [h, w, 3] array."""
    n = src.shape[axis]
    idx = np.minimum(xmins[:, None] + np.arange(kk.shape[1])[None, :], n - 1)
    taps = np.take(src.astype(np.int64), idx, axis=axis)  # axis expands to [out, ksize]
    if axis == 1:
        acc = (taps * kk[None, :, :, None]).sum(axis=2)
    else:
        acc = (taps * kk[:, :, None, None]).sum(axis=1)
    acc += 1 << (_RS_BITS - 1)
    out: np.ndarray = np.clip(acc >> _RS_BITS, 0, 255).astype(np.uint8)
    return out


def resample_bilinear(src: Any, h: int, w: int, row_stride: int, pixel_stride: int,
                      x0: float, y0: float, x1: float, y1: float, out: Any, oh: int, ow: int,
                      flip: bool, transposed: bool = True) -> None:
    """See ``_core.c`` ``py_resample_bilinear``: the box of an RGB image
    resampled (antialiased bilinear, 22-bit fixed point) into ``out``
    (``transposed``, the C core's choice of its horizontal loop, changes
    nothing here)."""
    buf = np.frombuffer(memoryview(src).cast("B") if memoryview(src).format != "B" else src, dtype=np.uint8)
    fx0, fy0, fx1, fy1 = (np.float32(v) for v in (x0, y0, x1, y1))
    if h < 1 or w < 1 or h > (1 << 20) or w > (1 << 20) or oh < 1 or ow < 1 or oh > (1 << 15) or ow > (1 << 15):
        raise ValueError("resample_bilinear: image or output size out of range")
    if (pixel_stride < 3 or pixel_stride > 16 or row_stride < w * pixel_stride
            or (h - 1) * row_stride + (w - 1) * pixel_stride + 3 > buf.size):
        raise ValueError("resample_bilinear: the image does not fit its buffer")
    dst = np.frombuffer(out, dtype=np.uint8)
    if oh * ow * 3 > dst.size:
        raise ValueError("resample_bilinear: output buffer too small")
    if not (fx0 >= 0 and fy0 >= 0 and fx1 <= np.float32(w) and fy1 <= np.float32(h) and fx1 > fx0 and fy1 > fy0):
        raise ValueError("resample_bilinear: the box is empty or outside the image")
    img = np.lib.stride_tricks.as_strided(buf, shape=(h, w, 3), strides=(row_stride, pixel_stride, 1),
                                          writeable=False)
    hx, _, hk = _rs_coeffs(w, fx0, fx1, ow)
    vy, _, vk = _rs_coeffs(h, fy0, fy1, oh)
    if h - oh > 0 and h - oh > (w - ow) * 2:  # Pillow 13's pass order (as _core.c)
        res = _rs_pass(_rs_pass(img, vy, vk, 0), hx, hk, 1)
    else:
        res = _rs_pass(_rs_pass(img, hx, hk, 1), vy, vk, 0)
    if flip:
        res = res[:, ::-1]
    dst[: oh * ow * 3] = res.reshape(-1)


# ------------------------------------------------------------------------ reading
def read_window(fd: int, offset: int, tail: Any, n: int) -> tuple[bytes, int, int]:
    """See ``_core.c`` ``py_read_window``: ``tail`` + up to ``n`` bytes at ``offset``
    (here read into bytes objects and joined: one copy more than the C core)."""
    if n < 0 or offset < 0:
        raise ValueError("read_window: negative size or offset")
    parts: list[Any] = [tail]
    got, err = 0, 0
    while got < n:
        try:
            c = os.pread(fd, n - got, offset + got)
        except InterruptedError:
            continue
        except OSError as exc:
            err = exc.errno or 5  # EIO
            break
        if not c:
            break
        parts.append(c)
        got += len(c)
    return b"".join(parts), got, err


# ------------------------------------------------------------------------ shuffle
def shuffle_moves(n: int, raw: Any) -> tuple[list[int], list[int], list[int]]:
    """The draws of ``_core.c`` ``py_shuffle_take`` as index moves (a loop
    over ints): draw j picks slot ``r = raw[j] * (n - j) >> 64`` and moves
    slot ``n-1-j`` into it. Returns (src, dst, dsrc) as ``py_shuffle_sources``."""
    held: dict[int, int] = {}  # slot -> the original slot of the row it holds (written slots)
    src = []
    last = n - 1
    for r in _draw_slots(n, np.asarray(raw, dtype=np.uint64)):
        src.append(held.get(r, r))
        if r != last:
            held[r] = held.get(last, last)
        last -= 1
    return src, list(held), list(held.values())


def _draw_slots(n: int, raw: np.ndarray) -> list[int]:
    """``raw[j] * (n - j) >> 64`` for every j, exactly."""
    k = raw.shape[0]
    if n > 1 << 32:
        return [(int(x) * (n - j)) >> 64 for j, x in enumerate(raw.tolist())]
    # In 64-bit halves: with m <= 2**32 the sum below stays under 2**64.
    m = np.arange(n, n - k, -1, dtype=np.uint64)
    hi, lo = raw >> np.uint64(32), raw & np.uint64(0xFFFFFFFF)
    slots: list[int] = ((hi * m + ((lo * m) >> np.uint64(32))) >> np.uint64(32)).tolist()
    return slots


def shuffle_sources(n: int, raw: Any, src: np.ndarray, dst: np.ndarray, dsrc: np.ndarray) -> int:
    """See ``_core.c`` ``py_shuffle_sources``."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        if len(memoryview(raw).cast("B")) % 8:
            raise ValueError("shuffle_sources: inconsistent argument sizes")
        draws = np.frombuffer(raw, dtype=np.uint64)
    else:
        draws = np.asarray(raw, dtype=np.uint64)
    k = int(draws.size)
    if n < 0 or k > n or len(src) < k or len(dst) < k or len(dsrc) < k:
        raise ValueError("shuffle_sources: inconsistent argument sizes")
    s, d, ds = shuffle_moves(n, draws)
    m = len(d)
    # (np.array of a list first: a slice assignment converts item by item.)
    src[:k] = np.array(s, dtype=np.int64)
    dst[:m] = np.array(d, dtype=np.int64)
    dsrc[:m] = np.array(ds, dtype=np.int64)
    return m


def _rows(buf: Any) -> np.ndarray:
    """The bytes of a writable C-contiguous buffer (the errors NumPy's buffer export gives C)."""
    view = np.frombuffer(buf, dtype=np.uint8)  # ValueError: not C-contiguous
    if not view.flags.writeable:
        raise ValueError("buffer source array is read-only")
    return view


def shuffle_take(n: int, raw: Any, cols: tuple[Any, ...], outs: tuple[Any, ...], done: Any = None) -> None:
    """See ``_core.c`` ``py_shuffle_take`` (here: the moves of
    :func:`shuffle_moves`, then one gather and one scatter per column)."""
    flag = None if done is None else _rows(done)
    if flag is not None and len(flag) < 1:
        raise ValueError("shuffle_take: done must hold at least one byte")
    if not isinstance(cols, tuple) or not isinstance(outs, tuple) or len(cols) != len(outs):
        raise TypeError("shuffle_take: cols and outs must be tuples of the same length")
    draws = np.asarray(raw)
    if draws.dtype != np.uint64:
        raise ValueError("shuffle_take: raw must hold uint64 draws")
    k = int(draws.size)
    if n < 0 or k > n:
        raise ValueError(f"shuffle_take: {k} draws from {n} rows")
    views = []
    for i, (c, o) in enumerate(zip(cols, outs)):
        cv, ov = _rows(c), _rows(o)
        if k > 0:
            rb = len(ov) // k
            if len(ov) % k or (rb > 0 and len(cv) // rb < n):
                raise ValueError(
                    f"shuffle_take: column {i}: {len(cv)} bytes of column and {len(ov)} of out do not hold "
                    f"{n} and {k} rows"
                )
            views.append((cv, ov, rb))
    if k > 0:
        src, dst, dsrc = shuffle_moves(n, draws)
        for cv, ov, rb in views:
            if rb == 0:
                continue
            rows = cv[: n * rb].reshape(n, rb)
            ov.reshape(k, rb)[:] = rows[src]
            rows[dst] = rows[dsrc]
    if flag is not None:
        flag[0] = 1
