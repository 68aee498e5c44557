"""Readers over files that are not regular files (project issue 10).

A named pipe or a ``/proc`` file reports ``st_size == 0``: readers that took
the size from ``stat`` read them as empty, with no error, and opening a FIFO
that had no writer blocked in ``open()`` forever, whatever the timeout. Now
they are streamed to their end, and every wait for a pipe is bounded by the
call's ``timeout`` and by ``close()``.
"""

from __future__ import annotations

import gzip
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from feedq.errors import CancelledError, DataLossError, DeadlineExceededError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    WholeFileReader,
)
from tests.conftest import Bg

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes"),
]


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


class TakenQueue:
    """A filename queue of one name that says when a reader has taken it."""

    def __init__(self, name: str | Path) -> None:
        self._name: str | None = str(name)
        self.taken = threading.Event()

    def dequeue(self, timeout: float | None = None) -> str:
        if self._name is None:
            raise OutOfRangeError("no more names")
        name, self._name = self._name, None
        self.taken.set()
        return name


def unblock(path: Path) -> None:
    """Open the FIFO's write end and close it: wakes a reader stuck in ``open()``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader has it open: nothing is stuck
        return
    os.close(fd)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    p = tmp_path / "pipe"
    os.mkfifo(p)
    yield p
    unblock(p)  # never leave a reader (old code) blocked in open()


def writer(path: Path, *chunks: bytes, go: threading.Event | None = None) -> Bg:
    """Write ``chunks`` into the FIFO from a thread (after ``go`` for all but the first)."""

    def run() -> None:
        fd = os.open(path, os.O_WRONLY)  # waits for the reader to open its end
        try:
            for i, c in enumerate(chunks):
                if i == 1 and go is not None:
                    assert go.wait(10), "the test never let the writer go on"
                os.write(fd, c)
        finally:
            os.close(fd)

    return Bg(run, name="fifo-writer")


def drain(reader: Any, q: Any, n: int = 100, timeout: float = 10.0) -> list[Any]:
    out: list[Any] = []
    with reader:
        while True:
            try:
                out += reader.read_up_to(q, n, timeout=timeout)[1].tolist()
            except OutOfRangeError:
                return out


# ------------------------------------------------------ pipes fed by a writer


def test_text_lines_from_a_named_pipe(fifo: Path, tmp_path: Path) -> None:
    w = writer(fifo, b"one\ntwo\r\n", b"three")
    nxt = tmp_path / "next.txt"
    nxt.write_bytes(b"after\n")
    reader = TextLineReader()
    call = Bg(drain, reader, closed_queue(fifo, nxt), name="drain")
    assert call.result(timeout=10) == [b"one", b"two", b"three", b"after"]
    w.result()
    assert reader.num_work_units_completed() == 2


def test_text_keys_and_header_lines_from_a_named_pipe(fifo: Path) -> None:
    w = writer(fifo, b"hdr\na\nb\n")
    with TextLineReader(skip_header_lines=1) as r:
        call = Bg(r.read_up_to, closed_queue(fifo), 10, timeout=10, name="read")
        keys, values = call.result(timeout=10)
    w.result()
    assert values.tolist() == [b"a", b"b"]
    assert keys.tolist() == [f"{fifo}:2".encode(), f"{fifo}:3".encode()]


def test_tfrecords_from_a_named_pipe(fifo: Path, tmp_path: Path) -> None:
    recs = [b"", b"x" * 10, os.urandom(70_000), b"end"]
    src = tmp_path / "src.tfrecord"
    with TFRecordWriter(src) as tw:
        tw.write_many(recs)
    data = src.read_bytes()
    w = writer(fifo, data[:100], data[100:])  # a record split across writes
    call = Bg(drain, TFRecordReader(), closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == recs
    w.result()


def test_gzip_tfrecords_from_a_named_pipe(fifo: Path, tmp_path: Path) -> None:
    recs = [os.urandom(1000) for _ in range(300)]
    src = tmp_path / "src.tfrecord.gz"
    with TFRecordWriter(src, "GZIP") as tw:
        tw.write_many(recs)
    w = writer(fifo, src.read_bytes())
    call = Bg(drain, TFRecordReader(options="GZIP"), closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == recs
    w.result()


def test_a_hostile_length_in_a_pipe_is_bounded_by_max_record_bytes(fifo: Path) -> None:
    # No file size to compare the length with: max_record_bytes bounds it.
    head = struct.pack("<Q", 1 << 40)
    from feedq.readers import masked_crc32c

    w = writer(fifo, head + struct.pack("<I", masked_crc32c(head)) + b"\0" * 64)
    call = Bg(drain, TFRecordReader(max_record_bytes=1 << 20), closed_queue(fifo), name="drain")
    with pytest.raises(DataLossError, match=r"exceeds max_record_bytes=1048576"):
        call.result(timeout=10)
    w.result()


def test_fixed_length_records_from_a_named_pipe(fifo: Path) -> None:
    body = b"".join(b"%04d" % i for i in range(1000))
    w = writer(fifo, b"HDR" + body[:1001], body[1001:] + b"FT")
    reader = FixedLengthRecordReader(4, header_bytes=3, footer_bytes=2, block_bytes=256)
    call = Bg(drain, reader, closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == [b"%04d" % i for i in range(1000)]
    w.result()


def test_fixed_length_hops_past_the_buffer_in_a_named_pipe(fifo: Path) -> None:
    data = bytes(range(200))
    w = writer(fifo, data[:50], data[50:])
    reader = FixedLengthRecordReader(2, hop_bytes=7, block_bytes=16)
    call = Bg(drain, reader, closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == [data[i : i + 2] for i in range(0, 199, 7)]
    w.result()


def test_a_short_fixed_length_pipe_is_data_loss(fifo: Path) -> None:
    w = writer(fifo, b"ab")
    reader = FixedLengthRecordReader(4, header_bytes=3)
    call = Bg(drain, reader, closed_queue(fifo), name="drain")
    with pytest.raises(DataLossError, match=r"file of 2 bytes is shorter than header_bytes=3"):
        call.result(timeout=10)
    w.result()


def test_whole_file_from_a_named_pipe(fifo: Path) -> None:
    data = os.urandom(200_000)
    w = writer(fifo, data[:1000], data[1000:])
    call = Bg(drain, WholeFileReader(), closed_queue(fifo), name="drain")
    assert call.result(timeout=10) == [data]
    w.result()


# ------------------------------------------------------------- /proc files


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/status"), reason="needs Linux /proc"
)


def _status_fields(lines: list[bytes]) -> list[bytes]:
    return [ln.split(b":", 1)[0] for ln in lines]


@needs_proc
def test_proc_self_status_lines() -> None:
    with open("/proc/self/status", "rb") as f:
        want = f.read().splitlines()
    assert os.stat("/proc/self/status").st_size == 0  # the reason it read as empty
    got = drain(TextLineReader(), closed_queue("/proc/self/status"))
    # Values (memory, times) move between two reads; the fields do not.
    assert _status_fields(got) == _status_fields(want)
    assert got[0].startswith(b"Name:")


@needs_proc
def test_proc_files_whole_and_fixed() -> None:
    (whole,) = drain(WholeFileReader(), closed_queue("/proc/self/status"))
    assert whole.startswith(b"Name:") and whole.endswith(b"\n")
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read()
    recs = drain(FixedLengthRecordReader(1), closed_queue("/proc/self/cmdline"), n=4096)
    assert b"".join(recs) == cmdline and len(recs) == len(cmdline) > 0


# ------------------------------------------------ waits: timeout and close()


def test_a_pipe_with_no_writer_times_out_within_the_timeout(fifo: Path) -> None:
    reader = TextLineReader()
    start = time.monotonic()
    call = Bg(reader.read, closed_queue(fifo), timeout=0.3, name="read")
    try:
        with pytest.raises(DeadlineExceededError, match=r"no data within the timeout"):
            call.result(timeout=5)
        assert time.monotonic() - start < 3.0  # 0.3 s plus scheduling, not forever
    finally:
        reader.close()


def test_timeout_zero_does_not_wait_for_a_pipe(fifo: Path) -> None:
    with TextLineReader() as reader:
        call = Bg(reader.read, closed_queue(fifo), timeout=0, name="read")
        with pytest.raises(DeadlineExceededError):
            call.result(timeout=5)


def test_after_a_timeout_the_same_reader_reads_the_pipe_from_its_start(fifo: Path) -> None:
    reader = TextLineReader()
    q = closed_queue(fifo)
    with pytest.raises(DeadlineExceededError):
        Bg(reader.read, q, timeout=0.2, name="read").result(timeout=5)
    # The FIFO stayed open: a writer now connects to this reader.
    w = writer(fifo, b"a\nb\n")
    assert Bg(drain, reader, q, name="drain").result(timeout=10) == [b"a", b"b"]
    w.result()


def test_close_wakes_a_read_waiting_for_a_pipe_and_the_reader_keeps_its_place(
    fifo: Path,
) -> None:
    reader = TextLineReader()
    q = TakenQueue(fifo)
    call = Bg(reader.read, q, name="read")  # no timeout: waits until woken
    assert q.taken.wait(5)  # the reader holds the FIFO's name: it is in read()
    reader.close()
    with pytest.raises(CancelledError, match=r"closed while waiting for data"):
        call.result(timeout=5)
    # Nothing was read from the pipe: the next read reopens it from the start.
    w = writer(fifo, b"first\nsecond\n")
    assert Bg(drain, reader, q, name="drain").result(timeout=10) == [b"first", b"second"]
    w.result()


@pytest.mark.parametrize("make", [
    lambda: TFRecordReader(),
    lambda: FixedLengthRecordReader(4),
    lambda: WholeFileReader(),
    lambda: TextLineReader(compression="GZIP"),
], ids=["tfrecord", "fixed", "whole", "text-gzip"])
def test_every_reader_honours_the_timeout_on_a_pipe_with_no_writer(fifo: Path, make: Any) -> None:
    reader = make()
    try:
        call = Bg(reader.read, closed_queue(fifo), timeout=0.2, name="read")
        with pytest.raises(DeadlineExceededError):
            call.result(timeout=5)
    finally:
        reader.close()


def test_a_slow_writer_gives_the_whole_lines_so_far_then_the_rest(fifo: Path) -> None:
    go = threading.Event()
    w = writer(fifo, b"l1\nl2\nl3\npart", b"ial\nl5\n", go=go)
    reader = TextLineReader()
    q = closed_queue(fifo)
    try:
        # The writer stalls after "part": the complete lines come back at the deadline.
        keys, values = Bg(reader.read_up_to, q, 10, timeout=0.5, name="r1").result(timeout=5)
        assert values.tolist() == [b"l1", b"l2", b"l3"]
        assert keys.tolist() == [f"{fifo}:{i}".encode() for i in (1, 2, 3)]
        with pytest.raises(DeadlineExceededError):  # no whole line buffered
            Bg(reader.read_up_to, q, 10, timeout=0.2, name="r2").result(timeout=5)
        go.set()
        rest = Bg(drain, reader, q, name="drain").result(timeout=10)
        assert rest == [b"partial", b"l5"]  # nothing lost across the timeouts
        w.result()
    finally:
        go.set()
        reader.close()


def test_a_slow_gzip_writer_loses_nothing_across_timeouts(fifo: Path) -> None:
    lines = [b"line %d" % i for i in range(2000)]
    data = gzip.compress(b"\n".join(lines) + b"\n")
    go = threading.Event()
    w = writer(fifo, data[: len(data) // 2], data[len(data) // 2 :], go=go)
    reader = TextLineReader(compression="GZIP")
    q = closed_queue(fifo)
    got: list[bytes] = []
    try:
        while True:
            try:
                got += Bg(reader.read_up_to, q, 50, timeout=0.2, name="r").result(5)[1].tolist()
            except DeadlineExceededError:
                break  # the writer is stalled
        assert got == lines[: len(got)]
        go.set()
        got += Bg(drain, reader, q, name="drain").result(timeout=10)
        assert got == lines
        w.result()
    finally:
        go.set()
        reader.close()


def test_close_in_the_middle_of_a_pipe_drops_it_and_goes_on(fifo: Path, tmp_path: Path) -> None:
    go = threading.Event()
    w = writer(fifo, b"a\nb\n", b"c\n", go=go)
    nxt = tmp_path / "n.txt"
    nxt.write_bytes(b"next\n")
    q = closed_queue(fifo, nxt)
    reader = TextLineReader()
    try:
        assert Bg(reader.read, q, timeout=5, name="r").result(5)[1] == b"a"
        reader.close()  # a pipe cannot be reopened where it was
        go.set()
        w.exception(timeout=5)  # its last write may fail: nobody reads any more
        assert Bg(drain, reader, q, name="drain").result(timeout=10) == [b"next"]
    finally:
        go.set()
        reader.close()


def test_parquet_refuses_a_pipe_instead_of_blocking(fifo: Path) -> None:
    reader = ParquetReader()
    call = Bg(reader.read, closed_queue(fifo), name="read")
    with pytest.raises(DataLossError, match=r"not a regular file"):
        call.result(timeout=5)


def test_a_directory_is_still_data_loss(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    d.mkdir()
    with pytest.raises(DataLossError, match=r"Is a directory"):
        drain(TextLineReader(), closed_queue(d))

