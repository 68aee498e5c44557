"""parse_example / parse_single_example (spec P1-P4); the vectorised walker
gives the same results and errors as protobuf per record."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import feedq.readers._example_wire as wire_mod
from feedq.errors import InvalidArgumentError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    SparseTensorValue,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    example_class,
    parse_example,
    parse_single_example,
    serialize_example,
)
from feedq.readers._example_spec import _Spec

pytestmark = pytest.mark.timeout(10)


def protobuf_only(serialized, features, single: bool = False):
    """Every record through protobuf (the walker's rows all marked slow)."""
    orig = wire_mod._walk

    def all_slow(u8, s, e, specs):
        r = orig(u8, s, e, specs)
        r[0][:] = True
        return r

    wire_mod._walk = all_slow
    try:
        return (parse_single_example if single else parse_example)(serialized, features)
    finally:
        wire_mod._walk = orig


def same(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, SparseTensorValue):
            for u, v in zip(x, y):
                assert u.dtype == v.dtype and u.shape == v.shape and u.tolist() == v.tolist()
        else:
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tolist() == y.tolist() or np.array_equal(x, y, equal_nan=True)


def check_both(serialized, features, single: bool = False):
    """Results or the error message must be the same on both paths."""
    fn = parse_single_example if single else parse_example
    try:
        want = protobuf_only(serialized, features, single)
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(exc.message)}$"):
            fn(serialized, features)
        return exc
    got = fn(serialized, features)
    same(got, want)
    return got


RECS = [
    serialize_example({"x": np.arange(4, dtype=np.float32) + i, "label": i * 1000 - 2, "v": np.arange(i, dtype=np.int64) * 300,
                       "s": b"s%d" % i})
    for i in range(6)
]
FEATS = {
    "x": FixedLenFeature([2, 2], np.float32),
    "label": FixedLenFeature([], np.int64),
    "v": VarLenFeature(np.int64),
    "s": FixedLenFeature([], "string"),
    "q": FixedLenFeature([2], np.float32, default_value=[7, 8]),
    "seq": FixedLenSequenceFeature([1], np.int64, allow_missing=True),
}


def test_p1_batch_outputs() -> None:
    out = check_both(RECS, FEATS)
    assert out["x"].shape == (6, 2, 2) and out["x"].dtype == np.float32
    assert out["label"].tolist() == [i * 1000 - 2 for i in range(6)]
    assert out["s"].tolist() == [b"s%d" % i for i in range(6)]
    assert out["q"].tolist() == [[7.0, 8.0]] * 6
    assert out["seq"].shape == (6, 0, 1)


def test_p1_empty_bytes_is_an_empty_example() -> None:
    out = check_both([b"", b""], {"q": FixedLenFeature([], np.int64, default_value=3)})
    assert out["q"].tolist() == [3, 3]


def test_p1_not_an_example() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^Could not parse example input, value: 'garbage here'$"):
        parse_example([RECS[0], b"garbage here"], FEATS)
    with pytest.raises(InvalidArgumentError, match=r"^Could not parse example input, value: '\\n\\x05abc'$"):
        parse_single_example(b"\n\x05abc", FEATS)


def test_p1_int32_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        parse_example(RECS, {"label": FixedLenFeature([], np.int32)})


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"x": FixedLenFeature([3], np.float32)},
         "Key: x, Index: 0.  Number of float values != expected.  Values size: 4 but output shape: [3]"),
        ({"x": FixedLenFeature([4], np.int64)},
         "Key: x, Index: 0.  Data types don't match. Data type: float but expected type: int64"),
        ({"m": FixedLenFeature([], np.int64)},
         "Feature: m (data type: int64) is required but could not be found."),
        ({"v": FixedLenFeature([1], np.int64)},
         "Key: v, Index: 0.  Number of int64 values != expected.  Values size: 0 but output shape: [1]"),
        ({"x": FixedLenSequenceFeature([3], np.float32, allow_missing=True)},
         ("Key: x, Index: 0.  Number of float values is not a multiple of stride length. "
         "Saw 4 values but output shape is: [?,3]")),
        ({"x": VarLenFeature(np.int64)},
         "Key: x, Index: 0.  Data types don't match. Expected type: int64, Actual type: float"),
    ],
)
def test_p2_p4_errors(features, message: str) -> None:
    # Messages as TF 2.21's, without its "Name: <unknown>, " prefix.
    err = check_both(RECS, features)
    assert isinstance(err, InvalidArgumentError) and err.message == message


def test_p2_config_errors() -> None:
    with pytest.raises(ValueError, match=r"^First dimension of shape for feature a unknown\. Consider using FixedLenSequenceFeature"):
        parse_example(RECS, {"a": FixedLenFeature([None], np.float32)})
    with pytest.raises(ValueError, match=r"^Input to reshape is a tensor with 2 values, but the requested shape has 3$"):
        parse_example(RECS, {"a": FixedLenFeature([3], np.float32, default_value=[1.0, 2.0])})
    with pytest.raises(ValueError, match=r"^Unsupported: FixedLenSequenceFeature requires allow_missing to be True\.$"):
        parse_example(RECS, {"a": FixedLenSequenceFeature([3], np.float32)})


def test_p2_shape_filled_row_major() -> None:
    out = check_both(RECS[:1], {"x": FixedLenFeature([1, 4], np.float32)})
    assert out["x"].tolist() == [[[0.0, 1.0, 2.0, 3.0]]]


def test_p3_varlen_sparse_triple() -> None:
    out = check_both(RECS[:4], {"v": VarLenFeature(np.int64), "none": VarLenFeature(np.float32)})
    v = out["v"]
    assert v.indices.tolist() == [[1, 0], [2, 0], [2, 1], [3, 0], [3, 1], [3, 2]]
    assert v.values.tolist() == [0, 0, 300, 0, 300, 600]
    assert v.dense_shape.tolist() == [4, 3]
    assert out["none"].dense_shape.tolist() == [4, 0] and out["none"].indices.shape == (0, 2)


def test_p4_sequence_padding() -> None:
    out = check_both(RECS[:4], {"v": FixedLenSequenceFeature([], np.int64, allow_missing=True, default_value=-1)})
    assert out["v"].tolist() == [[-1, -1, -1], [0, -1, -1], [0, 300, -1], [0, 300, 600]]


def test_single_example_forms() -> None:
    out = check_both(RECS[3], {"v": VarLenFeature(np.int64), "x": FixedLenSequenceFeature([2], np.float32, allow_missing=True),
                                "m": FixedLenSequenceFeature([2], np.float32, allow_missing=True)}, single=True)
    assert out["v"].indices.tolist() == [[0], [1], [2]] and out["v"].dense_shape.tolist() == [3]
    assert out["x"].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert out["m"].shape == (0, 2)  # missing: [0] + shape
    with pytest.raises(InvalidArgumentError, match=r"^Key: x\.  Data types don't match\. Data type: float but expected type: int64$"):
        parse_single_example(RECS[0], {"x": FixedLenFeature([4], np.int64)})


def odd_encodings() -> list[bytes]:
    """Valid Examples the walker leaves to protobuf, and malformed ones."""
    E = example_class()
    out = []
    e = E()
    e.features.feature["x"].float_list.value.extend([1, 2, 3, 4])
    e.features.feature["s"].bytes_list.value.extend([b"a", b"b"])  # 2 strings
    out.append(e.SerializeToString())
    # Unpacked floats (tag 0x0d per value) inside a FloatList.
    inner = b"".join(b"\x0d" + np.float32(v).tobytes() for v in (5, 6, 7, 8))
    feat = b"\x12" + bytes([len(inner)]) + inner
    entry = b"\x0a\x01x\x12" + bytes([len(feat)]) + feat
    features = b"\x0a" + bytes([len(entry)]) + entry
    out.append(b"\x0a" + bytes([len(features)]) + features)
    # Duplicate key: the last entry wins.
    e1, e2 = E(), E()
    e1.features.feature["x"].float_list.value.extend([0, 0, 0, 0])
    e2.features.feature["x"].float_list.value.extend([9, 9, 9, 9])
    out.append(e1.SerializeToString() + e2.SerializeToString())
    # A large negative int64 (10-byte varint) and an extra unknown field.
    e3 = E()
    e3.features.feature["label"].int64_list.value.append(-(2**62))
    e3.features.feature["x"].float_list.value.extend([1, 1, 1, 1])
    out.append(e3.SerializeToString() + b"\x10\x01")
    return out


def test_walker_falls_back_per_record_with_identical_results() -> None:
    recs = RECS[:2] + odd_encodings() + RECS[2:]
    out = check_both(recs, {"x": FixedLenFeature([4], np.float32),
                            "label": FixedLenFeature([], np.int64, default_value=-1)})
    assert out["x"][4].tolist() == [9, 9, 9, 9]
    assert out["x"][3].tolist() == [5, 6, 7, 8]
    assert out["label"][5] == -(2**62)


def test_non_ascii_and_invalid_utf8_keys() -> None:
    E = example_class()
    e = E()
    e.features.feature["ключ"].int64_list.value.append(5)
    e.features.feature["x"].float_list.value.extend([1, 2, 3, 4])
    good = e.SerializeToString()
    bad = good.replace("ключ".encode(), b"\xff" * len("ключ".encode()))
    check_both([good, good], {"x": FixedLenFeature([4], np.float32), "ключ": FixedLenFeature([], np.int64)})
    check_both([good, bad], {"x": FixedLenFeature([4], np.float32)})


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def test_parse_a_tfrecord_block_in_place(tmp_path: Path) -> None:
    p = tmp_path / "ex.tfr"
    recs = [serialize_example({"x": np.full(32, i, np.float32), "label": i % 10}) for i in range(500)]
    with TFRecordWriter(p) as w:
        w.write_many(recs)
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 1000)
    out = check_both(block, {"x": FixedLenFeature([32], np.float32), "label": FixedLenFeature([], np.int64)})
    assert out["x"][:, 0].tolist() == list(range(500))
    assert out["label"].tolist() == [i % 10 for i in range(500)]


def test_walker_takes_the_common_layout_and_leaves_odd_ones() -> None:
    recs = RECS + odd_encodings()
    lens = np.array([len(r) for r in recs], dtype=np.int64)
    ends = np.cumsum(lens)
    specs = [_Spec(k, f) for k, f in FEATS.items()]
    u8 = np.frombuffer(b"".join(recs), dtype=np.uint8)
    slow = wire_mod._walk(u8, ends - lens, ends, specs)[0]
    # Multi-string BytesLists, unpacked floats, repeated keys, unknown fields -> protobuf.
    assert slow.tolist() == [False] * len(RECS) + [True, True, True, True]
