"""The reader base class (R1-R9): work units, counters, errors, state, closing.

A reader is a cursor over work units (filenames) pulled from a queue. The
primitive is :meth:`ReaderBase.read_block`: it returns up to ``n`` records of
ONE file as a :class:`RecordBlock` -- one contiguous buffer plus record
offsets -- so decoders can turn a whole block into columns without making a
Python object per record (X10). ``read`` and ``read_up_to`` (the TF1 API) are
built on it and materialise keys and values as NumPy object arrays.

Where the rest lives: :class:`RecordBlock` in ``_block`` (re-exported here),
the per-file error ``_SkipFile`` in ``_skip``, and the byte side of the
record readers (``_open_stream_at``, ``_Buffer``) in ``_buffer``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

from feedq._core import positions as _positions
from feedq._core import scope as _scope
from feedq._core.timeouts import resolve_timeout
from feedq.errors import InvalidArgumentError
from feedq.readers._block import RecordBlock
from feedq.readers._io import INTERRUPTS, ByteStream, Waiter
from feedq.readers._skip import _SkipFile

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["DEFAULT_BLOCK_BYTES", "FilenameQueue", "OnError", "ReaderBase", "RecordBlock"]

logger = logging.getLogger("feedq.readers")

OnError = Literal["raise", "skip"]

#: Default bytes a reader buffers per block; memory per reader stays near this
#: (plus one record larger than it), whatever the file size.
DEFAULT_BLOCK_BYTES = 4 << 20
#: Upper bound accepted for ``block_bytes`` (the issue's per-reader budget).
MAX_BLOCK_BYTES = 16 << 20


class FilenameQueue(Protocol):
    """What a reader needs from a queue: ``dequeue`` of one scalar string (R1)."""

    def dequeue(self, timeout: float | None = None) -> Any: ...


class ReaderBase:
    """Common machinery of every reader: work units, counters, errors, state.

    A reader holds one current work unit and dequeues the next only when the
    current one is exhausted (R1); calls on one reader are serialised by a
    lock, parallel reading uses several readers. End of file never surfaces:
    a read that hits it moves on to the next file in the same call (R3).

    Bad input, better than TF1 (R8, R9, R12, X6): an error opening a file
    (``NotFoundError``) or reading it (``DataLossError`` naming file and byte
    offset) is raised ONCE -- after the good records before it have been
    returned -- and the reader then moves on, so it never raises the same
    error forever. With ``on_error="skip"`` the error is logged on the
    ``feedq.readers`` logger as ``file:offset``, counted in
    :meth:`num_errors_skipped`, and reading goes on (from the next record when
    the format lets it resynchronise, else from the next file).

    State: :meth:`state_dict` / :meth:`load_state_dict` save and restore the
    current file, the offset of the next record in it and the counters, so a
    pipeline can resume exactly (TF1 left this unimplemented, R7).

    Closing: :meth:`close` (or leaving a ``with`` block) closes the current
    file and ends its read-ahead thread now, instead of when the reader is
    collected. The reader keeps its place: a read after ``close()`` reopens
    the file and goes on with the next record, exactly as
    ``load_state_dict(state_dict())`` would (a file gone since raises
    ``NotFoundError`` once, R8). Close the filename queue before closing a
    reader that another thread may be reading with: ``close()`` waits for a
    read in progress, which may be waiting for a filename. A read waiting
    for data from a pipe is woken by ``close()`` (``CancelledError``). A
    reader created inside ``with feedq.Pipeline()`` (any closing scope of
    ``feedq._core.scope``) is closed by the pipeline when it shuts down.

    Pipes and devices: a named pipe, a character device or a ``/proc`` file
    is read to its end like any file, without assuming a size. Every wait for
    its data -- including for a writer to open a FIFO -- is bounded by the
    call's ``timeout`` (``DeadlineExceededError``; the bytes read so far stay
    buffered and the next call goes on) and by ``close()``. A pipe cannot be
    reopened where it was: ``close()`` in the middle of one drops the rest
    of it (with a warning).

    Args:
        on_error: ``"raise"`` (default) or ``"skip"``.
        block_bytes: bytes buffered per block (at most 16 MiB).
        name: a name for logs.
    """

    KEY_WORK_UNIT: ClassVar[str] = "work_unit"
    KEY_OFFSET: ClassVar[str] = "offset"
    KEY_INDEX: ClassVar[str] = "index"
    KEY_RECORDS: ClassVar[str] = "num_records_produced"
    KEY_UNITS: ClassVar[str] = "num_work_units_completed"
    KEY_SKIPPED: ClassVar[str] = "num_errors_skipped"
    KEY_READER: ClassVar[str] = "reader"
    #: True when returning a block observes the end of the file (R15).
    _COMPLETE_EAGERLY: ClassVar[bool] = False

    def __init__(
        self,
        *,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if not isinstance(block_bytes, int) or not 1 <= block_bytes <= MAX_BLOCK_BYTES:
            raise ValueError(f"block_bytes must be in [1, {MAX_BLOCK_BYTES}], got {block_bytes!r}")
        self.on_error: OnError = on_error
        self.block_bytes = block_bytes
        self.name = name or type(self).__name__
        self._lock = threading.Lock()
        self._work_unit: bytes | None = None  # guarded by self._lock
        self._stream: ByteStream | None = None  # guarded by self._lock
        self._pending: _SkipFile | None = None  # error found after good records
        # (offset, key id) of the next record of a work unit whose file
        # close() closed; the next read reopens it there.
        self._reopen: tuple[int, int] | None = None  # guarded by self._lock
        self._records = 0
        self._units = 0
        self._skipped = 0
        # Resumable pipelines (feedq._core.positions): the current unit (its
        # re-read filter, where its positions are reported), and the index of
        # its next record.
        self._unit: _positions.Unit | None = None  # guarded by self._lock
        self._unit_next = 0  # guarded by self._lock
        # Bounds waits for pipes: the deadline of the call in progress, and
        # close() from another thread.
        self._waiter = Waiter()
        # Inside `with feedq.Pipeline()`, the pipeline closes this reader.
        _scope.register_closeable(self)

    # ----------------------------------------------------------------- TF1 API
    def read(self, queue: FilenameQueue, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Read one record (R2).

        Args:
            queue: the filename queue (elements are single scalar strings).
            timeout: seconds to wait for a filename (and for a pipe's data),
                for the whole call; None = process default.

        Returns:
            ``(key, value)`` byte strings.

        Raises:
            OutOfRangeError: the queue is closed and empty (its own message).
            NotFoundError: a file is missing (once; the reader moves on).
            DataLossError: a corrupt record (once; the reader moves on).
            DeadlineExceededError: ``timeout`` passed waiting for a filename
                or for a pipe's data (nothing read is lost).
            CancelledError: ``close()`` woke a wait for a pipe's data.
        """
        block = self.read_block(queue, 1, timeout=timeout)
        return block.keys()[0], block.values()[0]

    def read_up_to(
        self, queue: FilenameQueue, num_records: int, timeout: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Read 1..``num_records`` records of one file (R5).

        Fewer than ``num_records`` only at the end of a file (or before an
        error); two files are never mixed.

        Args:
            queue: the filename queue.
            num_records: the most records to return (>= 1).
            timeout: seconds to wait for a filename (and for a pipe's data),
                for the whole call; None = process default.

        Returns:
            ``(keys, values)``, two ``[k]`` object arrays of bytes.

        Raises:
            Same as :meth:`read`; InvalidArgumentError for ``num_records < 1``.
        """
        block = self.read_block(queue, num_records, timeout=timeout, fill=True)
        return block.keys(), block.values()

    def read_block(
        self,
        queue: FilenameQueue,
        num_records: int,
        timeout: float | None = None,
        *,
        fill: bool = False,
    ) -> Any:
        """Read 1..``num_records`` records of one file as a :class:`RecordBlock`.

        The block API: no per-record Python objects. Without ``fill`` it may
        return fewer than asked at a buffer boundary (``block_bytes``) as well
        as at the end of a file; with ``fill=True`` it gathers until
        ``num_records`` or the end of the file, as ``read_up_to`` does.

        Args:
            queue: the filename queue.
            num_records: the most records to return (>= 1).
            timeout: seconds to wait for a filename (and for a pipe's data),
                for the whole call; None = process default. From a pipe
                whose writer is slow, the records complete when the time is
                up are returned (fewer than ``num_records`` even with
                ``fill``), or ``DeadlineExceededError`` when there are none.
            fill: keep reading the same file until ``num_records``.

        Returns:
            A non-empty block.

        Raises:
            Same as :meth:`read_up_to`.
        """
        if int(num_records) < 1:
            raise InvalidArgumentError(f"num_records must be >= 1, got {num_records}")
        n = int(num_records)
        limit = resolve_timeout(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        with self._lock:
            self._waiter.deadline = deadline
            while True:
                if self._work_unit is None:
                    # One deadline for the whole call (STYLE 2).
                    wait = timeout if deadline is None else max(0.0, deadline - time.monotonic())
                    self._start_next(queue, wait)
                    continue
                if self._reopen is not None:
                    self._reopen_unit()
                    continue
                if self._pending is not None:
                    pending, self._pending = self._pending, None
                    self._handle(pending)
                    continue
                try:
                    block = self._next_block(n)
                    if fill and 0 < len(block) < n:
                        parts = [block]
                        got = len(block)
                        while got < n and self._pending is None and not self._exhausted():
                            try:
                                more = self._next_block(n - got)
                            except _SkipFile as err:
                                self._pending = err  # after the good records (R14)
                                break
                            except INTERRUPTS:
                                break  # a pipe ran dry: the records so far
                            if len(more) == 0:
                                break
                            parts.append(more)
                            got += len(more)
                        block = type(block).concatenate(parts)
                except _SkipFile as err:
                    self._handle(err)
                    continue
                if len(block) == 0:
                    if self._pending is None:
                        self._finish_unit(completed=True)
                    continue
                if self._unit is not None:
                    block = self._track(self._unit, block)
                    if len(block) == 0:  # every record filtered out (resumption)
                        if self._pending is None and self._exhausted():
                            self._finish_unit(completed=True)
                        continue
                self._records += len(block)
                if (
                    (len(block) < n or self._COMPLETE_EAGERLY)
                    and self._pending is None
                    and self._exhausted()
                ):
                    # A call that stops at an end of file has observed it (R5).
                    self._finish_unit(completed=True)
                return block

    def num_records_produced(self) -> int:
        """Records returned since creation or :meth:`reset` (R4)."""
        return self._records

    def num_work_units_completed(self) -> int:
        """Files whose end was observed since creation or :meth:`reset` (R4)."""
        return self._units

    def num_errors_skipped(self) -> int:
        """Errors skipped under ``on_error="skip"`` since creation or :meth:`reset`."""
        return self._skipped

    def reset(self) -> None:
        """Zero the counters and drop the current work unit (R6)."""
        with self._lock:
            self._close_stream()
            self._work_unit = None
            self._pending = None
            self._reopen = None
            self._unit = None
            self._records = self._units = self._skipped = 0

    def close(self) -> None:
        """Close the current file and end its read-ahead thread (idempotent).

        The reader stays usable and keeps its place: the next read reopens
        the file at the next record (see the class docstring). Waits for a
        read in progress on another thread; one waiting for a pipe's data is
        woken at once (it raises ``CancelledError``).
        """
        self._waiter.cancel()  # wake a read waiting for a pipe: it holds the lock
        with self._lock:
            try:
                if self._work_unit is not None and self._reopen is None:
                    stream = self._stream
                    if stream is not None and stream.streaming and stream.offset > 0:
                        # A pipe cannot be reopened where it was.
                        logger.warning(
                            "%s closed %s after %d bytes: the rest of it is not read",
                            self.name,
                            _name(self._work_unit),
                            stream.offset,
                        )
                        self._finish_unit(completed=False)
                    else:
                        # An error still to report is found again on reopening:
                        # the position is the bad record's (as in state_dict).
                        self._reopen = self._position()
                        self._pending = None
                self._close_stream()
            finally:
                self._waiter.reset()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serialize_state(self) -> dict[str, Any]:
        """TF1 name for :meth:`state_dict` (R7, implemented here)."""
        return self.state_dict()

    def restore_state(self, state: dict[str, Any]) -> None:
        """TF1 name for :meth:`load_state_dict`."""
        self.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        """The reader's position: current file, offset of the next record, counters.

        Returns:
            A plain dict (keys are the ``KEY_*`` class constants).
        """
        with self._lock:
            wu = self._work_unit
            state: dict[str, Any] = {
                self.KEY_READER: type(self).__name__,
                self.KEY_WORK_UNIT: wu,
                self.KEY_OFFSET: None,
                self.KEY_INDEX: None,
                self.KEY_RECORDS: self._records,
                self.KEY_UNITS: self._units,
                self.KEY_SKIPPED: self._skipped,
            }
            if wu is not None:
                # With an error still to report, the position is the bad
                # record's, so a restored reader reports it too.
                position = self._reopen if self._reopen is not None else self._position()
                state[self.KEY_OFFSET], state[self.KEY_INDEX] = position
            return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position saved by :meth:`state_dict` (re-opens the file).

        Raises:
            ValueError: the state is from another reader class or malformed.
            NotFoundError: the saved file no longer exists.
        """
        if state.get(self.KEY_READER) != type(self).__name__:
            raise ValueError(
                f"state is from {state.get(self.KEY_READER)!r}, not {type(self).__name__}"
            )
        with self._lock:
            self._close_stream()
            self._pending = None
            self._reopen = None
            self._work_unit = None
            self._unit = None
            self._records = int(state[self.KEY_RECORDS])
            self._units = int(state[self.KEY_UNITS])
            self._skipped = int(state[self.KEY_SKIPPED])
            wu = state[self.KEY_WORK_UNIT]
            if wu is not None:
                wu_b = wu if isinstance(wu, bytes) else str(wu).encode()
                self._work_unit = wu_b
                try:
                    self._open(wu_b)
                    self._seek(int(state[self.KEY_OFFSET]), int(state[self.KEY_INDEX]))
                except _SkipFile as err:
                    self._work_unit = None
                    self._close_stream()
                    raise err.error from None

    # ----------------------------------------------------- subclass interface
    def _open(self, work_unit: bytes) -> None:
        """Open ``work_unit`` (set ``self._stream`` etc.); raise ``_SkipFile`` on failure.

        Must not read: a pipe may have no data yet, and waits belong in
        :meth:`_next_block`, which can be interrupted and called again.
        """
        raise NotImplementedError

    def _next_block(self, n: int) -> Any:
        """Up to ``n`` records (a RecordBlock, or ColumnBlock for Parquet);
        an empty block at the end of the file.

        May set ``self._pending`` (an error after the returned records) or
        raise ``_SkipFile`` when no good record precedes the error. A wait
        for a pipe may raise ``DeadlineExceededError`` / ``CancelledError``:
        the reader's state must then let the next call go on (bytes read
        stay in the buffer).
        """
        raise NotImplementedError

    def _exhausted(self) -> bool:
        """True when the current file has no more records."""
        raise NotImplementedError

    def _position(self) -> tuple[int, int]:
        """(stream offset, key id) of the next record of the current file."""
        raise NotImplementedError

    def _seek(self, offset: int, index: int) -> None:
        """Move the freshly opened current file to a saved position."""
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers
    def _start_next(self, queue: FilenameQueue, timeout: float | None) -> None:
        item = queue.dequeue(timeout=timeout)
        wu = _as_work_unit(item)
        self._work_unit = wu
        self._unit = _positions.claim_unit()
        self._unit_next = 0
        try:
            self._open(wu)
        except _SkipFile as err:
            self._handle(err)

    def _reopen_unit(self) -> None:
        # After close(): the same file, at the next record.
        assert self._reopen is not None and self._work_unit is not None
        (offset, index), self._reopen = self._reopen, None
        try:
            self._open(self._work_unit)
            self._seek(offset, index)
        except _SkipFile as err:
            self._handle(err)

    def _handle(self, err: _SkipFile) -> None:
        # The one place a per-file error is raised or skipped (R8, R9, X6).
        wu = self._work_unit
        resume = err.resume if self.on_error == "skip" else None
        if resume is None:
            self._finish_unit(completed=False)
        if self.on_error == "raise":
            raise err.error
        self._skipped += 1
        where = f"{_name(wu)}:{err.offset}" if err.offset is not None else _name(wu)
        logger.warning("%s skipped %s: %s", self.name, where, err.error.message)
        if resume is not None:
            self._resync(resume)

    def _resync(self, offset: int) -> None:
        """Continue the current file at ``offset`` after a skipped record."""
        raise NotImplementedError

    def _track(self, unit: _positions.Unit, block: Any) -> Any:
        """Report the positions of ``block``'s records and drop those the
        unit's re-read filter excludes (resumable pipelines)."""
        first = self._unit_next
        self._unit_next += len(block)
        if unit.filter is None:  # the usual case: one arange of positions
            unit.report_range(first, len(block))
            return block
        records = np.arange(first, first + len(block), dtype=np.int64)
        mask = unit.filter.keep(records)
        if not mask.all():
            block = _subset(block, mask)
            records = records[mask]
        unit.report_rows(records)
        return block

    def _finish_unit(self, *, completed: bool) -> None:
        unit, self._unit = self._unit, None
        if unit is not None and (completed or self.on_error == "skip"):
            unit.report_size(self._unit_next)
        self._close_stream()
        self._work_unit = None
        self._pending = None
        self._reopen = None
        if completed:
            self._units += 1

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _subset(block: Any, mask: np.ndarray) -> Any:
    """The records of ``block`` where ``mask`` is True (same type of block)."""
    if isinstance(block, RecordBlock):
        return RecordBlock(
            block.work_unit,
            block.data,
            block.starts[mask],
            block.ends[mask],
            block.key_ids[mask],
            fixed=None if block.fixed is None else block.fixed[mask],
            bare_keys=block.bare_keys,
        )
    subset = getattr(block, "subset", None)
    if subset is None:
        raise InvalidArgumentError(
            f"resumption cannot filter the records of a {type(block).__name__}"
        )
    return subset(mask)


def _name(work_unit: bytes | None) -> str:
    return "<none>" if work_unit is None else work_unit.decode("utf-8", "backslashreplace")


def _as_work_unit(item: Any) -> bytes:
    # R1: the queue's elements must be single scalar strings.
    if isinstance(item, (list, tuple)):
        if len(item) != 1:
            raise InvalidArgumentError("Expected queue with single string component")
        item = item[0]
    if isinstance(item, np.ndarray):
        if item.shape != ():
            raise InvalidArgumentError("Expected queue with single string component")
        item = item.item()
    if isinstance(item, (bytes, np.bytes_)):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8", "surrogateescape")
    raise InvalidArgumentError(
        f"Expected queue with single string component, got {type(item).__name__}"
    )
