"""TFRecordReader / TFRecordWriter (spec R13, R14, R9, X6): framing, CRCs,
compression, corruption, hostile lengths, skip policy, state."""

from __future__ import annotations

import gzip
import logging
import struct
from pathlib import Path

import numpy as np
import pytest

from feedq.errors import DataLossError, NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    TFRecordCompressionType,
    TFRecordOptions,
    TFRecordReader,
    TFRecordWriter,
    masked_crc32c,
    tf_record_iterator,
)

pytestmark = pytest.mark.timeout(10)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def read_all(reader, q, n: int = 100) -> list[bytes]:
    out: list[bytes] = []
    with reader:
        while True:
            try:
                out += reader.read_up_to(q, n)[1].tolist()
            except OutOfRangeError:
                return out


def write(path: Path, records: list[bytes], options: str | None = None) -> Path:
    with TFRecordWriter(path, options) as w:
        for r in records:
            w.write(r)
    return path


PAYLOADS = [b"ab", b"abcd", b"", b"wxyz"]


def test_r13_keys_are_byte_offsets(tmp_path: Path) -> None:
    # Obs: offsets 0, 18, 38, 54 for payloads of 2, 4, 0, 4 bytes.
    p = write(tmp_path / "a.tfr", PAYLOADS)
    with TFRecordReader() as r:
        keys, values = r.read_up_to(closed_queue(p), 10)
    assert values.tolist() == PAYLOADS
    assert keys.tolist() == [f"{p}:{o}".encode() for o in (0, 18, 38, 54)]


def test_writer_framing_is_tfrecord(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", [b"xyz"])
    raw = p.read_bytes()
    assert raw[:8] == struct.pack("<Q", 3)
    assert raw[8:12] == struct.pack("<I", masked_crc32c(raw[:8]))
    assert raw[12:15] == b"xyz"
    assert raw[15:] == struct.pack("<I", masked_crc32c(b"xyz"))


@pytest.mark.parametrize(
    "options", ["GZIP", "ZLIB", TFRecordOptions("GZIP"), TFRecordCompressionType.ZLIB, None, ""]
)
def test_r13_compression_round_trip(tmp_path: Path, options) -> None:
    recs = [bytes([i % 256]) * i for i in range(300)]
    p = write(tmp_path / "a.tfr", recs, options)
    assert read_all(TFRecordReader(options=options), closed_queue(p)) == recs
    assert list(tf_record_iterator(p, options)) == recs


def test_equal_length_runs_give_a_fixed_view(tmp_path: Path) -> None:
    recs = [bytes([i]) * 7 for i in range(50)]
    p = write(tmp_path / "a.tfr", recs)
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(p), 100)
    assert block.fixed is not None
    assert [bytes(x) for x in block.fixed] == recs


def corrupt(p: Path, offset: int, value: int = 0xFF) -> None:
    raw = bytearray(p.read_bytes())
    raw[offset] ^= value
    p.write_bytes(bytes(raw))


def test_r14_bad_data_crc_after_good_records_then_moves_on(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    good = write(tmp_path / "b.tfr", [b"next"])
    corrupt(p, 18 + 12)  # first data byte of the record at 18
    r = TFRecordReader()
    q = closed_queue(p, good)
    assert r.read_up_to(q, 10)[1].tolist() == [b"ab"]
    with pytest.raises(
        DataLossError, match=rf"^{p}: corrupted record at 30 \(data CRC mismatch; the record starts at 18\)$"
    ):
        r.read_up_to(q, 10)
    # Never the same error forever (R9): the reader moves on.
    assert r.read_up_to(q, 10)[1].tolist() == [b"next"]
    r.close()


def test_r14_bad_length_crc(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    corrupt(p, 8)
    with TFRecordReader() as r, pytest.raises(
        DataLossError, match=rf"^{p}: corrupted record at 0 \(Is this even a TFRecord file\?\)$"
    ):
        r.read(closed_queue(p))


def test_r14_gzip_file_read_as_plain_is_data_loss(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS, "GZIP")
    with TFRecordReader() as r, pytest.raises(DataLossError, match=r"Is this even a TFRecord file"):
        r.read(closed_queue(p))


def test_r14_plain_file_read_as_gzip(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    with TFRecordReader(options="GZIP") as r, pytest.raises(
        DataLossError, match=rf"^{p}: inflate\(\) failed with .*incorrect header check"
    ):
        r.read(closed_queue(p))


@pytest.mark.parametrize("cut", [1, 5, 13, 19])
def test_r14_truncated_last_record_after_good_records(tmp_path: Path, cut: int) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) - cut])
    r = TFRecordReader()
    q = closed_queue(p)
    got = r.read_up_to(q, 10)[1].tolist()
    assert got == PAYLOADS[: len(got)] and len(got) >= 2
    with pytest.raises(DataLossError, match=rf"^{p}: truncated record at \d+$"):
        r.read_up_to(q, 10)
    with pytest.raises(OutOfRangeError):
        r.read_up_to(q, 10)


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", [b"x" * 1000] * 20, "GZIP")
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with TFRecordReader(options="GZIP") as r, pytest.raises(DataLossError, match=r"truncated"):
        read_all(r, closed_queue(p))


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_hostile_length_prefix_does_not_allocate(tmp_path: Path, compression: str) -> None:
    head = struct.pack("<Q", 2**60)
    raw = head + struct.pack("<I", masked_crc32c(head)) + b"tiny"
    p = tmp_path / "evil.tfr"
    p.write_bytes(gzip.compress(raw) if compression else raw)
    with TFRecordReader(options=compression) as r, pytest.raises(DataLossError, match=r"corrupted record at 0|truncated record at 0"):
        r.read(closed_queue(p))


def test_max_record_bytes_caps_valid_lengths_in_compressed_streams(tmp_path: Path) -> None:
    head = struct.pack("<Q", 10**6)
    p = tmp_path / "big.tfr.gz"
    p.write_bytes(gzip.compress(head + struct.pack("<I", masked_crc32c(head)) + b"\0" * 10**6))
    with TFRecordReader(options="GZIP", max_record_bytes=1000) as r, pytest.raises(
        DataLossError, match=r"exceeds max_record_bytes=1000"
    ):
        r.read(closed_queue(p))


def test_x6_skip_resyncs_after_a_bad_data_crc(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    corrupt(p, 18 + 12)
    r = TFRecordReader(on_error="skip")
    with caplog.at_level(logging.WARNING, logger="feedq.readers"):
        got = read_all(r, closed_queue(p))
    assert got == [b"ab", b"", b"wxyz"]
    assert r.num_errors_skipped() == 1
    assert f"{p}:18" in caplog.text


def test_x6_skip_drops_rest_of_file_after_a_bad_length(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", PAYLOADS)
    corrupt(p, 18 + 8)  # the length CRC of the 2nd record
    q2 = write(tmp_path / "b.tfr", [b"b"])
    r = TFRecordReader(on_error="skip")
    assert read_all(r, closed_queue(p, q2)) == [b"ab", b"b"]
    assert r.num_errors_skipped() == 1


def test_r8_missing_then_next(tmp_path: Path) -> None:
    p = write(tmp_path / "a.tfr", [b"a"])
    r = TFRecordReader()
    q = closed_queue(tmp_path / "missing.tfr", p)
    with pytest.raises(NotFoundError, match=r"missing.tfr; No such file or directory$"):
        r.read(q)
    assert r.read(q)[1] == b"a"
    r.close()


def test_empty_file_is_skipped(tmp_path: Path) -> None:
    e = tmp_path / "e.tfr"
    e.write_bytes(b"")
    p = write(tmp_path / "a.tfr", [b"a"])
    assert read_all(TFRecordReader(), closed_queue(e, p)) == [b"a"]


def test_memory_is_bounded_on_a_file_larger_than_the_block(tmp_path: Path) -> None:
    recs = [np.random.default_rng(i).bytes(100 + i % 7) for i in range(3000)]  # ~330 kB
    p = write(tmp_path / "a.tfr", recs)
    r = TFRecordReader(block_bytes=8192)
    q = closed_queue(p)
    got, peak = [], 0
    while True:
        try:
            b = r.read_block(q, 10**6)
        except OutOfRangeError:
            break
        peak = max(peak, len(b.data))
        got += b.values().tolist()
    assert got == recs and peak <= 2 * 8192


@pytest.mark.parametrize("compression", ["", "GZIP"])
@pytest.mark.parametrize("stop", [0, 1, 150, 299, 300])
def test_state_dict_resumes_exactly(tmp_path: Path, compression: str, stop: int) -> None:
    recs = [bytes([i % 256]) * (i % 13) for i in range(300)]
    p = write(tmp_path / "a.tfr", recs, compression)
    p2 = write(tmp_path / "b.tfr", [b"tail"], compression)
    q = closed_queue(p, p2)
    r = TFRecordReader(options=compression, block_bytes=1024)
    first = [r.read(q)[1] for _ in range(stop)]
    state = r.state_dict()
    r.close()
    r2 = TFRecordReader(options=compression)
    r2.load_state_dict(state)
    assert first + read_all(r2, q, 7) == recs + [b"tail"]


def test_writer_rejects_str_and_closed(tmp_path: Path) -> None:
    w = TFRecordWriter(tmp_path / "a.tfr")
    with pytest.raises(TypeError, match=r"^TFRecordWriter records must be bytes, not str$"):
        w.write("text")  # type: ignore[arg-type]
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError, match=r"^TFRecordWriter is closed$"):
        w.write(b"x")


def test_writer_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        TFRecordWriter(tmp_path / "no" / "a.tfr")


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    a = write(tmp_path / "a.gz", [b"1", b"2"], "GZIP").read_bytes()
    b = write(tmp_path / "b.gz", [b"3"], "GZIP").read_bytes()
    p = tmp_path / "ab.gz"
    p.write_bytes(a + b)
    assert read_all(TFRecordReader(options="GZIP"), closed_queue(p)) == [b"1", b"2", b"3"]


def _inflate_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("feedq-inflate:")]


def test_gzip_read_ahead_thread_stops_on_close_and_when_dropped(tmp_path: Path) -> None:
    import gc
    import time

    p = write(tmp_path / "a.tfr", [b"x" * 100] * 50000, "GZIP")
    r = TFRecordReader(options="GZIP")
    q = closed_queue(p, p)
    r.read(q)
    assert _inflate_threads()
    r.close()
    assert not _inflate_threads()
    r.read(q)  # the next file starts a new read-ahead thread
    del r
    gc.collect()
    deadline = time.monotonic() + 5
    while _inflate_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _inflate_threads()


@pytest.mark.parametrize("compression", ["", "GZIP"])
@pytest.mark.parametrize("lengths", ["fixed", "varying"])
def test_blocks_held_stay_valid_while_the_reader_refills(tmp_path: Path, compression: str, lengths: str) -> None:
    # Each refill reads into a new buffer: a block still held keeps its own
    # memory (its fixed view and values), however many refills come after.
    rng = np.random.default_rng(3)
    sizes = [40] * 600 if lengths == "fixed" else rng.integers(0, 90, 600).tolist()
    records = [rng.integers(0, 256, k, dtype=np.uint8).tobytes() for k in sizes]
    p = tmp_path / "r.tfrecord"
    with TFRecordWriter(p, compression or None) as w:
        w.write_many(records)
    reader = TFRecordReader(options=compression or None, block_bytes=1024)
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(p)]])
    q.close()
    held = []
    with reader:
        while True:
            try:
                held.append(reader.read_block(q, 7))
            except OutOfRangeError:
                break
    assert len({id(b.data) for b in held}) > 20  # many refills
    assert [v for b in held for v in b.values().tolist()] == records
    if lengths == "fixed":
        assert all(b.fixed is not None for b in held)
        assert b"".join(b.fixed.tobytes() for b in held) == b"".join(records)  # type: ignore[union-attr]
