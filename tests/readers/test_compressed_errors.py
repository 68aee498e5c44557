"""Read errors after good data (spec R8, R9, R14, X6): corrupt or truncated
GZIP/ZLIB streams and OS read errors.

feedq's rule: an error is raised ONCE, after every good record before it has
been returned, and then the reader moves on (``on_error="skip"`` counts and
logs it instead). A stream error met while filling a 4 MiB buffer used to
throw away everything read in that fill.
"""

from __future__ import annotations

import errno
import gzip
import os
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from feedq import _native
from feedq.errors import DataLossError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    WholeFileReader,
    _inflate,
    _io,
)
from feedq.readers._io import open_stream
from tests.conftest import Bg

pytestmark = pytest.mark.timeout(30)

GARBAGE = b"\x1f\x8b\x08\x00garbage-garbage-garbage"


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def drain(reader: Any, q: FIFOQueue, n: int) -> list[Any]:
    """Every value read, with ``("ERR", message)`` where a read raised DataLossError."""
    out: list[Any] = []
    with reader:
        while True:
            try:
                out += reader.read_up_to(q, n)[1].tolist()
            except DataLossError as exc:
                out.append(("ERR", exc.message))
            except OutOfRangeError:
                return out


def write_tfr(path: Path, records: list[bytes], options: str | None = None) -> Path:
    with TFRecordWriter(path, options) as w:
        w.write_many(records)
    return path


def whole_records(stream: bytes) -> list[bytes]:
    """The TFRecord payloads wholly inside ``stream`` (CRCs not checked)."""
    out, pos = [], 0
    while pos + 12 <= len(stream):
        (length,) = struct.unpack_from("<Q", stream, pos)
        if pos + 16 + length > len(stream):
            break
        out.append(stream[pos + 12 : pos + 12 + length])
        pos += 16 + length
    return out


def inflatable(data: bytes, wbits: int = 31) -> bytes:
    """What zlib can decompress from a damaged stream before it fails."""
    d = zlib.decompressobj(wbits)
    try:
        return d.decompress(data)
    except zlib.error:  # pragma: no cover - truncation is not a zlib error
        return b""


# ------------------------------------------------------- trailing garbage


@pytest.mark.parametrize("n", [1, 4, 100])
def test_gzip_text_trailing_garbage_lines_then_error_then_next_file(tmp_path: Path, n: int) -> None:
    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"".join(b"line%d\n" % i for i in range(10))) + GARBAGE)
    nxt = tmp_path / "b.txt.gz"
    nxt.write_bytes(gzip.compress(b"next\n"))
    out = drain(TextLineReader(compression="GZIP"), closed_queue(p, nxt), n)
    assert out[:10] == [b"line%d" % i for i in range(10)]
    assert len(out) == 12 and out[11] == b"next"
    assert out[10][0] == "ERR" and out[10][1].startswith(f"{p}: inflate() failed with")


def test_gzip_tfrecord_trailing_garbage_keeps_all_records(tmp_path: Path) -> None:
    recs = [b"rec%d" % i for i in range(100)]
    p = write_tfr(tmp_path / "b.tfr.gz", recs, "GZIP")
    with open(p, "ab") as f:
        f.write(GARBAGE)
    out = drain(TFRecordReader(options="GZIP"), closed_queue(p), 10)
    assert out[:100] == recs
    assert len(out) == 101 and out[100][0] == "ERR"
    assert out[100][1].startswith(f"{p}: inflate() failed with")


@pytest.mark.parametrize("options", ["GZIP", "ZLIB"])
def test_r14_bad_stream_checksum_after_the_last_record_keeps_every_record(
    tmp_path: Path, options: str
) -> None:
    # A flipped byte in the stream's own checksum (GZIP's CRC32 trailer,
    # ZLIB's Adler-32): zlib fails in the call that decompresses the last
    # ~1 MiB and drops that call's output; the reader still hands on every
    # record before the fault, then the error, naming the compressed offset.
    recs = [b"%06d" % i + bytes(range(i % 200)) for i in range(20000)]  # ~2.1 MB of records
    p = write_tfr(tmp_path / "t.tfr", recs, options)
    raw = bytearray(p.read_bytes())
    at = len(raw) - (8 if options == "GZIP" else 4)
    raw[at] ^= 0x01
    p.write_bytes(bytes(raw))
    out = drain(TFRecordReader(options=options), closed_queue(p), 1000)
    assert out[:-1] == recs
    kind, msg = out[-1]
    assert kind == "ERR" and msg.startswith(f"{p}: inflate() failed with")
    assert "incorrect data check at compressed offset" in msg and "is this a" not in msg


def test_zlib_fixed_length_trailing_garbage_keeps_all_records(tmp_path: Path) -> None:
    recs = [bytes([i]) * 10 for i in range(50)]
    p = tmp_path / "c.bin.z"
    p.write_bytes(zlib.compress(b"".join(recs)) + b"junk")
    out = drain(FixedLengthRecordReader(10, encoding="ZLIB"), closed_queue(p), 7)
    assert out[:50] == recs
    where = p.stat().st_size - 4
    assert out[50:] == [
        ("ERR", f"{p}: trailing bytes after the ZLIB stream at compressed offset {where}")
    ]


def test_skip_policy_counts_the_stream_error_once(tmp_path: Path) -> None:
    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"x\ny\n") + GARBAGE)
    nxt = tmp_path / "b.txt.gz"
    nxt.write_bytes(gzip.compress(b"z\n"))
    r = TextLineReader(compression="GZIP", on_error="skip")
    assert drain(r, closed_queue(p, nxt), 100) == [b"x", b"y", b"z"]
    assert r.num_errors_skipped() == 1
    assert r.num_work_units_completed() == 1  # the bad file is not counted (R4)
    assert r.num_records_produced() == 3


# ------------------------------------------------------------- truncation


def test_truncated_gzip_tfrecord_returns_every_whole_record(tmp_path: Path) -> None:
    recs = [b"rec%d" % i for i in range(100)]
    p = write_tfr(tmp_path / "c.tfr.gz", recs, "GZIP")
    data = p.read_bytes()[:-40]
    p.write_bytes(data)
    expect = whole_records(inflatable(data))
    assert 0 < len(expect) < 100
    out = drain(TFRecordReader(options="GZIP"), closed_queue(p), 10)
    assert out[:-1] == expect
    assert out[-1][0] == "ERR" and "truncated GZIP stream" in out[-1][1]


@pytest.mark.parametrize("n", [1000, 100_000])
def test_gzip_tfrecord_cut_in_half_loses_only_the_cut_record(tmp_path: Path, n: int) -> None:
    # ~7 MB decompressed: the cut lies beyond the first 4 MiB buffer fill,
    # and one ByteStream.read spans several 1 MiB inflate chunks.
    rng = random.Random(7)
    recs = [rng.randbytes(100) for _ in range(60_000)]
    p = write_tfr(tmp_path / "d.tfr.gz", recs, "GZIP")
    data = p.read_bytes()
    cut = data[: len(data) * 2 // 3]
    p.write_bytes(cut)
    expect = whole_records(inflatable(cut))
    assert len(expect) > 35_000
    out = drain(TFRecordReader(options="GZIP"), closed_queue(p), n)
    assert len(out) == len(expect) + 1 and out[:-1] == expect
    assert out[-1][0] == "ERR" and "truncated GZIP stream" in out[-1][1]


def test_truncated_gzip_text_drops_only_the_partial_last_line(tmp_path: Path) -> None:
    lines = [b"%06d" % i for i in range(200_000)]  # 1.4 MB decompressed
    p = tmp_path / "t.txt.gz"
    data = gzip.compress(b"\n".join(lines) + b"\n")
    p.write_bytes(data[: len(data) // 2])
    got = inflatable(data[: len(data) // 2])
    expect = got[: got.rindex(b"\n")].split(b"\n")
    out = drain(TextLineReader(compression="GZIP"), closed_queue(p), 50_000)
    assert out[:-1] == expect
    assert out[-1][0] == "ERR"


# --------------------------------------------------------- ByteStream level


def test_bytestream_returns_the_good_bytes_then_raises_every_time(tmp_path: Path) -> None:
    good = os.urandom(3 << 20)  # three inflate chunks
    p = tmp_path / "s.gz"
    p.write_bytes(gzip.compress(good, 1) + GARBAGE)
    s = open_stream(p, "GZIP")
    try:
        assert s.read(10 << 20) == good
        assert s.offset == len(good)
        for _ in range(2):  # the second call used to wait forever on the prefetcher
            call = Bg(s.read, 10, name="second-read")
            with pytest.raises(DataLossError, match=r"inflate\(\) failed"):
                call.result(timeout=5)
    finally:
        s.close()


def test_prefetcher_reraises_after_its_thread_ended_with_an_error(tmp_path: Path) -> None:
    p = tmp_path / "plain.bin"
    p.write_bytes(b"not gzip at all" * 10)
    s = open_stream(p, "GZIP")
    try:
        for i in range(3):  # calls after the first used to wait forever
            call = Bg(s.read, 10, name=f"read-{i}")
            with pytest.raises(DataLossError, match=r"incorrect header check"):
                call.result(timeout=5)
    finally:
        s.close()


def test_bytestream_read_after_close_raises_instead_of_blocking(tmp_path: Path) -> None:
    p = tmp_path / "s.gz"
    p.write_bytes(gzip.compress(os.urandom(3 << 20), 1))
    s = open_stream(p, "GZIP")
    s.read(10)
    s.close()
    s.close()  # idempotent
    call = Bg(s.read, 10 << 20, name="read-closed")
    with pytest.raises(ValueError, match=r"closed stream$"):
        call.result(timeout=5)


# --------------------------------------------------------- OS read errors


class _FailingFile:
    """A binary file whose reads raise EIO from byte ``fail_at`` on."""

    def __init__(self, f: Any, fail_at: int) -> None:
        self._f = f
        self._fail_at = fail_at

    def read(self, n: int = -1) -> bytes:
        end = self._f.tell() + (n if n >= 0 else 1 << 62)
        if end > self._fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        data: bytes = self._f.read(n)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@pytest.fixture
def eio_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``eio_at(path, k)``: reads of ``path`` fail with EIO from byte k on."""
    plan: dict[str, int] = {}

    def fake_open(name: str, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = open(name, mode, *args, **kwargs)  # noqa: SIM115 - the stream closes it
        return _FailingFile(f, plan[name]) if name in plan else f

    # Regular files are read by position (the native core's read_window on
    # the descriptor): fail those reads at the same byte.
    real_window = _native.read_window

    def failing_window(fd: int, offset: int, tail: Any, n: int) -> tuple[bytes, int, int]:
        fail_at = plan.get(os.readlink(f"/proc/self/fd/{fd}"))
        if fail_at is None or offset + n <= fail_at:
            return real_window(fd, offset, tail, n)
        window, got, _err = real_window(fd, offset, tail, max(0, fail_at - offset))
        return window, got, errno.EIO

    monkeypatch.setattr(_io, "open", fake_open, raising=False)
    monkeypatch.setattr(_native, "read_window", failing_window)
    return lambda path, k: plan.__setitem__(str(path), k)


def test_eio_in_a_plain_text_file_is_data_loss_after_the_good_lines(
    tmp_path: Path, eio_at: Any
) -> None:
    p = tmp_path / "a.txt"
    p.write_bytes(b"".join(b"line%02d\n" % i for i in range(50)))  # 7 bytes a line
    eio_at(p, 7 * 20 + 3)
    nxt = tmp_path / "b.txt"
    nxt.write_bytes(b"next\n")
    out = drain(TextLineReader(block_bytes=64), closed_queue(p, nxt), 5)
    assert out[:-2] == [b"line%02d" % i for i in range(len(out) - 2)]
    assert 10 <= len(out) - 2 <= 20
    assert out[-1] == b"next"
    assert out[-2][0] == "ERR"
    assert out[-2][1].startswith(f"{p}: read failed at offset ")
    assert out[-2][1].endswith(": Input/output error")


def test_eio_in_a_gzip_tfrecord_names_the_compressed_offset(tmp_path: Path, eio_at: Any) -> None:
    step = _inflate._ZLIB_COMPRESSED_CHUNK  # compressed bytes per read (1 MiB)
    recs = [os.urandom(1000) for _ in range(step // 1000 + 600)]  # incompressible
    p = write_tfr(tmp_path / "a.tfr.gz", recs, "GZIP")
    eio_at(p, step + 40_000)  # the second compressed read fails
    out = drain(TFRecordReader(options="GZIP"), closed_queue(p), 1000)
    assert out[:-1] == recs[: len(out) - 1] and len(out) > 200
    assert out[-1] == ("ERR", f"{p}: read failed at compressed offset {step}: Input/output error")


def test_eio_in_whole_file_reader_is_data_loss(tmp_path: Path, eio_at: Any) -> None:
    p = tmp_path / "a.bin"
    p.write_bytes(b"x" * 100)
    eio_at(p, 10)
    nxt = tmp_path / "b.bin"
    nxt.write_bytes(b"ok")
    out = drain(WholeFileReader(), closed_queue(p, nxt), 1)
    assert out == [("ERR", f"{p}: read failed at offset 0: Input/output error"), b"ok"]
