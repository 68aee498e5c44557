"""Byte streams over files: plain, GZIP, ZLIB or ZSTD, with bounded buffers.

The decoders live in ``_inflate``, the pipe side (non-blocking reads bounded
by a :class:`Waiter`) in ``_pipes``; this module puts them together.

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

A URL of a store (``s3://``, ``gs://``, ...: :mod:`feedq.storage`) is read
through a :class:`feedq.storage.RemoteFile`: range requests ahead of the
reader, retried below decompression, so everything above the raw bytes --
decompression, framing, the native core -- is the same as for a local
file. ``file://`` URLs and plain paths are local files.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import weakref
from collections import deque
from typing import Any

from feedq import _native
from feedq.errors import DataLossError, NotFoundError
from feedq.readers._inflate import (
    _INFLATE_CHUNK,
    _ZLIB_INFLATE_CHUNK,
    _Decoder,
    _Inflater,
    _ZstdInflater,
    zstd_module,
)
from feedq.readers._pipes import INTERRUPTS, Waiter, _open_nonblocking, _PollFile
from feedq.storage import RemoteFile, is_remote, local_path, open_remote

__all__ = [
    "INTERRUPTS",
    "ByteStream",
    "Waiter",
    "normalize_compression",
    "open_stream",
    "path_of",
    "zstd_module",
]

logger = logging.getLogger("feedq.readers")

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
    """The filesystem path of a work unit (bytes are decoded with ``os.fsdecode``;
    ``file://`` URLs become paths; other URLs stay as they are)."""
    if is_remote(work_unit):
        return os.fsdecode(work_unit)
    return local_path(work_unit)


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
        #: A regular file's descriptor: read by position (pread), never by its file position.
        self._fd = -1
        if compression == "":
            self.size = size
            if size is not None and not streaming and not isinstance(raw, RemoteFile):
                self._fd = raw.fileno()
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

    def read_after(self, tail: Any, n: int) -> bytes:
        """``tail`` (bytes-like) followed by :meth:`read` ``(n)``, as one new bytes object.

        A regular file's bytes are read straight into it (the native core's
        ``read_window``), so they are copied once, and the tail once; other
        streams join the tail with the pieces they have (one copy).

        Raises:
            As :meth:`read` (when no byte was read).
        """
        self._check()
        if n <= 0 or self._eof:
            return bytes(tail)
        if self._fd < 0:
            return b"".join([tail, *self._read_parts(n)])
        window, got, err = _native.read_window(self._fd, self.offset, tail, n)
        if err:
            exc = self._os_error(OSError(err, os.strerror(err)))
            if not got:
                raise exc
        elif got < n:
            self._eof = True
        self.offset += got
        return window

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
        if self._fd >= 0:
            return self.read_after(b"", n)
        self._check()
        if n <= 0 or self._eof:
            return b""
        parts = self._read_parts(n)
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)

    def _read_parts(self, n: int) -> list[bytes | memoryview]:
        """:meth:`read` of a compressed stream or a pipe, as the pieces it came
        in (the decompressed chunks' bytes are not copied here)."""
        if n <= 0 or self._eof:
            return []
        parts: list[bytes | memoryview] = []
        want = n
        while want > 0:
            if self._inflater is None:
                # A pipe or device: as much as comes, up to n, until its end.
                # (A remote object: n bytes, fewer only at its end or before an error.)
                try:
                    chunk = self._raw.read(want)
                except INTERRUPTS:
                    if not parts:
                        raise
                    break
                except DataLossError as exc:  # a remote read past its retry budget
                    self._error = exc
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
                parts.append(memoryview(self._chunk)[self._chunk_pos : self._chunk_pos + take])
            self._chunk_pos += take
            want -= take
            if self.streaming:
                break  # a pipe: what has come, without waiting for more
        self.offset += sum(len(p) for p in parts)
        return parts

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


def open_stream(
    work_unit: bytes | str, compression: str = "", waiter: Waiter | None = None
) -> ByteStream:
    """Open a work unit for reading.

    Regular files are read with blocking reads (and ``size`` from
    ``st_size`` when it is nonzero); pipes and devices are opened without
    blocking and read in waits bounded by ``waiter`` (a fresh one, with no
    deadline, when None).

    A URL of a store is opened with :func:`feedq.storage.open_remote` (one
    metadata request) and read ahead in range requests.

    Raises:
        NotFoundError: the file does not exist ("<path>; No such file or directory", R8).
        DataLossError: the file cannot be read (a directory, no permission).
        PermissionDeniedError: a store refused to serve a URL.
        UnavailableError: a store could not be reached within the retry budget.
        InvalidArgumentError: a URL with credentials in it.
    """
    if is_remote(work_unit):
        remote = open_remote(work_unit)
        try:
            return ByteStream(remote.name, remote, compression, size=remote.size)
        except BaseException:
            remote.close()
            raise
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
