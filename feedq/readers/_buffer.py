"""A work unit's bytes: opened at an offset, read through a sliding buffer (R8, R14).

:func:`_open_stream_at` opens a file where a reader left it, turning open
errors into per-file skips; :class:`_Buffer` is the window over its stream
that the record readers parse, keeping every byte read before an error.
"""

from __future__ import annotations

from feedq.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.readers._io import ByteStream, Waiter, open_stream
from feedq.readers._skip import _data_loss, _not_found, _open_failed


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
    except (PermissionDeniedError, UnavailableError, InvalidArgumentError) as exc:
        raise _open_failed(exc) from None
    return stream


class _Buffer:
    """A sliding window over a :class:`ByteStream`: ``data[pos:]`` is unread.

    ``base`` is the stream offset of ``data[0]``. Refills compact the window,
    so its size stays near ``block_bytes`` unless one record is larger. Each
    refill makes ``data`` a new bytes object: the unread tail copied once,
    the new bytes read right after it (a regular file's straight from the
    kernel: ``ByteStream.read_after``). Blocks handed out keep the old object,
    so memory a consumer still holds is never reused.

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
        size = self.stream.size
        known = size is not None
        if size is not None:
            # Plain file: never ask for more than the file holds, whatever
            # a (hostile) length prefix says.
            want = min(want, max(0, size - self.stream.offset))
        # The new window is a new bytes object: blocks handed out keep the old
        # one, whose memory is never reused. The first read lands right after
        # the unread tail (a regular file's bytes straight from the kernel);
        # only the tail is copied.
        tail = memoryview(self.data)[self.pos :]
        window: bytes | None = None
        more: list[bytes] = []  # reads after the first (records larger than a block)
        got = 0
        try:
            while got < want:
                # A file of known size is read at once (want is within it);
                # others grow in block-sized steps, so a length prefix larger
                # than the remaining (compressed) data never allocates more
                # than exists.
                step = want - got if known else min(want - got, max(self.block_bytes, 1 << 16))
                if window is None:
                    window = self.stream.read_after(tail, step)
                    c = len(window) - len(tail)
                else:
                    chunk = self.stream.read(step)
                    c = len(chunk)
                    if c:
                        more.append(chunk)
                if not c:
                    break
                got += c
                if streaming and got >= short:
                    break  # a pipe: wait for what is needed, not for a whole block
        except DataLossError as exc:
            self.error = exc  # reported after the records read so far
        finally:
            # Also when a wait for a pipe is interrupted: what came stays here.
            if window is not None:
                self.data = b"".join([window, *more]) if more else window
                self.base += self.pos
                self.pos = 0
        return self.avail >= need
