"""RecordBlock: up to ``n`` records of one file in one buffer, the batch-first unit.

A block is one contiguous buffer plus record offsets, so decoders turn a
whole block into columns without making a Python object per record (X10);
``keys()`` and ``values()`` materialise the TF1 API's object arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RecordBlock"]


@dataclass(frozen=True, eq=False)
class RecordBlock:
    """Up to ``n`` consecutive records of one work unit, without per-record objects.

    Record ``i`` is ``data[starts[i]:ends[i]]``; its key is
    ``work_unit + b":" + str(key_ids[i])`` (line number, record index, byte
    offset or row, depending on the reader). For fixed-length records,
    ``fixed`` is a ``[k, record_bytes]`` uint8 array (a view of ``data`` when
    the records are contiguous), which ``decode_raw`` turns into numbers with
    no per-record loop. For text lines, ``span`` is the byte range of ``data``
    holding exactly these lines (newlines included), which ``decode_csv``
    hands to pyarrow in one call.

    Attributes:
        work_unit: the filename the records come from, as dequeued (bytes).
        data: the buffer holding the records (read-only bytes).
        starts: int64 ``[k]`` record starts in ``data``.
        ends: int64 ``[k]`` record ends in ``data`` (exclusive).
        key_ids: int64 ``[k]`` the numbers in the keys.
        fixed: ``[k, L]`` uint8 array when every record has length ``L``, or None.
        span: ``(start, end)`` of the lines in ``data`` (text blocks only), or None.
    """

    work_unit: bytes
    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    key_ids: np.ndarray
    fixed: np.ndarray | None = None
    span: tuple[int, int] | None = None
    bare_keys: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[k]`` record lengths."""
        out: np.ndarray = self.ends - self.starts
        return out

    def keys(self) -> np.ndarray:
        """The keys as a ``[k]`` object array of bytes (``b"file:id"``)."""
        if self.bare_keys:
            # WholeFileReader: the key is the work unit exactly (R15).
            return _object_array([self.work_unit] * len(self))
        prefix = self.work_unit + b":"
        return _object_array([prefix + b"%d" % i for i in self.key_ids.tolist()])

    def values(self) -> np.ndarray:
        """The records as a ``[k]`` object array of bytes."""
        cached = self._cache.get("values")
        if cached is None:
            if self.fixed is not None and self.fixed.shape[1] == 0:
                cached = _object_array([b""] * len(self))
            elif self.fixed is not None:
                buf = self.fixed.tobytes()
                width = self.fixed.shape[1]
                cached = _object_array([buf[i : i + width] for i in range(0, len(buf), width)])
            else:
                d = self.data
                cached = _object_array(
                    [d[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist())]
                )
            self._cache["values"] = cached
        return cached

    @staticmethod
    def concatenate(blocks: list[RecordBlock]) -> RecordBlock:
        """Join blocks of the same work unit into one (copies the records)."""
        if len(blocks) == 1:
            return blocks[0]
        lengths = np.concatenate([b.lengths for b in blocks])
        data = b"".join(
            b.data[int(b.starts[0]) : int(b.ends[-1])] if _dense(b) else b"".join(b.values())
            for b in blocks
        )
        ends = np.cumsum(lengths)
        starts = ends - lengths
        fixed = None
        parts = [b.fixed for b in blocks if b.fixed is not None]
        if len(parts) == len(blocks) and len({p.shape[1] for p in parts}) == 1:
            fixed = np.concatenate(parts)
        return RecordBlock(
            blocks[0].work_unit,
            data,
            starts,
            ends,
            np.concatenate([b.key_ids for b in blocks]),
            fixed=fixed,
        )


def _dense(b: RecordBlock) -> bool:
    # True when the records are back to back in b.data (no separators).
    if len(b) == 0:
        return True
    return bool(np.all(b.starts[1:] == b.ends[:-1]))


def _object_array(items: list[bytes]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _empty_block(work_unit: bytes) -> RecordBlock:
    z = np.zeros(0, dtype=np.int64)
    return RecordBlock(work_unit, b"", z, z, z)
