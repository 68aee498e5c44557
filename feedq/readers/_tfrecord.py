"""TFRecord files: TFRecordReader (R13, R14), TFRecordWriter, TFRecordOptions.

Framing of one record (little endian)::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

Reading is block-wise: the records of a buffered block, whatever their
lengths, are located and both CRCs checked by one call of
``feedq._native.scan_tfrecords`` (compiled, GIL released; a pure-Python twin
when the extension is not built), so no Python runs per record.
"""

from __future__ import annotations

import enum
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq import _native
from feedq.errors import DataLossError, NotFoundError
from feedq.readers._base import DEFAULT_BLOCK_BYTES, OnError, ReaderBase
from feedq.readers._block import RecordBlock, _empty_block
from feedq.readers._buffer import _Buffer, _open_stream_at
from feedq.readers._io import normalize_compression, zstd_module
from feedq.readers._skip import _data_loss, _SkipFile
from feedq.storage import is_remote, local_path, open_output

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "TFRecordCompressionType",
    "TFRecordOptions",
    "TFRecordReader",
    "TFRecordWriter",
    "tf_record_iterator",
]

_HEADER = 12  # length (8) + length CRC (4)
_FOOTER = 4  # data CRC
#: Default cap on one record's length; a larger length prefix is treated as
#: corruption instead of an allocation (protobuf messages cannot exceed 2 GiB).
DEFAULT_MAX_RECORD_BYTES = 1 << 30


class TFRecordCompressionType(enum.IntEnum):
    """TF1's compression enum (``tf.io.TFRecordCompressionType``)."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


@dataclass(frozen=True)
class TFRecordOptions:
    """Options of TFRecord files (``tf.io.TFRecordOptions``).

    Args:
        compression_type: ``None``/``""``, ``"GZIP"``, ``"ZLIB"``, ``"ZSTD"``
            (beyond TF; needs the ``zstd`` extra, ``pip install "feedq[zstd]"``)
            or a :class:`TFRecordCompressionType`.
        compression_level: the level for writing: zlib 0-9 or zstd 1-22
            (None = the library's default).
    """

    compression_type: str | int | None = None
    compression_level: int | None = None

    @property
    def compression(self) -> str:
        """The normalised name: ``""``, ``"GZIP"``, ``"ZLIB"`` or ``"ZSTD"``."""
        return normalize_compression(self.compression_type)

    @staticmethod
    def get_compression_type_string(options: TFRecordOptions | str | int | None) -> str:
        """TF1 helper: the compression name of ``options`` (``""`` for None)."""
        if isinstance(options, TFRecordOptions):
            return options.compression
        return normalize_compression(options)


class TFRecordReader(ReaderBase):
    """Reads the records of TFRecord files (R13, R14).

    The key of a record is ``b"<filename>:<offset>"``, the offset of the
    record's start in the (decompressed) stream. Both CRCs are checked. A bad
    length CRC, a bad data CRC or a truncated record raises ``DataLossError``
    naming the file and offset -- after the good records before it -- once;
    then the reader moves on (R9, X6). With ``on_error="skip"`` a record with
    a bad data CRC (its length was intact) is skipped and reading continues
    after it; a bad length or truncation skips the rest of the file.

    A hostile length prefix never allocates: a length beyond the file's size
    (regular files) or ``max_record_bytes`` (always; the only bound for pipes
    and compressed files) is reported as corruption, and data is buffered
    only as it is actually read.

    Args:
        name: a name for logs.
        options: :class:`TFRecordOptions` or a compression name.
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
        block_bytes: bytes buffered per block.
        max_record_bytes: the largest record accepted.
    """

    def __init__(
        self,
        name: str | None = None,
        options: TFRecordOptions | str | int | None = None,
        *,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        self.compression = TFRecordOptions.get_compression_type_string(options)
        self.max_record_bytes = int(max_record_bytes)
        self._buf: _Buffer | None = None

    def _open(self, work_unit: bytes) -> None:
        self._open_at(work_unit, 0)

    def _open_at(self, work_unit: bytes, offset: int) -> None:
        self._stream = _open_stream_at(work_unit, self.compression, offset, self._waiter)
        self._buf = _Buffer(self._stream, self.block_bytes)

    def _fname(self) -> str:
        wu = self._work_unit or b""
        return wu.decode("utf-8", "backslashreplace")

    def _fill(self, need: int, start: int) -> bool:
        """``buf.fill(need)``; a stream error that leaves the record at
        ``start`` incomplete is raised now (the records before it are out)."""
        buf = self._buf
        assert buf is not None
        if buf.fill(need):
            return True
        if buf.error is not None:
            raise _data_loss(buf.error, start)
        return False

    def _truncated(self, start: int) -> DataLossError:
        return DataLossError(f"{self._fname()}: truncated record at {start}")

    def _bad_length(self, start: int, why: str = "") -> DataLossError:
        return DataLossError(
            f"{self._fname()}: corrupted record at {start} (Is this even a TFRecord file?"
            f"{why})"
        )

    def _header(self, data: bytes, pos: int, start: int) -> int:
        """Validate the 12-byte header at ``data[pos:]``; return the data length."""
        (length,) = struct.unpack_from("<Q", data, pos)
        (lcrc,) = struct.unpack_from("<I", data, pos + 8)
        if _native.masked_crc32c(memoryview(data)[pos : pos + 8]) != lcrc:
            raise _data_loss(self._bad_length(start), start)
        if length > self.max_record_bytes:
            raise _data_loss(
                self._bad_length(
                    start, f" length {length} exceeds max_record_bytes={self.max_record_bytes}"
                ),
                start,
            )
        return int(length)

    def _next_block(self, n: int) -> RecordBlock:
        buf, wu = self._buf, self._work_unit
        assert buf is not None and wu is not None
        start = buf.offset
        if not self._fill(_HEADER, start):
            if buf.avail == 0:
                return _empty_block(wu)
            raise _data_loss(self._truncated(start), start)
        length = self._header(buf.data, buf.pos, start)
        size = buf.stream.size
        if size is not None and start + _HEADER + length + _FOOTER > size:
            # Plain file: the record cannot fit; say so without reading it.
            raise _data_loss(self._truncated(start), start)
        if not self._fill(_HEADER + length + _FOOTER, start):
            raise _data_loss(self._truncated(start), start)
        data = buf.data
        # Every whole record buffered from pos, both CRCs checked, in one call
        # of the native core (GIL released; its twin without it). It stops at
        # the first bad record: the good ones before it go out now, the error
        # after them (R14).
        scan = _native.scan_tfrecords(data, buf.pos, n, max_record_bytes=self.max_record_bytes)
        starts, lengths = scan.starts, scan.lengths
        err: _SkipFile | None = None
        bad_start = int(buf.base + scan.stop)
        if scan.status == _native.SCAN_BAD_DATA_CRC:
            (bad_length,) = struct.unpack_from("<Q", data, scan.stop)
            err = _data_loss(
                DataLossError(
                    f"{self._fname()}: corrupted record at {bad_start + _HEADER} "
                    f"(data CRC mismatch; the record starts at {bad_start})"
                ),
                bad_start,
                resume=bad_start + _HEADER + int(bad_length) + _FOOTER,
            )
        elif scan.status in (_native.SCAN_BAD_LENGTH_CRC, _native.SCAN_LENGTH_TOO_LARGE):
            try:
                self._header(data, scan.stop, bad_start)
            except _SkipFile as exc:
                err = exc
        if len(starts) == 0:
            if err is None:  # pragma: no cover - the first record is whole and its header valid
                raise AssertionError("empty scan")
            raise err
        if err is not None:
            self._pending = err
        buf.pos = scan.stop
        u8 = np.frombuffer(data, dtype=np.uint8)
        return self._make_block(wu, data, u8, starts, lengths, int(buf.base))

    @staticmethod
    def _make_block(
        wu: bytes,
        data: bytes,
        u8: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        base: int,
    ) -> RecordBlock:
        fixed = None
        length = int(lengths[0])
        if np.all(lengths == length):
            # Records of one length lie at a fixed stride: a [k, L] view.
            fixed = np.lib.stride_tricks.as_strided(
                u8[int(starts[0]) + _HEADER :],
                shape=(len(starts), length),
                strides=(_HEADER + length + _FOOTER, 1),
                writeable=False,
            )
        return RecordBlock(
            wu, data, starts + _HEADER, starts + _HEADER + lengths, starts + base, fixed=fixed
        )

    def _exhausted(self) -> bool:
        buf = self._buf
        if buf is None:
            return True
        return buf.avail == 0 and buf.at_eof

    def _position(self) -> tuple[int, int]:
        assert self._buf is not None
        return self._buf.offset, self._buf.offset

    def _seek(self, offset: int, index: int) -> None:
        assert self._work_unit is not None
        buf = self._buf
        if self._stream is not None and buf is not None and buf.base == offset == buf.offset:
            return  # freshly opened there (a pipe is not reopened)
        self._close_stream()
        self._open_at(self._work_unit, offset)

    def _resync(self, offset: int) -> None:
        buf = self._buf
        assert buf is not None
        if buf.base <= offset <= buf.base + len(buf.data):
            buf.pos = offset - buf.base
        else:
            self._seek(offset, offset)


def _frame(record: bytes | memoryview) -> list[bytes]:
    head = struct.pack("<Q", len(record))
    return [
        head,
        struct.pack("<I", _native.masked_crc32c(head)),
        bytes(record),
        struct.pack("<I", _native.masked_crc32c(record)),
    ]


class TFRecordWriter:
    """Writes TFRecord files that TensorFlow reads (``tf.io.TFRecordWriter``).

    Use as a context manager, or call :meth:`close`. GZIP and ZLIB output are
    standard zlib streams; ZSTD output (beyond TF, which cannot read it) is
    one standard zstd frame (``zstd -d`` decompresses it), with a content
    checksum.

    Args:
        path: the file to create (truncated if it exists), or a URL of a
            store (``s3://bucket/key``: the object appears on ``close()``).
        options: :class:`TFRecordOptions` or a compression name.

    Raises:
        NotFoundError: the directory does not exist.
        UnimplementedError: ZSTD without the ``zstandard`` package.
    """

    def __init__(self, path: str | os.PathLike[str], options: TFRecordOptions | str | int | None = None) -> None:
        opts = options if isinstance(options, TFRecordOptions) else TFRecordOptions(options)
        self.path = os.fspath(path)
        self.compression = opts.compression
        # The compressor first: a bad level must not leave the file open.
        self._comp: Any = None  # zlib or zstd compressobj
        self._zstd: Any = None
        if self.compression == "ZSTD":
            self._zstd = zstd_module()
            level = 3 if opts.compression_level is None else int(opts.compression_level)
            self._comp = self._zstd.ZstdCompressor(level=level, write_checksum=True).compressobj()
        elif self.compression:
            level = -1 if opts.compression_level is None else int(opts.compression_level)
            wbits = 31 if self.compression == "GZIP" else 15
            self._comp = zlib.compressobj(level, zlib.DEFLATED, wbits)
        if is_remote(self.path):
            # An object in a store (feedq.storage): uploaded as written, visible once closed.
            self._file = open_output(self.path)
            self._closed = False
            return
        try:
            self._file = open(local_path(self.path), "wb")  # noqa: SIM115 - closed in close()
        except FileNotFoundError:
            raise NotFoundError(f"{self.path}; No such file or directory") from None
        self._closed = False

    def write(self, record: bytes) -> None:
        """Append one record.

        Raises:
            ValueError: the writer is closed.
            TypeError: ``record`` is not bytes-like.
        """
        self.write_many([record])

    def write_many(self, records: Iterable[bytes]) -> None:
        """Append several records with one write call.

        Raises:
            ValueError: the writer is closed.
        """
        if self._closed:
            raise ValueError("TFRecordWriter is closed")
        parts: list[bytes] = []
        for r in records:
            if isinstance(r, str):
                raise TypeError("TFRecordWriter records must be bytes, not str")
            parts.extend(_frame(r))
        payload = b"".join(parts)
        self._file.write(self._comp.compress(payload) if self._comp else payload)

    def flush(self) -> None:
        """Flush buffered data to the file (compressed streams: a sync flush)."""
        if self._closed:
            return
        if self._comp is not None:
            mode = (
                self._zstd.COMPRESSOBJ_FLUSH_BLOCK if self._zstd is not None else zlib.Z_SYNC_FLUSH
            )
            self._file.write(self._comp.flush(mode))
        self._file.flush()

    def close(self) -> None:
        """Finish the stream and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._comp is not None:
                self._file.write(self._comp.flush())
        finally:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def tf_record_iterator(
    path: str | os.PathLike[str], options: TFRecordOptions | str | int | None = None
) -> Iterable[bytes]:
    """Yield the records of one TFRecord file (``tf.io.tf_record_iterator``).

    Raises:
        NotFoundError: the file is missing.
        DataLossError: a corrupt or truncated record.
    """
    class _One:
        def __init__(self) -> None:
            self.done = False

        def dequeue(self, timeout: float | None = None) -> bytes:
            if self.done:
                from feedq.errors import OutOfRangeError

                raise OutOfRangeError("end of file list")
            self.done = True
            return os.fsencode(os.fspath(path))

    reader = TFRecordReader(options=options)
    q = _One()
    from feedq.errors import OutOfRangeError

    with reader:  # an abandoned iterator closes its file when it is closed or collected
        while True:
            try:
                block = reader.read_block(q, 4096)
            except OutOfRangeError:
                return
            except _SkipFile as err:  # pragma: no cover - read_block converts these
                raise err.error from None
            yield from block.values().tolist()
