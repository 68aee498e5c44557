"""TextLineReader (R10): one record per line, keys ``file:line``."""

from __future__ import annotations

import numpy as np

from feedq import _native
from feedq.errors import InvalidArgumentError
from feedq.readers._base import DEFAULT_BLOCK_BYTES, OnError, ReaderBase
from feedq.readers._block import RecordBlock, _empty_block
from feedq.readers._buffer import _Buffer, _open_stream_at
from feedq.readers._io import INTERRUPTS, normalize_compression
from feedq.readers._skip import _data_loss

__all__ = ["TextLineReader"]


class TextLineReader(ReaderBase):
    """Reads the lines of text files (R10).

    The key of a line is ``b"<filename>:<n>"`` with ``n`` the 1-based
    PHYSICAL line number (skipped header lines count). The value is the line
    without its ``\\n``; a trailing ``\\r`` is removed too (CRLF files); an
    empty line gives ``b""``; a last line without a newline is returned.
    ``skip_header_lines`` applies to every file; a file with no more lines
    than that yields nothing and is skipped (R3).

    Blocks (``read_block``) carry ``span``, the byte range of the lines, which
    ``decode_csv`` parses in one pyarrow call.

    Args:
        skip_header_lines: lines to skip at the start of every file (>= 0).
        compression: ``""``, ``"GZIP"``, ``"ZLIB"`` or ``"ZSTD"`` (beyond TF1's
            reader; ZSTD needs the ``zstd`` extra).
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
        block_bytes: bytes buffered per block.
        name: a name for logs.

    Raises:
        InvalidArgumentError: ``skip_header_lines < 0``.
    """

    def __init__(
        self,
        skip_header_lines: int = 0,
        *,
        compression: str | None = None,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str | None = None,
    ) -> None:
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        if int(skip_header_lines) < 0:
            raise InvalidArgumentError(
                f"skip_header_lines must be >= 0, got {skip_header_lines}"
            )
        self.skip_header_lines = int(skip_header_lines)
        self.compression = normalize_compression(compression)
        self._buf: _Buffer | None = None
        self._nl = np.zeros(0, dtype=np.int64)  # newline positions in self._buf.data
        self._nl_i = 0  # index in _nl of the first newline at or after buf.pos
        self._line = 1  # physical number of the next line

    def _open(self, work_unit: bytes) -> None:
        # The header lines are skipped by the first _next_block (a pipe may
        # have none yet; the line number says how many are left).
        self._open_at(work_unit, 0, 1)

    def _open_at(self, work_unit: bytes, offset: int, line: int) -> None:
        self._stream = _open_stream_at(work_unit, self.compression, offset, self._waiter)
        self._buf = _Buffer(self._stream, self.block_bytes)
        self._nl = np.zeros(0, dtype=np.int64)
        self._nl_i = 0
        self._line = line

    def _refill(self, need: int) -> None:
        buf = self._buf
        assert buf is not None
        # Newlines not yet consumed, as stream offsets: only new bytes are scanned.
        keep = self._nl[self._nl_i :] + buf.base
        old_end = buf.base + len(buf.data)
        try:
            buf.fill(need)  # a stream error stays in buf.error, after the bytes read
        finally:
            # Also after an interrupted wait for a pipe: fill moved the window.
            start = old_end - buf.base
            new = _native.find_byte(buf.data, start, 10)
            self._nl = np.concatenate([keep - buf.base, new]) if len(keep) else new
            self._nl_i = 0

    def _next_block(self, n: int) -> RecordBlock:
        while self._line <= self.skip_header_lines:  # R10: in every file
            if len(self._lines(self.skip_header_lines - self._line + 1)) == 0:
                assert self._work_unit is not None
                return _empty_block(self._work_unit)
        return self._lines(n)

    def _lines(self, n: int) -> RecordBlock:
        buf = self._buf
        wu = self._work_unit
        assert buf is not None and wu is not None
        while True:
            complete = len(self._nl) - self._nl_i
            ended = buf.ended
            if complete >= n or ended or (complete >= 1 and buf.avail >= self.block_bytes):
                break
            # Not enough whole lines buffered: read on (a line longer than the
            # block grows the buffer to hold it; text has no length limit).
            # From a pipe, whatever comes next, then look for newlines again.
            grow = 1 if buf.stream.streaming else max(self.block_bytes, buf.avail)
            try:
                self._refill(buf.avail + grow)
            except INTERRUPTS:
                # A pipe ran dry before the deadline: the whole lines so far.
                if len(self._nl) - self._nl_i == 0:
                    raise
                complete = len(self._nl) - self._nl_i
                ended = False
                break
        k = min(n, complete)
        nl = self._nl[self._nl_i : self._nl_i + k]
        # k < n means every whole line was taken; at EOF a last line without
        # a newline may follow. Before a stream error it may not be whole:
        # the error is reported instead, after the whole lines (R14).
        after = int(nl[-1]) + 1 if k else buf.pos
        tail = k < n and ended and buf.error is None and after < len(buf.data)
        if k == 0 and not tail:
            if buf.error is not None:
                raise _data_loss(buf.error, buf.offset)
            return _empty_block(wu)
        starts = np.empty(k + (1 if tail else 0), dtype=np.int64)
        ends = np.empty_like(starts)
        starts[0] = buf.pos
        if k:
            starts[1:k] = nl[:-1] + 1
            ends[:k] = nl
        span_end = int(nl[-1]) + 1 if k else buf.pos
        if tail:
            # The last line of the file has no newline: it is still a record.
            starts[k] = span_end
            ends[k] = len(buf.data)
            span_end = len(buf.data)
        u8 = np.frombuffer(buf.data, dtype=np.uint8)
        # CRLF: drop one '\r' before the newline (or at the end of the file).
        cr = (ends > starts) & (u8[np.maximum(ends - 1, 0)] == 13)
        ends = ends - cr
        m = len(starts)
        ids = np.arange(self._line, self._line + m, dtype=np.int64)
        block = RecordBlock(wu, buf.data, starts, ends, ids, span=(int(buf.pos), span_end))
        self._line += m
        buf.pos = span_end
        self._nl_i += k
        return block

    def _exhausted(self) -> bool:
        buf = self._buf
        if buf is None:
            return True
        return buf.avail == 0 and buf.at_eof

    def _position(self) -> tuple[int, int]:
        assert self._buf is not None
        return self._buf.offset, self._line

    def _seek(self, offset: int, index: int) -> None:
        assert self._work_unit is not None
        buf = self._buf
        if self._stream is not None and buf is not None and buf.base == offset == buf.offset:
            self._line = index  # freshly opened there (a pipe is not reopened)
            return
        self._close_stream()
        self._open_at(self._work_unit, offset, index)

    def _resync(self, offset: int) -> None:  # pragma: no cover - text never resyncs
        self._seek(offset, self._line)
