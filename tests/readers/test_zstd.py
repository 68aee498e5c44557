"""ZSTD compression (project issue 11): TFRecord reading and writing, text and
fixed-length files, through the ``zstandard`` package (the ``zstd`` extra).

TensorFlow has no ZSTD TFRecord files ("Not a valid compression_type"), so
the cross-check is with the zstd format itself: what the writer makes is a
standard zstd stream that ``zstandard`` decompresses to exactly the bytes of
the uncompressed TFRecord file, which TensorFlow reads.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from feedq.errors import DataLossError, MissingExtraError, OutOfRangeError, UnimplementedError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    TextLineReader,
    TFRecordOptions,
    TFRecordReader,
    TFRecordWriter,
    tf_record_iterator,
)
from feedq.readers._io import open_stream

try:
    import zstandard
except ImportError:  # the zstd extra is not installed: only the error test runs
    zstandard = None

pytestmark = pytest.mark.timeout(60)
needs_zstd = pytest.mark.skipif(zstandard is None, reason='needs the "zstd" extra')

ROOT = Path(__file__).resolve().parents[2]


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def drain(reader: Any, q: FIFOQueue, n: int = 1000) -> list[Any]:
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


def unzstd(data: bytes) -> bytes:
    """Decompress every frame of ``data`` with zstandard alone (the reference)."""
    out, rest = [], data
    while rest:
        d = zstandard.ZstdDecompressor().decompressobj()
        out.append(d.decompress(rest))
        assert d.eof, "the stream ends inside a frame"
        rest = d.unused_data
    return b"".join(out)


RECORDS = [b"", b"a", os.urandom(100), b"x" * 70_000, os.urandom(5000) * 3]


# ------------------------------------------------------------------ TFRecord


@needs_zstd
def test_tfrecord_zstd_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "a.tfrecord.zst"
    with TFRecordWriter(p, "ZSTD") as w:
        w.write_many(RECORDS)
    assert p.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    with TFRecordReader(options="ZSTD") as r:
        keys, values = r.read_up_to(closed_queue(p), 100)
    assert values.tolist() == RECORDS
    # Keys are offsets in the decompressed stream (R13).
    offsets, pos = [], 0
    for rec in RECORDS:
        offsets.append(pos)
        pos += 16 + len(rec)
    assert keys.tolist() == [f"{p}:{o}".encode() for o in offsets]
    assert list(tf_record_iterator(p, TFRecordOptions(compression_type="ZSTD"))) == RECORDS


@needs_zstd
def test_zstd_output_is_the_plain_tfrecord_file_compressed(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.tfrecord", tmp_path / "a.tfrecord.zst"
    with TFRecordWriter(plain) as w:
        w.write_many(RECORDS)
    opts = TFRecordOptions(compression_type="ZSTD", compression_level=19)
    with TFRecordWriter(packed, opts) as w:
        for r in RECORDS:
            w.write(r)
    assert unzstd(packed.read_bytes()) == plain.read_bytes()


@needs_zstd
def test_tensorflow_reads_the_decompressed_zstd_output(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    packed = tmp_path / "a.tfrecord.zst"
    with TFRecordWriter(packed, "ZSTD") as w:
        w.write_many(RECORDS)
    plain = tmp_path / "from-zstd.tfrecord"
    plain.write_bytes(unzstd(packed.read_bytes()))
    got = [t.numpy() for t in tf.data.TFRecordDataset(str(plain))]
    assert got == RECORDS


@needs_zstd
def test_reads_zstd_made_by_another_compressor_frames_chained(tmp_path: Path) -> None:
    plain = tmp_path / "a.tfrecord"
    with TFRecordWriter(plain) as w:
        w.write_many(RECORDS)
    data = plain.read_bytes()
    cut = 16 + 16 + 1  # frames split inside the records
    skippable = struct.pack("<II", 0x184D2A5E, 4) + b"meta"
    packed = tmp_path / "cat.tfrecord.zst"
    packed.write_bytes(
        zstandard.ZstdCompressor(level=1).compress(data[:cut])
        + skippable
        + zstandard.ZstdCompressor(level=5, write_checksum=True, write_content_size=False)
        .compress(data[cut:])
    )
    assert drain(TFRecordReader(options="ZSTD"), closed_queue(packed)) == RECORDS


@needs_zstd
def test_flush_makes_the_records_so_far_readable(tmp_path: Path) -> None:
    p = tmp_path / "f.tfrecord.zst"
    w = TFRecordWriter(p, "ZSTD")
    try:
        w.write_many(RECORDS[:3])
        w.flush()
        d = zstandard.ZstdDecompressor().decompressobj()
        flushed = d.decompress(p.read_bytes())
        assert not d.eof  # the frame goes on
        plain = tmp_path / "p.tfrecord"
        with TFRecordWriter(plain) as pw:
            pw.write_many(RECORDS[:3])
        assert flushed == plain.read_bytes()
        w.write_many(RECORDS[3:])
    finally:
        w.close()
    assert drain(TFRecordReader(options="ZSTD"), closed_queue(p)) == RECORDS


@needs_zstd
def test_a_reader_for_zstd_reads_ahead_in_a_feedq_thread(tmp_path: Path) -> None:
    p = tmp_path / "t.tfrecord.zst"
    with TFRecordWriter(p, "ZSTD") as w:
        w.write_many([os.urandom(1000) for _ in range(3000)])
    before = set(threading.enumerate())
    with TFRecordReader(options="ZSTD", block_bytes=1 << 16) as r:
        r.read(closed_queue(p))  # ~3 MB: the thread waits with the next chunks
        started = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        assert started == [f"feedq-inflate:{p.name}"]
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


# ------------------------------------------------------------- text, fixed


@needs_zstd
def test_text_and_fixed_length_zstd(tmp_path: Path) -> None:
    lines = [b"line %d" % i for i in range(50_000)]
    text = b"\n".join(lines) + b"\n"
    p = tmp_path / "t.txt.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(text))
    assert drain(TextLineReader(compression="ZSTD"), closed_queue(p), 4096) == lines
    f = tmp_path / "f.bin.zst"
    f.write_bytes(zstandard.ZstdCompressor().compress(b"HD" + b"".join(lines) + b"F"))
    reader = FixedLengthRecordReader(6, header_bytes=2, footer_bytes=1, encoding="ZSTD")
    got = drain(reader, closed_queue(f), 4096)
    assert b"".join(got) == b"".join(lines)[: len(got) * 6] and len(got) == len(b"".join(lines)) // 6


# ----------------------------------------------------------------- bad data


def _lines_file(tmp_path: Path) -> tuple[list[bytes], bytes]:
    # Incompressible lines: many zstd blocks, so a cut falls between blocks.
    lines = [os.urandom(40).hex().encode() for _ in range(20_000)]
    return lines, zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n")


@needs_zstd
def test_truncated_zstd_is_data_loss_after_the_good_lines(tmp_path: Path) -> None:
    lines, packed = _lines_file(tmp_path)
    p = tmp_path / "cut.txt.zst"
    p.write_bytes(packed[: len(packed) // 2])
    nxt = tmp_path / "next.txt.zst"
    nxt.write_bytes(zstandard.ZstdCompressor().compress(b"next\n"))
    out = drain(TextLineReader(compression="ZSTD"), closed_queue(p, nxt), 500)
    good = out[:-2]
    assert good == lines[: len(good)] and len(good) > len(lines) // 4
    assert out[-2] == ("ERR", f"{p}: truncated ZSTD stream at compressed offset {len(packed) // 2}")
    assert out[-1] == b"next"


@needs_zstd
def test_garbage_after_a_zstd_frame_is_data_loss_after_every_line(tmp_path: Path) -> None:
    lines, packed = _lines_file(tmp_path)
    p = tmp_path / "junk.txt.zst"
    p.write_bytes(packed + b"not zstd at all")
    out = drain(TextLineReader(compression="ZSTD"), closed_queue(p), 4096)
    assert out[:-1] == lines
    assert out[-1] == (
        "ERR",
        (
            f"{p}: ZSTD decompression failed at compressed offset {len(packed)}: "
            "unknown frame magic 0x20746f6e (is this a ZSTD file?)"
        ),
    )


@needs_zstd
def test_a_plain_file_read_as_zstd(tmp_path: Path) -> None:
    p = tmp_path / "plain.tfrecord"
    with TFRecordWriter(p) as w:
        w.write(b"abc")
    out = drain(TFRecordReader(options="ZSTD"), closed_queue(p))
    assert len(out) == 1 and out[0][0] == "ERR"
    assert out[0][1].startswith(f"{p}: ZSTD decompression failed at compressed offset 0: ")
    assert out[0][1].endswith("(is this a ZSTD file?)")


@needs_zstd
def test_corrupt_zstd_block_is_data_loss(tmp_path: Path) -> None:
    lines, _ = _lines_file(tmp_path)
    bad = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(
        b"\n".join(lines) + b"\n"))
    bad[len(bad) // 2] ^= 0xFF
    p = tmp_path / "bad.txt.zst"
    p.write_bytes(bytes(bad))
    out = drain(TextLineReader(compression="ZSTD"), closed_queue(p), 4096)
    assert out[-1][0] == "ERR"
    assert out[-1][1].startswith(f"{p}: ZSTD decompression failed at compressed offset ")
    # Like GZIP's CRC, zstd's checksum is checked at the end of the frame:
    # the lines before the damaged block are intact, and the error is raised.
    quarter = len(lines) // 4
    assert out[:quarter] == lines[:quarter]


def _rle_bomb(nblocks: int) -> bytes:
    """A zstd frame of ``nblocks`` RLE blocks: 4 bytes each, 128 KiB each decompressed."""
    head = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])  # no size, 128 KiB window
    block = ((131072 << 3) | (1 << 1)).to_bytes(3, "little") + b"\0"
    last = ((131072 << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\0"
    return head + block * (nblocks - 1) + last


@needs_zstd
def test_a_decompression_bomb_is_read_in_bounded_chunks(tmp_path: Path) -> None:
    p = tmp_path / "bomb.zst"
    p.write_bytes(_rle_bomb(8192))  # 32 KiB that decompress to 1 GiB
    tracemalloc.start()
    try:
        s = open_stream(p, "ZSTD")
        try:
            for _ in range(8):
                assert s.read(1 << 20) == b"\0" * (1 << 20)
        finally:
            s.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # a few chunks, not the gigabyte one zstd call would make


# --------------------------------------------------------- missing package


def test_without_zstandard_a_clear_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails
    msg = r'^ZSTD compression needs the zstandard package, which is not installed: pip install "feedq\[zstd\]"$'
    with pytest.raises(MissingExtraError, match=msg) as info:  # the one error for extras
        TFRecordReader(options="ZSTD")
    assert info.value.name == "zstandard"  # ImportError.name: the missing module
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ImportError)  # the failed import, kept
    with pytest.raises(UnimplementedError, match=msg):  # what it raised before, still
        TFRecordReader(options="ZSTD")
    with pytest.raises(UnimplementedError, match=msg):
        TFRecordWriter(tmp_path / "x.zst", "ZSTD")
    with pytest.raises(NotImplementedError, match=msg):  # also a NotImplementedError
        TextLineReader(compression="zstd")
    with pytest.raises(UnimplementedError, match=msg):
        FixedLengthRecordReader(4, encoding="ZSTD")
    assert not (tmp_path / "x.zst").exists()  # nothing created before the error
    # Other compressions do not need it.
    with TFRecordWriter(tmp_path / "g.gz", "GZIP") as w:
        w.write(b"ok")
    assert drain(TFRecordReader(options="GZIP"), closed_queue(tmp_path / "g.gz")) == [b"ok"]


def test_the_zstd_extra_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    assert extras["zstd"] == ["zstandard>=0.22"]
    assert any("zstd" in dep and dep.startswith("feedq[") for dep in extras["dev"])


# -------------------------------------------------------------------- pipes


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@needs_zstd
def test_zstd_tfrecords_from_a_named_pipe(tmp_path: Path) -> None:
    from tests.conftest import Bg

    src = tmp_path / "src.tfrecord.zst"
    with TFRecordWriter(src, "ZSTD") as w:
        w.write_many(RECORDS)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = src.read_bytes()

    def write() -> None:
        fd = os.open(fifo, os.O_WRONLY)
        try:
            os.write(fd, data[:7])
            os.write(fd, data[7:])
        finally:
            os.close(fd)

    w_call = Bg(write, name="fifo-writer")
    call = Bg(drain, TFRecordReader(options="ZSTD"), closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == RECORDS
    w_call.result()
