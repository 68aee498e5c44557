"""feedq._native.parse_examples and pad_ragged: native vs the Python twin
(exactly: kinds, counts, values, splits, error record and reason), both vs
protobuf (upb) record by record, and vs feedq.parse_example on
TensorFlow-written files (P1-P4)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq._native as nat
from feedq._native import KIND_BYTES, KIND_FLOAT, KIND_INT64
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
)
from feedq.readers._example_pb import example_class
from tests.native._cores import CORES

pytestmark = pytest.mark.timeout(120)
# 150 (was 300): the two fuzz tests took 11 s and 8 s, 3-4 times the other fuzz tests of
# the native core; CI draws the same examples every run (derandomized), local runs new ones.
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = (1 << 64) - 1


# --------------------------------------------------------------------- wire format
def v(n: int) -> bytes:
    n &= U64
    out = bytearray()
    while True:
        b, n = n & 127, n >> 7
        if n:
            out.append(b | 128)
        else:
            out.append(b)
            return bytes(out)


def tag(f: int, wt: int) -> bytes:
    return v((f << 3) | wt)


def ld(f: int, body: bytes) -> bytes:
    return tag(f, 2) + v(len(body)) + body


def ex(*entries: bytes) -> bytes:
    return ld(1, b"".join(entries))


def entry(key: bytes, *vals: bytes) -> bytes:
    return ld(1, b"".join([ld(1, key)] + [ld(2, x) for x in vals]))


def fl(*xs: float) -> bytes:
    return ld(2, ld(1, struct.pack(f"<{len(xs)}f", *xs)))


def il(*xs: int) -> bytes:
    return ld(3, ld(1, b"".join(v(x) for x in xs)))


def bl(*xs: bytes) -> bytes:
    return ld(1, b"".join(ld(1, x) for x in xs))


def groups(depth: int, f: int = 9) -> bytes:
    return tag(f, 3) * depth + tag(f, 4) * depth


# --------------------------------------------------------------------- oracles
NAMES = [b"a", b"b", b"feat", b"", "é".encode(), b"zz"]
KIND_OF = {"bytes_list": KIND_BYTES, "float_list": KIND_FLOAT, "int64_list": KIND_INT64}


def protobuf_view(rec: bytes, names: list[bytes]) -> dict[bytes, tuple[int, list[Any]]] | None:
    """upb's reading of one record: name -> (kind, values), None if it rejects it."""
    from google.protobuf.message import DecodeError

    e = example_class()()
    try:
        e.ParseFromString(rec)
    except (DecodeError, ValueError, RuntimeError):
        return None
    out: dict[bytes, tuple[int, list[Any]]] = {}
    fmap = e.features.feature
    for nm in names:
        key = nm.decode()
        if key in fmap:
            which = fmap[key].WhichOneof("kind")
            if which is not None:
                out[nm] = (KIND_OF[which], list(getattr(fmap[key], which).value))
    return out


def requests(kinds: dict[bytes, int]) -> list[nat.FeatureRequest]:
    return [nat.FeatureRequest(nm, k, -1) for nm, k in kinds.items()]


def run(core: nat.Kernels, recs: list[bytes], feats: list[Any], **kw: Any) -> nat.ParsedExamples:
    buf = b"".join(recs)
    lengths = np.array([len(r) for r in recs], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    return core.parse_examples(buf, starts, lengths, feats, **kw)


def same(a: nat.ParsedExamples, b: nat.ParsedExamples) -> None:
    assert (a.error_index, a.error_code) == (b.error_index, b.error_code)
    assert np.array_equal(a.kinds, b.kinds) and np.array_equal(a.counts, b.counts)
    assert len(a.values) == len(b.values)
    for x, y in zip(a.values, b.values):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()  # bit for bit (NaN payloads too)
    for x, y in zip(a.splits, b.splits):
        assert (x is None and y is None) or np.array_equal(x, y)


def both(recs: list[bytes], feats: list[Any], **kw: Any) -> nat.ParsedExamples:
    """Parse with every core; they must agree exactly."""
    out = run(nat.PURE, recs, feats, **kw)
    if nat.NATIVE is not None:
        same(run(nat.NATIVE, recs, feats, **kw), out)
    return out


def check_against_protobuf(recs: list[bytes], res: nat.ParsedExamples, feats: list[nat.FeatureRequest], buf: bytes) -> None:
    names = [f.name for f in feats]
    for i, rec in enumerate(recs):
        view = protobuf_view(rec, names)
        if res.error_index != -1 and i >= res.error_index:
            if i == res.error_index:
                assert view is None, f"record {i}: the kernel rejects what protobuf accepts ({res.error_code})"
            assert not res.kinds[:, i].any()
            continue
        assert view is not None, f"record {i}: protobuf rejects it, the kernel did not"
        for fi, f in enumerate(feats):
            kind, vals = view.get(f.name, (0, []))
            assert res.kinds[fi, i] == kind, (i, f.name)
            assert res.counts[fi, i] == len(vals), (i, f.name)
            if kind != f.kind:
                continue
            a, b = res.splits[fi][i], res.splits[fi][i + 1]  # type: ignore[index]
            got = res.values[fi][a:b]
            if kind == KIND_BYTES:
                assert [buf[s:e] for s, e in got.tolist()] == vals
            elif kind == KIND_FLOAT:
                want = np.array(vals, dtype=np.float32)
                assert np.array_equal(got, want, equal_nan=True)
            else:
                assert got.tolist() == vals


def parse_and_check(recs: list[bytes], kinds: dict[bytes, int]) -> nat.ParsedExamples:
    feats = requests(kinds)
    res = both(recs, feats)
    check_against_protobuf(recs, res, feats, b"".join(recs))
    return res


# --------------------------------------------------------------------- hand-made
CASES = {
    "empty record": b"",
    "one of each": ex(entry(b"a", fl(1.5, -2.0)), entry(b"b", il(1, -1, 300, U64)), entry(b"feat", bl(b"x", b"", b"yz"))),
    "repeated key, last wins": ex(entry(b"a", fl(1.0)), entry(b"a", il(2))),
    "two value fields merge": ex(entry(b"a", fl(1.0), fl(2.0))),
    "oneof switch": ex(entry(b"a", fl(1.0) + il(5) + fl(3.0))),
    "oneof switch over values": ex(entry(b"a", fl(1.0), il(5), fl(3.0))),
    "two features fields": ex(entry(b"a", fl(1.0))) + ex(entry(b"b", il(1))),
    "two features, same key": ex(entry(b"a", fl(1.0))) + ex(entry(b"a", il(1))),
    "group at top": ex(entry(b"a", fl(1.0))) + groups(1, 5),
    "group mismatch": ex(entry(b"a", fl(1.0))) + tag(5, 3) + tag(6, 4),
    "end group at top": ex(entry(b"a", fl(1.0))) + tag(5, 4),
    "end group in features": ld(1, entry(b"a", fl(1.0)) + tag(5, 4)),
    "open group": ex(entry(b"a", fl(1.0))) + tag(5, 3) + tag(7, 0) + b"\x01",
    "field 0": ex(entry(b"a", fl(1.0))) + b"\x00\x01",
    "5-byte tag above 2**32": ex(entry(b"a", fl(1.0))) + b"\xf8\xff\xff\xff\x1f\x00",
    "5-byte tag": ex(entry(b"a", fl(1.0))) + b"\xf8\xff\xff\xff\x0f\x00",
    "6-byte tag": ex(entry(b"a", fl(1.0))) + b"\x88\x80\x80\x80\x80\x00\x00",
    "overlong tag": ex(entry(b"a", fl(1.0))) + b"\x88\x00\x00",
    "wire type 6": ex(entry(b"a", fl(1.0))) + bytes([(5 << 3) | 6]),
    "wire type 7": ex(entry(b"a", fl(1.0))) + bytes([(5 << 3) | 7]),
    "packed floats not x4": ex(entry(b"a", ld(2, ld(1, b"\x00\x00\x00")))),
    "unpacked floats": ex(entry(b"a", ld(2, tag(1, 5) + struct.pack("<f", 1.0) + tag(1, 5) + struct.pack("<f", 2.0)))),
    "floats mixed packed": ex(entry(b"a", ld(2, tag(1, 5) + struct.pack("<f", 1.0) + ld(1, struct.pack("<2f", 3, 4))))),
    "float field as varint": ex(entry(b"a", ld(2, tag(1, 0) + b"\x05"))),
    "float field as fixed64": ex(entry(b"a", ld(2, tag(1, 1) + b"\x00" * 8))),
    "int field as fixed32": ex(entry(b"a", ld(3, tag(1, 5) + b"\x00" * 4))),
    "unpacked ints": ex(entry(b"a", ld(3, tag(1, 0) + b"\x05" + tag(1, 0) + b"\x06"))),
    "10-byte varint, high 10th byte": ex(entry(b"a", ld(3, tag(1, 0) + b"\xff" * 9 + b"\x7f"))),
    "11-byte varint": ex(entry(b"a", ld(3, tag(1, 0) + b"\xff" * 10 + b"\x01"))),
    "packed 10-byte varint": ex(entry(b"a", ld(3, ld(1, b"\xff" * 9 + b"\x7f")))),
    "packed 11-byte varint": ex(entry(b"a", ld(3, ld(1, b"\xff" * 10 + b"\x01")))),
    "packed varint cut short": ex(entry(b"a", ld(3, ld(1, b"\x05\xff")))),
    "packed varints, long run across words": ex(entry(b"a", il(*range(-5, 40)), entry(b"b", il(U64, 1 << 62)))),
    "empty packed runs among values": ex(
        entry(b"a", ld(2, ld(1, b"") + ld(1, struct.pack("<f", 2.0)) + ld(1, b""))),
        entry(b"b", ld(3, ld(1, b"") + ld(1, v(5)) + ld(1, b"") + tag(1, 0) + v(6))),
        entry(b"feat", ld(1, ld(1, b""))),
    ),
    "bad UTF-8 key": ex(entry(b"\xff", fl(1.0))),
    "bad UTF-8 in an unknown field": ex(entry(b"a", fl(1.0))) + ld(7, b"\xff"),
    "surrogate key": ex(entry(b"\xed\xa0\x80", fl(1.0))),
    "overlong key": ex(entry(b"\xc0\x80", fl(1.0))),
    "4-byte UTF-8 key": ex(entry("a\U0001f600".encode(), fl(1.0))),
    "no key": ex(ld(1, ld(2, fl(1.0)))),
    "no value": ex(ld(1, ld(1, b"a"))),
    "two keys": ex(ld(1, ld(1, b"a") + ld(2, fl(1.0)) + ld(1, b"b"))),
    "key as varint": ex(ld(1, tag(1, 0) + b"\x01" + ld(1, b"a") + ld(2, fl(1.0)))),
    "features as varint": tag(1, 0) + b"\x01" + ex(entry(b"a", fl(1.0))),
    "bytes value as varint": ex(entry(b"a", ld(1, tag(1, 0) + b"\x01" + ld(1, b"xy")))),
    "10-byte length": ex(entry(b"a", fl(1.0))) + tag(7, 2) + b"\x80" * 9 + b"\x00",
    "5-byte length": ex(entry(b"a", fl(1.0))) + tag(7, 2) + b"\x80" * 4 + b"\x00",
    "6-byte length": ex(entry(b"a", fl(1.0))) + tag(7, 2) + b"\x80" * 5 + b"\x00",
    "length 2**31 - 2": ex(entry(b"a", fl(1.0))) + tag(7, 2) + v(2**31 - 2),
    "fixed64 unknown": ex(entry(b"a", fl(1.0))) + tag(7, 1) + b"\x00" * 8,
    "fixed64 cut short": ex(entry(b"a", fl(1.0))) + tag(7, 1) + b"\x00" * 7,
    "empty Feature": ex(entry(b"a", b"")),
    "empty list": ex(entry(b"a", ld(2, b""))),
    "11-byte unknown varint": ex(entry(b"a", fl(1.0))) + tag(7, 0) + b"\xff" * 10 + b"\x01",
    "entry with unknown after": ex(entry(b"a", fl(1.0)), ld(1, ld(1, b"a") + ld(2, il(3)) + tag(9, 0) + b"\x01")),
    "entry with unknown before": ex(entry(b"a", fl(1.0)), ld(1, tag(9, 0) + b"\x01" + ld(1, b"a") + ld(2, il(3)))),
    "entry with group": ex(ld(1, ld(1, b"a") + ld(2, il(3)) + groups(1))),
    "entry value as varint": ex(ld(1, ld(1, b"a") + tag(2, 0) + b"\x01")),
    "dropped entry, bad UTF-8": ex(ld(1, ld(1, b"\xff") + ld(2, il(3)) + tag(9, 0) + b"\x01")),
    "unknown in Feature": ex(entry(b"a", fl(1.0) + tag(9, 0) + b"\x01")),
    "kind field as varint": ex(entry(b"a", fl(1.0) + tag(3, 0) + b"\x01")),
    "unknown in list": ex(entry(b"a", ld(2, ld(1, struct.pack("<f", 1.0)) + tag(9, 0) + b"\x01"))),
    "empty name": ex(entry(b"", il(7))),
    "non-ASCII name": ex(entry("é".encode(), bl(b"\xff\xfe"))),
    "NaN payloads": ex(entry(b"a", ld(2, ld(1, b"\x01\x00\xc0\x7f" + b"\x00\x00\x80\x7f")))),
    "truncated record": ex(entry(b"a", fl(1.0, 2.0)))[:-3],
}
# varints of 10 and 11 bytes at every alignment of the C core's 8-byte steps
for k in range(9):
    CASES[f"packed 10-byte varint after {k} bytes"] = ex(entry(b"b", ld(3, ld(1, b"\x01" * k + b"\xff" * 9 + b"\x01" + b"\x00" * 8))))
    CASES[f"packed 11-byte varint after {k} bytes"] = ex(entry(b"b", ld(3, ld(1, b"\x01" * k + b"\xff" * 10 + b"\x01" + b"\x00" * 8))))
    CASES[f"packed run cut short after {k} bytes"] = ex(entry(b"b", ld(3, ld(1, b"\x01" * k + b"\xff" * (9 - k % 3)))))
# protobuf's depth limit: Example 0, Features 1, entry 2, Feature 3, list 4; groups add one each
for depth in (95, 96, 97, 98, 99, 100, 101):
    CASES[f"{depth} groups at top"] = ex(entry(b"a", fl(1.0))) + groups(depth)
    CASES[f"{depth} groups in Features"] = ld(1, entry(b"a", fl(1.0)) + groups(depth))
    CASES[f"{depth} groups in a Feature"] = ex(entry(b"a", fl(1.0) + groups(depth)))
    CASES[f"{depth} groups in a list"] = ex(entry(b"a", ld(2, ld(1, struct.pack("<f", 1.0)) + groups(depth))))

KINDS_A = {b"a": KIND_FLOAT, b"b": KIND_INT64, b"feat": KIND_BYTES, b"": KIND_INT64, "é".encode(): KIND_BYTES, b"zz": KIND_FLOAT}


@pytest.mark.parametrize("name", list(CASES))
def test_hand_made_records_match_protobuf(name: str) -> None:
    rec = CASES[name]
    parse_and_check([rec], KINDS_A)
    # The same record between good ones: results before it, nothing after.
    good = ex(entry(b"a", fl(9.0)), entry(b"b", il(4)))
    parse_and_check([good, rec, good], KINDS_A)
    parse_and_check([good, rec, good], {b"a": KIND_INT64, b"b": KIND_FLOAT, b"feat": KIND_FLOAT})


def test_reason_codes() -> None:
    codes = {
        "11-byte varint": nat.EX_BAD_VARINT,
        "6-byte tag": nat.EX_BAD_TAG,
        "field 0": nat.EX_BAD_TAG,
        "wire type 7": nat.EX_BAD_WIRE_TYPE,
        "10-byte length": nat.EX_BAD_VARINT,
        "length 2**31 - 2": nat.EX_BAD_LENGTH,
        "packed floats not x4": nat.EX_BAD_PACKED,
        "packed varint cut short": nat.EX_BAD_PACKED,
        "bad UTF-8 key": nat.EX_BAD_UTF8,
        "end group at top": nat.EX_BAD_GROUP,
        "open group": nat.EX_BAD_GROUP,
        "fixed64 cut short": nat.EX_TRUNCATED,
        "101 groups at top": nat.EX_TOO_DEEP,
        "97 groups in a list": nat.EX_TOO_DEEP,
    }
    for name, code in codes.items():
        res = both([ex(entry(b"a", fl(1.0))), CASES[name]], requests(KINDS_A))
        assert (res.error_index, res.error_code) == (1, code), name
        assert nat.EX_REASONS[code]


# --------------------------------------------------------------------- fuzzing
@st.composite
def unknown_field(draw: Any, depth: int = 0) -> bytes:
    f = draw(st.integers(2, 40))
    wt = draw(st.sampled_from([0, 1, 2, 5] + ([3] if depth < 3 else [])))
    if wt == 0:
        return tag(f, 0) + v(draw(st.integers(0, U64)))
    if wt == 1:
        return tag(f, 1) + draw(st.binary(min_size=8, max_size=8))
    if wt == 5:
        return tag(f, 5) + draw(st.binary(min_size=4, max_size=4))
    if wt == 2:
        return ld(f, draw(st.binary(max_size=12)))
    inner = b"".join(draw(st.lists(unknown_field(depth + 1), max_size=2)))
    return tag(f, 3) + inner + tag(f, 4)


@st.composite
def list_body(draw: Any, kind: int) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["packed", "packed", "unpacked", "unknown", "wrong wire type"]))
        if how == "unknown":
            parts.append(draw(unknown_field()))
        elif how == "wrong wire type":  # kept by protobuf as an unknown field
            wt = draw(st.sampled_from({KIND_FLOAT: [0, 1], KIND_INT64: [1, 5]}.get(kind, [0, 1, 5])))
            size = {0: 0, 1: 8, 5: 4}[wt]
            body = v(draw(st.integers(0, U64))) if wt == 0 else draw(st.binary(min_size=size, max_size=size))
            parts.append(tag(1, wt) + body)
        elif kind == KIND_FLOAT:
            xs = draw(st.lists(st.binary(min_size=4, max_size=4), max_size=6))
            parts.append(ld(1, b"".join(xs)) if how == "packed" else b"".join(tag(1, 5) + x for x in xs))
        elif kind == KIND_INT64:
            xs = draw(st.lists(st.one_of(st.integers(0, 300), st.integers(-(1 << 63), U64)), max_size=6))
            parts.append(ld(1, b"".join(v(x) for x in xs)) if how == "packed" else b"".join(tag(1, 0) + v(x) for x in xs))
        else:
            parts.append(b"".join(ld(1, draw(st.binary(max_size=6))) for _ in range(draw(st.integers(0, 3)))))
    return b"".join(parts)


@st.composite
def feature_body(draw: Any) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 9)) == 0:
            parts.append(draw(unknown_field()))
        else:
            k = draw(st.sampled_from([KIND_BYTES, KIND_FLOAT, KIND_INT64]))
            parts.append(ld(k, draw(list_body(k))))
    return b"".join(parts)


KEYS = [b"a", b"b", b"feat", b"", "é".encode(), b"other", b"\xff", b"\xed\xa0\x80", b"\xc3"]


@st.composite
def entry_body(draw: Any) -> bytes:
    parts = []
    if draw(st.integers(0, 19)):
        parts.append(ld(1, draw(st.sampled_from(KEYS[:6] if draw(st.integers(0, 9)) else KEYS))))
    for _ in range(draw(st.integers(0, 2))):
        which = draw(st.integers(0, 14))
        if which == 0:
            parts.append(draw(unknown_field()))
        elif which == 1:
            parts.append(ld(1, draw(st.sampled_from(KEYS[:6]))))
        else:
            parts.append(ld(2, draw(feature_body())))
    return b"".join(draw(st.permutations(parts)))


@st.composite
def example(draw: Any) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        entries = [ld(1, draw(entry_body())) for _ in range(draw(st.integers(0, 4)))]
        if draw(st.integers(0, 9)) == 0:
            entries.append(draw(unknown_field()))
        parts.append(ld(1, b"".join(entries)))
    if draw(st.integers(0, 7)) == 0:
        parts.append(draw(unknown_field()))
    rec = bytearray(b"".join(draw(st.permutations(parts))))
    how = draw(st.sampled_from(["as is"] * 12 + ["flip", "truncate", "insert"]))
    if how == "flip" and rec:
        i = draw(st.integers(0, len(rec) - 1))
        rec[i] ^= 1 << draw(st.integers(0, 7))
    elif how == "truncate" and rec:
        del rec[draw(st.integers(0, len(rec) - 1)) :]
    elif how == "insert":
        at = draw(st.integers(0, len(rec)))
        rec[at:at] = draw(st.binary(min_size=1, max_size=3))
    return bytes(rec)


FUZZ_KINDS = st.fixed_dictionaries(
    {nm: st.sampled_from([KIND_BYTES, KIND_FLOAT, KIND_INT64]) for nm in NAMES}
)


@FUZZ
@given(st.lists(example(), min_size=1, max_size=6), FUZZ_KINDS)
def test_fuzz_native_twin_and_protobuf_agree(recs: list[bytes], kinds: dict[bytes, int]) -> None:
    parse_and_check(recs, kinds)


@FUZZ
@given(st.lists(example(), min_size=1, max_size=4), st.integers(0, 4))
def test_fuzz_fixed_columns(recs: list[bytes], n: int) -> None:
    feats = [nat.FeatureRequest(b"a", KIND_FLOAT, n), nat.FeatureRequest(b"b", KIND_INT64, n)]
    res = both(recs, feats)
    flat = both(recs, requests({b"a": KIND_FLOAT, b"b": KIND_INT64}))
    for fi, f in enumerate(feats):
        col = res.values[fi]
        assert col.shape == (len(recs), n)
        for i in range(len(recs)):
            a, b = flat.splits[fi][i], flat.splits[fi][i + 1]  # type: ignore[index]
            if res.kinds[fi, i] == f.kind and res.counts[fi, i] == n:
                assert col[i].tobytes() == flat.values[fi][a:b].tobytes()
            else:
                assert not col[i].any()  # left as it was


# --------------------------------------------------------------------- columns
def test_out_columns_keep_defaults_where_nothing_is_written() -> None:
    recs = [ex(entry(b"a", fl(1, 2))), ex(), ex(entry(b"a", fl(3))), ex(entry(b"a", il(1, 2)))]
    for core in (nat.PURE, nat.NATIVE):
        if core is None:
            continue
        col = np.full((4, 2), -7.0, dtype=np.float32)
        res = run(core, recs, [(b"a", KIND_FLOAT, 2)], out=[col])
        assert res.values[0] is col
        assert col.tolist() == [[1, 2], [-7, -7], [-7, -7], [-7, -7]]
        assert res.kinds[0].tolist() == [KIND_FLOAT, 0, KIND_FLOAT, KIND_INT64]
        assert res.counts[0].tolist() == [2, 0, 1, 2]


@pytest.mark.parametrize("core", CORES)
def test_bad_requests(core: nat.Kernels) -> None:
    recs = [ex(entry(b"a", fl(1)))]
    with pytest.raises(ValueError, match=r"^feature names must be distinct$"):
        run(core, recs, [(b"a", 2), ("a", 3)])
    with pytest.raises(ValueError, match=r"kind must be 1 \(bytes\), 2 \(float\) or 3 \(int64\), got 4$"):
        run(core, recs, [(b"a", 4)])
    with pytest.raises(ValueError, match=r"^out\[0\] must be a float32 array$"):
        run(core, recs, [(b"a", 2, 1)], out=[np.zeros((1, 1), dtype=np.float64)])
    with pytest.raises(ValueError, match=r"^out\[0\] must be a writable C-contiguous array of 2 items$"):
        run(core, recs, [(b"a", 2, 2)], out=[np.zeros((1, 3), dtype=np.float32)])
    with pytest.raises(ValueError, match=r"^record 1 \(start 5, length 10\) is outside the buffer of 12 bytes$"):
        core.parse_examples(b"x" * 12, [0, 5], [1, 10], [(b"a", 2)])
    with pytest.raises(ValueError, match=r"^record 0 \(start -1, length 1\) is outside"):
        core.parse_examples(b"x" * 12, [-1], [1], [(b"a", 2)])


@pytest.mark.parametrize("core", CORES)
def test_records_anywhere_in_a_buffer(core: nat.Kernels) -> None:
    # Records out of order, overlapping, in a NumPy buffer; bytes values are offsets into it.
    r1, r2 = ex(entry(b"t", bl(b"hello", b"w"))), ex(entry(b"t", bl(b"z")))
    buf = np.frombuffer(b"junk" + r1 + r2, dtype=np.uint8)
    res = core.parse_examples(buf, [4 + len(r1), 4, 4], [len(r2), len(r1), len(r1)], [(b"t", KIND_BYTES)])
    got = [buf[s:e].tobytes() for s, e in res.values[0].tolist()]
    assert got == [b"z", b"hello", b"w", b"hello", b"w"]
    assert res.splits[0].tolist() == [0, 1, 3, 5]  # type: ignore[union-attr]


# --------------------------------------------------------------------- TensorFlow files
def tf_examples(tf: Any, n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        feats = {
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.standard_normal(32).astype(np.float32))),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(0, 1000))])),
            "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(-(10**12), 10**12, i % 21))),
            "tag": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"t%d" % rng.integers(0, 10**6)])),
        }
        if i % 7 == 0:
            del feats["ids"]
        out.append(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return out


def test_tensorflow_files_match_parse_example(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfr")
    with tf.io.TFRecordWriter(path) as w:
        for rec in tf_examples(tf, 600, 5):
            w.write(rec)
    buf = Path(path).read_bytes()
    scan = nat.scan_tfrecords(buf)
    assert scan.status == nat.SCAN_OK and len(scan.starts) == 600
    recs = [buf[s + 12 : s + 12 + n] for s, n in zip(scan.starts.tolist(), scan.lengths.tolist())]
    want = parse_example(
        recs,
        {
            "x": FixedLenFeature([32], np.float32),
            "label": FixedLenFeature([], np.int64),
            "ids": VarLenFeature(np.int64),
            "tag": FixedLenFeature([], np.str_),
            "seq": FixedLenSequenceFeature([], np.int64, allow_missing=True),
        },
    )
    feats = [(b"x", KIND_FLOAT, 32), (b"label", KIND_INT64, 1), (b"ids", KIND_INT64), (b"tag", KIND_BYTES)]
    for core in (nat.PURE, nat.NATIVE):
        if core is None:
            continue
        res = core.parse_examples(buf, scan.starts + 12, scan.lengths, feats)
        assert res.error_index == -1
        assert res.values[0].tobytes() == want["x"].tobytes()
        assert res.values[1][:, 0].tolist() == want["label"].tolist()
        ids = want["ids"]
        assert res.values[2].tolist() == ids.values.tolist()
        rows = np.bincount(ids.indices[:, 0], minlength=600)
        assert np.diff(res.splits[2]).tolist() == rows.tolist()  # type: ignore[arg-type]
        assert (res.kinds[2] == 0).sum() == 600 // 7 + 1
        assert [buf[s:e] for s, e in res.values[3].tolist()] == want["tag"].tolist()
        # ragged ids padded as FixedLenSequenceFeature would pad them
        dense = core.pad_ragged(res.values[2], res.splits[2], pad=-1)
        assert dense.shape == (600, 20)
        for i in (0, 1, 20, 599):
            a, b = res.splits[2][i], res.splits[2][i + 1]  # type: ignore[index]
            assert dense[i].tolist() == res.values[2][a:b].tolist() + [-1] * (20 - (b - a))


# --------------------------------------------------------------------- padding
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.float64, np.uint16])
@pytest.mark.parametrize("core", CORES)
def test_pad_ragged_matches_numpy(core: nat.Kernels, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 9, 50)
    splits = np.concatenate([[0], np.cumsum(counts)])
    values = rng.integers(0, 100, int(splits[-1])).astype(dtype)
    for width, pad in ((None, 0), (12, 7), (int(counts.max()), -1 if np.dtype(dtype).kind != "u" else 3)):
        got = core.pad_ragged(values, splits, width, pad)
        w = int(counts.max()) if width is None else width
        want = np.full((50, w), pad, dtype=dtype)
        for i in range(50):
            want[i, : counts[i]] = values[splits[i] : splits[i + 1]]
        assert got.dtype == np.dtype(dtype) and np.array_equal(got, want)


@pytest.mark.parametrize("core", CORES)
def test_pad_ragged_edges_and_errors(core: nat.Kernels) -> None:
    assert core.pad_ragged(np.zeros(0, np.float32), [0]).shape == (0, 0)
    assert core.pad_ragged(np.arange(3), [1, 1, 3], 4, 9).tolist() == [[9, 9, 9, 9], [1, 2, 9, 9]]
    assert core.pad_ragged(np.arange(3), [0, 0, 0], None).shape == (2, 0)
    with pytest.raises(ValueError, match=r"^row 1 has 3 values, more than width 2$"):
        core.pad_ragged(np.arange(5), [0, 1, 4], 2)
    with pytest.raises(ValueError, match=r"^splits must be non-decreasing within \[0, 5\]$"):
        core.pad_ragged(np.arange(5), [0, 3, 2])
    with pytest.raises(ValueError, match=r"^splits must be non-decreasing within \[0, 5\]$"):
        core.pad_ragged(np.arange(5), [0, 6])
    with pytest.raises(TypeError, match=r"^pad_ragged needs a fixed-size dtype, not object$"):
        core.pad_ragged(np.array([b"x"], dtype=object), [0, 1])
