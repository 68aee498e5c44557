"""ParquetReader (beyond TF1): row groups as columns, keys ``file:row``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from feedq.errors import DataLossError
from feedq.readers._base import DEFAULT_BLOCK_BYTES, FilenameQueue, OnError, ReaderBase, _SkipFile
from feedq.readers._io import path_of

__all__ = ["ColumnBlock", "ParquetReader"]


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
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        self.columns = list(columns) if columns is not None else None
        self._pf: Any = None
        self._row = 0  # next row of the current file
        self._pending_batch: pa.RecordBatch | None = None
        self._iter: Any = None

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

        from feedq.errors import NotFoundError

        name = path_of(work_unit)
        try:
            pf = pq.ParquetFile(name)
        except FileNotFoundError:
            raise _SkipFile(NotFoundError(f"{name}; No such file or directory"), None) from None
        except (pa.ArrowException, OSError) as exc:
            raise _SkipFile(DataLossError(f"{name}: not a readable Parquet file: {exc}"), 0) from None
        self._pf = pf
        self._row = row
        # Start at the row group holding `row`, then drop the rows before it.
        groups, first = [], 0
        md = pf.metadata
        for g in range(md.num_row_groups):
            nrows = md.row_group(g).num_rows
            if first + nrows > row:
                groups.append(g)
            else:
                first += nrows
        self._iter = pf.iter_batches(batch_size=65536, row_groups=groups, columns=self.columns)
        self._pending_batch = None
        self._drop = row - first

    def _next_batch(self) -> pa.RecordBatch | None:
        if self._pending_batch is not None:
            b, self._pending_batch = self._pending_batch, None
            return b
        try:
            while True:
                b = next(self._iter)
                if self._drop:
                    cut = min(self._drop, b.num_rows)
                    b = b.slice(cut)
                    self._drop -= cut
                if b.num_rows:
                    return b
        except StopIteration:
            return None
        except (pa.ArrowException, OSError) as exc:
            name = path_of(self._work_unit or b"")
            raise _SkipFile(
                DataLossError(f"{name}: corrupt Parquet data after row {self._row}: {exc}"),
                self._row,
            ) from None

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
            self._pending_batch = b.slice(n)
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
        assert self._work_unit is not None
        self._close_stream()
        self._open_at(self._work_unit, index)

    def _close_stream(self) -> None:
        # The ParquetFile holds the open file, not self._stream.
        super()._close_stream()
        pf, self._pf = self._pf, None
        self._iter = None
        self._pending_batch = None
        if pf is not None:
            pf.close()

    def _resync(self, offset: int) -> None:  # pragma: no cover - never resyncs
        raise NotImplementedError
