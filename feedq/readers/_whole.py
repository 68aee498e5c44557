"""WholeFileReader (R15): one record per file."""

from __future__ import annotations

import numpy as np

from feedq.errors import DataLossError, NotFoundError
from feedq.readers._base import (
    OnError,
    ReaderBase,
    RecordBlock,
    _data_loss,
    _empty_block,
    _not_found,
)
from feedq.readers._io import open_stream

__all__ = ["WholeFileReader"]


class WholeFileReader(ReaderBase):
    """Reads each file as one record (R15).

    The key is the work unit exactly (no ``:n`` suffix), the value the whole
    file; an empty file gives one ``b""`` record; every read completes a work
    unit. A missing file raises ``NotFoundError`` once and the reader moves
    on (TF1 raised it forever, R9). Memory is the size of the file read --
    the one reader whose records are not bounded by ``block_bytes``.

    Args:
        name: a name for logs.
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
    """

    _COMPLETE_EAGERLY = True

    def __init__(self, name: str | None = None, *, on_error: OnError = "raise") -> None:
        super().__init__(on_error=on_error, name=name)
        self._done = True

    def _open(self, work_unit: bytes) -> None:
        try:
            self._stream = open_stream(work_unit)
        except NotFoundError as exc:
            raise _not_found(exc) from None
        except DataLossError as exc:
            raise _data_loss(exc, None) from None
        self._done = False

    def _next_block(self, n: int) -> RecordBlock:
        wu = self._work_unit
        assert wu is not None and self._stream is not None
        if self._done:
            return _empty_block(wu)
        size = self._stream.size or 0
        try:
            data = self._stream.read(size) if size else b""
        except DataLossError as exc:  # an OS read error (EIO), naming file and offset
            raise _data_loss(exc, self._stream.offset) from None
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
