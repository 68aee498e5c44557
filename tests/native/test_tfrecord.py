"""feedq._native.scan_tfrecords: TFRecord framing + both CRCs, native vs its
Python twin vs a reference model, on hand-made and fuzzed buffers (hostile
lengths, bit flips, truncations, varied lengths); and TFRecordReader on top
of it, identical under both cores (R13, R14, X6)."""

from __future__ import annotations

import itertools
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq._native as nat
from feedq.errors import DataLossError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import TFRecordReader, TFRecordWriter
from tests.native._cores import CORES, NOT_BUILT

crc32c_pkg = pytest.importorskip("crc32c")

pytestmark = pytest.mark.timeout(60)
needs_native = pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def masked(b: bytes) -> int:
    c = crc32c_pkg.crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(head)) + data + struct.pack("<I", masked(data))


def header(length: int) -> bytes:
    head = struct.pack("<Q", length)
    return head + struct.pack("<I", masked(head))


def reference(buf: bytes, start: int, max_records: int, max_bytes: int, check: bool) -> tuple[list[int], list[int], int, int]:
    """The framing rules written plainly (a third implementation)."""
    pos, starts, lengths = start, [], []
    while len(starts) < max_records:
        if pos == len(buf):
            return starts, lengths, pos, nat.SCAN_OK
        if len(buf) - pos < 12:
            return starts, lengths, pos, nat.SCAN_INCOMPLETE
        (length,) = struct.unpack_from("<Q", buf, pos)
        if masked(buf[pos : pos + 8]) != struct.unpack_from("<I", buf, pos + 8)[0]:
            return starts, lengths, pos, nat.SCAN_BAD_LENGTH_CRC
        if length > max_bytes:
            return starts, lengths, pos, nat.SCAN_LENGTH_TOO_LARGE
        if pos + 16 + length > len(buf):
            return starts, lengths, pos, nat.SCAN_INCOMPLETE
        data = buf[pos + 12 : pos + 12 + length]
        if check and masked(data) != struct.unpack_from("<I", buf, pos + 12 + length)[0]:
            return starts, lengths, pos, nat.SCAN_BAD_DATA_CRC
        starts.append(pos)
        lengths.append(length)
        pos += 16 + length
    return starts, lengths, pos, nat.SCAN_OK


def check_scan(buf: bytes, start: int = 0, max_records: int | None = None, max_bytes: int = 1 << 30, check: bool = True) -> nat.TFRecordScan:
    """Every core agrees with the reference; returns the result."""
    want = reference(buf, start, max_records if max_records is not None else 1 << 62, max_bytes, check)
    got = None
    for core in (nat.PURE, nat.NATIVE):
        if core is None:
            continue
        r = core.scan_tfrecords(buf, start, max_records, max_record_bytes=max_bytes, check_data_crc=check)
        assert r.starts.dtype == np.int64 and r.lengths.dtype == np.int64
        assert (r.starts.tolist(), r.lengths.tolist(), r.stop, r.status) == want, core.name
        got = r
    assert got is not None
    return got


RECS = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00" * 17]


def test_variable_length_records() -> None:
    buf = b"".join(frame(r) for r in RECS)
    r = check_scan(buf)
    assert r.status == nat.SCAN_OK and r.stop == len(buf)
    got = [buf[s + 12 : s + 12 + n] for s, n in zip(r.starts.tolist(), r.lengths.tolist())]
    assert got == RECS


def test_start_and_max_records() -> None:
    buf = b"".join(frame(r) for r in RECS)
    first = len(frame(RECS[0]))
    r = check_scan(buf, first, 2)
    assert r.starts.tolist() == [first, first + len(frame(RECS[1]))]
    assert r.status == nat.SCAN_OK
    assert check_scan(buf, 0, 0).stop == 0
    assert check_scan(buf, len(buf)).status == nat.SCAN_OK


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 13, 15])
def test_incomplete_trailing_record_is_not_an_error(cut: int) -> None:
    good = frame(b"x" * 3) + frame(b"yy")
    tail = frame(b"z" * 20)[:cut]
    r = check_scan(good + tail)
    assert r.status == nat.SCAN_INCOMPLETE and r.stop == len(good) and len(r.starts) == 2


def test_bad_length_crc_after_good_records() -> None:
    good = frame(b"abc") * 3
    bad = bytearray(frame(b"defg"))
    bad[9] ^= 0x40
    r = check_scan(good + bytes(bad) + frame(b"after"))
    assert r.status == nat.SCAN_BAD_LENGTH_CRC and r.stop == len(good) and len(r.starts) == 3


def test_bad_length_crc_in_a_short_tail_is_reported() -> None:
    # 12..15 trailing bytes cannot hold a record, but a header there is still judged.
    bad = bytearray(header(1000))
    bad[0] ^= 1
    r = check_scan(frame(b"") + bytes(bad) + b"\x00\x00")
    assert r.status == nat.SCAN_BAD_LENGTH_CRC and r.stop == 16


def test_length_above_max_record_bytes() -> None:
    buf = frame(b"a" * 10) + frame(b"b" * 100)
    r = check_scan(buf, max_bytes=50)
    assert r.status == nat.SCAN_LENGTH_TOO_LARGE and r.stop == len(frame(b"a" * 10))


def test_bad_data_crc_and_skipping_the_check() -> None:
    bad = bytearray(frame(b"payload"))
    bad[14] ^= 0x01
    buf = frame(b"ok") + bytes(bad) + frame(b"tail")
    r = check_scan(buf)
    assert r.status == nat.SCAN_BAD_DATA_CRC and r.stop == len(frame(b"ok"))
    r = check_scan(buf, check=False)
    assert r.status == nat.SCAN_OK and len(r.starts) == 3


@pytest.mark.parametrize("length", [(1 << 64) - 1, (1 << 63) + 5, (1 << 62), 1 << 40, (1 << 64) - 16])
@pytest.mark.parametrize("core", CORES)
def test_hostile_lengths_never_read_out_of_bounds_or_allocate(core: nat.Kernels, length: int) -> None:
    # A valid length CRC around an absurd length: with no cap it is merely
    # incomplete; with the default cap it is too large. Never an allocation.
    buf = frame(b"fine") + header(length) + b"\x00" * 40
    tracemalloc.start()
    try:
        r = core.scan_tfrecords(buf, max_record_bytes=(1 << 64) - 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (r.status, r.stop, len(r.starts)) == (nat.SCAN_INCOMPLETE, 20, 1)
    assert peak < 1 << 20
    r = core.scan_tfrecords(buf)
    assert (r.status, r.stop) == (nat.SCAN_LENGTH_TOO_LARGE, 20)


@pytest.mark.parametrize("core", CORES)
def test_outputs_are_bounded_by_the_buffer(core: nat.Kernels) -> None:
    buf = frame(b"") * 1000
    r = core.scan_tfrecords(buf, max_records=1 << 40)
    assert len(r.starts) == 1000 and r.starts.base is None  # trimmed copies, no oversized view


@pytest.mark.parametrize("core", CORES)
def test_bad_arguments(core: nat.Kernels) -> None:
    with pytest.raises(ValueError, match=r"^start 5 is outside the buffer of 4 bytes$"):
        core.scan_tfrecords(b"abcd", 5)
    with pytest.raises(ValueError, match=r"^max_records must be >= 0, got -1$"):
        core.scan_tfrecords(b"abcd", 0, -1)


@st.composite
def corrupted_streams(draw: Any) -> tuple[bytes, int, int | None, int, bool]:
    if draw(st.booleans()):
        lengths = draw(st.lists(st.integers(0, 300), max_size=12))
    else:  # runs of one length (the twin confirms those in bulk)
        lengths = [draw(st.integers(0, 40))] * draw(st.integers(0, 150))
        lengths += draw(st.lists(st.integers(0, 40), max_size=3))
    recs = [draw(st.binary(min_size=n, max_size=n)) for n in lengths]
    buf = bytearray(b"".join(frame(r) for r in recs))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "garbage", "hostile", "none"]))
        if kind == "flip" and buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate" and buf:
            del buf[draw(st.integers(0, len(buf))) :]
        elif kind == "garbage":
            buf += draw(st.binary(max_size=40))
        elif kind == "hostile":
            at = draw(st.integers(0, len(buf)))
            length = draw(st.sampled_from([(1 << 64) - 1, 1 << 63, 1 << 31, 10**6, 301]))
            buf[at:at] = header(length)
    start = draw(st.integers(0, len(buf)))
    if draw(st.booleans()):
        start = 0
    max_records = draw(st.one_of(st.none(), st.integers(0, 15)))
    max_bytes = draw(st.sampled_from([1 << 30, 100, 0, (1 << 64) - 1]))
    return bytes(buf), start, max_records, max_bytes, draw(st.booleans())


@FUZZ
@given(corrupted_streams())
def test_fuzz_native_twin_and_reference_agree(case: tuple[bytes, int, int | None, int, bool]) -> None:
    buf, start, max_records, max_bytes, check = case
    check_scan(buf, start, max_records, max_bytes, check)


# ------------------------------------------------------------------- the reader
def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def read_all(path: Path, core: nat.Kernels, monkeypatch: pytest.MonkeyPatch, n: int, on_error: str, block_bytes: int) -> list[Any]:
    """Everything a reader yields (values, errors, positions) with ``core`` framing."""
    monkeypatch.setattr(nat, "scan_tfrecords", core.scan_tfrecords)
    out: list[Any] = []
    r = TFRecordReader(on_error=on_error, block_bytes=block_bytes)  # type: ignore[arg-type]
    q = closed_queue(path)
    with r:
        for _ in range(10000):
            try:
                k, v = r.read_up_to(q, n)
                out.append(("ok", k.tolist(), v.tolist(), r.state_dict()[r.KEY_OFFSET]))
            except OutOfRangeError:
                out.append(("end", r.num_records_produced(), r.num_errors_skipped()))
                return out
            except DataLossError as exc:
                out.append(("err", exc.message))
    raise AssertionError("reader did not finish")


def write_variable(path: Path, n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    recs = [rng.integers(0, 256, int(rng.integers(0, 60)), dtype=np.uint8).tobytes() for _ in range(n)]
    with TFRecordWriter(path) as w:
        w.write_many(recs)
    return recs


def test_reader_frames_records_with_the_native_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v.tfr"
    recs = write_variable(path, 500, 0)
    calls: list[int] = []
    real = nat.scan_tfrecords

    def spy(*args: Any, **kwargs: Any) -> nat.TFRecordScan:
        res = real(*args, **kwargs)
        calls.append(len(res.starts))
        return res

    monkeypatch.setattr(nat, "scan_tfrecords", spy)
    with TFRecordReader() as r:
        _, values = r.read_up_to(closed_queue(path), 1000)
    assert values.tolist() == recs
    assert sum(calls) == 500 and len(calls) <= 2  # whole blocks per call, not records


@needs_native
@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize(("n", "block_bytes"), [(7, 1 << 20), (1000, 200), (3, 64)])
def test_reader_identical_under_both_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_error: str, n: int, block_bytes: int
) -> None:
    assert nat.NATIVE is not None
    path = tmp_path / "c.tfr"
    write_variable(path, 300, 1)
    raw = bytearray(path.read_bytes())
    raw[500] ^= 0x10  # somewhere in the first records (data or header)
    raw[3000] ^= 0x01
    raw = raw[:-7]  # truncated tail
    path.write_bytes(bytes(raw))
    native = read_all(path, nat.NATIVE, monkeypatch, n, on_error, block_bytes)
    twin = read_all(path, nat.PURE, monkeypatch, n, on_error, block_bytes)
    assert native == twin
    assert any(e[0] == "err" for e in native) or on_error == "skip"


@pytest.mark.timeout(120)
def test_reader_matches_tensorflow_on_variable_length_examples(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfr")
    rng = np.random.default_rng(3)
    with tf.io.TFRecordWriter(path) as w:
        for i in range(400):
            feats = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.standard_normal(32))),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(0, 1000))])),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(0, 10**6, i % 21))),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    want = [bytes(t.numpy()) for t in tf.data.TFRecordDataset(path)]
    assert len({len(b) for b in want}) > 10  # really variable lengths
    with TFRecordReader() as r:
        _, values = r.read_up_to(closed_queue(path), 1000)
    assert values.tolist() == want


def python_ran_during(call: Any, attempts: int = 5) -> bool:
    """True when another thread ran Python all through a ``call()`` (the GIL
    released). With the GIL held, the other thread's time stamps leave a gap
    as long as the C loop (it can only run in the call's Python parts, and for
    one switch interval after it); with it released they are spread all over
    the call. Retries absorb a loaded machine's scheduling gaps."""
    stamps: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())
            if len(stamps) > 2_000_000:
                del stamps[:1_000_000]

    t = threading.Thread(target=ticker, name="feedq-test-ticker")
    t.start()
    try:
        for _ in range(attempts):
            t0 = time.perf_counter()
            call()
            t1 = time.perf_counter()
            inside = [t0] + [x for x in stamps[-500_000:] if t0 < x < t1] + [t1]
            if max(b - a for a, b in itertools.pairwise(inside)) < 0.5 * (t1 - t0):
                return True
        return False
    finally:
        stop.set()
        t.join(10)


@needs_native
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_native_scan_releases_the_gil() -> None:
    """Another thread runs Python while a long scan is inside the C core."""
    assert nat.NATIVE is not None
    native = nat.NATIVE
    buf = frame(b"\x5a" * 65536) * 1024  # 64 MiB, CRC'd by the (slower) table path
    was = native.backend.use_hardware_crc(False)
    try:
        assert len(native.scan_tfrecords(buf, max_records=1024).starts) == 1024
        assert python_ran_during(lambda: native.scan_tfrecords(buf, max_records=1024))
    finally:
        native.backend.use_hardware_crc(was)
