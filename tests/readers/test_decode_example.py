"""parse_example / parse_single_example (spec P1-P4), SparseFeature,
RaggedFeature and the SequenceExample parsers; the vectorised walker gives the
same results and errors as protobuf per record."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import feedq.readers._example as example_mod
import feedq.readers._example_wire as wire_mod
from feedq.errors import InvalidArgumentError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedTensorValue,
    SparseFeature,
    SparseTensorValue,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    example_class,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
    sequence_example_class,
    serialize_example,
    serialize_sequence_example,
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

    kernel = example_mod._KERNEL
    wire_mod._walk = all_slow
    example_mod._KERNEL = False  # the walker's path, not the native kernel's
    try:
        return (parse_single_example if single else parse_example)(serialized, features)
    finally:
        wire_mod._walk = orig
        example_mod._KERNEL = kernel


def same(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, SparseTensorValue):
            for u, v in zip(x, y):
                assert u.dtype == v.dtype and u.shape == v.shape and u.tolist() == v.tolist()
        elif isinstance(x, RaggedTensorValue):
            assert isinstance(y, RaggedTensorValue) and x.to_list() == y.to_list()
            for u, v in zip(x.nested_row_splits + (x.flat_values,), y.nested_row_splits + (y.flat_values,)):
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


def varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 127) | (128 if n > 127 else 0)])
        n >>= 7
        if not n:
            return out


def wire_example(*entries: tuple[bytes, int, bytes]) -> bytes:
    """An Example from raw (key, Feature kind, list payload) map entries."""
    body = b""
    for key, kind, payload in entries:
        lst = b"\x0a" + varint(len(payload)) + payload if payload else b""
        feat = bytes([kind << 3 | 2]) + varint(len(lst)) + lst
        entry = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(feat)) + feat
        body += b"\x0a" + varint(len(entry)) + entry
    return b"\x0a" + varint(len(body)) + body


X4 = (b"x", 2, np.arange(4, dtype="<f4").tobytes())


@pytest.mark.parametrize(
    ("corrupt", "valid"),
    [
        ((b"zz", 3, b"\x81"), (b"zz", 3, b"\x81\x01")),  # a packed varint cut short
        ((b"zz", 3, b"\xff" * 10 + b"\x01"), (b"zz", 3, b"\xff" * 9 + b"\x7f")),  # 11 bytes; 10 is the limit
        ((b"zz", 2, b"\x00" * 5), (b"zz", 2, b"\x00" * 8)),  # packed floats: a multiple of 4 bytes
        ((b"x", 2, b"\x00" * 5), (b"x", 2, b"\x00" * 16)),  # a repeated key: the entry that loses
    ],
)
def test_walker_checks_unrequested_features_as_protobuf_does(corrupt, valid) -> None:
    # The walker used to skip the payloads of features nobody asked for, and
    # accepted records that protobuf (and TF) reject.
    feats = {"x": FixedLenFeature([4], np.float32)}
    bad, good = wire_example(corrupt, X4), wire_example(valid, X4)
    err = check_both([good, bad], feats)
    assert isinstance(err, InvalidArgumentError) and err.message.startswith("Could not parse example input")
    assert check_both([good, good], feats)["x"].tolist() == [[0, 1, 2, 3]] * 2
    specs = [_Spec("x", feats["x"])]
    for rec, slow in ((bad, True), (good, corrupt[0] == b"x")):  # a repeated key always goes to protobuf
        u8 = np.frombuffer(rec, dtype=np.uint8)
        assert wire_mod._walk(u8, np.array([0]), np.array([len(rec)]), specs)[0].tolist() == [slow]


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


# --------------------------------------------------------------------------- feature specs (P2, P4)
def test_p2_an_int_shape_is_a_vector() -> None:
    # TF's as_shape(2) is [2]; this used to fail with "'int' object is not iterable".
    out = check_both(RECS, {"x": FixedLenFeature(4, np.float32), "q": FixedLenFeature(2, np.float32, default_value=[7, 8]),
                            "x2": FixedLenSequenceFeature(2, np.float32, allow_missing=True),
                            "label": FixedLenFeature(np.int64(1), np.int64)})
    assert out["x"].shape == (6, 4) and out["x"][1].tolist() == [1, 2, 3, 4]
    assert out["q"].tolist() == [[7, 8]] * 6
    assert out["x2"].shape == (6, 0, 2) and out["label"].shape == (6, 1)
    single = parse_single_example(RECS[2], {"x": FixedLenSequenceFeature(2, np.float32, allow_missing=True)})
    assert single["x"].tolist() == [[2, 3], [4, 5]]


def test_p2_a_none_shape_is_missing_not_scalar() -> None:
    # A None shape used to read as [] (a scalar): "label" (one value) parsed.
    with pytest.raises(ValueError, match=r"^Missing shape for feature label\. Received feature=FixedLenFeature\("):
        parse_example(RECS, {"label": FixedLenFeature(None, np.int64)})
    with pytest.raises(ValueError, match=r"^Missing shape for feature label\."):
        parse_single_example(RECS[0], {"label": FixedLenFeature(None, np.int64, default_value=0)})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shape": [0]},
        {"shape": 0},
        {"shape": [-1]},
        {"shape": [2, 0]},
    ],
)
def test_p4_bad_sequence_feature_fails_at_construction(kwargs: dict) -> None:
    # Used to construct fine and then fail inside NumPy at parse time.
    with pytest.raises(ValueError, match=r"^FixedLenSequenceFeature "):
        FixedLenSequenceFeature(dtype=np.float32, allow_missing=True, **kwargs)


@pytest.mark.parametrize("default, n", [([], 0), (np.zeros(0, np.float32), 0), ([[]], 0), ([1.0, 2.0], 2)])
@pytest.mark.parametrize("single", [False, True])
def test_p4_sequence_default_not_one_value_constructs_and_parsing_refuses_it(default, n, single) -> None:
    # TF constructs these and its ParseExample refuses them (issue 24; TF's
    # testSerializedContainingVarLenDense expects this error for []): the
    # same error on both paths, also when no record needs padding.
    f = FixedLenSequenceFeature([2], np.float32, allow_missing=True, default_value=default)
    assert f.default_value is default
    err = check_both(RECS[3] if single else RECS[:4], {"x": f}, single=single)
    assert isinstance(err, InvalidArgumentError)
    assert err.message == f"Input to reshape is a tensor with {n} values, but the requested shape has 1"


def test_p4_sequence_feature_still_constructs_like_tf() -> None:
    f = FixedLenSequenceFeature([2], np.float32, default_value=1.5)
    assert f == ([2], np.float32, False, 1.5) and f._replace(allow_missing=True).allow_missing
    assert repr(f).startswith("FixedLenSequenceFeature(shape=[2]")
    # A None dimension constructs (TF's too) and is refused when parsing.
    with pytest.raises(ValueError, match=r"must be fully defined"):
        parse_example(RECS, {"x": FixedLenSequenceFeature([None], np.float32, allow_missing=True)})


def test_example_class_is_public() -> None:
    ex = example_class()()
    ex.ParseFromString(RECS[1])
    assert list(ex.features.feature["x"].float_list.value) == [1, 2, 3, 4]
    seq = sequence_example_class()()
    seq.ParseFromString(serialize_sequence_example({"a": 1}, {"f": [[1.0], [2.0]]}))
    assert len(seq.feature_lists.feature_list["f"].feature) == 2


# --------------------------------------------------------------------------- SparseFeature
SPARSE_RECS = [
    serialize_example({"i": [3, 0, 2, 0], "j": [1, 1, 0, 0], "v": np.array([1, 2, 3, 4], np.float32),
                       "s": [b"a", b"b"], "si": [1, 0]}),
    b"",
    serialize_example({"i": [1], "j": [0], "v": np.array([5], np.float32), "s": [b"c"], "si": [2]}),
]


def test_sparse_feature_sorted_row_major() -> None:
    out = check_both(SPARSE_RECS, {"sp": SparseFeature("i", "v", np.float32, 4)})["sp"]
    # Sorted by (record, index), stable for the repeated index 0.
    assert out.indices.tolist() == [[0, 0], [0, 0], [0, 2], [0, 3], [2, 1]]
    assert out.values.tolist() == [2, 4, 3, 1, 5] and out.values.dtype == np.float32
    assert out.dense_shape.tolist() == [3, 4]
    kept = check_both(SPARSE_RECS, {"sp": SparseFeature("i", "v", np.float32, 4, already_sorted=True)})["sp"]
    assert kept.indices.tolist() == [[0, 3], [0, 0], [0, 2], [0, 0], [2, 1]]
    assert kept.values.tolist() == [1, 2, 3, 4, 5]


def test_sparse_feature_several_dimensions_and_single() -> None:
    out = check_both(SPARSE_RECS, {"sp": SparseFeature(["i", "j"], "v", np.float32, [4, 2])})["sp"]
    assert out.indices.tolist() == [[0, 0, 0], [0, 0, 1], [0, 2, 0], [0, 3, 1], [2, 1, 0]]
    assert out.values.tolist() == [4, 2, 3, 1, 5] and out.dense_shape.tolist() == [3, 4, 2]
    one = check_both(SPARSE_RECS[0], {"sp": SparseFeature(["i", "j"], "v", np.float32, [4, 2]),
                                      "s": SparseFeature("si", "s", "string", 2)}, single=True)
    assert one["sp"].indices.tolist() == [[0, 0], [0, 1], [2, 0], [3, 1]] and one["sp"].dense_shape.tolist() == [4, 2]
    assert one["s"].indices.tolist() == [[0], [1]] and one["s"].values.tolist() == [b"b", b"a"]
    empty = check_both(SPARSE_RECS[1], {"sp": SparseFeature("i", "v", np.float32, 4)}, single=True)["sp"]
    assert empty.indices.shape == (0, 1) and empty.values.shape == (0,) and empty.dense_shape.tolist() == [4]


def test_sparse_feature_shares_columns_with_varlen() -> None:
    out = check_both(SPARSE_RECS, {"sp": SparseFeature("i", "v", np.float32, 4), "i": VarLenFeature(np.int64)})
    assert out["i"].values.tolist() == [3, 0, 2, 0, 1]
    with pytest.raises(ValueError, match=r"^Conflicting type float vs int64 for feature v\.$"):
        parse_example(SPARSE_RECS, {"sp": SparseFeature("v", "v", np.float32, 4)})
    with pytest.raises(TypeError, match=r"size must be a list of 2 ints"):
        parse_example(SPARSE_RECS, {"sp": SparseFeature(["i", "j"], "v", np.float32, 4)})


@pytest.mark.parametrize(
    ("feature", "message"),
    [
        (SparseFeature("i", "v", np.float32, 3),
         "Key: sp, Index: 0.  Index feature i value 3 is out of range [0, 3)."),
        (SparseFeature("si", "v", np.float32, 3),
         "Key: sp, Index: 0.  Index feature si has 2 values but value feature v has 4."),
        (SparseFeature("i", "v", np.int64, 4),
         "Key: v, Index: 0.  Data types don't match. Expected type: int64, Actual type: float"),
    ],
)
def test_sparse_feature_errors(feature, message: str) -> None:
    err = check_both(SPARSE_RECS, {"sp": feature})
    assert isinstance(err, InvalidArgumentError) and err.message == message
    with pytest.raises(InvalidArgumentError, match=f"^{re.escape(message.replace(', Index: 0', ''))}$"):
        parse_single_example(SPARSE_RECS[0], {"sp": feature})


def test_sparse_feature_negative_index_is_out_of_range() -> None:
    rec = serialize_example({"i": [-1], "v": np.array([1], np.float32)})
    with pytest.raises(InvalidArgumentError, match=r"^Key: sp, Index: 1\.  Index feature i value -1 is out of range"):
        parse_example([SPARSE_RECS[2], rec], {"sp": SparseFeature("i", "v", np.float32, 4)})


# --------------------------------------------------------------------------- RaggedFeature
RAGGED_RECS = [
    serialize_example({"v": np.array([1, 2, 3], np.float32), "rl": [2, 1], "rs": [0, 2, 3], "st": [0, 2],
                       "lim": [2, 3], "u": [1, 2, 3, 4], "a": [2, 0], "b": [1, 2]}),
    serialize_example({"v": np.array([4], np.float32), "rl": [0, 1], "rs": [0, 0, 1], "st": [0, 0], "lim": [0, 1],
                       "u": [5, 6], "a": [1], "b": [1]}),
    b"",
]
R = RaggedFeature


def ragged(partitions=(), key="v", dtype=np.float32, **kw) -> RaggedFeature:
    return RaggedFeature(dtype, value_key=key, partitions=partitions, **kw)


def test_ragged_feature_without_partitions() -> None:
    out = check_both(RAGGED_RECS, {"v": RaggedFeature(np.float32), "u": ragged(key="u", dtype=np.int64,
                                                                                row_splits_dtype=np.int64)})
    assert out["v"].to_list() == [[1, 2, 3], [4], []]
    assert out["v"].row_splits.tolist() == [0, 3, 4, 4] and out["v"].row_splits.dtype == np.int32
    assert out["v"].values.dtype == np.float32
    assert out["u"].row_splits.dtype == np.int64 and out["u"].to_list() == [[1, 2, 3, 4], [5, 6], []]
    single = check_both(RAGGED_RECS[0], {"v": RaggedFeature(np.float32)}, single=True)["v"]
    assert isinstance(single, np.ndarray) and single.tolist() == [1, 2, 3]  # TF: a plain Tensor


@pytest.mark.parametrize("partition", [R.RowLengths("rl"), R.RowSplits("rs"), R.RowStarts("st"), R.RowLimits("lim")])
def test_ragged_feature_keyed_partitions(partition) -> None:
    out = check_both(RAGGED_RECS, {"r": ragged((partition,))})["r"]
    assert out.to_list() == [[[1, 2], [3]], [[], [4]], []]
    assert [s.tolist() for s in out.nested_row_splits] == [[0, 2, 4, 4], [0, 2, 3, 3, 4]]
    single = check_both(RAGGED_RECS[1], {"r": ragged((partition,))}, single=True)["r"]
    assert single.to_list() == [[], [4]] and single.row_splits.tolist() == [0, 0, 1]


def test_ragged_feature_uniform_and_nested_partitions() -> None:
    out = check_both(RAGGED_RECS, {"u": ragged((R.UniformRowLength(2),), key="u", dtype=np.int64),
                                   "n": ragged((R.RowLengths("a"), R.RowLengths("b"))),
                                   "m": ragged((R.UniformRowLength(1), R.UniformRowLength(2)), key="u",
                                               dtype=np.int64)})
    # Trailing uniform partitions become inner dimensions of the values (TF's flat_values).
    assert out["u"].values.shape == (3, 2) and out["u"].row_splits.tolist() == [0, 2, 3, 3]
    assert out["u"].to_list() == [[[1, 2], [3, 4]], [[5, 6]], []]
    assert out["m"].values.shape == (3, 1, 2) and out["m"].to_list() == [[[[1, 2]], [[3, 4]]], [[[5, 6]]], []]
    assert out["n"].to_list() == [[[[1], [2, 3]], []], [[[4]]], []]
    single = check_both(RAGGED_RECS[0], {"u": ragged((R.UniformRowLength(2),), key="u", dtype=np.int64)},
                        single=True)["u"]
    assert isinstance(single, np.ndarray) and single.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("partitions", "message"),
    [
        ((R.RowLengths("a"),), "Row lengths feature a does not partition the 3 items below it: [2, 0]."),
        ((R.RowLengths("lim"),), "Row lengths feature lim does not partition the 3 items below it: [2, 3]."),
        ((R.RowSplits("rl"),), "Row splits feature rl does not partition the 3 items below it: [2, 1]."),
        ((R.RowStarts("lim"),), "Row starts feature lim does not partition the 3 items below it: [2, 3]."),
        ((R.RowLimits("st"),), "Row limits feature st does not partition the 3 items below it: [0, 2]."),
        ((R.UniformRowLength(2),), "UniformRowLength(2) does not divide the 3 items below it."),
        ((R.RowLengths("a"), R.UniformRowLength(2)), "UniformRowLength(2) does not divide the 3 items below it."),
        ((R.RowLengths("missing"),), "Row lengths feature missing does not partition the 3 items below it: []."),
    ],
)
def test_ragged_feature_partitions_must_fit(partitions, message: str) -> None:
    # TF builds a malformed RaggedTensor (no check without validate=True); feedq refuses.
    err = check_both(RAGGED_RECS, {"r": ragged(partitions)})
    assert isinstance(err, InvalidArgumentError) and err.message == "Key: r, Index: 0.  " + message


def test_ragged_feature_bad_record_is_named_and_config_errors() -> None:
    rec = serialize_example({"v": np.array([1, 2], np.float32), "rl": [-1, 3]})
    with pytest.raises(InvalidArgumentError, match=r"^Key: r, Index: 1\.  Row lengths feature rl does not partition"):
        parse_example([RAGGED_RECS[0], rec], {"r": ragged((R.RowLengths("rl"),))})
    with pytest.raises(InvalidArgumentError, match=r"^Key: r\.  Row lengths feature rl does not partition"):
        parse_single_example(rec, {"r": ragged((R.RowLengths("rl"),))})
    with pytest.raises(ValueError, match=r"ValueRowIds partitions are not supported"):
        parse_example(RAGGED_RECS, {"r": ragged((R.ValueRowIds("rl"),))})
    with pytest.raises(ValueError, match=r"UniformRowLength must be >= 1"):
        parse_example(RAGGED_RECS, {"r": ragged((R.UniformRowLength(0),))})
    with pytest.raises(ValueError, match=r"row_splits_dtype must be int32 or int64"):
        parse_example(RAGGED_RECS, {"r": ragged(row_splits_dtype=np.int16)})
    with pytest.raises(TypeError, match=r"unsupported partition"):
        parse_example(RAGGED_RECS, {"r": ragged(("rl",))})


# --------------------------------------------------------------------------- SequenceExample
SEQ_RECS = [
    serialize_sequence_example({"id": b"a", "n": [1, 2]},
                               {"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "t": [[1], [2, 3], np.zeros(0, np.int64)],
                                "s": [[b"p"], [b"q"], [b"r"]]}),
    serialize_sequence_example({"id": b"b", "n": [3]}, {"x": [[7.0, 8.0]], "t": [[4]], "s": [[b"z"]]}),
    serialize_sequence_example({"id": b"c"}, {}),
]
SEQ_CTX = {"id": FixedLenFeature([], "string"), "n": VarLenFeature(np.int64),
           "d": FixedLenFeature(2, np.int64, default_value=[5, 6])}
SEQ_LISTS = {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True), "t": VarLenFeature(np.int64),
             "s": FixedLenSequenceFeature([], "string", allow_missing=True), "r": ragged(key="t", dtype=np.int64)}


def test_single_sequence_example() -> None:
    ctx, lists = parse_single_sequence_example(SEQ_RECS[0], SEQ_CTX, SEQ_LISTS)
    assert ctx["id"] == b"a" and ctx["n"].values.tolist() == [1, 2] and ctx["d"].tolist() == [5, 6]
    assert lists["x"].dtype == np.float32 and lists["x"].tolist() == [[1, 2], [3, 4], [5, 6]]
    assert lists["s"].tolist() == [b"p", b"q", b"r"]
    assert lists["t"].indices.tolist() == [[0, 0], [1, 0], [1, 1]] and lists["t"].dense_shape.tolist() == [3, 2]
    assert lists["r"].to_list() == [[1], [2, 3], []]
    ctx, lists = parse_single_sequence_example(SEQ_RECS[2], SEQ_CTX, SEQ_LISTS)  # every list missing
    assert lists["x"].shape == (0, 2) and lists["s"].shape == (0,)
    assert lists["t"].dense_shape.tolist() == [0, 0] and lists["r"].to_list() == []
    assert parse_single_sequence_example(b"") == ({}, {})


def test_sequence_example_batch(tmp_path: Path) -> None:
    p = tmp_path / "seq.tfr"
    with TFRecordWriter(p) as w:
        w.write_many(SEQ_RECS)
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 10)
    for batch in (SEQ_RECS, block):
        ctx, lists, lengths = parse_sequence_example(batch, SEQ_CTX, SEQ_LISTS)
        assert ctx["id"].tolist() == [b"a", b"b", b"c"] and ctx["n"].dense_shape.tolist() == [3, 2]
        assert lists["x"].shape == (3, 3, 2)
        assert lists["x"][1].tolist() == [[7, 8], [0, 0], [0, 0]] and lists["x"][2].tolist() == [[0, 0]] * 3
        assert lists["s"].tolist() == [[b"p", b"q", b"r"], [b"z", b"", b""], [b"", b"", b""]]
        assert lists["t"].indices.tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 0, 0]]
        assert lists["t"].dense_shape.tolist() == [3, 3, 2]
        assert lists["r"].to_list() == [[[1], [2, 3], []], [[4]], []]
        assert {k: v.tolist() for k, v in lengths.items()} == {"x": [3, 1, 0], "s": [3, 1, 0]}
    ctx, lists, lengths = parse_sequence_example([], SEQ_CTX, SEQ_LISTS)
    assert lists["x"].shape == (0, 0, 2) and lengths["x"].shape == (0,)


@pytest.mark.parametrize(
    ("lists", "spec", "message"),
    [
        ({"x": [[1.0], [2.0, 3.0]]}, FixedLenSequenceFeature([2], np.float32),
         ("Feature list 'x' has an unexpected number of values.  Total values size: 3 is not consistent "
          "with output shape: [?,2]")),
        ({"x": [[1.0, 2.0, 3.0], [4.0]]}, FixedLenSequenceFeature([2], np.float32),
         "Key: x, Index: 0.  Number of values != expected.  values size: 3 but output shape: [2]"),
        ({"x": [[1.0, 2.0], None]}, FixedLenSequenceFeature([2], np.float32),
         "Key: x, Index: 1.  Number of values != expected.  values size: 0 but output shape: [2]"),
        ({"x": [[1.0], [2]]}, VarLenFeature(np.float32),
         "Feature list: x, Index: 1.  Data types don't match. Expected type: float"),
        ({"y": [[1.0]]}, FixedLenSequenceFeature([1], np.float32),
         "Feature list 'x' is required but could not be found.  Did you mean to set allow_missing=True?"),
        ({"x": [[1.0], [2.0]], "p": [[1]]}, ragged((R.RowLengths("p"),), key="x"),
         "Key: x.  Feature list p has 1 steps but feature list x has 2."),
        ({"x": [[1.0], [2.0]], "p": [[1], [2]]}, ragged((R.RowLengths("p"),), key="x"),
         "Key: x, Index: 1.  Row lengths feature p does not partition the 1 items below it: [2]."),
    ],
)
def test_sequence_example_errors(lists: dict, spec, message: str) -> None:
    bad = serialize_sequence_example({}, lists)
    with pytest.raises(InvalidArgumentError, match=f"^{re.escape(message)}$"):
        parse_single_sequence_example(bad, {}, {"x": spec})
    good = serialize_sequence_example({}, {})
    feats = {"x": spec._replace(allow_missing=True) if isinstance(spec, FixedLenSequenceFeature) else spec}
    if "required" not in message:  # the good record must parse
        parse_sequence_example([good], {}, feats)
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape('Record: 1, ' + message)}$"):
            parse_sequence_example([good, bad], {}, feats)


def test_sequence_example_parse_and_config_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^Could not parse sequence example input, value: 'garbage'$"):
        parse_single_sequence_example(b"garbage", {}, SEQ_LISTS)
    with pytest.raises(InvalidArgumentError, match=r"^Record: 1, Could not parse sequence example input"):
        parse_sequence_example([SEQ_RECS[0], b"\x12\x05\n\x03ab"], {}, SEQ_LISTS)
    with pytest.raises(InvalidArgumentError, match=r"^Key: id\.  Data types don't match"):
        parse_single_sequence_example(SEQ_RECS[0], {"id": FixedLenFeature([], np.int64)})
    with pytest.raises(ValueError, match=r"^Unsupported FixedLenFeature .* for sequence feature 'x'$"):
        parse_single_sequence_example(SEQ_RECS[0], {}, {"x": FixedLenFeature([2], np.float32)})
    with pytest.raises(ValueError, match=r"^Unsupported SparseFeature .* for context feature 'c'$"):
        parse_single_sequence_example(SEQ_RECS[0], {"c": SparseFeature("n", "n", np.int64, 3)})
    with pytest.raises(ValueError, match=r"^Feature list x: default_value must be None"):
        parse_single_sequence_example(SEQ_RECS[0], {}, {"x": FixedLenSequenceFeature([2], np.float32, default_value=0.0)})
