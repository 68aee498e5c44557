"""Byte streams over files: plain, GZIP or ZLIB, with bounded buffers.

Every reader reads through :class:`ByteStream`, which knows the offset in the
(decompressed) stream, never returns more than asked (so memory per reader is
bounded by its block size, not the file size) and turns OS and zlib failures
into feedq errors naming the file (R8, R14).
"""

from __future__ import annotations

import os
import weakref
import zlib
from typing import BinaryIO

from feedq.errors import DataLossError, NotFoundError

__all__ = ["ByteStream", "open_stream", "normalize_compression", "path_of"]

_COMPRESSED_CHUNK = 256 * 1024  # compressed bytes fed to zlib per step


def normalize_compression(compression: str | None) -> str:
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


class ByteStream:
    """A forward-only byte stream over one file, plain or decompressed.

    ``offset`` is the position in the decompressed stream. ``size`` is the
    total size when known without reading (plain files), else ``None``.
    """

    def __init__(self, name: str, raw: BinaryIO, compression: str) -> None:
        self.name = name
        self._raw = raw
        # A reader dropped mid-file closes its file when collected, quietly.
        self._finalizer = weakref.finalize(self, raw.close)
        self.compression = compression
        self.offset = 0
        self._eof = False
        self.size: int | None = None
        if compression == "":
            self.size = os.fstat(raw.fileno()).st_size
            self._dec = None
        else:
            self._dec = self._new_decompressor()
            self._pending = b""  # compressed input not yet consumed by zlib
            self._raw_offset = 0

    def _new_decompressor(self) -> zlib._Decompress:
        # GZIP: wbits 16+15; ZLIB: 15 (TF's ZlibCompressionOptions defaults).
        return zlib.decompressobj(31 if self.compression == "GZIP" else 15)

    def read(self, n: int) -> bytes:
        """Read up to ``n`` bytes; fewer only at the end of the stream.

        Raises:
            DataLossError: corrupt or truncated compressed data.
        """
        if n <= 0 or self._eof:
            return b""
        if self._dec is None:
            data = self._raw.read(n)
            if len(data) < n:
                self._eof = True
            self.offset += len(data)
            return data
        parts: list[bytes] = []
        want = n
        while want > 0:
            if self._dec.eof:
                # Concatenated GZIP members (as `cat a.gz b.gz` makes) continue the stream.
                rest = self._dec.unused_data + self._pending
                self._pending = b""
                if not rest:
                    rest = self._raw.read(_COMPRESSED_CHUNK)
                    self._raw_offset += len(rest)
                if not rest:
                    self._eof = True
                    break
                if self.compression != "GZIP":
                    raise DataLossError(
                        f"{self.name}: trailing bytes after the {self.compression} stream "
                        f"at compressed offset {self._raw_offset - len(rest)}"
                    )
                self._dec = self._new_decompressor()
                self._pending = rest
                continue
            if self._dec.unconsumed_tail:
                src = self._dec.unconsumed_tail
            else:
                if not self._pending:
                    self._pending = self._raw.read(_COMPRESSED_CHUNK)
                    self._raw_offset += len(self._pending)
                    if not self._pending:
                        raise DataLossError(
                            f"{self.name}: truncated {self.compression} stream at compressed "
                            f"offset {self._raw_offset}"
                        )
                src, self._pending = self._pending, b""
            try:
                out = self._dec.decompress(src, want)
            except zlib.error as exc:
                raise DataLossError(
                    f"{self.name}: inflate() failed with {exc} (is this a "
                    f"{self.compression} file?)"
                ) from None
            parts.append(out)
            want -= len(out)
        data = b"".join(parts)
        self.offset += len(data)
        return data

    def skip(self, n: int) -> int:
        """Skip ``n`` bytes (seek for plain files, decompress in chunks otherwise).

        Returns:
            The number of bytes skipped (fewer only at the end of the stream).
        """
        if self._dec is None:
            size = self.size if self.size is not None else 0
            k = max(0, min(n, size - self.offset))
            self._raw.seek(self.offset + k)
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

    def close(self) -> None:
        """Close the underlying file."""
        self._finalizer()


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
