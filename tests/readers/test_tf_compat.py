"""Compatibility with TensorFlow both ways (runs when tensorflow is installed).

Files TensorFlow writes are read by feedq and vice versa; decoders are
compared with TF's kernels (spec R10, R11, R13, R14, D1-D9, P1-P4). One
module, one TF import (module-scoped fixture) to keep the suite fast.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from feedq.errors import InvalidArgumentError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedTensorValue,
    SparseFeature,
    SparseTensorValue,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    decode_csv,
    decode_raw,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
    serialize_example,
    serialize_sequence_example,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def read_all(reader, q) -> tuple[list[bytes], list[bytes]]:
    keys: list[bytes] = []
    values: list[bytes] = []
    with reader:
        while True:
            try:
                k, v = reader.read_up_to(q, 64)
            except OutOfRangeError:
                return keys, values
            keys += k.tolist()
            values += v.tolist()


def tf_message(exc: BaseException) -> str:
    text = str(exc).split("}}", 1)[-1].strip()
    return text.split(" [Op:")[0].replace("Name: <unknown>, ", "")


RECORDS = [b"", b"a", os.urandom(1000), b"x" * 70000] + [os.urandom(i) for i in range(50)]


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_r13_files_written_by_tf_are_read_by_feedq(tf: Any, tmp_path: Path, compression: str) -> None:
    p = str(tmp_path / "tf.tfr")
    with tf.io.TFRecordWriter(p, options=tf.io.TFRecordOptions(compression_type=compression)) as w:
        for r in RECORDS:
            w.write(r)
    keys, values = read_all(TFRecordReader(options=compression), closed_queue(p))
    assert values == RECORDS
    offsets = np.cumsum([0] + [16 + len(r) for r in RECORDS[:-1]])
    assert keys == [f"{p}:{o}".encode() for o in offsets]


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_r13_files_written_by_feedq_are_read_by_tf(tf: Any, tmp_path: Path, compression: str) -> None:
    p = tmp_path / "fq.tfr"
    with TFRecordWriter(p, compression) as w:
        w.write_many(RECORDS)
    got = [t.numpy() for t in tf.data.TFRecordDataset(str(p), compression_type=compression)]
    assert got == RECORDS


def test_r14_tf_rejects_what_feedq_rejects(tf: Any, tmp_path: Path) -> None:
    p = tmp_path / "bad.tfr"
    with TFRecordWriter(p) as w:
        w.write_many([b"abcd", b"efgh"])
    raw = bytearray(p.read_bytes())
    raw[20 + 12] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(tf.errors.DataLossError, match=r"corrupted record at 32"):
        list(tf.data.TFRecordDataset(str(p)))
    from feedq.errors import DataLossError

    with pytest.raises(DataLossError, match=r"corrupted record at 32 "):
        read_all(TFRecordReader(), closed_queue(p))


def test_r10_text_lines_match_tf(tf: Any, tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    # tf.data's TextLineDataset drops EVERY '\r' of a line; TF1's
    # TextLineReader (R10, what feedq follows) only a trailing one, so the
    # file has no '\r' mid-line here (the TF1 case is in test_readers_text).
    p.write_bytes(b"h\r\na\r\n\r\nb\n\ncd\nlast\r")
    want = [t.numpy() for t in tf.data.TextLineDataset(str(p), num_parallel_reads=None).skip(1)]
    _, got = read_all(TextLineReader(skip_header_lines=1), closed_queue(p))
    assert got == want


@pytest.mark.parametrize("kw", [{"record_bytes": 3}, {"record_bytes": 3, "header_bytes": 2, "footer_bytes": 1},
                                {"record_bytes": 4, "header_bytes": 1, "footer_bytes": 0}])
@pytest.mark.parametrize("encoding", ["", "GZIP"])
def test_r11_fixed_length_matches_tf(tf: Any, tmp_path: Path, kw: dict, encoding: str) -> None:
    import gzip

    # tf.data insists on a whole number of records (TF1's reader drops a
    # partial one, R11): size the file to fit.
    body = 12 * kw["record_bytes"]
    raw = bytes(range(kw.get("header_bytes", 0) + body + kw.get("footer_bytes", 0)))
    p = tmp_path / "f.bin"
    p.write_bytes(gzip.compress(raw) if encoding else raw)
    ds = tf.data.FixedLengthRecordDataset(str(p), compression_type=encoding, **kw)
    _, got = read_all(FixedLengthRecordReader(encoding=encoding, **kw), closed_queue(p))
    assert got == [t.numpy() for t in ds]


CSV_RECORDS = [
    "1,2.5,a", " 7 ,nan,b", "3,-inf,", "4,1e3,\"q,\"\"x\"\"\"", "5,Infinity,c", "6,+1.5,d", ",,", "8,0x10,e",
    "9,.5,NA", "NA,5.,f", "10,1e400, s p ",
]
CSV_BAD = ["1,2", "1,2,3,4", "", "x,1,a", "1,abc,a", 'a"b,1,x', '"a"x,1,y', '"abc,1,z', "1.5,1,a",
           "3000000000,1,a", "1,1_0,a", " ,1,a"]


@pytest.mark.parametrize("na", ["", "NA"])
def test_d1_d8_decode_csv_matches_tf(tf: Any, na: str) -> None:
    defaults = [[0], [0.0], ["z"]]
    records = [r for r in CSV_RECORDS if na or not r.startswith("NA")]
    want = tf.io.decode_csv(records, record_defaults=defaults, na_value=na)
    try:
        got = decode_csv(records, defaults, na_value=na)
    except InvalidArgumentError as exc:
        pytest.fail(f"feedq rejected what TF accepts: {exc}")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
        assert g.dtype == w.numpy().dtype


@pytest.mark.parametrize("record", CSV_BAD)
def test_d3_d6_decode_csv_errors_match_tf(tf: Any, record: str) -> None:
    defaults = [[0], [0.0], ["z"]]
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.io.decode_csv(["1,1,ok", record], record_defaults=defaults)
    with pytest.raises(InvalidArgumentError) as fq_err:
        decode_csv(["1,1,ok", record], defaults)
    want = tf_message(tf_err.value)
    # feedq adds " in record k" to the quoting errors (TF does not name the record there).
    assert fq_err.value.message in (want, f"{want} in record 1")


def test_d8_select_cols_matches_tf(tf: Any) -> None:
    recs = ["1,x,3,junk", "4,y,6"]
    want = tf.io.decode_csv(recs, [[0], [0]], select_cols=[0, 2])
    got = decode_csv(recs, [[0], [0]], select_cols=[0, 2])
    assert [g.tolist() for g in got] == [w.numpy().tolist() for w in want]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                   "uint16", "complex64", "complex128"])
@pytest.mark.parametrize("little", [True, False])
def test_d9_decode_raw_matches_tf(tf: Any, dtype: str, little: bool) -> None:
    raw = [os.urandom(16), os.urandom(16)]
    want = tf.io.decode_raw(raw, getattr(tf, dtype), little_endian=little).numpy()
    got = decode_raw(raw, dtype, little_endian=little)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def tf_example(tf: Any, i: int) -> bytes:
    F = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "x": F(float_list=tf.train.FloatList(value=np.arange(6, dtype=np.float32) * i)),
        "label": F(int64_list=tf.train.Int64List(value=[i - 3])),
        "v": F(int64_list=tf.train.Int64List(value=list(range(i % 4)))),
        "s": F(bytes_list=tf.train.BytesList(value=[b"s%d" % i] * (1 + i % 2))),
        "big": F(int64_list=tf.train.Int64List(value=[2**40 + i, -(2**62)])),
    })).SerializeToString()


def test_p1_p4_parse_example_matches_tf(tf: Any) -> None:
    recs = [tf_example(tf, i) for i in range(9)] + [b""]
    tf_feats = {
        "x": tf.io.FixedLenFeature([2, 3], tf.float32, default_value=np.zeros((2, 3), np.float32)),
        "label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "v": tf.io.VarLenFeature(tf.int64),
        "s": tf.io.VarLenFeature(tf.string),
        "big": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True),
        "seq": tf.io.FixedLenSequenceFeature([3], tf.float32, allow_missing=True, default_value=1.5),
    }
    fq_feats = {
        "x": FixedLenFeature([2, 3], np.float32, default_value=np.zeros((2, 3), np.float32)),
        "label": FixedLenFeature([], np.int64, default_value=-1),
        "v": VarLenFeature(np.int64),
        "s": VarLenFeature("string"),
        "big": FixedLenSequenceFeature([], np.int64, allow_missing=True),
        "seq": FixedLenSequenceFeature([3], np.float32, allow_missing=True, default_value=1.5),
    }
    want = tf.io.parse_example(recs, tf_feats)
    got = parse_example(recs, fq_feats)
    for k in ("x", "label", "big"):
        np.testing.assert_array_equal(got[k], want[k].numpy())
    for k in ("v", "s"):
        assert got[k].indices.tolist() == want[k].indices.numpy().tolist()
        assert got[k].values.tolist() == want[k].values.numpy().tolist()
        assert got[k].dense_shape.tolist() == want[k].dense_shape.numpy().tolist()


@pytest.mark.parametrize("default", [[], [1.0, 2.0], 1.0])
def test_p4_sequence_feature_defaults_as_tf(tf: Any, default: Any) -> None:
    # FixedLenSequenceFeature(..., default_value=[]) constructs in both, and
    # both parsers refuse it with the same message (issue 24); one value pads.
    recs = [tf_example(tf, i) for i in range(4)] + [b""]  # the last one is padded
    try:
        want = tf.io.parse_example(
            recs, {"x": tf.io.FixedLenSequenceFeature([3], tf.float32, allow_missing=True,
                                                      default_value=default)})["x"].numpy()
    except tf.errors.InvalidArgumentError as exc:
        message = exc.message.rsplit("}} ", 1)[-1].removesuffix(" [Op:Reshape]")
        assert message.startswith("Input to reshape is a tensor with ")
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(message)}$"):
            parse_example(recs, {"x": FixedLenSequenceFeature([3], np.float32, allow_missing=True,
                                                               default_value=default)})
        return
    got = parse_example(recs, {"x": FixedLenSequenceFeature([3], np.float32, allow_missing=True,
                                                             default_value=default)})["x"]
    np.testing.assert_array_equal(got, want)


def test_p1_feedq_examples_parse_in_tf(tf: Any) -> None:
    rec = serialize_example({"x": np.arange(4, dtype=np.float32), "n": 7, "s": [b"a", "b"]})
    out = tf.io.parse_single_example(rec, {"x": tf.io.FixedLenFeature([4], tf.float32),
                                           "n": tf.io.FixedLenFeature([], tf.int64),
                                           "s": tf.io.FixedLenFeature([2], tf.string)})
    assert out["x"].numpy().tolist() == [0, 1, 2, 3] and out["n"].numpy() == 7
    assert out["s"].numpy().tolist() == [b"a", b"b"]


@pytest.mark.parametrize(
    "features",
    [
        {"x": ("fixed", [5], "float32")},
        {"x": ("fixed", [6], "int64")},
        {"m": ("fixed", [], "int64")},
        {"x": ("seq", [4], "float32")},
        {"x": ("var", None, "int64")},
    ],
)
def test_p2_p4_error_messages_match_tf(tf: Any, features: dict) -> None:
    recs = [tf_example(tf, 1), tf_example(tf, 2)]

    def make(ns: str) -> dict:
        out: dict = {}
        for k, (cls, shape, dt) in features.items():
            if ns == "tf":
                dtype = getattr(tf, dt)
                fixed, seq, var = tf.io.FixedLenFeature, tf.io.FixedLenSequenceFeature, tf.io.VarLenFeature
            else:
                dtype = np.dtype(dt)
                fixed, seq, var = FixedLenFeature, FixedLenSequenceFeature, VarLenFeature
            if cls == "fixed":
                out[k] = fixed(shape, dtype)
            elif cls == "seq":
                out[k] = seq(shape, dtype, allow_missing=True)
            else:
                out[k] = var(dtype)
        return out

    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.io.parse_example(recs, make("tf"))
    with pytest.raises(InvalidArgumentError) as fq_err:
        parse_example(recs, make("fq"))
    assert fq_err.value.message == tf_message(tf_err.value)


# --------------------------------------------------------------------------- feature specs, SparseFeature, RaggedFeature
def tf_value(tf: Any, v: Any) -> Any:
    """A TF result as comparable plain data: (type, parts...) with dtypes and shapes."""
    if isinstance(v, tf.SparseTensor):
        return ("sparse",) + tuple((dtype_name(a), a.shape, a.tolist()) for a in
                                   (v.indices.numpy(), v.values.numpy(), v.dense_shape.numpy()))
    if isinstance(v, tf.RaggedTensor):
        flat = v.flat_values.numpy()
        return ("ragged", (dtype_name(flat), flat.shape, flat.tolist()),
                tuple((s.numpy().dtype.name, s.numpy().tolist()) for s in v.nested_row_splits))
    a = np.asarray(v.numpy())
    return ("dense", dtype_name(a), a.shape, a.tolist())


def dtype_name(a: np.ndarray) -> str:
    return "bytes" if a.dtype.kind in "SO" else a.dtype.name


def fq_value(v: Any) -> Any:
    if isinstance(v, SparseTensorValue):
        return ("sparse",) + tuple((dtype_name(a), a.shape, a.tolist()) for a in v)
    if isinstance(v, RaggedTensorValue):
        flat = v.flat_values
        return ("ragged", (dtype_name(flat), flat.shape, flat.tolist()),
                tuple((s.dtype.name, s.tolist()) for s in v.nested_row_splits))
    a = np.asarray(v)
    return ("dense", dtype_name(a), a.shape, a.tolist())


def assert_same(tf: Any, got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, value in want.items():
        assert fq_value(got[k]) == tf_value(tf, value), k


def to_tf_features(tf: Any, spec: dict) -> dict:
    """The same feature configuration, as tf.io classes."""
    out: dict = {}
    for k, f in spec.items():
        name = type(f).__name__
        dt = getattr(f, "dtype", None)
        tdt = tf.string if dt in ("string", object) else tf.as_dtype(np.dtype(dt))
        if name == "FixedLenFeature":
            out[k] = tf.io.FixedLenFeature(f.shape, tdt, default_value=f.default_value)
        elif name == "VarLenFeature":
            out[k] = tf.io.VarLenFeature(tdt)
        elif name == "FixedLenSequenceFeature":  # TF's takes no int shape
            shape = [f.shape] if isinstance(f.shape, int) else f.shape
            out[k] = tf.io.FixedLenSequenceFeature(shape, tdt, allow_missing=f.allow_missing,
                                                   default_value=f.default_value)
        elif name == "SparseFeature":
            out[k] = tf.io.SparseFeature(f.index_key, f.value_key, tdt, f.size, f.already_sorted)
        else:
            R = tf.io.RaggedFeature
            parts = [getattr(R, type(p).__name__)(*p) for p in f.partitions]
            out[k] = R(tdt, value_key=f.value_key, partitions=parts,
                       row_splits_dtype=tf.as_dtype(np.dtype(f.row_splits_dtype)))
    return out


def ex_records() -> list[bytes]:
    return [
        serialize_example({"v": np.array([1.5, 2.5, 3.5], np.float32), "i": [3, 0, 2], "j": [1, 1, 0],
                           "rl": [2, 1], "rs": [0, 1, 3], "st": [0, 0], "lim": [3, 3], "u": [1, 2, 3, 4],
                           "s": [b"a", b"b"], "si": [1, 0], "n": 7}),
        serialize_example({"v": np.array([4.5], np.float32), "i": [1], "j": [0], "rl": [0, 1], "rs": [0, 1],
                           "st": [0], "lim": [0, 1], "u": [5, 6], "s": [b"c"], "si": [2], "n": 8}),
        b"",  # every feature missing
        serialize_example({"v": np.zeros(0, np.float32), "i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64),
                           "rl": np.zeros(0, np.int64), "u": np.zeros(0, np.int64), "n": 9}),
    ]


SPARSE_RAGGED = [
    {"sp": SparseFeature("i", "v", np.float32, 4)},
    {"sp": SparseFeature("i", "v", np.float32, 4, already_sorted=True)},
    {"sp": SparseFeature(["i", "j"], "v", np.float32, [4, 2])},
    {"sp": SparseFeature("si", "s", "string", 3), "i": VarLenFeature(np.int64)},
    {"v": RaggedFeature(np.float32)},
    {"r": RaggedFeature(np.int64, value_key="u", row_splits_dtype=np.int64)},
    {"r": RaggedFeature("string", value_key="s")},
    {"r": RaggedFeature(np.float32, value_key="v", partitions=(RaggedFeature.RowLengths("rl"),))},
    {"r": RaggedFeature(np.float32, value_key="v", partitions=(RaggedFeature.RowSplits("rs"),))},
    {"r": RaggedFeature(np.float32, value_key="v", partitions=(RaggedFeature.RowLimits("lim"),))},
    {"r": RaggedFeature(np.int64, value_key="u", partitions=(RaggedFeature.UniformRowLength(2),))},
    {"r": RaggedFeature(np.int64, value_key="u",
                        partitions=(RaggedFeature.UniformRowLength(1), RaggedFeature.UniformRowLength(2)))},
    {"r": RaggedFeature(np.float32, value_key="v",
                        partitions=(RaggedFeature.UniformRowLength(1), RaggedFeature.RowLengths("rl")))},
    {"a": FixedLenFeature(1, np.int64, default_value=[0]), "n": FixedLenFeature([], np.int64, default_value=0),
     "q": FixedLenSequenceFeature(1, np.int64, allow_missing=True)},
]


@pytest.mark.parametrize("spec", SPARSE_RAGGED)
def test_sparse_and_ragged_features_match_tf(tf: Any, spec: dict) -> None:
    recs = ex_records()
    assert_same(tf, parse_example(recs, spec), tf.io.parse_example(recs, to_tf_features(tf, spec)))
    for rec in recs[:2]:  # single records (TF's RowSplits needs a non-empty split list)
        assert_same(tf, parse_single_example(rec, spec), tf.io.parse_single_example(rec, to_tf_features(tf, spec)))


def test_row_starts_match_tf(tf: Any) -> None:
    # TF's RowStarts needs at least one row per record: only such records here.
    spec = {"r": RaggedFeature(np.float32, value_key="v", partitions=(RaggedFeature.RowStarts("st"),))}
    recs = ex_records()[:2]
    assert_same(tf, parse_example(recs, spec), tf.io.parse_example(recs, to_tf_features(tf, spec)))
    assert_same(tf, parse_single_example(recs[0], spec), tf.io.parse_single_example(recs[0], to_tf_features(tf, spec)))


@pytest.mark.parametrize("spec", [
    {"a": FixedLenFeature(None, np.float32)},
    {"a": FixedLenFeature([None], np.float32)},
    {"sp": SparseFeature("i", "v", np.float32, 4), "v": VarLenFeature(np.int64)},
])
def test_feature_config_errors_match_tf(tf: Any, spec: dict) -> None:
    recs = ex_records()
    with pytest.raises(ValueError):
        tf.io.parse_example(recs, to_tf_features(tf, spec))
    with pytest.raises(ValueError):
        parse_example(recs, spec)


# --------------------------------------------------------------------------- SequenceExample
def tf_sequence_example(tf: Any, context: dict, lists: dict) -> bytes:
    """A tf.train.SequenceExample built with TF's own classes."""
    def feature(v: Any) -> Any:
        F = tf.train.Feature
        if v is None:
            return F()
        a = np.asarray(v)
        if a.dtype.kind == "f":
            return F(float_list=tf.train.FloatList(value=a.reshape(-1).tolist()))
        if a.dtype.kind in "iu":
            return F(int64_list=tf.train.Int64List(value=a.reshape(-1).tolist()))
        return F(bytes_list=tf.train.BytesList(value=[bytes(x) for x in a.reshape(-1).tolist()]))

    ex = tf.train.SequenceExample()
    for k, v in context.items():
        ex.context.feature[k].CopyFrom(feature(v))
    for k, steps in lists.items():
        fl = ex.feature_lists.feature_list[k]
        for s in steps:
            fl.feature.add().CopyFrom(feature(s))
    return ex.SerializeToString()


def audioset_like(tf: Any) -> list[bytes]:
    """Records laid out like AudioSet / YouTube-8M frame-level files."""
    rng = np.random.default_rng(7)
    recs = []
    for i in range(7):
        T = [3, 1, 0, 5, 2, 4, 1][i]
        context = {"video_id": np.array([b"vid%d" % i], dtype=object), "labels": np.arange(i % 3, dtype=np.int64),
                   "tags": np.arange(i % 4, dtype=np.int64),
                   "start_time_seconds": np.array([i * 1.5], np.float32)}
        lists = {
            "audio_embedding": [np.array([rng.bytes(4)], dtype=object) for _ in range(T)],
            "rgb": [rng.random(3).astype(np.float32) for _ in range(T)],
            "tokens": [rng.integers(0, 9, size=t % 3) for t in range(T)],
            "tok2": [rng.integers(0, 9, size=t % 3) for t in range(T)],
            "rl": [np.array([t % 3], np.int64) for t in range(T)],
        }
        if i == 4:
            del lists["rgb"]  # a missing feature list
        recs.append(tf_sequence_example(tf, context, lists))
    return recs


SEQ_CONTEXT = {
    "video_id": FixedLenFeature([], "string"),
    "labels": VarLenFeature(np.int64),
    "start_time_seconds": FixedLenFeature(1, np.float32, default_value=[-1.0]),
    "missing": FixedLenFeature([2], np.int64, default_value=[5, 6]),
    "tags_r": RaggedFeature(np.int64, value_key="tags"),
}
SEQ_LISTS = {
    "audio_embedding": FixedLenSequenceFeature([], "string", allow_missing=True),
    "rgb": FixedLenSequenceFeature(3, np.float32, allow_missing=True),
    "tokens": VarLenFeature(np.int64),
    # (TF wants keys read as ragged apart from keys read as VarLen.)
    "tok_r": RaggedFeature(np.int64, value_key="tok2"),
    "tok_p": RaggedFeature(np.int64, value_key="tok2", partitions=(RaggedFeature.RowLengths("rl"),)),
    "none": VarLenFeature(np.float32),
    "none_dense": FixedLenSequenceFeature([2], np.int64, allow_missing=True),
}


def write_with_tf(tf: Any, path: Path, recs: list[bytes]) -> None:
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in recs:
            w.write(r)


def test_sequence_examples_written_by_tf_parse_as_tf(tf: Any, tmp_path: Path) -> None:
    recs = audioset_like(tf)
    p = tmp_path / "seq.tfr"
    write_with_tf(tf, p, recs)
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 100)
    assert block.values().tolist() == recs
    ctx_tf, seq_tf = to_tf_features(tf, SEQ_CONTEXT), to_tf_features(tf, SEQ_LISTS)
    # One record at a time.
    for rec in recs:
        got_c, got_l = parse_single_sequence_example(rec, SEQ_CONTEXT, SEQ_LISTS)
        want_c, want_l = tf.io.parse_single_sequence_example(rec, ctx_tf, seq_tf)
        assert_same(tf, got_c, want_c)
        assert_same(tf, got_l, want_l)
    # The whole block (straight from the reader's buffer) and a list.
    want_c, want_l, want_n = tf.io.parse_sequence_example(recs, ctx_tf, seq_tf)
    for batch in (block, recs):
        got_c, got_l, got_n = parse_sequence_example(batch, SEQ_CONTEXT, SEQ_LISTS)
        assert_same(tf, got_c, want_c)
        assert_same(tf, got_l, want_l)
        assert_same(tf, got_n, want_n)
    assert got_n["rgb"].tolist() == [3, 1, 0, 5, 0, 4, 1]


def tf_seq_message(exc: BaseException) -> str:
    return tf_message(exc).split(" [Op:")[0].strip()


@pytest.mark.parametrize(
    ("good", "bad", "spec"),
    [
        # a record's total count, then a step's count / a step with no kind / the wrong kind
        ([[1.0, 2.0]], [[1.0, 2.0], [3.0]], FixedLenSequenceFeature([2], np.float32)),
        ([[1.0, 2.0]], [[1.0, 2.0, 3.0], [4.0]], FixedLenSequenceFeature([2], np.float32)),
        ([[1.0, 2.0]], [[1.0, 2.0], None], FixedLenSequenceFeature([2], np.float32)),
        ([[1.0, 2.0]], [[1.0, 2.0], [1, 2]], FixedLenSequenceFeature(2, np.float32)),
        ([[1.0]], [[1.0], np.zeros(0, np.int64)], VarLenFeature(np.float32)),
        ([[1]], [[b"a"]], FixedLenSequenceFeature([1, 1], np.int64)),
        ([[1] * 6], [[1] * 6, [2] * 5], FixedLenSequenceFeature([2, 3], np.int64)),
        # a missing feature list without allow_missing (TF's hint names its raw-op arguments)
        ([[1.0]], None, FixedLenSequenceFeature([1], np.float32)),
    ],
)
def test_sequence_example_errors_match_tf(tf: Any, good: list, bad: list | None, spec: Any) -> None:
    good_rec = tf_sequence_example(tf, {}, {"x": [np.asarray(s) for s in good]})
    bad_rec = tf_sequence_example(tf, {}, {} if bad is None else {"x": [None if s is None else np.asarray(s) for s in bad]})
    spec_fq = {"x": spec}
    spec_tf = to_tf_features(tf, spec_fq)

    def tf_text(records: Any) -> str:
        with pytest.raises(tf.errors.InvalidArgumentError) as err:
            if isinstance(records, list):
                tf.io.parse_sequence_example(records, {}, spec_tf)
            else:
                tf.io.parse_single_sequence_example(records, {}, spec_tf)
        text = tf_seq_message(err.value)
        return text.split("  Did you mean")[0] if bad is None else text

    with pytest.raises(InvalidArgumentError) as fq_err:
        parse_single_sequence_example(bad_rec, {}, spec_fq)
    assert fq_err.value.message.startswith(tf_text(bad_rec))
    assert bad is None or fq_err.value.message == tf_text(bad_rec)
    # In a batch TF's message names no record; feedq's starts with it.
    with pytest.raises(InvalidArgumentError) as fq_err:
        parse_sequence_example([good_rec, bad_rec], {}, spec_fq)
    assert fq_err.value.message.startswith("Record: 1, " + tf_text([good_rec, bad_rec]))
    assert list(parse_sequence_example([good_rec], {}, spec_fq)[1]) == ["x"]


def test_sequence_example_garbage_and_config_errors_match_tf(tf: Any) -> None:
    spec = {"x": FixedLenSequenceFeature([1], np.float32, allow_missing=True)}
    for bad in (b"garbage!", b"\x12\x05\n\x03abc"):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.parse_single_sequence_example(bad, {}, to_tf_features(tf, spec))
        with pytest.raises(InvalidArgumentError, match=r"^Could not parse sequence example input, value: "):
            parse_single_sequence_example(bad, {}, spec)
    # Classes not allowed where given, and a default for a feature list: ValueError in both.
    for ctx, seq in [({"c": FixedLenSequenceFeature([1], np.int64, allow_missing=True)}, {}),
                     ({}, {"x": FixedLenFeature([1], np.float32)}),
                     ({}, {"x": FixedLenSequenceFeature([1], np.float32, allow_missing=True, default_value=1.0)})]:
        with pytest.raises(ValueError):
            tf.io.parse_single_sequence_example(b"", to_tf_features(tf, ctx), to_tf_features(tf, seq))
        with pytest.raises(ValueError):
            parse_single_sequence_example(b"", ctx, seq)


def test_feedq_sequence_examples_parse_in_tf(tf: Any) -> None:
    rec = serialize_sequence_example({"id": b"a", "n": 3}, {"x": [[1.0, 2.0], [3.0, 4.0]], "t": [[1], [2, 3]]})
    assert rec == tf_sequence_example(tf, {"id": np.array([b"a"], dtype=object), "n": np.array([3])},
                                      {"x": [np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)],
                                       "t": [np.array([1]), np.array([2, 3])]})
    ctx = {"id": FixedLenFeature([], "string"), "n": FixedLenFeature([], np.int64)}
    seq = {"x": FixedLenSequenceFeature([2], np.float32), "t": VarLenFeature(np.int64)}
    want = tf.io.parse_single_sequence_example(rec, to_tf_features(tf, ctx), to_tf_features(tf, seq))
    got = parse_single_sequence_example(rec, ctx, seq)
    assert_same(tf, got[0], want[0])
    assert_same(tf, got[1], want[1])
