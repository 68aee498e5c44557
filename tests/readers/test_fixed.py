"""FixedLengthRecordReader (spec R11, R12, X6) and decode_raw on its blocks (D9)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import pytest

from feedq.errors import DataLossError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import FixedLengthRecordReader, decode_raw

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


@pytest.fixture
def abc(tmp_path: Path) -> Path:
    p = tmp_path / "f.bin"
    p.write_bytes(b"abcdefg")
    return p


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"record_bytes": 2}, [b"ab", b"cd", b"ef"]),  # trailing partial record dropped
        ({"record_bytes": 3, "hop_bytes": 2}, [b"abc", b"cde", b"efg"]),  # overlapping
        ({"record_bytes": 3, "hop_bytes": 2, "header_bytes": 1, "footer_bytes": 1}, [b"bcd", b"def"]),
        ({"record_bytes": 1, "hop_bytes": 3}, [b"a", b"d", b"g"]),  # gaps
        ({"record_bytes": 7}, [b"abcdefg"]),
    ],
)
def test_r11_record_layout(abc: Path, kwargs: dict, expected: list[bytes]) -> None:
    assert read_all(FixedLengthRecordReader(**kwargs), closed_queue(abc)) == expected


def test_r11_keys_are_record_indices(abc: Path) -> None:
    with FixedLengthRecordReader(record_bytes=2) as r:
        keys, _ = r.read_up_to(closed_queue(abc), 10)
    assert keys.tolist() == [f"{abc}:{i}".encode() for i in range(3)]


@pytest.mark.parametrize("encoding", ["GZIP", "ZLIB"])
def test_r11_compressed_offsets_refer_to_the_decompressed_stream(tmp_path: Path, encoding: str) -> None:
    raw = b"H" + bytes(range(40)) + b"FF"
    p = tmp_path / "f.z"
    p.write_bytes(gzip.compress(raw) if encoding == "GZIP" else zlib.compress(raw))
    r = FixedLengthRecordReader(record_bytes=8, header_bytes=1, footer_bytes=2, encoding=encoding)
    assert read_all(r, closed_queue(p)) == [bytes(range(i, i + 8)) for i in range(0, 40, 8)]


def test_r11_empty_file_without_header_is_skipped(tmp_path: Path, abc: Path) -> None:
    e = tmp_path / "empty.bin"
    e.write_bytes(b"")
    assert read_all(FixedLengthRecordReader(record_bytes=7), closed_queue(e, abc)) == [b"abcdefg"]


def test_r12_file_shorter_than_header_is_data_loss_once(tmp_path: Path, abc: Path) -> None:
    # TF1 raised OutOfRange here, which a QueueRunner took for end of input.
    short = tmp_path / "short.bin"
    short.write_bytes(b"ab")
    r = FixedLengthRecordReader(record_bytes=1, header_bytes=3)
    q = closed_queue(short, abc)
    with pytest.raises(
        DataLossError,
        match=rf"^{short}: file of 2 bytes is shorter than header_bytes=3 \+ footer_bytes=0$",
    ):
        r.read(q)
    assert r.read(q)[1] == b"d"  # moved on to the next file
    r.close()


def test_x6_skip_policy_for_short_files(tmp_path: Path, abc: Path) -> None:
    short = tmp_path / "short.bin"
    short.write_bytes(b"")
    r = FixedLengthRecordReader(record_bytes=1, header_bytes=3, on_error="skip")
    assert read_all(r, closed_queue(short, abc)) == [b"d", b"e", b"f", b"g"]
    assert r.num_errors_skipped() == 1


def test_block_is_one_array_and_decode_raw_uses_it(tmp_path: Path) -> None:
    data = np.arange(1000, dtype="<i4")
    p = tmp_path / "ints.bin"
    p.write_bytes(data.tobytes())
    with FixedLengthRecordReader(record_bytes=40) as r:
        block = r.read_block(closed_queue(p), 1000)
    assert block.fixed is not None and block.fixed.shape == (100, 40)
    out = decode_raw(block, np.int32)
    np.testing.assert_array_equal(out, data.reshape(100, 10))
    assert out.flags.writeable


def test_memory_is_bounded_on_a_file_larger_than_the_block(tmp_path: Path) -> None:
    p = tmp_path / "big.bin"
    p.write_bytes(np.arange(50000, dtype="<i4").tobytes())  # 200 kB
    r = FixedLengthRecordReader(record_bytes=8, block_bytes=4096)
    q = closed_queue(p)
    total, peak = 0, 0
    while True:
        try:
            b = r.read_block(q, 10**6)
        except OutOfRangeError:
            break
        peak = max(peak, len(b.data))
        total += len(b)
    assert total == 25000 and peak <= 2 * 4096


@pytest.mark.parametrize("stop", [0, 2, 3])
def test_state_dict_resumes_exactly(abc: Path, tmp_path: Path, stop: int) -> None:
    other = tmp_path / "o.bin"
    other.write_bytes(b"0123")
    kw = {"record_bytes": 2, "header_bytes": 1}
    full = read_all(FixedLengthRecordReader(**kw), closed_queue(abc, other), 1)
    q = closed_queue(abc, other)
    r = FixedLengthRecordReader(**kw)
    first = [r.read(q)[1] for _ in range(stop)]
    r2 = FixedLengthRecordReader(**kw)
    r2.load_state_dict(r.state_dict())
    r.close()
    assert first + read_all(r2, q, 1) == full


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match=r"^record_bytes must be >= 1, got 0$"):
        FixedLengthRecordReader(record_bytes=0)
    with pytest.raises(ValueError, match=r"^hop_bytes must be >= 0, got -1$"):
        FixedLengthRecordReader(record_bytes=1, hop_bytes=-1)
    with pytest.raises(ValueError, match=r"^compression must be '', 'GZIP', 'ZLIB' or 'ZSTD', got 'LZ4'$"):
        FixedLengthRecordReader(record_bytes=1, encoding="LZ4")
