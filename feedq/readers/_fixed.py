"""FixedLengthRecordReader (R11, R12)."""

from __future__ import annotations

import numpy as np

from feedq.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.readers._base import DEFAULT_BLOCK_BYTES, OnError, ReaderBase, logger
from feedq.readers._block import RecordBlock, _empty_block
from feedq.readers._buffer import _Buffer
from feedq.readers._io import INTERRUPTS, normalize_compression, open_stream
from feedq.readers._skip import _data_loss, _not_found, _open_failed

__all__ = ["FixedLengthRecordReader"]


class FixedLengthRecordReader(ReaderBase):
    """Reads fixed-length records from binary files (R11).

    Per file: skip ``header_bytes``; the data region ends ``footer_bytes``
    before the end. Record ``i`` starts at ``header_bytes + i * hop_bytes``
    (``hop_bytes=0``: back to back); ``hop_bytes < record_bytes`` gives
    overlapping records. A record is emitted only if it lies entirely in the
    data region; a trailing partial record is dropped, as in TF1, with one
    warning per file on the ``feedq.readers`` logger naming the file, the
    bytes dropped and ``record_bytes`` (TF1 was silent). Keys are
    ``b"<filename>:<i>"`` (0-based). With ``encoding`` GZIP/ZLIB, offsets
    refer to the decompressed stream.

    A file shorter than ``header_bytes + footer_bytes`` raises
    ``DataLossError`` (TF1 raised OutOfRange, which looked like end of input,
    R12/X6), once; the reader then moves on.

    Blocks carry ``fixed``, a ``[k, record_bytes]`` uint8 array (a view of
    the read buffer when records are back to back) for ``decode_raw``.

    Args:
        record_bytes: bytes per record (>= 1).
        header_bytes: bytes to skip at the start of every file.
        footer_bytes: bytes to ignore at the end of every file.
        hop_bytes: bytes between record starts; 0 means ``record_bytes``.
        encoding: ``None``/``""``, ``"GZIP"``, ``"ZLIB"`` or ``"ZSTD"`` (the
            ``zstd`` extra).
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
        block_bytes: bytes buffered per block.
        name: a name for logs.

    Raises:
        ValueError: a negative size or ``record_bytes < 1``.
    """

    def __init__(
        self,
        record_bytes: int,
        header_bytes: int | None = None,
        footer_bytes: int | None = None,
        hop_bytes: int | None = None,
        encoding: str | None = None,
        *,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str | None = None,
    ) -> None:
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        self.record_bytes = int(record_bytes)
        self.header_bytes = int(header_bytes or 0)
        self.footer_bytes = int(footer_bytes or 0)
        self.hop_bytes = int(hop_bytes or 0)
        if self.record_bytes < 1:
            raise ValueError(f"record_bytes must be >= 1, got {record_bytes}")
        for label, v in (
            ("header_bytes", self.header_bytes),
            ("footer_bytes", self.footer_bytes),
            ("hop_bytes", self.hop_bytes),
        ):
            if v < 0:
                raise ValueError(f"{label} must be >= 0, got {v}")
        self.encoding = normalize_compression(encoding)
        self._stride = self.hop_bytes or self.record_bytes
        self._buf: _Buffer | None = None  # None until the stream is at _skip_to
        self._skip_to = 0  # stream offset where the next buffer starts
        self._check_short = False  # the file's length is still to be checked (R12)
        self._next = 0  # index of the next record in the current file
        self._warned = False  # the current file's trailing bytes were reported

    def _record_offset(self, i: int) -> int:
        return self.header_bytes + i * self._stride

    def _open(self, work_unit: bytes) -> None:
        self._open_at(work_unit, 0)

    def _open_at(self, work_unit: bytes, index: int) -> None:
        # Only opens: skipping the header (or to a saved record) reads, which
        # for a pipe may wait, so _next_block does it (_start_buffer).
        try:
            stream = self._stream = open_stream(work_unit, self.encoding, self._waiter)
        except NotFoundError as exc:
            raise _not_found(exc) from None
        except DataLossError as exc:
            raise _data_loss(exc, None) from None
        except (PermissionDeniedError, UnavailableError, InvalidArgumentError) as exc:
            raise _open_failed(exc) from None
        if index and stream.streaming:
            raise _data_loss(
                DataLossError(f"{stream.name}: a pipe cannot be reopened at record {index}"), None
            )
        self._buf = None
        self._skip_to = self._record_offset(index)  # where the buffer starts
        self._check_short = index == 0  # R12: a file shorter than header + footer
        self._next = index
        self._warned = False

    def _start_buffer(self) -> _Buffer:
        """Skip to ``_skip_to`` and start the buffer there (resumable after a
        wait for a pipe is cut short: the stream's offset says how far it got)."""
        stream = self._stream
        assert stream is not None
        try:
            if stream.offset < self._skip_to:
                stream.skip(self._skip_to - stream.offset)
        except DataLossError as exc:
            raise _data_loss(exc, None) from None
        buf = self._buf = _Buffer(stream, self.block_bytes)
        return buf

    def _check_length(self, buf: _Buffer) -> None:
        # R12, X6: a file shorter than header_bytes + footer_bytes is an error.
        stream = buf.stream
        short = stream.offset < self._skip_to or not buf.fill(self.footer_bytes)
        if short and buf.error is not None:
            raise _data_loss(buf.error, stream.offset)
        if short:
            size = stream.offset
            name = (self._work_unit or b"").decode("utf-8", "backslashreplace")
            raise _data_loss(
                DataLossError(
                    f"{name}: file of {size} bytes is shorter than header_bytes="
                    f"{self.header_bytes} + footer_bytes={self.footer_bytes}"
                ),
                size,
            )
        self._check_short = False

    def _fit(self, avail: int) -> int:
        # Records that fit in `avail` bytes from the next record's start,
        # keeping footer_bytes back.
        room = avail - self.record_bytes - self.footer_bytes
        return 0 if room < 0 else room // self._stride + 1

    def _next_block(self, n: int) -> RecordBlock:
        buf, wu = self._buf, self._work_unit
        assert wu is not None
        if buf is None:
            buf = self._start_buffer()
        if self._check_short:
            self._check_length(buf)
        L, S = self.record_bytes, self._stride
        k = min(n, max(1, self.block_bytes // S))
        # Read whole strides only: the next block starts a fresh buffer
        # instead of copying a partial record over. A stream error stays in
        # buf.error until the whole records read before it are out (R14).
        try:
            buf.fill(max(k * S, (k - 1) * S + L) + self.footer_bytes, exact=True)
        except INTERRUPTS:
            if self._fit(buf.avail) == 0:
                raise
            # A pipe ran dry before the deadline: the whole records so far.
        k = min(k, self._fit(buf.avail))
        if k == 0:
            if buf.error is not None:
                raise _data_loss(buf.error, buf.offset)
            if not self._warned:
                self._warn_trailing(buf.avail)  # the end of the file
            return _empty_block(wu)
        u8 = np.frombuffer(buf.data, dtype=np.uint8)
        pos = buf.pos
        if S == L:
            fixed = u8[pos : pos + k * L].reshape(k, L)
        else:
            fixed = np.lib.stride_tricks.as_strided(
                u8[pos:], shape=(k, L), strides=(S, 1), writeable=False
            )
        starts = pos + np.arange(k, dtype=np.int64) * S
        ids = np.arange(self._next, self._next + k, dtype=np.int64)
        block = RecordBlock(wu, buf.data, starts, starts + L, ids, fixed=fixed)
        self._next += k
        self._advance(k * S)
        return block

    def _advance(self, nbytes: int) -> None:
        buf = self._buf
        assert buf is not None
        buf.pos += nbytes
        if buf.pos > len(buf.data):
            # hop_bytes > record_bytes: the next record starts past the
            # buffer; the next call skips there (an error then is reported
            # then, after this good block).
            self._skip_to = buf.base + buf.pos
            self._buf = None

    def _exhausted(self) -> bool:
        s = self._stream
        if s is None:
            return True
        buf = self._buf
        if buf is not None and buf.error is not None:
            return False  # the error is still to be reported
        if s.size is not None:
            left = s.size - self._record_offset(self._next)
            done = left < self.record_bytes + self.footer_bytes
        elif buf is None:
            return s.at_eof  # a hop past the buffer is still to be skipped
        else:
            left = buf.avail
            done = s.at_eof and self._fit(left) == 0
        if done and not self._warned:
            self._warn_trailing(left)
        return done

    def _warn_trailing(self, left: int) -> None:
        """Log the partial record dropped at the end of the file (R11): the
        data-region bytes after the last whole record, ``left`` being the
        bytes from where the next record would start to the end of the file."""
        self._warned = True
        # With hop_bytes < record_bytes the next start lies inside the last record.
        overlap = max(0, self.record_bytes - self._stride) if self._next else 0
        trailing = left - self.footer_bytes - overlap
        if trailing > 0:
            name = (self._work_unit or b"").decode("utf-8", "backslashreplace")
            logger.warning(
                "%s: %d trailing bytes after the last whole record dropped (record_bytes=%d)",
                name, trailing, self.record_bytes,
            )

    def _position(self) -> tuple[int, int]:
        return self._record_offset(self._next), self._next

    def _seek(self, offset: int, index: int) -> None:
        assert self._work_unit is not None
        stream = self._stream
        if stream is not None and self._buf is None and self._next == index and stream.offset == 0:
            return  # freshly opened there (a pipe is not reopened)
        self._close_stream()
        self._open_at(self._work_unit, index)

    def _resync(self, offset: int) -> None:  # pragma: no cover - never resyncs
        raise NotImplementedError
