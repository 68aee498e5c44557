"""A work unit's bytes: opened at an offset, read through a sliding buffer (R8, R14).

:func:`_open_stream_at` opens a file where a reader left it, turning open
errors into per-file skips; :class:`_Buffer` is the window over its stream
that the record readers parse, keeping every byte read before an error.
"""

from __future__ import annotations

from feedq.errors import DataLossError, NotFoundError
from feedq.readers._io import ByteStream, Waiter, open_stream
from feedq.readers._skip import _data_loss, _not_found


def _open_stream_at(
    work_unit: bytes, compression: str, offset: int, waiter: Waiter | None = None
) -> ByteStream:
    """Open a work unit positioned at ``offset``; open errors become per-file skips (R8)."""
    try:
        stream = open_stream(work_unit, compression, waiter)
        if offset and stream.streaming:
            stream.close()
            raise DataLossError(
                f"{stream.name}: a pipe cannot be reopened at offset {offset}"
            )
        if offset:
            stream.skip(offset)
    except NotFoundError as exc:
        raise _not_found(exc) from None
    except DataLossError as exc:
        raise _data_loss(exc, offset) from None
    return stream


class _Buffer:
    """A sliding window over a :class:`ByteStream`: ``data[pos:]`` is unread.

    ``base`` is the stream offset of ``data[0]``. Refills compact the window,
    so its size stays near ``block_bytes`` unless one record is larger.

    A stream error never discards bytes already read: :meth:`fill` keeps
    them and stores the error in ``error``, and the buffer then behaves as
    if the stream ended there (``ended``). A reader returns the complete
    records still buffered, then raises ``error`` where the next record
    cannot be completed -- once, after every good record before it (R14).
    """

    def __init__(self, stream: ByteStream, block_bytes: int) -> None:
        self.stream = stream
        self.block_bytes = block_bytes
        self.data = b""
        self.base = stream.offset
        self.pos = 0
        self.error: DataLossError | None = None  # the stream failed after data[-1]

    @property
    def avail(self) -> int:
        return len(self.data) - self.pos

    @property
    def offset(self) -> int:
        """Stream offset of the next unread byte."""
        return self.base + self.pos

    @property
    def ended(self) -> bool:
        """True when no byte will follow ``data``: end of the stream or an error."""
        s = self.stream
        return self.error is not None or s.at_eof or (s.size is not None and s.offset >= s.size)

    @property
    def at_eof(self) -> bool:
        """True at a clean end of the stream (never with an error pending)."""
        s = self.stream
        return self.error is None and (s.at_eof or (s.size is not None and s.offset >= s.size))

    def fill(self, need: int, *, exact: bool = False) -> bool:
        """Make at least ``need`` unread bytes available, if the stream has them.

        Reads at least up to ``block_bytes`` when it reads at all, or exactly
        up to ``need`` with ``exact`` (so fixed-size records end the buffer
        with nothing left over to copy on the next refill); from a pipe, what
        has come once ``need`` is met. Returns False
        when the stream ended -- or failed -- first; never raises: a stream
        error (corrupt compressed data, an OS read error) is kept in
        ``error`` with every byte read before it. An interrupted wait for a
        pipe (``DeadlineExceededError``, ``CancelledError``) propagates, with
        the bytes read before it kept in the buffer.
        """
        if self.avail >= need:
            return True
        if self.error is not None or self.stream.at_eof:
            return False
        want = (need if exact else max(need, self.block_bytes)) - self.avail
        short = need - self.avail  # reads from a pipe stop once these came
        streaming = self.stream.streaming
        if self.stream.size is not None:
            # Plain file: never ask for more than the file holds, whatever
            # a (hostile) length prefix says.
            want = min(want, max(0, self.stream.size - self.stream.offset))
        chunks = [self.data[self.pos :]] if self.avail else []
        self.base += self.pos
        self.pos = 0
        got = 0
        try:
            while got < want:
                # Grow in block-sized steps, so a length prefix larger than the
                # remaining (compressed) data never allocates more than exists.
                c = self.stream.read(min(want - got, max(self.block_bytes, 1 << 16)))
                if not c:
                    break
                chunks.append(c)
                got += len(c)
                if streaming and got >= short:
                    break  # a pipe: wait for what is needed, not for a whole block
        except DataLossError as exc:
            self.error = exc  # reported after the records read so far
        finally:
            # Also when a wait for a pipe is interrupted: what came stays here.
            self.data = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        return self.avail >= need
