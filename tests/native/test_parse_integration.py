"""parse_example / parse_single_example through the native kernel: the same
outputs and the same errors as the vectorised walker + protobuf path (P1-P4).

Every input goes through four paths and all must agree exactly (float bits,
dtypes, shapes, error messages):

* ``protobuf``: every record parsed by protobuf (the walker's rows all slow);
* ``walker``: the vectorised NumPy walker, odd records left to protobuf (the
  driver's path when the native core is not active);
* ``kernel-twin``: the driver's kernel path over the core's pure-Python twin;
* ``kernel-native``: the driver's kernel path over the compiled core (when
  it is built; the driver's default path then).

Inputs: hand-made wire encodings (unpacked lists, merges, repeated keys,
oneof switches, unknown fields, groups, bad UTF-8 keys, truncations),
TensorFlow-written Examples read back as RecordBlocks, and hypothesis-fuzzed
records, well-formed and mutated.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq._native as nat
import feedq.readers._example as example_mod
import feedq.readers._example_wire as wire_mod
from feedq.errors import InvalidArgumentError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedTensorValue,
    RecordBlock,
    SparseFeature,
    SparseTensorValue,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    parse_example,
    parse_single_example,
    serialize_example,
)
from tests.native._cores import CORES

pytestmark = pytest.mark.timeout(120)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = (1 << 64) - 1

PATHS = ["protobuf", "walker", "kernel-twin"] + (["kernel-native"] if nat.NATIVE is not None else [])


# --------------------------------------------------------------------- the paths
@contextmanager
def parse_path(name: str) -> Iterator[None]:
    """Make parse_example take one path (see the module docstring)."""
    saved = (example_mod._KERNEL, wire_mod._walk, nat.parse_examples, nat.pad_ragged, nat.take_bytes)
    orig_walk = wire_mod._walk

    def all_slow(u8: Any, s: Any, e: Any, specs: Any) -> Any:
        r = orig_walk(u8, s, e, specs)
        r[0][:] = True
        return r

    try:
        if name.startswith("kernel-"):
            kernels = nat.PURE if name == "kernel-twin" else nat.NATIVE
            assert kernels is not None
            example_mod._KERNEL = True
            nat.parse_examples = kernels.parse_examples  # type: ignore[assignment]
            nat.pad_ragged = kernels.pad_ragged  # type: ignore[assignment]
            nat.take_bytes = kernels.take_bytes  # type: ignore[assignment]
        else:
            example_mod._KERNEL = False
            if name == "protobuf":
                wire_mod._walk = all_slow
        yield
    finally:
        (example_mod._KERNEL, wire_mod._walk, nat.parse_examples, nat.pad_ragged,  # type: ignore[assignment]
         nat.take_bytes) = saved


def canon(x: Any) -> Any:
    """A comparable form of an output: dtype, shape and exact contents (float bits)."""
    if isinstance(x, Mapping):
        return {k: canon(v) for k, v in x.items()}
    if isinstance(x, SparseTensorValue):
        return ("sparse", canon(x.indices), canon(x.values), canon(x.dense_shape))
    if isinstance(x, RaggedTensorValue):
        return ("ragged", canon(x.values), canon(x.row_splits))
    if isinstance(x, np.generic):  # a scalar of parse_single_example
        return ("scalar", canon(np.asarray(x)))
    if isinstance(x, bytes):  # ... of strings
        return ("bytes", x)
    assert isinstance(x, np.ndarray), type(x)
    body = x.tolist() if x.dtype == object else x.tobytes()
    return (x.dtype.str, x.shape, body)


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", canon(fn()))
    except InvalidArgumentError as exc:
        return ("InvalidArgumentError", exc.message)


def all_paths(serialized: Any, features: Mapping[str, Any], single: bool = False) -> Any:
    """The common outcome of every path; fails if any two differ."""
    fn = parse_single_example if single else parse_example
    results = {}
    for name in PATHS:
        with parse_path(name):
            results[name] = outcome(lambda: fn(serialized, features))
    want = results["protobuf"]
    for name, got in results.items():
        assert got == want, f"{name} differs from protobuf:\n{got}\nvs\n{want}"
    # The default path (no switch) is one of them.
    assert outcome(lambda: fn(serialized, features)) == want
    return want


# ------------------------------------------------------------------ wire format
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


def entry(key: bytes, *features: bytes, extra: bytes = b"") -> bytes:
    """A map entry: key, then each Feature body as a value field."""
    return ld(1, ld(1, key) + b"".join(ld(2, f) for f in features) + extra)


def example(*entries: bytes, extra: bytes = b"") -> bytes:
    return ld(1, b"".join(entries)) + extra


def floats(*xs: float, packed: bool = True) -> bytes:
    """A Feature with a float_list."""
    if packed:
        body = ld(1, struct.pack(f"<{len(xs)}f", *xs)) if xs else b""
    else:
        body = b"".join(tag(1, 5) + struct.pack("<f", x) for x in xs)
    return ld(2, body)


def ints(*xs: int, packed: bool = True) -> bytes:
    """A Feature with an int64_list."""
    if packed:
        body = ld(1, b"".join(v(x) for x in xs)) if xs else b""
    else:
        body = b"".join(tag(1, 0) + v(x) for x in xs)
    return ld(3, body)


def strs(*xs: bytes) -> bytes:
    """A Feature with a bytes_list."""
    return ld(1, b"".join(ld(1, x) for x in xs))


HAND_MADE = [
    b"",  # an empty Example
    example(),
    example(entry(b"x", floats(1, 2, 3, 4)), entry(b"label", ints(7)), entry(b"v", ints(1, 300, 2**40)),
            entry(b"s", strs(b"ab"))),
    example(entry(b"x", floats(1, 2, 3, 4, packed=False)), entry(b"label", ints(-5, packed=False))),
    # lists merged inside one Feature, packed and unpacked
    example(entry(b"x", floats(1, 2) + floats(3, 4, packed=False)), entry(b"v", ints(1) + ints(2, 3, packed=False))),
    # oneof: a list of another kind replaces the one before
    example(entry(b"x", ints(1, 2) + floats(5, 6, 7, 8)), entry(b"label", floats(1.5) + ints(9))),
    # two value fields in one entry are merged
    example(entry(b"x", floats(1, 2), floats(3, 4)), entry(b"v", ints(4), ints(5, 6))),
    # a repeated key: the last entry wins
    example(entry(b"x", floats(9, 9, 9, 9)), entry(b"label", ints(1)), entry(b"x", floats(1, 2, 3, 4)),
            entry(b"label", ints(2))),
    example(entry(b"v", ints(1, 2, 3)), entry(b"v", floats(1.0))),  # ... of another kind
    # an entry with an unknown field is dropped (upb)
    example(entry(b"x", floats(1, 2, 3, 4)), entry(b"x", floats(5, 6, 7, 8), extra=tag(3, 0) + v(1))),
    # value before key; an entry without a key (key "")
    example(ld(1, ld(2, floats(1, 2, 3, 4)) + ld(1, b"x")), ld(1, ld(2, ints(3)))),
    # a Feature with no kind counts as missing; empty lists
    example(entry(b"label", b""), entry(b"x", floats()), entry(b"s", strs())),
    example(entry(b"s", strs(b"", b"two", b"\xff\x00"))),  # several strings, any bytes
    # unknown fields at every level: varint, fixed64, fixed32, length, group
    example(entry(b"x", floats(1, 2, 3, 4) + tag(9, 0) + v(5)), extra=tag(2, 1) + b"\0" * 8),
    example(entry(b"label", ints(3) + tag(7, 5) + b"\0" * 4), extra=tag(5, 3) + tag(1, 0) + v(1) + tag(5, 4)),
    ld(1, entry(b"label", ints(4)) + tag(2, 0) + v(99)),
    example(entry(b"label", ld(3, ld(1, v(4)) + tag(2, 2) + v(1) + b"z"))),
    # large and negative int64 values, NaN and infinity bits
    example(entry(b"v", ints(U64, 2**63, -1, 0)), entry(b"x", floats(float("nan"), float("inf"), -0.0, 1e-45))),
    # malformed records
    b"garbage here",
    example(entry(b"x", floats(1, 2, 3, 4)))[:-1],  # truncated
    example(entry(b"\xff\xfe", ints(1))),  # a key that is not UTF-8
    example(entry(b"x", ld(2, ld(1, b"\0" * 5)))),  # packed floats not a multiple of 4
    example(entry(b"v", ld(3, ld(1, b"\x81")))),  # a packed varint cut short
    example(entry(b"v", ld(3, ld(1, b"\xff" * 10 + b"\x01")))),  # an 11-byte varint
    example(entry(b"zz", ints(1)), extra=tag(5, 4)),  # an end-group without a start
    example(extra=tag(5, 3)),  # a group never closed
    example(extra=tag(1, 7)),  # wire type 7
    example(entry(b"zz", ld(2, ld(1, b"\0" * 3)))),  # an unrequested feature, corrupt
]

CONFIGS: list[dict[str, Any]] = [
    {"x": FixedLenFeature([4], np.float32, default_value=[0, 0, 0, 0]),
     "label": FixedLenFeature([], np.int64, default_value=-1),
     "v": VarLenFeature(np.int64), "s": VarLenFeature("string")},
    {"x": FixedLenFeature([2, 2], np.float32), "label": FixedLenFeature([], np.int64)},
    {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True, default_value=0.5),
     "v": FixedLenSequenceFeature([], np.int64, allow_missing=True, default_value=-1),
     "s": FixedLenSequenceFeature([], "string", allow_missing=True)},
    {"s": FixedLenFeature([], "string", default_value=b"?"), "x": VarLenFeature(np.float32),
     "label": VarLenFeature(np.int64)},
    # one key read twice: as a fixed column and as flat values (a shared request)
    {"label": FixedLenFeature([], np.int64, default_value=0),
     "r": RaggedFeature(np.int64, value_key="label"),
     "sp": SparseFeature("v", "v", np.int64, 2**62)},
    {"x": FixedLenFeature([4], np.float32, default_value=[1, 2, 3, 4]), "e": FixedLenFeature([0], np.float32)},
    {"v": FixedLenFeature([3], np.int64, default_value=[7, 8, 9])},
]


# ------------------------------------------------------------------ hand-made
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_hand_made_records_one_at_a_time(ci: int) -> None:
    for rec in HAND_MADE:
        all_paths([rec], CONFIGS[ci])
        all_paths(rec, CONFIGS[ci], single=True)


@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_hand_made_records_in_batches(ci: int) -> None:
    good = [r for r in HAND_MADE if outcome(lambda r=r: parse_example([r], {})) == ("ok", {})]
    assert len(good) >= 15
    all_paths(good, CONFIGS[ci])
    all_paths(good[::-1], CONFIGS[ci])
    for bad in HAND_MADE:
        # A record that is not an Example is reported before any other
        # error, wherever it is in the batch.
        all_paths([*good[:5], bad, *good[5:]], CONFIGS[ci])


def test_errors_are_tf_messages_on_the_kernel_path() -> None:
    recs = [example(entry(b"x", floats(1, 2, 3, 4))), example(entry(b"x", ints(1)))]
    feats = {"x": FixedLenFeature([4], np.float32)}
    assert all_paths(recs, feats) == (
        "InvalidArgumentError",
        "Key: x, Index: 1.  Data types don't match. Data type: int64 but expected type: float",
    )
    assert all_paths([recs[0], recs[0][:-2], recs[1]], feats) == (
        "InvalidArgumentError",
        "Could not parse example input, value: '" + repr(recs[0][:-2])[2:-1] + "'",
    )
    assert all_paths([recs[0], b""], feats) == (
        "InvalidArgumentError", "Feature: x (data type: float) is required but could not be found.")
    assert all_paths([b"", b"", b""], {"x": FixedLenFeature([2], np.float32, default_value=[3, 4])}) == (
        "ok", canon({"x": np.array([[3, 4]] * 3, np.float32)}))


def test_empty_batch() -> None:
    for ci in range(len(CONFIGS)):
        all_paths(np.zeros(0, dtype=object), CONFIGS[ci])


# ------------------------------------------------------------------ TF-written
def closed_queue(path: Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(path)]])
    q.close()
    return q


def test_tensorflow_written_examples_as_record_blocks(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(1)
    p = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(p)) as w:
        for i in range(300):
            feats = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.standard_normal(32).tolist())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(0, 1000))])),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=(rng.integers(0, 10**9, int(rng.integers(0, 21))) - 5).tolist())),
                "tag": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"t" * int(rng.integers(3, 13))])),
            }
            if i % 7 == 3:
                del feats["ids"]
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 1000)
    assert isinstance(block, RecordBlock) and len(block) == 300 and block.fixed is None
    configs = [
        {"x": FixedLenFeature([32], np.float32), "label": FixedLenFeature([], np.int64)},
        {"ids": FixedLenSequenceFeature([], np.int64, allow_missing=True), "label": FixedLenFeature([], np.int64)},
        {"ids": VarLenFeature(np.int64), "tag": FixedLenFeature([], "string"),
         "r": RaggedFeature(np.int64, value_key="ids", partitions=(RaggedFeature.UniformRowLength(1),))},
        {"ids": FixedLenFeature([3], np.int64, default_value=[0, 0, 0])},  # a count error
    ]
    for feats in configs:
        got = all_paths(block, feats)
        assert got[0] == ("InvalidArgumentError" if "ids" in feats and len(feats) == 1 else "ok")
    want = tf.io.parse_example(tf.constant(block.values()), {
        "x": tf.io.FixedLenFeature([32], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64),
        "ids": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)})
    got = parse_example(block, {"x": FixedLenFeature([32], np.float32), "label": FixedLenFeature([], np.int64),
                                "ids": FixedLenSequenceFeature([], np.int64, allow_missing=True)})
    for k in ("x", "label", "ids"):
        assert got[k].dtype == want[k].numpy().dtype and got[k].tobytes() == want[k].numpy().tobytes()


# ------------------------------------------------------------------ fuzzed
KEYS = [b"x", b"label", b"v", b"s", b"zz", b""]


@st.composite
def wire_feature(draw: st.DrawFn) -> bytes:
    """A Feature body: 0-2 lists of any kind and encoding, maybe an unknown field."""
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["f", "i", "s"]))
        packed = draw(st.booleans())
        if kind == "f":
            xs = draw(st.lists(st.floats(width=32, allow_nan=False), max_size=5))
            parts.append(floats(*xs, packed=packed))
        elif kind == "i":
            xs = draw(st.lists(st.one_of(st.integers(0, 300), st.integers(-(2**63), U64)), max_size=5))
            parts.append(ints(*xs, packed=packed))
        else:
            parts.append(strs(*draw(st.lists(st.binary(max_size=4), max_size=3))))
    if draw(st.integers(0, 9)) == 0:
        parts.append(tag(draw(st.integers(4, 20)), 0) + v(draw(st.integers(0, 1000))))
    return b"".join(parts)


@st.composite
def wire_record(draw: st.DrawFn) -> bytes:
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.sampled_from(KEYS))
        feats = draw(st.lists(wire_feature(), min_size=0, max_size=2))
        extra = tag(3, 0) + v(1) if draw(st.integers(0, 14)) == 0 else b""
        entries.append(entry(key, *feats, extra=extra))
    return example(*entries)


def typical_record() -> st.SearchStrategy[bytes]:
    """What serialize_example writes: one list per Feature, packed."""
    optional = {
        "x": st.lists(st.floats(width=32), min_size=3, max_size=5),
        "label": st.integers(-(2**63), 2**63 - 1),
        "v": st.lists(st.one_of(st.integers(0, 20000), st.integers(-(2**63), 2**63 - 1)), max_size=5),
        "s": st.lists(st.binary(max_size=5), min_size=1, max_size=2),
        "zz": st.lists(st.integers(0, 300), min_size=1, max_size=3),
    }
    return st.fixed_dictionaries({}, optional=optional).map(lambda d: serialize_example({
        k: (np.array(x, dtype=np.float32) if k == "x" else np.array(x, dtype=np.int64) if k in ("label", "v", "zz")
            else x) for k, x in d.items()}))


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


RECORDS = st.lists(st.one_of(typical_record(), wire_record()), min_size=1, max_size=6)
FLIPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=2)


@FUZZ
@given(recs=RECORDS, ci=st.integers(0, len(CONFIGS) - 1))
def test_fuzzed_records_agree(recs: list[bytes], ci: int) -> None:
    all_paths(recs, CONFIGS[ci])


@FUZZ
@given(recs=RECORDS, flips=FLIPS, cut=st.integers(0, 8), ci=st.integers(0, len(CONFIGS) - 1))
def test_fuzzed_mutated_records_agree(recs: list[bytes], flips: list[tuple[int, int]], cut: int, ci: int) -> None:
    all_paths(mutate(recs, flips, cut), CONFIGS[ci])


@FUZZ
@given(rec=st.one_of(typical_record(), wire_record()), flips=FLIPS, ci=st.integers(0, len(CONFIGS) - 1))
def test_fuzzed_single_example_agrees(rec: bytes, flips: list[tuple[int, int]], ci: int) -> None:
    all_paths(mutate([rec], flips, 0)[0], CONFIGS[ci], single=True)


@FUZZ
@given(recs=st.lists(st.binary(max_size=40), min_size=1, max_size=4), ci=st.integers(0, len(CONFIGS) - 1))
def test_random_bytes_agree(recs: list[bytes], ci: int) -> None:
    all_paths(recs, CONFIGS[ci])


# ------------------------------------------------------------------ which path runs
@pytest.mark.timeout(60)
def test_native_core_parses_a_block_in_one_kernel_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the compiled core a block of records of varying lengths is one
    kernel call, and neither the walker nor protobuf runs; without it (the
    twin, FEEDQ_PURE_PYTHON=1) the walker parses it."""
    p = tmp_path / "var.tfrecord"
    recs = [serialize_example({"ids": np.arange(i % 9, dtype=np.int64), "label": i * 37}) for i in range(2000)]
    with TFRecordWriter(p) as w:
        w.write_many(recs)
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 5000)
    assert len(block) == 2000 and block.fixed is None
    calls: list[int] = []
    real = nat.parse_examples

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(len(a[1]))
        return real(*a, **k)

    walks: list[int] = []
    real_walk = wire_mod._walk

    def counting_walk(*a: Any) -> Any:
        walks.append(1)
        return real_walk(*a)

    def no_protobuf(*a: Any) -> Any:
        raise AssertionError("protobuf parsed a record")

    monkeypatch.setattr(nat, "parse_examples", counting)
    monkeypatch.setattr(wire_mod, "_walk", counting_walk)
    monkeypatch.setattr(example_mod, "_parse_slow", no_protobuf)
    out = parse_example(block, {"ids": FixedLenSequenceFeature([], np.int64, allow_missing=True),
                                "label": FixedLenFeature([], np.int64)})
    assert out["label"].tolist() == [i * 37 for i in range(2000)]
    assert out["ids"].shape == (2000, 8)
    assert out["ids"][17].tolist() == list(range(8)) and out["ids"][9].tolist() == [0] + [0] * 7
    if nat.CORE == "native":
        assert example_mod._KERNEL and calls == [2000] and walks == []
    else:
        assert not example_mod._KERNEL and calls == [] and walks == [1]


def test_kernel_error_names_the_record_as_protobuf_does() -> None:
    """The kernel stops at the first bad record; the message shows its first 512 bytes."""
    good = serialize_example({"label": 1})
    bad = example(entry(b"label", ints(1))) + b"\xff" * 600
    for name in PATHS:
        with parse_path(name), pytest.raises(
            InvalidArgumentError, match="^" + re.escape(f"Could not parse example input, value: '{repr(bad[:512])[2:-1]}'") + "$"
        ):
            parse_example([good, bad, b"also bad"], {"label": FixedLenFeature([], np.int64)})


# ------------------------------------------------------------------ take_bytes


@pytest.mark.parametrize("k", CORES)
def test_take_bytes_makes_the_slices(k: nat.Kernels) -> None:
    buf = b"hello, world"
    got = k.take_bytes(buf, np.array([[0, 5], [7, 12], [3, 3], [0, 12]], dtype=np.int64))
    assert got.dtype == object and got.shape == (4,)
    assert got.tolist() == [b"hello", b"world", b"", buf]
    assert all(type(x) is bytes for x in got)
    assert k.take_bytes(buf, np.zeros((0, 2), dtype=np.int64)).shape == (0,)
    assert k.take_bytes(memoryview(bytearray(buf)), [[1, 2]]).tolist() == [b"e"]


@pytest.mark.parametrize("k", CORES)
@pytest.mark.parametrize("pair", [(-1, 2), (3, 2), (0, 13), (13, 13), (2**62, 2**62 + 1)])
def test_take_bytes_never_reads_outside_the_buffer(k: nat.Kernels, pair: tuple[int, int]) -> None:
    offsets = np.array([[0, 1], pair], dtype=np.int64)
    with pytest.raises(ValueError, match=r"^take_bytes: pair 1 \(.*\) is outside the buffer of 12 bytes$"):
        k.take_bytes(b"hello, world", offsets)
    with pytest.raises(ValueError, match=r"^offsets must be \[N, 2\]"):
        k.take_bytes(b"hello, world", np.zeros(4, dtype=np.int64))


@FUZZ
@given(buf=st.binary(max_size=40), pairs=st.lists(st.tuples(st.integers(-3, 45), st.integers(-3, 45)), max_size=8))
def test_take_bytes_native_equals_twin(buf: bytes, pairs: list[tuple[int, int]]) -> None:
    offsets = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    results = []
    for k in (nat.PURE, nat.NATIVE):
        if k is None:
            continue
        try:
            results.append(("ok", k.take_bytes(buf, offsets).tolist()))
        except ValueError as exc:
            results.append(("error", str(exc)))
    assert all(r == results[0] for r in results)
    if results[0][0] == "ok":
        assert results[0][1] == [buf[a:b] for a, b in pairs]
