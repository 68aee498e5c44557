"""Compatibility with TensorFlow both ways (runs when tensorflow is installed).

Files TensorFlow writes are read by feedq and vice versa; decoders are
compared with TF's kernels (spec R10, R11, R13, R14, D1-D9, P1-P4). One
module, one TF import (module-scoped fixture) to keep the suite fast.
"""

from __future__ import annotations

import os
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
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    decode_csv,
    decode_raw,
    parse_example,
    serialize_example,
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
