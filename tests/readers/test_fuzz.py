"""Property tests: random and mutated bytes through the TFRecord, CSV,
Example and SequenceExample paths never crash, hang or allocate without
bound; only feedq errors come out; the fast paths agree with the reference
paths (R9, R14, X6, D1-D8, P1-P4)."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq.readers._csv as csv_mod
import feedq.readers._example as example_mod
import feedq.readers._example_wire as wire_mod
from feedq.errors import DataLossError, InvalidArgumentError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    decode_csv,
    parse_example,
    parse_sequence_example,
    parse_single_sequence_example,
    serialize_example,
    serialize_sequence_example,
)

pytestmark = pytest.mark.timeout(30)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def read_everything(reader, q) -> tuple[list[bytes], int]:
    """Read until the queue ends; errors must be DataLoss, and never repeat forever."""
    values, errors = [], 0
    with reader:
        for _ in range(10000):
            try:
                values += reader.read_up_to(q, 7)[1].tolist()
            except OutOfRangeError:
                return values, errors
            except DataLossError:
                errors += 1
    raise AssertionError("reader did not finish")


def valid_tfrecord(tmp: Path, records: list[bytes], compression: str) -> bytes:
    p = tmp / "v.tfr"
    with TFRecordWriter(p, compression) as w:
        w.write_many(records)
    return p.read_bytes()


@FUZZ
@given(data=st.binary(max_size=400), compression=st.sampled_from(["", "GZIP", "ZLIB"]))
def test_tfrecord_random_bytes(tmp_path: Path, data: bytes, compression: str) -> None:
    p = tmp_path / "r.tfr"
    p.write_bytes(data)
    tracemalloc.start()
    try:
        _, errors = read_everything(TFRecordReader(options=compression), closed_queue(p, p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert errors <= 2  # at most once per work unit (R9)
    assert peak < 32 << 20


@FUZZ
@given(
    records=st.lists(st.binary(max_size=40), max_size=12),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
    cut=st.integers(0, 50),
    compression=st.sampled_from(["", "GZIP"]),
    policy=st.sampled_from(["raise", "skip"]),
)
def test_tfrecord_mutated_files(tmp_path: Path, records, flips, cut, compression, policy) -> None:
    raw = bytearray(valid_tfrecord(tmp_path, records, compression))
    for pos, x in flips:
        if raw:
            raw[pos % len(raw)] ^= x
    if cut and raw:
        del raw[-min(cut, len(raw)):]
    p = tmp_path / "m.tfr"
    p.write_bytes(bytes(raw))
    values, errors = read_everything(TFRecordReader(options=compression, on_error=policy), closed_queue(p))
    if not flips and not cut:
        assert values == records and errors == 0
    if policy == "skip":
        assert errors == 0
    # Whatever came out is made of real records, in order (CRCs held).
    it = iter(records)
    assert all(any(v == r for r in it) for v in values) or flips


def tf_like_per_record(records, defaults, **kw):
    orig = csv_mod._arrow_block
    csv_mod._arrow_block = lambda *a, **k: None
    try:
        return decode_csv(records, defaults, **kw)
    finally:
        csv_mod._arrow_block = orig


CSV_ALPHABET = st.sampled_from(list('0123456789,,,"" .-+eEnaNAif\r\tx'))
CSV_LINE = st.lists(CSV_ALPHABET, max_size=14).map("".join)


def both_paths(records, defaults, **kw):
    try:
        want = tf_like_per_record(records, defaults, **kw)
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(exc.message)}$"):
            decode_csv(records, defaults, **kw)
        return
    got = decode_csv(records, defaults, **kw)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            np.testing.assert_array_equal(g, w)
        else:
            assert g.tolist() == w.tolist()


@FUZZ
@given(
    lines=st.lists(CSV_LINE, min_size=1, max_size=8),
    defaults=st.lists(st.sampled_from([[0], [0.0], [""], [np.int64(5)], [np.float64(1)], []]), min_size=1, max_size=4),
    quote=st.booleans(),
    na=st.sampled_from(["", "NA", "x"]),
)
def test_csv_fast_path_equals_reference(lines, defaults, quote, na) -> None:
    both_paths(lines, defaults, use_quote_delim=quote, na_value=na)


@FUZZ
@given(
    lines=st.lists(st.binary(max_size=12), min_size=1, max_size=6),
    defaults=st.lists(st.sampled_from([[0], [0.0], [""]]), min_size=1, max_size=3),
)
def test_csv_random_bytes_only_invalid_argument(lines, defaults) -> None:
    both_paths(lines, defaults)


@FUZZ
@given(
    lines=st.lists(CSV_LINE, min_size=1, max_size=8),
    defaults=st.lists(st.sampled_from([[0], [0.0], [""]]), min_size=1, max_size=3),
    crlf=st.booleans(),
)
def test_csv_reader_block_path_equals_reference(tmp_path: Path, lines, defaults, crlf) -> None:
    p = tmp_path / "f.csv"
    p.write_bytes(("\r\n" if crlf else "\n").join(lines).encode())
    with TextLineReader() as r:
        try:
            block = r.read_block(closed_queue(p), 100, fill=True)
        except OutOfRangeError:
            return
    try:
        want = tf_like_per_record(block, defaults)  # both paths name a line by its key
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(exc.message)}$"):
            decode_csv(block, defaults)
        return
    got = decode_csv(block, defaults)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w) if g.dtype.kind == "f" else None
        assert g.dtype.kind == "f" or g.tolist() == w.tolist()


@FUZZ
@given(data=st.binary(max_size=300))
def test_text_reader_random_bytes(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "r.txt"
    p.write_bytes(data)
    values, errors = read_everything(TextLineReader(), closed_queue(p))
    assert errors == 0
    expected = data.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    assert values == [v[:-1] if v.endswith(b"\r") else v for v in expected]


FEATURES = {
    "x": FixedLenFeature([4], np.float32, default_value=[0, 0, 0, 0]),
    "label": FixedLenFeature([], np.int64, default_value=-1),
    "v": VarLenFeature(np.int64),
    "s": VarLenFeature("string"),
}


def protobuf_only(recs):
    orig = wire_mod._walk

    def all_slow(u8, s, e, specs):
        r = orig(u8, s, e, specs)
        r[0][:] = True
        return r

    kernel = example_mod._KERNEL
    wire_mod._walk = all_slow
    example_mod._KERNEL = False  # the walker's path, not the native kernel's
    try:
        return parse_example(recs, FEATURES)
    finally:
        wire_mod._walk = orig
        example_mod._KERNEL = kernel


def assert_paths_agree(recs) -> None:
    """The vectorised walker and the protobuf path give the same values, or the same error."""
    try:
        want = protobuf_only(recs)
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(exc.message)}$"):
            parse_example(recs, FEATURES)
        return
    got = parse_example(recs, FEATURES)
    for k in FEATURES:
        if k in ("v", "s"):
            for a, b in zip(got[k], want[k]):
                assert a.tolist() == b.tolist()
        elif got[k].dtype == np.float32:  # bit for bit: a flipped bit can make a NaN
            assert got[k].view(np.uint32).tolist() == want[k].view(np.uint32).tolist()
        else:
            assert got[k].tolist() == want[k].tolist()


def example_strategy(unrequested: bool = True):
    optional = {
        "x": st.lists(st.floats(width=32, allow_nan=False), min_size=3, max_size=5),
        "label": st.integers(-(2**63), 2**63 - 1),
        "v": st.lists(st.one_of(st.integers(0, 20000), st.integers(-(2**63), 2**63 - 1)), max_size=5),
        "s": st.lists(st.binary(max_size=5), min_size=1, max_size=2),
    }
    if unrequested:
        optional["zz"] = st.lists(st.integers(0, 300), min_size=1, max_size=3)
    return st.fixed_dictionaries(
        {},
        optional=optional,
    ).map(lambda d: serialize_example({k: (np.array(v, dtype=np.float32) if k == "x" else np.array(v, dtype=np.int64) if k in ("label", "v", "zz") else v) for k, v in d.items()}))


@FUZZ
@given(recs=st.lists(example_strategy(), min_size=1, max_size=6))
def test_parse_example_walker_equals_protobuf_with_unrequested_features(recs) -> None:
    """Well-formed records carrying a feature nobody asked for ("zz"): both paths agree."""
    assert_paths_agree(recs)


@FUZZ
@given(
    # Corruption anywhere, unrequested features ("zz") included: the walker
    # checks the payloads it skips as protobuf does, so both paths agree.
    recs=st.lists(example_strategy(), min_size=1, max_size=6),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=2),
)
def test_parse_example_walker_equals_protobuf(recs, flips) -> None:
    recs = list(recs)
    for pos, x in flips:
        i = pos % len(recs)
        if recs[i]:
            b = bytearray(recs[i])
            b[pos % len(b)] ^= x
            recs[i] = bytes(b)
    assert_paths_agree(recs)


@FUZZ
@given(recs=st.lists(st.binary(max_size=60), min_size=1, max_size=5))
def test_parse_example_random_bytes(recs) -> None:
    try:
        parse_example(recs, FEATURES)
    except InvalidArgumentError:
        pass


def mutate(recs: list[bytes], flips: list[tuple[int, int]], cut: int) -> list[bytes]:
    recs = list(recs)
    for pos, x in flips:
        i = pos % len(recs)
        if recs[i]:
            b = bytearray(recs[i])
            b[pos % len(b)] ^= x
            recs[i] = bytes(b)
    if cut:
        i = cut % len(recs)
        recs[i] = recs[i][: max(len(recs[i]) - cut, 0)]
    return recs


COMPOSITE = {
    "sp": SparseFeature(["i", "j"], "v", np.int64, [8, 3]),
    "r": RaggedFeature(np.int64, value_key="v", partitions=(RaggedFeature.RowLengths("rl"),)),
    "rs": RaggedFeature("string", value_key="s", partitions=(RaggedFeature.RowSplits("ss"),),
                        row_splits_dtype=np.int64),
    "u": RaggedFeature(np.int64, value_key="i", partitions=(RaggedFeature.UniformRowLength(1),)),
}


@st.composite
def composite_example(draw: st.DrawFn) -> bytes:
    """An Example whose index / partition features fit its values."""
    n = draw(st.integers(0, 5))
    d = {"v": np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), np.int64),
         "i": np.array(draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)), np.int64),
         "j": np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)}
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    d["rl"] = np.diff([0, *cuts, n]).astype(np.int64)
    s = draw(st.lists(st.binary(max_size=3), max_size=1))
    if s or draw(st.booleans()):
        d["s"], d["ss"] = s or [b""], np.array([0, len(s or [b""])], np.int64)
    for k in draw(st.sets(st.sampled_from(sorted(d)), max_size=2)):
        del d[k]  # missing features
    return serialize_example(d)


@FUZZ
@given(recs=st.lists(composite_example(), min_size=1, max_size=5),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=2))
def test_sparse_and_ragged_walker_equals_protobuf(recs, flips) -> None:
    """SparseFeature / RaggedFeature outputs and errors do not depend on the path."""
    recs = mutate(recs, flips, 0)
    orig = wire_mod._walk

    def all_slow(u8, s, e, specs):
        r = orig(u8, s, e, specs)
        r[0][:] = True
        return r

    kernel = example_mod._KERNEL
    wire_mod._walk = all_slow
    example_mod._KERNEL = False  # the walker's path, not the native kernel's
    try:
        want = parse_example(recs, COMPOSITE)
    except InvalidArgumentError as exc:
        wire_mod._walk, example_mod._KERNEL = orig, kernel
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(exc.message)}$"):
            parse_example(recs, COMPOSITE)
        return
    finally:
        wire_mod._walk = orig
        example_mod._KERNEL = kernel
    got = parse_example(recs, COMPOSITE)
    assert got["sp"].indices.tolist() == want["sp"].indices.tolist()
    assert got["sp"].values.tolist() == want["sp"].values.tolist()
    for k in ("r", "rs", "u"):
        assert got[k].to_list() == want[k].to_list()
        assert [a.tolist() for a in got[k].nested_row_splits] == [a.tolist() for a in want[k].nested_row_splits]
    if not flips:  # well-formed records parse
        assert got["sp"].dense_shape.tolist() == [len(recs), 8, 3]


SEQ_CONTEXT = {"id": FixedLenFeature([], "string", default_value=b"?"), "n": VarLenFeature(np.int64),
               "nr": RaggedFeature(np.int64, value_key="m")}
SEQ_LISTS = {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True), "t": VarLenFeature(np.int64),
             "tr": RaggedFeature(np.int64, value_key="t2", partitions=(RaggedFeature.RowLengths("p"),))}


@st.composite
def sequence_example(draw: st.DrawFn) -> bytes:
    T = draw(st.integers(0, 4))
    ctx = {"id": draw(st.binary(max_size=4)), "n": draw(st.lists(st.integers(-5, 2**40), max_size=3)),
           "m": np.array(draw(st.lists(st.integers(0, 9), max_size=2)), np.int64)}
    ctx["n"] = np.array(ctx["n"], np.int64)
    lists: dict = {
        "x": [np.array(draw(st.lists(st.floats(width=32, allow_nan=False), min_size=2, max_size=2)), np.float32)
              for _ in range(T)],
        "t": [np.array(draw(st.lists(st.integers(0, 300), max_size=3)), np.int64) for _ in range(T)],
    }
    t2 = [draw(st.lists(st.integers(0, 9), min_size=1, max_size=3)) for _ in range(T)]
    lists["t2"] = [np.array(v, np.int64) for v in t2]
    lists["p"] = [np.array([len(v)], np.int64) for v in t2]
    for k in draw(st.sets(st.sampled_from(["x", "t"]), max_size=1)):
        del lists[k]
    return serialize_sequence_example(ctx, lists)


@FUZZ
@given(
    recs=st.lists(sequence_example(), min_size=1, max_size=4),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
    cut=st.integers(0, 40),
)
def test_sequence_example_mutations_only_give_feedq_errors(recs, flips, cut) -> None:
    """Bit flips and truncations: InvalidArgumentError or results, never another
    exception; a batch fails exactly when one of its records does, and its rows
    are the records' own results."""
    recs = mutate(recs, flips, cut)
    singles: list = []
    for rec in recs:
        try:
            singles.append(parse_single_sequence_example(rec, SEQ_CONTEXT, SEQ_LISTS))
        except InvalidArgumentError:
            singles.append(None)
    if not flips and not cut:
        assert all(s is not None for s in singles)
    try:
        ctx, lists, lengths = parse_sequence_example(recs, SEQ_CONTEXT, SEQ_LISTS)
    except InvalidArgumentError as exc:
        # The first bad record is named: "Record: i, " (feature lists, bytes)
        # or "Key: k, Index: i." (context features, as parse_example's).
        first = next(i for i, s in enumerate(singles) if s is None)
        assert exc.message.startswith(f"Record: {first}, ") or f", Index: {first}.  " in exc.message, exc
        return
    assert all(s is not None for s in singles)
    for i, (c, fl) in enumerate(singles):
        assert ctx["id"][i] == c["id"]
        T = int(lengths["x"][i])
        assert lists["x"][i, :T].view(np.uint32).tolist() == fl["x"].view(np.uint32).tolist()
        assert lists["tr"].to_list()[i] == fl["tr"].to_list()
        assert [v for idx, v in zip(lists["t"].indices.tolist(), lists["t"].values.tolist()) if idx[0] == i] == \
            fl["t"].values.tolist()


@FUZZ
@given(recs=st.lists(st.binary(max_size=60), min_size=1, max_size=4))
def test_sequence_example_random_bytes(recs) -> None:
    for parse in (lambda: parse_sequence_example(recs, SEQ_CONTEXT, SEQ_LISTS),
                  lambda: parse_single_sequence_example(recs[0], SEQ_CONTEXT, SEQ_LISTS)):
        try:
            parse()
        except InvalidArgumentError:
            pass


@FUZZ
@given(
    data=st.binary(max_size=200).map(lambda b: b.replace(b"\x00", b"\n")),
    block=st.integers(1, 32),
    n=st.integers(1, 9),
    skip=st.integers(0, 2),
)
def test_text_reader_tiny_blocks_agree_with_split(tmp_path: Path, data: bytes, block: int, n: int, skip: int) -> None:
    # Buffer boundaries anywhere: lines, keys and counts must not depend on them.
    p = tmp_path / "t.txt"
    p.write_bytes(data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    want = [(i + 1, ln[:-1] if ln.endswith(b"\r") else ln) for i, ln in enumerate(lines)][skip:]
    got = []
    with TextLineReader(skip_header_lines=skip, block_bytes=block) as r:
        q = closed_queue(p)
        while True:
            try:
                k, v = r.read_up_to(q, n)
            except OutOfRangeError:
                break
            got += [(int(x.rsplit(b":", 1)[1]), y) for x, y in zip(k.tolist(), v.tolist())]
    assert got == want


@FUZZ
@given(
    records=st.lists(st.binary(max_size=30), max_size=15),
    block=st.integers(1, 64),
    n=st.integers(1, 9),
    compression=st.sampled_from(["", "ZLIB"]),
)
def test_tfrecord_tiny_blocks_agree(tmp_path: Path, records, block: int, n: int, compression: str) -> None:
    raw = valid_tfrecord(tmp_path, records, compression)
    p = tmp_path / "b.tfr"
    p.write_bytes(raw)
    got = []
    with TFRecordReader(options=compression, block_bytes=block) as r:
        q = closed_queue(p)
        while True:
            try:
                got += r.read_up_to(q, n)[1].tolist()
            except OutOfRangeError:
                break
    assert got == records


@FUZZ
@given(
    size=st.integers(0, 60),
    record=st.integers(1, 7),
    hop=st.integers(0, 9),
    header=st.integers(0, 5),
    footer=st.integers(0, 5),
    block=st.integers(1, 40),
)
def test_fixed_reader_tiny_blocks_agree(tmp_path: Path, size, record, hop, header, footer, block) -> None:
    from feedq.readers import FixedLengthRecordReader

    data = bytes(range(size))
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    stride = hop or record
    end = size - footer
    want = [data[s : s + record] for s in range(header, end - record + 1, stride)] if size >= header + footer else None
    got: list[bytes] = []
    errors = 0
    with FixedLengthRecordReader(record, header, footer, hop, block_bytes=block) as r:
        q = closed_queue(p)
        while True:
            try:
                got += r.read_up_to(q, 4)[1].tolist()
            except OutOfRangeError:
                break
            except DataLossError:
                errors += 1
    if want is None:
        assert errors == 1 and got == []
    else:
        assert got == want and errors == 0
