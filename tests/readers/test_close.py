"""Closing readers (STYLE 6): ``close()`` frees the file and ends the
read-ahead thread now; the reader keeps its place and reopens on the next read.

A pipeline stopped while a reader was mid-file used to leave its
``feedq-inflate:<file>`` thread and file descriptor alive for as long as the
reader object lived.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedq.errors import NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
)
from feedq.readers._io import open_stream

pytestmark = pytest.mark.timeout(30)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def inflate_threads(path: Path) -> list[str]:
    """The read-ahead threads of files named like ``path``."""
    name = f"feedq-inflate:{path.name}"
    return [t.name for t in threading.enumerate() if t.name == name and t.is_alive()]


def open_fds(path: Path) -> int:
    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):  # pragma: no cover - Linux only
        pytest.skip("needs /proc/self/fd")
    n = 0
    for fd in os.listdir(fd_dir):
        try:
            n += os.readlink(os.path.join(fd_dir, fd)) == str(path)
        except OSError:
            pass
    return n


def big_gzip_tfrecord(path: Path, n: int = 60_000) -> list[bytes]:
    # ~13 MB decompressed: the read-ahead thread is still at work (waiting
    # for room) after the first 4 MiB block.
    recs = [b"%010d" % i * 20 for i in range(n)]
    with TFRecordWriter(path, "GZIP") as w:
        w.write_many(recs)
    return recs


def test_close_mid_file_ends_the_inflate_thread_and_frees_the_file(tmp_path: Path) -> None:
    p = tmp_path / "close-test.tfr.gz"
    big_gzip_tfrecord(p)
    r = TFRecordReader(options="GZIP")
    r.read_up_to(closed_queue(p), 64)
    assert inflate_threads(p) == ["feedq-inflate:close-test.tfr.gz"]
    assert open_fds(p) == 1
    r.close()
    assert inflate_threads(p) == []  # ended when close() returned, no polling
    assert open_fds(p) == 0
    r.close()  # idempotent


def test_leaving_a_with_block_closes_the_reader(tmp_path: Path) -> None:
    p = tmp_path / "close-test.tfr.gz"
    big_gzip_tfrecord(p)
    with TFRecordReader(options="GZIP") as r:
        r.read(closed_queue(p))
        assert inflate_threads(p)
    assert inflate_threads(p) == [] and open_fds(p) == 0


def test_a_closed_reader_reopens_at_the_next_record(tmp_path: Path) -> None:
    p = tmp_path / "close-test.tfr.gz"
    recs = big_gzip_tfrecord(p)
    q = closed_queue(p)
    r = TFRecordReader(options="GZIP")
    keys, values = r.read_up_to(q, 1000)
    state = r.state_dict()
    r.close()
    assert r.state_dict() == state  # the place is kept
    got = values.tolist()
    last_key = keys[-1]
    keys, values = r.read_up_to(q, 10)
    assert int(keys[0].rsplit(b":", 1)[1]) == int(last_key.rsplit(b":", 1)[1]) + 216
    got += values.tolist()
    while True:
        try:
            got += r.read_up_to(q, 5000)[1].tolist()
        except OutOfRangeError:
            break
    assert got == recs  # nothing lost, nothing twice
    assert r.num_records_produced() == len(recs)
    assert r.num_work_units_completed() == 1
    r.close()


def _text(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    p = tmp_path / "a.txt"
    p.write_bytes(b"head\n" + b"".join(b"line%d\n" % i for i in range(300)))
    return p, lambda: TextLineReader(skip_header_lines=1, block_bytes=256)


def _text_gz(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    import gzip

    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"".join(b"line%d\n" % i for i in range(300))))
    return p, lambda: TextLineReader(compression="GZIP", block_bytes=256)


def _tfr(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    p = tmp_path / "a.tfr"
    with TFRecordWriter(p) as w:
        w.write_many([b"r%d" % i for i in range(300)])
    return p, lambda: TFRecordReader(block_bytes=256)


def _fixed_zlib(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    import zlib

    p = tmp_path / "a.bin.z"
    p.write_bytes(zlib.compress(b"H" + bytes(range(256)) * 3 + b"FF"))
    return p, lambda: FixedLengthRecordReader(3, 1, 2, 5, encoding="ZLIB", block_bytes=64)


def _parquet(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": np.arange(300)}), p, row_group_size=50)
    return p, lambda: ParquetReader()


@pytest.mark.parametrize("make", [_text, _text_gz, _tfr, _fixed_zlib, _parquet])
@pytest.mark.parametrize("stop", [1, 37, 150])
def test_close_and_read_on_equals_an_uninterrupted_read(
    tmp_path: Path, make: Callable[[Path], tuple[Path, Callable[[], Any]]], stop: int
) -> None:
    p, new = make(tmp_path)

    def take(r: Any, q: FIFOQueue, n: int) -> list[Any]:
        keys = r.read_up_to(q, n)[0]
        return keys.tolist()

    def rest(r: Any, q: FIFOQueue) -> list[Any]:
        out: list[Any] = []
        while True:
            try:
                out += take(r, q, 7)
            except OutOfRangeError:
                return out

    with new() as ref:
        expect = rest(ref, closed_queue(p))
    r = new()
    q = closed_queue(p)
    got = []
    while len(got) < stop:
        got += take(r, q, stop - len(got))
    r.close()
    assert open_fds(p) == 0
    got += rest(r, q)
    r.close()
    assert got == expect
    assert r.num_records_produced() == len(expect)
    assert r.num_work_units_completed() == 1


def test_a_file_removed_while_closed_is_reported_once(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_bytes(b"1\n2\n3\n")
    nxt = tmp_path / "b.txt"
    nxt.write_bytes(b"4\n")
    q = closed_queue(p, nxt)
    r = TextLineReader()
    assert r.read(q)[1] == b"1"
    r.close()
    p.unlink()
    with pytest.raises(NotFoundError, match=rf"^{p}; No such file or directory$"):
        r.read(q)
    assert r.read(q)[1] == b"4"  # moved on (R8)
    r.close()


def test_close_keeps_an_error_still_to_report(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"a\nb\nc\n") + b"\x1f\x8b\x08\x00garbage")
    q = closed_queue(p)
    r = TextLineReader(compression="GZIP")
    assert r.read_up_to(q, 2)[1].tolist() == [b"a", b"b"]
    r.close()
    assert r.read_up_to(q, 10)[1].tolist() == [b"c"]
    from feedq.errors import DataLossError

    with pytest.raises(DataLossError, match=rf"^{p}: truncated GZIP stream"):
        r.read(q)
    with pytest.raises(OutOfRangeError):
        r.read(q)
    r.close()


def test_closing_a_stream_with_a_full_read_ahead_ends_its_thread(tmp_path: Path) -> None:
    p = tmp_path / "close-test.tfr.gz"
    big_gzip_tfrecord(p)
    s = open_stream(p, "GZIP")
    s.read(1)
    assert inflate_threads(p)  # decompressing ahead, then waiting for room
    s.close()
    assert inflate_threads(p) == [] and s.closed
