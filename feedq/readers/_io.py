"""Byte streams over files: plain, GZIP, ZLIB or ZSTD, with bounded buffers.

Every reader reads through :class:`ByteStream`, which knows the offset in the
(decompressed) stream, never returns more than asked (so memory per reader is
bounded by its block size, not the file size) and turns OS and decompression
failures into ``DataLossError`` naming the file and the offset (R8, R14).

A failure is sticky: the bytes decompressed before it are still returned,
then every later ``read`` raises the same error (the reader, not the stream,
decides to report it once and move on).

Files that are not regular files -- named pipes, character devices, and
``/proc``-style files whose ``st_size`` is 0 -- are streamed: no size is
assumed, reads go on to the end of the data. A pipe is opened without
blocking (``O_NONBLOCK``: opening a FIFO with no writer would otherwise hang
in ``open``) and read after ``poll`` says it is readable, in bounded slices
that check the reader's :class:`Waiter` -- the deadline of the call in
progress and the reader's ``close()`` -- so no read of a pipe outlasts the
caller's timeout or a close.
"""

from __future__ import annotations

import logging
import math
import os
import select
import stat
import threading
import time
import weakref
import zlib
from collections import deque
from types import ModuleType
from typing import Any, Protocol

from feedq.errors import (
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    MissingExtraError,
    NotFoundError,
)

__all__ = [
    "ByteStream",
    "Waiter",
    "normalize_compression",
    "open_stream",
    "path_of",
    "zstd_module",
]

logger = logging.getLogger("feedq.readers")

_COMPRESSED_CHUNK = 256 * 1024  # compressed bytes fed to zstd per step
_INFLATE_CHUNK = 1 << 20  # zstd: decompressed bytes per chunk handed over (2 wait at most)
# GZIP/ZLIB inflate in large steps on the read-ahead thread: zlib releases the
# GIL for the whole call, and every step ends by taking the GIL back -- the
# fewer the steps, the fewer waits for a GIL held by the reading thread.
_ZLIB_COMPRESSED_CHUNK = 1 << 20  # compressed bytes read and fed to zlib per step
_ZLIB_INFLATE_CHUNK = 1 << 20  # decompressed bytes per chunk at most (2 wait at most)
#: Longest single wait for a pipe to become readable: a close() or a passed
#: deadline is noticed within this many seconds.
POLL_SLICE = 0.05

#: The exceptions that interrupt a wait for a pipe; the stream stays usable.
INTERRUPTS = (DeadlineExceededError, CancelledError)


def zstd_module() -> ModuleType:
    """The ``zstandard`` package, imported on first use.

    Raises:
        MissingExtraError: it is not installed (the message names the ``zstd``
            extra; also an ``UnimplementedError``, as this raised before).
    """
    try:
        import zstandard
    except ImportError as exc:
        raise MissingExtraError(
            "ZSTD compression needs the zstandard package, which is not installed: "
            'pip install "feedq[zstd]"',
            name="zstandard",
        ) from exc
    return zstandard


def normalize_compression(compression: str | int | None) -> str:
    """Map a compression name (``None``, ``""``, ``"GZIP"``, ``"ZLIB"``, ``"ZSTD"``)
    to ``""``/GZIP/ZLIB/ZSTD.

    Raises:
        ValueError: an unknown name.
        MissingExtraError: ``"ZSTD"`` without the ``zstandard`` package.
    """
    if compression is None:
        return ""
    if isinstance(compression, int):  # TF1's TFRecordCompressionType enum values
        names = {0: "", 1: "ZLIB", 2: "GZIP"}
        if compression in names:
            return names[compression]
    if isinstance(compression, str) and compression.upper() in (
        "",
        "NONE",
        "GZIP",
        "ZLIB",
        "ZSTD",
    ):
        up = compression.upper()
        if up == "ZSTD":
            zstd_module()  # fail now, at construction, with the extra's name
        return "" if up == "NONE" else up
    raise ValueError(f"compression must be '', 'GZIP', 'ZLIB' or 'ZSTD', got {compression!r}")


def path_of(work_unit: bytes | str) -> str:
    """The filesystem path of a work unit (bytes are decoded with ``os.fsdecode``)."""
    return os.fsdecode(work_unit)


class Waiter:
    """What bounds one reader's waits for a pipe: a deadline and ``cancel()``.

    The reader sets ``deadline`` (a ``time.monotonic()`` value, or None for
    no limit) at the start of each call, and calls :meth:`cancel` from
    ``close()`` -- on any thread, without the reader's lock -- to wake a call
    waiting for a pipe. Regular files never wait here.
    """

    def __init__(self) -> None:
        self.deadline: float | None = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Make every wait raise ``CancelledError`` until :meth:`reset`."""
        self._cancelled.set()

    def reset(self) -> None:
        """Undo :meth:`cancel` (the reader is usable again after ``close()``)."""
        self._cancelled.clear()

    def wait_readable(self, poll: Any, name: str) -> None:
        """Wait until ``poll`` (a ``select.poll`` object or an fd) reports data or EOF.

        Raises:
            DeadlineExceededError: the deadline passed first.
            CancelledError: :meth:`cancel` was called.
        """
        while True:
            if self._cancelled.is_set():
                raise CancelledError(f"{name}: the reader was closed while waiting for data")
            wait = POLL_SLICE
            deadline = self.deadline
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            if isinstance(poll, int):  # no select.poll on this platform
                ready = bool(select.select([poll], [], [], wait)[0])
            else:
                ready = bool(poll.poll(math.ceil(wait * 1000)))
            if ready:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceededError(
                    f"{name}: no data within the timeout (a pipe with no writer?)"
                )


class _PollFile:
    """A pipe or device opened non-blocking, read after ``poll`` says it is ready.

    ``read(n)`` waits (bounded by the waiter) until some bytes are there,
    then returns what is there without waiting again: 1..n bytes, ``b""``
    at the end of the data (the last writer closed). An interrupted wait
    raises what the waiter raises, having consumed nothing.
    """

    def __init__(self, raw: Any, name: str, waiter: Waiter) -> None:
        self._raw = raw  # the file object that owns the descriptor
        self._fd: int = raw.fileno()
        self._name = name
        self._waiter = waiter
        self._poll: Any
        if hasattr(select, "poll"):
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN | select.POLLPRI)
        else:  # pragma: no cover - Windows has no FIFOs to open
            self._poll = self._fd
        self._eof = False  # the end was seen after bytes a read returned

    def read(self, n: int) -> bytes:
        if self._eof or n <= 0:
            return b""
        while True:
            self._waiter.wait_readable(self._poll, self._name)
            try:
                first = os.read(self._fd, n)
                break
            except BlockingIOError:  # readable, then drained by someone else
                continue
        if not first or len(first) == n:
            return first
        # Take what else is there now (a fast writer refills the pipe's
        # 64 KiB as we read), without waiting for more.
        parts, got = [first], len(first)
        while got < n:
            try:
                more = os.read(self._fd, n - got)
            except BlockingIOError:
                break
            if not more:
                self._eof = True
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        self._raw.close()


class _Decoder(Protocol):
    """Decompression of one file, produced in chunks of at most ``n`` bytes."""

    name: str

    def produce(self, n: int) -> bytes: ...


class _Inflater:
    """zlib decompression of one file, produced in chunks (GZIP members chained)."""

    def __init__(self, name: str, raw: Any, compression: str) -> None:
        self.name = name
        self._raw = raw
        self.compression = compression
        self._wbits = 31 if compression == "GZIP" else 15  # TF's ZlibCompressionOptions
        self._dec = zlib.decompressobj(self._wbits)
        self._pending = b""  # compressed input not yet given to zlib
        self._raw_offset = 0
        self._done = False

    def _read_raw(self) -> bytes:
        try:
            data: bytes = self._raw.read(_ZLIB_COMPRESSED_CHUNK)
        except INTERRUPTS:  # a TimeoutError is an OSError too: not a read error
            raise
        except OSError as exc:  # EIO and friends: the module's promise (R14)
            raise DataLossError(
                f"{self.name}: read failed at compressed offset {self._raw_offset}: "
                f"{exc.strerror or exc}"
            ) from None
        self._raw_offset += len(data)
        return data

    def produce(self, n: int) -> bytes:
        """Up to ``n`` decompressed bytes; ``b""`` only at the end of the stream.

        Raises:
            DataLossError: corrupt, truncated or trailing data, or an OS read error.
        """
        while not self._done:
            if self._dec.eof:
                # Concatenated GZIP members (as `cat a.gz b.gz` makes) continue the stream.
                rest = self._dec.unused_data + self._pending
                self._pending = b""
                if not rest:
                    rest = self._read_raw()
                if not rest:
                    self._done = True
                    break
                if self.compression != "GZIP":
                    raise DataLossError(
                        f"{self.name}: trailing bytes after the {self.compression} stream "
                        f"at compressed offset {self._raw_offset - len(rest)}"
                    )
                self._dec = zlib.decompressobj(self._wbits)
                self._pending = rest
                continue
            if self._dec.unconsumed_tail:
                src = self._dec.unconsumed_tail
            else:
                if not self._pending:
                    self._pending = self._read_raw()
                    if not self._pending:
                        raise DataLossError(
                            f"{self.name}: truncated {self.compression} stream at compressed "
                            f"offset {self._raw_offset}"
                        )
                src, self._pending = self._pending, b""
            try:
                out = self._dec.decompress(src, n)
            except zlib.error as exc:
                raise DataLossError(
                    f"{self.name}: inflate() failed with {exc} (is this a "
                    f"{self.compression} file?)"
                ) from None
            if out:
                return out
        return b""


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024  # the most one zstd block decompresses to (RFC 8878)
_MAGIC, _SKIP_LEN, _FRAME_HEADER, _BLOCK = range(4)
_HEADER_BYTES = {_MAGIC: 4, _SKIP_LEN: 4, _FRAME_HEADER: 1, _BLOCK: 3}


class _ZstdWalker:
    """Follows the frame and block headers of a zstd stream (RFC 8878) without decoding.

    The decoder feeds zstd a few whole blocks at a time, so the output of one
    call stays bounded (a block decompresses to at most 128 KiB, while a few
    compressed bytes can expand to gigabytes), and asks whether the stream
    ended between frames (else it was truncated).
    """

    def __init__(self) -> None:
        self._state = _MAGIC  # the header to read next
        self._head = b""  # its bytes collected so far
        self._skip = 0  # bytes to pass over before it
        self._end_block = False  # passing the skip ends a block
        self._end_frame = False  # passing the skip ends a frame
        self._checksum = False  # the current frame ends with a 4-byte checksum
        self.bad: str | None = None  # why the bytes cannot be a zstd stream

    @property
    def at_frame_boundary(self) -> bool:
        """True between frames (or before the first): a clean place for the data to end."""
        return (
            self._state == _MAGIC
            and not self._head
            and not self._skip
            and not (self._end_block or self._end_frame)
        )

    def walk(self, data: bytes, max_blocks: int) -> tuple[int, bool]:
        """Walk ``data`` up to ``max_blocks`` block ends, a frame end, or its end.

        Returns:
            ``(bytes walked, True when they end a frame)``; stops early with
            ``bad`` set at bytes that cannot be a zstd stream.
        """
        i, n, blocks = 0, len(data), 0
        while True:
            if self._skip:
                k = min(self._skip, n - i)
                self._skip -= k
                i += k
                if self._skip:
                    return i, False
            if self._end_block or self._end_frame:
                blocks += self._end_block
                frame = self._end_frame
                self._end_block = self._end_frame = False
                if frame:
                    return i, True
                if blocks >= max_blocks:
                    return i, False
            if i >= n:
                return i, False
            size = _HEADER_BYTES[self._state]
            take = data[i : i + size - len(self._head)]
            self._head += take
            i += len(take)
            if len(self._head) < size:
                return i, False
            self._parse()
            if self.bad is not None:
                return i, False

    def _parse(self) -> None:
        # A whole header: what to pass over next, and which header follows.
        head, state = self._head, self._state
        self._head = b""
        if state == _MAGIC:
            magic = int.from_bytes(head, "little")
            if magic == _ZSTD_MAGIC:
                self._state = _FRAME_HEADER
            elif magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
                self._state = _SKIP_LEN
            else:
                self.bad = f"unknown frame magic {magic:#010x} (is this a ZSTD file?)"
        elif state == _SKIP_LEN:
            self._skip = int.from_bytes(head, "little")
            self._state, self._end_frame = _MAGIC, True
        elif state == _FRAME_HEADER:
            d = head[0]
            if d & 0x08:
                self.bad = "reserved bit set in a frame header"
                return
            single = (d >> 5) & 1
            self._checksum = bool((d >> 2) & 1)
            self._skip = (0 if single else 1) + (0, 1, 2, 4)[d & 3] + (single, 2, 4, 8)[d >> 6]
            self._state = _BLOCK
        else:
            v = int.from_bytes(head, "little")
            last, kind, size = v & 1, (v >> 1) & 3, v >> 3
            if kind == 3:
                self.bad = "reserved block type"
                return
            self._skip = (1 if kind == 1 else size) + (4 if last and self._checksum else 0)
            self._state = _MAGIC if last else _BLOCK
            self._end_block, self._end_frame = True, bool(last)


class _ZstdInflater:
    """ZSTD decompression of one file, produced in bounded chunks (frames chained).

    zstd's ``decompressobj`` has no output limit, so compressed input is fed
    a few blocks at a time (:class:`_ZstdWalker`): one step produces about
    ``n`` bytes at most (whole blocks of at most 128 KiB each), whatever a
    hostile file claims -- 32 KiB of RLE blocks would otherwise expand to
    1 GiB in one call. Concatenated frames (as ``cat a.zst b.zst`` makes) continue
    the stream; skippable frames are passed over; a stream that ends inside
    a frame is truncated.
    """

    def __init__(self, name: str, raw: Any) -> None:
        self.name = name
        self.compression = "ZSTD"
        self._zstd = zstd_module()
        self._raw = raw
        self._walker = _ZstdWalker()
        self._dec: Any = None  # the decompressobj of the current frame
        self._pending = b""  # compressed input not yet given to zstd
        self._raw_offset = 0  # compressed bytes read
        self._fed = 0  # compressed bytes given to zstd
        self._out = b""  # decompressed bytes beyond what the last call asked for
        self._done = False

    def _read_raw(self) -> bytes:
        try:
            data: bytes = self._raw.read(_COMPRESSED_CHUNK)
        except INTERRUPTS:  # a TimeoutError is an OSError too: not a read error
            raise
        except OSError as exc:
            raise DataLossError(
                f"{self.name}: read failed at compressed offset {self._raw_offset}: "
                f"{exc.strerror or exc}"
            ) from None
        self._raw_offset += len(data)
        return data

    def _fail(self, why: object) -> DataLossError:
        return DataLossError(
            f"{self.name}: ZSTD decompression failed at compressed offset {self._fed}: {why}"
        )

    def produce(self, n: int) -> bytes:
        """Up to ``n`` decompressed bytes; ``b""`` only at the end of the stream.

        Raises:
            DataLossError: corrupt or truncated data, or an OS read error.
        """
        out = self._out
        while not out and not self._done:
            if not self._pending:
                self._pending = self._read_raw()
                if not self._pending:
                    if not self._walker.at_frame_boundary:
                        raise DataLossError(
                            f"{self.name}: truncated ZSTD stream at compressed offset "
                            f"{self._raw_offset}"
                        )
                    self._done = True
                    break
            walker = self._walker
            k, frame_end = walker.walk(self._pending, max(1, n // _ZSTD_BLOCK_MAX))
            if walker.bad is not None:
                raise self._fail(walker.bad)
            src, self._pending = self._pending[:k], self._pending[k:]
            if self._dec is None:
                self._dec = self._zstd.ZstdDecompressor().decompressobj()
            try:
                out = self._dec.decompress(src)
            except self._zstd.ZstdError as exc:
                raise self._fail(exc) from None
            self._fed += k
            if frame_end:
                if not self._dec.eof:  # the headers said the frame ended here
                    raise self._fail("frame does not end where its blocks say")
                self._dec = None
        self._out = out[n:]
        return out[:n] if len(out) > n else out


class _Prefetcher:
    """Decompresses ahead in a named daemon thread (zlib releases the GIL).

    At most ``depth`` chunks wait, so memory stays bounded. The thread waits
    on ``not_full`` (no polling) and ends promptly on :meth:`close`. The end
    of the stream and an error are both final: every later :meth:`get`
    returns ``b""`` or re-raises the error, instead of waiting for a thread
    that has exited. The thread holds no reference to its ByteStream, so a
    stream dropped without ``close()`` is still collected, and its finalizer
    stops the thread.
    """

    def __init__(self, inflater: _Decoder, chunk: int, depth: int = 2) -> None:
        self._inflater = inflater
        self._chunk = chunk
        self._depth = depth
        self._mutex = threading.Lock()
        # Notified by the thread after it adds a chunk or ends, and by close().
        self._not_empty = threading.Condition(self._mutex)
        # Notified by get() after it takes a chunk, and by close().
        self._not_full = threading.Condition(self._mutex)
        self._items: deque[bytes] = deque()  # guarded by self._mutex
        self._ended = False  # guarded by self._mutex; the thread saw the end
        self._error: BaseException | None = None  # guarded by self._mutex
        self._closed = False  # guarded by self._mutex
        self._thread = threading.Thread(
            target=self._run,
            name=f"feedq-inflate:{os.path.basename(inflater.name)}",
            daemon=True,
        )
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._mutex:
                while len(self._items) >= self._depth and not self._closed:
                    self._not_full.wait()
                if self._closed:
                    return
            try:
                item = self._inflater.produce(self._chunk)  # outside the lock
            except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
                with self._mutex:
                    self._error = exc
                    self._not_empty.notify_all()
                return
            with self._mutex:
                if self._closed:
                    return
                if not item:
                    self._ended = True
                    self._not_empty.notify_all()
                    return
                self._items.append(item)
                self._not_empty.notify()

    def get(self) -> bytes:
        """The next chunk; ``b""`` at (and after) the end of the stream.

        Raises:
            DataLossError: the stream failed (again on every later call).
            ValueError: the prefetcher is closed.
        """
        with self._mutex:
            while not (self._items or self._ended or self._error or self._closed):
                self._not_empty.wait()
            if self._closed:
                raise ValueError(f"{self._inflater.name}: read from a closed stream")
            if self._items:
                item = self._items.popleft()
                self._not_full.notify()
                return item
            if self._error is not None:
                raise self._error
            return b""

    def close(self) -> None:
        """Stop the thread and drop what it decompressed (idempotent)."""
        with self._mutex:
            self._closed = True
            self._items.clear()
            self._not_full.notify_all()
            self._not_empty.notify_all()
        if threading.current_thread() is not self._thread:
            # At most one produce() step (one compressed chunk) to finish.
            self._thread.join(timeout=5.0)
            if self._thread.is_alive():
                logger.warning("thread %s did not stop within 5 s", self._thread.name)


class ByteStream:
    """A forward-only byte stream over one file, plain or decompressed.

    ``offset`` is the position in the decompressed stream. ``size`` is the
    total size when known without reading (regular files with a nonzero
    ``st_size``), else ``None``: pipes, devices and ``/proc``-style files
    are read to their end. Compressed streams of regular files decompress
    ahead in a background thread (``prefetch``), overlapping decompression
    with the caller's decoding: GZIP/ZLIB in steps of 1 MiB of compressed
    input and chunks of up to 1 MiB (zlib runs without the GIL, so the
    reading thread parses while the next chunk inflates), two chunks ahead.

    Errors are sticky: a read that fails after some bytes returns those
    bytes, and the next read raises the ``DataLossError``, as does every read
    after it. Reading a closed stream raises ``ValueError``. A wait for a
    pipe interrupted by the reader's :class:`Waiter` (``DeadlineExceededError``,
    ``CancelledError``) is not an error of the stream: the bytes read before
    it are returned, and a later read goes on where it stopped.
    """

    def __init__(
        self,
        name: str,
        raw: Any,
        compression: str,
        *,
        prefetch: bool = True,
        size: int | None = None,
        streaming: bool = False,
    ) -> None:
        self.name = name
        self._raw = raw
        self.compression = compression
        self.offset = 0
        self._eof = False
        self._error: DataLossError | None = None  # raised by every later read
        self._closed = False
        self.size: int | None = None
        #: True for pipes and devices: reads may wait, and return short before the end.
        self.streaming = streaming
        self._inflater: _Decoder | None = None
        self._chunk_size = 0  # decompressed bytes per chunk
        self._prefetch: _Prefetcher | None = None
        self._chunk = b""
        self._chunk_pos = 0
        if compression == "":
            self.size = size
        else:
            if compression == "ZSTD":
                self._inflater = _ZstdInflater(name, raw)
                self._chunk_size = _INFLATE_CHUNK
            else:
                self._inflater = _Inflater(name, raw, compression)
                self._chunk_size = _ZLIB_INFLATE_CHUNK
            # A pipe is read in the caller's thread, where its waits are bounded.
            if prefetch and not streaming:
                self._prefetch = _Prefetcher(self._inflater, self._chunk_size)
        # A reader dropped mid-file closes its file when collected, quietly.
        self._finalizer = weakref.finalize(self, _close, raw, self._prefetch)

    def _next_chunk(self) -> bytes:
        if self._prefetch is not None:
            return self._prefetch.get()
        assert self._inflater is not None
        return self._inflater.produce(self._chunk_size)

    def _check(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name}: read from a closed stream")
        if self._error is not None:
            raise self._error

    def _os_error(self, exc: OSError) -> DataLossError:
        self._error = DataLossError(
            f"{self.name}: read failed at offset {self.offset}: {exc.strerror or exc}"
        )
        return self._error

    def read(self, n: int) -> bytes:
        """Read up to ``n`` bytes; fewer only at the end of the stream, before
        an error (which the next call raises), or -- from a pipe or device
        (``streaming``) -- when fewer are there: such a read waits for some
        bytes, not for ``n``. ``b""`` only at the end of the stream.

        Raises:
            DataLossError: corrupt or truncated compressed data, or an OS read
                error (naming the file and offset); again on every later call.
            DeadlineExceededError, CancelledError: a wait for a pipe was cut
                short before any byte came (the stream stays usable).
            ValueError: the stream is closed.
        """
        self._check()
        if n <= 0 or self._eof:
            return b""
        if self._inflater is None and not self.streaming:
            try:
                data: bytes = self._raw.read(n)
            except OSError as exc:
                raise self._os_error(exc) from None
            if len(data) < n:
                self._eof = True
            self.offset += len(data)
            return data
        parts: list[bytes] = []
        want = n
        while want > 0:
            if self._inflater is None:
                # A pipe or device: as much as comes, up to n, until its end.
                try:
                    chunk = self._raw.read(want)
                except INTERRUPTS:
                    if not parts:
                        raise
                    break
                except OSError as exc:
                    err = self._os_error(exc)
                    if not parts:
                        raise err from None
                    break
                if not chunk:
                    self._eof = True
                    break
                parts.append(chunk)
                break  # what the pipe had: the caller decides whether to wait for more
            if self._chunk_pos >= len(self._chunk):
                try:
                    chunk = self._next_chunk()
                except INTERRUPTS:
                    if not parts:
                        raise
                    break  # the bytes so far now; the next read waits again
                except DataLossError as exc:
                    self._error = exc
                    if not parts:
                        raise
                    break  # return the good bytes first; the next read raises
                self._chunk = chunk
                self._chunk_pos = 0
                if not self._chunk:
                    self._eof = True
                    break
            take = min(want, len(self._chunk) - self._chunk_pos)
            if self._chunk_pos == 0 and take == len(self._chunk):
                parts.append(self._chunk)
            else:
                parts.append(self._chunk[self._chunk_pos : self._chunk_pos + take])
            self._chunk_pos += take
            want -= take
            if self.streaming:
                break  # a pipe: what has come, without waiting for more
        if not parts:
            return b""
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.offset += len(data)
        return data

    def skip(self, n: int) -> int:
        """Skip ``n`` bytes (seek in regular files of known size, read otherwise).

        Returns:
            The number of bytes skipped (fewer only at the end of the stream).

        Raises:
            DataLossError: as :meth:`read`.
            DeadlineExceededError, CancelledError: as :meth:`read`; ``offset``
                counts the bytes skipped before it.
            ValueError: the stream is closed.
        """
        if self._inflater is None and self.size is not None:
            self._check()
            k = max(0, min(n, self.size - self.offset))
            try:
                self._raw.seek(self.offset + k)
            except OSError as exc:
                raise self._os_error(exc) from None
            self.offset += k
            if k < n:
                self._eof = True
            return k
        done = 0
        while done < n:
            got = len(self.read(min(n - done, 1 << 20)))
            if got == 0:
                break
            done += got
        return done

    @property
    def at_eof(self) -> bool:
        """True once a read has hit the end of the stream."""
        return self._eof

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Stop decompressing ahead and close the underlying file (idempotent).

        The read-ahead thread has ended when this returns.
        """
        self._closed = True
        self._finalizer()


def _close(raw: Any, prefetch: _Prefetcher | None) -> None:
    if prefetch is not None:
        prefetch.close()
    raw.close()


def _open_nonblocking(path: str, flags: int) -> int:
    # Opening a FIFO that has no writer yet must not block (it would ignore
    # every timeout); regular files are unaffected by O_NONBLOCK.
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def open_stream(
    work_unit: bytes | str, compression: str = "", waiter: Waiter | None = None
) -> ByteStream:
    """Open a work unit for reading.

    Regular files are read with blocking reads (and ``size`` from
    ``st_size`` when it is nonzero); pipes and devices are opened without
    blocking and read in waits bounded by ``waiter`` (a fresh one, with no
    deadline, when None).

    Raises:
        NotFoundError: the file does not exist ("<path>; No such file or directory", R8).
        DataLossError: the file cannot be read (a directory, no permission).
    """
    name = path_of(work_unit)
    try:
        raw = open(name, "rb", opener=_open_nonblocking)  # noqa: SIM115 - closed by ByteStream
    except FileNotFoundError:
        raise NotFoundError(f"{name}; No such file or directory") from None
    except OSError as exc:
        raise DataLossError(f"{name}; {exc.strerror or exc}") from None
    try:
        fd = raw.fileno()
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if hasattr(os, "set_blocking"):
                os.set_blocking(fd, True)
            # /proc and sysfs files report 0 bytes: stream them to their end.
            size = st.st_size if st.st_size > 0 else None
            return ByteStream(name, raw, compression, size=size)
        pipe = _PollFile(raw, name, waiter if waiter is not None else Waiter())
        return ByteStream(name, pipe, compression, streaming=True)
    except BaseException:
        raw.close()
        raise
