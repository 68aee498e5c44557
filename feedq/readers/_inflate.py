"""Decompression of one file in bounded chunks: GZIP/ZLIB (zlib) and ZSTD.

Each decoder produces at most ``n`` decompressed bytes per call, so memory
per reader stays bounded whatever the compression ratio, and turns
corruption, truncation and OS read errors into ``DataLossError`` naming the
file and the compressed offset (R14). :mod:`feedq.readers._io` runs them,
usually on a read-ahead thread.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

from feedq._core.extras import zstd_module
from feedq.errors import DataLossError
from feedq.readers._pipes import INTERRUPTS

__all__ = ["zstd_module"]

_COMPRESSED_CHUNK = 256 * 1024  # compressed bytes fed to zstd per step
_INFLATE_CHUNK = 1 << 20  # zstd: decompressed bytes per chunk handed over (2 wait at most)
# GZIP/ZLIB inflate in large steps on the read-ahead thread: zlib releases the
# GIL for the whole call, and every step ends by taking the GIL back -- the
# fewer the steps, the fewer waits for a GIL held by the reading thread.
_ZLIB_COMPRESSED_CHUNK = 1 << 20  # compressed bytes read and fed to zlib per step
_ZLIB_INFLATE_CHUNK = 1 << 20  # decompressed bytes per chunk at most (2 wait at most)


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
        self._tail = b""  # input given to zlib and not consumed yet (it comes before _pending)
        self._raw_offset = 0
        self._done = False
        # After a zlib error: 0 (none yet), else the compressed bytes per
        # step while the input of the failed call is fed again (see produce).
        self._step = 0
        self._produced = 0  # decompressed bytes handed on

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
                rest = self._dec.unused_data + self._tail + self._pending
                self._pending = self._tail = b""
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
            if self._tail:
                src, self._tail = self._tail, b""
            else:
                if not self._pending:
                    self._pending = self._read_raw()
                    if not self._pending:
                        raise DataLossError(
                            f"{self.name}: truncated {self.compression} stream at compressed "
                            f"offset {self._raw_offset}"
                        )
                src, self._pending = self._pending, b""
            step, rest = (src[: self._step], src[self._step :]) if self._step else (src, b"")
            before = self._dec.copy()
            try:
                out = self._dec.decompress(step, n)
            except zlib.error as exc:
                # zlib drops what the failing call decompressed (up to n
                # bytes: whole records before a bad GZIP trailer, say).
                # Feed that input again from the state before it, in small
                # steps, then a byte at a time in the step that fails, so
                # every byte before the fault is handed on (R14: the good
                # records before the error go out first).
                if self._step != 1:
                    self._dec = before
                    self._pending = src + self._pending
                    self._step = 4096 if not self._step else 1
                    continue
                at = self._raw_offset - len(self._pending) - len(src)
                hint = "" if self._produced else f" (is this a {self.compression} file?)"
                raise DataLossError(
                    f"{self.name}: inflate() failed with {exc} at compressed offset {at}{hint}"
                ) from None
            self._tail = self._dec.unconsumed_tail + rest
            if out:
                self._produced += len(out)
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
