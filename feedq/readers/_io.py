"""Byte streams over files: plain, GZIP or ZLIB, with bounded buffers.

Every reader reads through :class:`ByteStream`, which knows the offset in the
(decompressed) stream, never returns more than asked (so memory per reader is
bounded by its block size, not the file size) and turns OS and zlib failures
into ``DataLossError`` naming the file and the offset (R8, R14).

A failure is sticky: the bytes decompressed before it are still returned,
then every later ``read`` raises the same error (the reader, not the stream,
decides to report it once and move on).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
import zlib
from collections import deque
from typing import BinaryIO

from feedq.errors import DataLossError, NotFoundError

__all__ = ["ByteStream", "normalize_compression", "open_stream", "path_of"]

logger = logging.getLogger("feedq.readers")

_COMPRESSED_CHUNK = 256 * 1024  # compressed bytes fed to zlib per step
_INFLATE_CHUNK = 1 << 20  # decompressed bytes per chunk handed over (2 wait at most)


def normalize_compression(compression: str | int | None) -> str:
    """Map a TF compression name (``None``, ``""``, ``"GZIP"``, ``"ZLIB"``) to ``""``/GZIP/ZLIB.

    Raises:
        ValueError: an unknown name.
    """
    if compression is None:
        return ""
    if isinstance(compression, int):  # TF1's TFRecordCompressionType enum values
        names = {0: "", 1: "ZLIB", 2: "GZIP"}
        if compression in names:
            return names[compression]
    if isinstance(compression, str) and compression.upper() in ("", "NONE", "GZIP", "ZLIB"):
        up = compression.upper()
        return "" if up == "NONE" else up
    raise ValueError(f"compression must be '', 'GZIP' or 'ZLIB', got {compression!r}")


def path_of(work_unit: bytes | str) -> str:
    """The filesystem path of a work unit (bytes are decoded with ``os.fsdecode``)."""
    return os.fsdecode(work_unit)


class _Inflater:
    """zlib decompression of one file, produced in chunks (GZIP members chained)."""

    def __init__(self, name: str, raw: BinaryIO, compression: str) -> None:
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
            data = self._raw.read(_COMPRESSED_CHUNK)
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

    def __init__(self, inflater: _Inflater, chunk: int, depth: int = 2) -> None:
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
    total size when known without reading (plain files), else ``None``.
    Compressed streams decompress one chunk ahead in a background thread
    (``prefetch``), overlapping zlib with the caller's decoding.

    Errors are sticky: a read that fails after some bytes returns those
    bytes, and the next read raises the ``DataLossError``, as does every read
    after it. Reading a closed stream raises ``ValueError``.
    """

    def __init__(self, name: str, raw: BinaryIO, compression: str, *, prefetch: bool = True) -> None:
        self.name = name
        self._raw = raw
        self.compression = compression
        self.offset = 0
        self._eof = False
        self._error: DataLossError | None = None  # raised by every later read
        self._closed = False
        self.size: int | None = None
        self._inflater: _Inflater | None = None
        self._prefetch: _Prefetcher | None = None
        self._chunk = b""
        self._chunk_pos = 0
        if compression == "":
            self.size = os.fstat(raw.fileno()).st_size
        else:
            self._inflater = _Inflater(name, raw, compression)
            if prefetch:
                self._prefetch = _Prefetcher(self._inflater, _INFLATE_CHUNK)
        # A reader dropped mid-file closes its file when collected, quietly.
        self._finalizer = weakref.finalize(self, _close, raw, self._prefetch)

    def _next_chunk(self) -> bytes:
        if self._prefetch is not None:
            return self._prefetch.get()
        assert self._inflater is not None
        return self._inflater.produce(_INFLATE_CHUNK)

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
        """Read up to ``n`` bytes; fewer only at the end of the stream or
        before an error (which the next call raises).

        Raises:
            DataLossError: corrupt or truncated compressed data, or an OS read
                error (naming the file and offset); again on every later call.
            ValueError: the stream is closed.
        """
        self._check()
        if n <= 0 or self._eof:
            return b""
        if self._inflater is None:
            try:
                data = self._raw.read(n)
            except OSError as exc:
                raise self._os_error(exc) from None
            if len(data) < n:
                self._eof = True
            self.offset += len(data)
            return data
        parts: list[bytes] = []
        want = n
        while want > 0:
            if self._chunk_pos >= len(self._chunk):
                try:
                    chunk = self._next_chunk()
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
        if not parts:
            return b""
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.offset += len(data)
        return data

    def skip(self, n: int) -> int:
        """Skip ``n`` bytes (seek for plain files, decompress in chunks otherwise).

        Returns:
            The number of bytes skipped (fewer only at the end of the stream).

        Raises:
            DataLossError: as :meth:`read`.
            ValueError: the stream is closed.
        """
        if self._inflater is None:
            self._check()
            size = self.size if self.size is not None else 0
            k = max(0, min(n, size - self.offset))
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


def _close(raw: BinaryIO, prefetch: _Prefetcher | None) -> None:
    if prefetch is not None:
        prefetch.close()
    raw.close()


def open_stream(work_unit: bytes | str, compression: str = "") -> ByteStream:
    """Open a work unit for reading.

    Raises:
        NotFoundError: the file does not exist ("<path>; No such file or directory", R8).
        DataLossError: the file cannot be read (a directory, no permission).
    """
    name = path_of(work_unit)
    try:
        raw = open(name, "rb")  # noqa: SIM115 - closed by ByteStream.close
    except FileNotFoundError:
        raise NotFoundError(f"{name}; No such file or directory") from None
    except OSError as exc:
        raise DataLossError(f"{name}; {exc.strerror or exc}") from None
    try:
        return ByteStream(name, raw, compression)
    except BaseException:
        raw.close()
        raise
