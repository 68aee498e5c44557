"""ParquetReader (beyond TF1): row groups as columns, keys ``file:row``."""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from feedq.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.readers._base import DEFAULT_BLOCK_BYTES, FilenameQueue, OnError, ReaderBase
from feedq.readers._io import path_of
from feedq.readers._skip import _SkipFile
from feedq.storage import RandomAccess, is_remote

__all__ = ["ColumnBlock", "ParquetReader"]

#: What pyarrow raises for corrupt bytes: its own errors, OS errors, and a
#: ``UnicodeDecodeError`` where it decodes names from the footer itself.
_CORRUPT = (pa.ArrowException, OSError, UnicodeDecodeError)


@dataclass(frozen=True, eq=False)
class ColumnBlock:
    """Rows of one Parquet file as columns.

    Attributes:
        work_unit: the filename (bytes).
        batch: the rows as a ``pyarrow.RecordBatch``.
        key_ids: int64 ``[k]`` row numbers in the file (0-based).
    """

    work_unit: bytes
    batch: pa.RecordBatch
    key_ids: np.ndarray
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def keys(self) -> np.ndarray:
        """``[k]`` object array of ``b"file:row"``."""
        prefix = self.work_unit + b":"
        out = np.empty(len(self), dtype=object)
        out[:] = [prefix + b"%d" % i for i in self.key_ids.tolist()]
        return out

    def values(self) -> dict[str, np.ndarray]:
        """The columns as NumPy arrays (zero-copy for numeric columns without nulls)."""
        cols = self._cache.get("values")
        if cols is None:
            cols = {
                name: col.to_numpy(zero_copy_only=False)
                for name, col in zip(self.batch.schema.names, self.batch.columns)
            }
            self._cache["values"] = cols
        return cols

    def subset(self, mask: np.ndarray) -> ColumnBlock:
        """The rows where ``mask`` is True (a re-read in a resumed pipeline)."""
        return ColumnBlock(self.work_unit, self.batch.filter(pa.array(mask)), self.key_ids[mask])

    @staticmethod
    def concatenate(blocks: list[ColumnBlock]) -> ColumnBlock:
        """Join blocks of one file."""
        if len(blocks) == 1:
            return blocks[0]
        table = pa.Table.from_batches([b.batch for b in blocks]).combine_chunks()
        batch = table.to_batches()[0] if table.num_rows else blocks[0].batch
        return ColumnBlock(
            blocks[0].work_unit, batch, np.concatenate([b.key_ids for b in blocks])
        )


class ParquetReader(ReaderBase):
    """Reads Parquet files as column blocks (beyond TF1).

    ``read_up_to`` returns ``(keys, columns)`` where ``columns`` maps column
    names to ``[k]`` NumPy arrays; ``read_block`` returns a
    :class:`ColumnBlock` holding a ``pyarrow.RecordBatch``. Keys are
    ``b"<filename>:<row>"``. pyarrow decodes one row group at a time, so
    memory follows the row-group size, not the file size.

    A corrupt row group (bad pages, invalid UTF-8 in a string column) raises
    ``DataLossError`` naming the file and the row group, after the rows
    before it; with ``on_error="skip"`` it is counted and logged and reading
    goes on with the next row group (keys keep the true row numbers). A
    corrupt footer (a column name that is not UTF-8 included) is a
    ``DataLossError`` naming the file, and the reader moves on to the next.

    Args:
        columns: the columns to read (None = all).
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
        block_bytes: unused by Parquet beyond validation; rows per pyarrow
            batch are capped by the ``num_records`` asked for.
        name: a name for logs.
    """

    def __init__(
        self,
        columns: Sequence[str] | None = None,
        *,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str | None = None,
    ) -> None:
        # Before super().__init__, which may hand the reader to a closing scope.
        self._pf: Any = None
        self._batches: deque[pa.RecordBatch] = deque()  # of the current row group
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        self.columns = list(columns) if columns is not None else None
        self._row = 0  # next row of the current file
        self._group_rows: list[int] = []  # rows per row group of the current file
        self._group = 0  # the next row group to read
        self._group_first = 0  # its first row
        self._drop = 0  # rows of it before the position (a restored state)

    def read_up_to(  # type: ignore[override]
        self, queue: FilenameQueue, num_records: int, timeout: float | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Read 1..``num_records`` rows of one file.

        Returns:
            ``(keys, columns)``: ``[k]`` keys and a dict of ``[k]`` arrays.

        Raises:
            OutOfRangeError: the queue is closed and empty.
            NotFoundError / DataLossError: a missing or corrupt file (once).
        """
        block = self.read_block(queue, num_records, timeout=timeout, fill=True)
        return block.keys(), block.values()

    def read(self, queue: FilenameQueue, timeout: float | None = None) -> tuple[bytes, Any]:
        """Read one row: ``(key, {column: value})``."""
        keys, cols = self.read_up_to(queue, 1, timeout=timeout)
        return keys[0], {k: v[0] for k, v in cols.items()}

    def _open(self, work_unit: bytes) -> None:
        self._open_at(work_unit, 0)

    def _open_at(self, work_unit: bytes, row: int) -> None:
        import pyarrow.parquet as pq

        name = path_of(work_unit)
        if is_remote(name):
            self._open_remote(name, row)
            return
        try:
            st = os.stat(name)
        except FileNotFoundError:
            raise _SkipFile(NotFoundError(f"{name}; No such file or directory"), None) from None
        except OSError as exc:
            raise _SkipFile(DataLossError(f"{name}; {exc.strerror or exc}"), None) from None
        if not stat.S_ISREG(st.st_mode):
            # Parquet needs to seek (its footer is at the end); opening a FIFO
            # would also block until a writer came.
            raise _SkipFile(
                DataLossError(f"{name}: not a regular file (Parquet files must be seekable)"), 0
            )
        try:
            pf = pq.ParquetFile(name)
        except FileNotFoundError:
            raise _SkipFile(NotFoundError(f"{name}; No such file or directory"), None) from None
        except _CORRUPT as exc:
            # A corrupt footer: pyarrow raises its own errors, or (a column
            # name that is not UTF-8) a UnicodeDecodeError of its own.
            raise _SkipFile(DataLossError(f"{name}: not a readable Parquet file: {exc}"), 0) from None
        self._use(pf, name, row)

    def _open_remote(self, name: str, row: int) -> None:
        # A seekable file over range requests, each retried (feedq.storage);
        # pyarrow never sees the URL, so it cannot decompress by extension.
        import pyarrow.parquet as pq

        try:
            source = RandomAccess(name)
        except NotFoundError as exc:
            raise _SkipFile(exc, None) from None
        except (PermissionDeniedError, UnavailableError, InvalidArgumentError) as exc:
            raise _SkipFile(exc, None) from None
        try:
            pf = pq.ParquetFile(source)
        except DataLossError as exc:
            source.close()
            raise _SkipFile(exc, 0) from None
        except _CORRUPT as exc:
            source.close()
            raise _SkipFile(DataLossError(f"{name}: not a readable Parquet file: {exc}"), 0) from None
        self._use(pf, name, row)

    def _use(self, pf: Any, name: str, row: int) -> None:
        try:
            md = pf.metadata
            group_rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        except _CORRUPT as exc:
            pf.close()
            raise _SkipFile(DataLossError(f"{name}: not a readable Parquet file: {exc}"), 0) from None
        self._pf = pf
        self._group_rows = group_rows
        self._seek_row(row)

    def _seek_row(self, row: int) -> None:
        # Start at the row group holding `row`; drop the rows before it.
        first, g = 0, 0
        while g < len(self._group_rows) and first + self._group_rows[g] <= row:
            first += self._group_rows[g]
            g += 1
        self._group = g  # the next row group to read
        self._group_first = first  # its first row
        self._row = row
        self._drop = row - first
        self._batches.clear()

    def _read_group(self) -> bool:
        """Queue the batches of the next row group; False after the last one.

        The whole group is read and validated (UTF-8 of string columns
        included) before any of its rows is returned, so a corrupt group is
        reported as a unit, naming it, with the rows before it delivered and
        -- with ``on_error="skip"`` -- the groups after it read on.
        """
        g = self._group
        if g >= len(self._group_rows):
            return False
        first, nrows = self._group_first, self._group_rows[g]
        try:
            table = self._pf.read_row_group(g, columns=self.columns)
            table.validate(full=True)
        except (DataLossError, *_CORRUPT) as exc:
            name = path_of(self._work_unit or b"")
            what = (f"row group {g} (rows {first}-{first + nrows - 1}) could not be read"
                    if isinstance(exc, DataLossError)  # a store's read past its retry budget
                    else f"corrupt Parquet data in row group {g} (rows {first}-{first + nrows - 1})")
            raise _SkipFile(
                DataLossError(f"{name}: {what}: {exc}"),
                first,
                resume=first + nrows,
            ) from None
        self._group, self._group_first = g + 1, first + nrows
        batches = table.to_batches(max_chunksize=65536)
        drop, self._drop = self._drop, 0
        for b in batches:
            if drop:
                cut = min(drop, b.num_rows)
                b = b.slice(cut)
                drop -= cut
            if b.num_rows:
                self._batches.append(b)
        return True

    def _next_batch(self) -> pa.RecordBatch | None:
        while not self._batches:
            if not self._read_group():
                return None
        return self._batches.popleft()

    def _next_block(self, n: int) -> ColumnBlock:
        wu = self._work_unit
        assert wu is not None
        b = self._next_batch()
        if b is None:
            schema = self._pf.schema_arrow
            if self.columns is not None:
                schema = pa.schema([schema.field(c) for c in self.columns])
            empty = pa.RecordBatch.from_pylist([], schema=schema)
            return ColumnBlock(wu, empty, np.zeros(0, dtype=np.int64))
        if b.num_rows > n:
            self._batches.appendleft(b.slice(n))
            b = b.slice(0, n)
        ids = np.arange(self._row, self._row + b.num_rows, dtype=np.int64)
        self._row += b.num_rows
        return ColumnBlock(wu, b, ids)

    def _exhausted(self) -> bool:
        if self._pf is None:
            return True
        return bool(self._row >= self._pf.metadata.num_rows)

    def _position(self) -> tuple[int, int]:
        return self._row, self._row

    def _seek(self, offset: int, index: int) -> None:
        self._seek_row(index)

    def _close_stream(self) -> None:
        # The ParquetFile holds the open file, not self._stream.
        super()._close_stream()
        pf, self._pf = self._pf, None
        self._batches.clear()
        if pf is not None:
            pf.close()

    def _resync(self, offset: int) -> None:
        # on_error="skip": go on with the row group after the corrupt one.
        self._seek_row(offset)
