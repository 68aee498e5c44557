"""WholeFileReader (R15): one record per file."""

from __future__ import annotations

import numpy as np

from feedq.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.readers._base import OnError, ReaderBase
from feedq.readers._block import RecordBlock, _empty_block
from feedq.readers._io import open_stream
from feedq.readers._skip import _data_loss, _not_found, _open_failed

__all__ = ["WholeFileReader"]


class WholeFileReader(ReaderBase):
    """Reads each file as one record (R15).

    The key is the work unit exactly (no ``:n`` suffix), the value the whole
    file; an empty file gives one ``b""`` record; every read completes a work
    unit. A missing file raises ``NotFoundError`` once and the reader moves
    on (TF1 raised it forever, R9). Memory is the size of the file read --
    the one reader whose records are not bounded by ``block_bytes``. Pipes,
    devices and ``/proc`` files are read to their end (see
    :class:`ReaderBase` for the waits).

    Args:
        name: a name for logs.
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
    """

    _COMPLETE_EAGERLY = True

    def __init__(self, name: str | None = None, *, on_error: OnError = "raise") -> None:
        super().__init__(on_error=on_error, name=name)
        self._done = True
        self._parts: list[bytes] = []  # read so far (kept when a wait is cut short)

    def _open(self, work_unit: bytes) -> None:
        try:
            self._stream = open_stream(work_unit, waiter=self._waiter)
        except NotFoundError as exc:
            raise _not_found(exc) from None
        except DataLossError as exc:
            raise _data_loss(exc, None) from None
        except (PermissionDeniedError, UnavailableError, InvalidArgumentError) as exc:
            raise _open_failed(exc) from None
        self._done = False
        self._parts = []

    def _next_block(self, n: int) -> RecordBlock:
        wu = self._work_unit
        assert wu is not None and self._stream is not None
        if self._done:
            return _empty_block(wu)
        stream = self._stream
        # st_size when known (one read), then on to the end: a file that
        # reports no size (/proc) or grew is read whole.
        step = stream.size or 1 << 16
        try:
            while not stream.at_eof:
                chunk = stream.read(max(step - stream.offset, 1 << 16))
                if not chunk:
                    break
                self._parts.append(chunk)
        except DataLossError as exc:  # an OS read error (EIO), naming file and offset
            self._parts = []
            raise _data_loss(exc, stream.offset) from None
        parts, self._parts = self._parts, []
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._done = True
        z = np.zeros(1, dtype=np.int64)
        return RecordBlock(wu, data, z, np.array([len(data)], dtype=np.int64), z, bare_keys=True)

    def _exhausted(self) -> bool:
        return self._done

    def _position(self) -> tuple[int, int]:
        return (1 if self._done else 0), 0

    def _seek(self, offset: int, index: int) -> None:
        self._done = bool(offset)

    def _resync(self, offset: int) -> None:  # pragma: no cover - never resyncs
        raise NotImplementedError
