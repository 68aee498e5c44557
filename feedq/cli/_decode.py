"""Blocks of records -> a schema's columns, for ``feedq bench`` and ``feedq inspect``.

A :class:`Decoder` decodes a reader's block in one call (``decode_csv``,
``parse_example``, ``decode_raw``) and also returns each delivered record's
payload bytes, so that throughput counts exactly the records handed on.

Bad records -- a CSV row with the wrong field count or a number that does not
parse, bytes that are not an Example, an Example without a required feature
-- fail the block's one call. The decoder then finds them by bisection
(decoding halves, O(bad * log n) calls, the good halves in bulk) and, with
``on_error="raise"``, raises for the first one, naming its file and line
(CSV) or byte offset (TFRecord); with ``"skip"`` it logs each one on the
``feedq.decode`` logger (the first 100), counts it and decodes the rest.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from feedq.cli._schema import OnError, Schema
from feedq.errors import InvalidArgumentError
from feedq.readers import VarLenFeature, decode_csv, decode_raw, parse_example

__all__ = ["Decoder"]

logger = logging.getLogger("feedq.decode")

#: Bad records logged per decoder; later ones are only counted.
LOG_LIMIT = 100
_RECORD_IN_MESSAGE = re.compile(r",? in record \d+")


class Decoder:
    """``decoder(block) -> (columns, payload bytes per record)`` for a schema.

    Thread-safe: reader threads share one decoder.

    Args:
        schema: what to decode.
        on_error: ``"raise"`` or ``"skip"`` bad records (see the module docstring).
    """

    def __init__(self, schema: Schema, on_error: OnError = "raise") -> None:
        self.schema = schema
        self.on_error = on_error
        self._decode = _columns_function(schema)
        self._lock = threading.Lock()
        self._skipped = 0  # guarded by self._lock

    @property
    def skipped(self) -> int:
        """Bad records skipped so far."""
        with self._lock:
            return self._skipped

    def __call__(self, block: Any) -> tuple[list[np.ndarray], np.ndarray]:
        """The block's columns and the payload bytes of each record in them.

        Raises:
            InvalidArgumentError: a bad record (``on_error="raise"``), naming
                file and line or offset.
        """
        cols, lengths, _ = self.decode(block)
        return cols, lengths

    def decode(self, block: Any, limit: int | None = None
               ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray | None]:
        """Like calling the decoder, for the first ``limit`` records only
        when given, and also returning the indices of the records kept
        (None: all of them).
        """
        fmt = self.schema.fmt
        if fmt not in ("csv", "tfrecord"):  # nothing here can be a bad record
            cols = self._decode(block)
            if fmt == "parquet":
                row = sum(c.dtype.itemsize for c in cols if c.dtype != object)
                lengths = np.full(len(block), row, dtype=np.int64)
            else:
                lengths = block.lengths.astype(np.int64, copy=False)
            if limit is not None:
                return [c[:limit] for c in cols], lengths[:limit], None
            return cols, lengths, None
        lengths = block.lengths.astype(np.int64, copy=False)
        records = block if limit is None else block.values()[:limit]
        if limit is not None:
            lengths = lengths[:limit]
        try:
            return self._decode(records), lengths, None
        except InvalidArgumentError as exc:
            first_error = exc
        values = block.values()[:limit]
        if self.on_error == "raise":
            found = self._first_bad(values, 0, first_error)
            if found is None:  # no single record fails alone: report the block
                raise InvalidArgumentError(f"{self.where(block, 0)}: {_text(first_error)}") from first_error
            i, err = found
            raise InvalidArgumentError(f"{self.where(block, i)}: {_text(err)}") from None
        bad = self._all_bad(values, 0, first_error)
        if not bad:
            raise first_error
        keep = np.ones(len(values), dtype=bool)
        for i, _ in bad:
            keep[i] = False
        with self._lock:
            start = self._skipped
            self._skipped += len(bad)
        for n, (i, err) in enumerate(bad, start):
            if n < LOG_LIMIT:
                logger.warning("skipped %s: %s", self.where(block, i), _text(err))
            elif n == LOG_LIMIT:
                logger.warning("more bad records: counted, no longer logged")
        return self._decode(values[keep]), lengths[keep], np.flatnonzero(keep)

    # Bisection: a slice that decodes is good as a whole.
    def _fails(self, values: np.ndarray) -> InvalidArgumentError | None:
        try:
            self._decode(values)
        except InvalidArgumentError as exc:
            return exc
        return None

    def _first_bad(self, values: np.ndarray, offset: int,
                   known: InvalidArgumentError | None = None) -> tuple[int, InvalidArgumentError] | None:
        err = known or self._fails(values)
        if err is None:
            return None
        if len(values) == 1:
            return offset, err
        mid = len(values) // 2
        return self._first_bad(values[:mid], offset) or self._first_bad(values[mid:], offset + mid)

    def _all_bad(self, values: np.ndarray, offset: int,
                 known: InvalidArgumentError | None = None) -> list[tuple[int, InvalidArgumentError]]:
        err = known or self._fails(values)
        if err is None:
            return []
        if len(values) == 1:
            return [(offset, err)]
        mid = len(values) // 2
        return self._all_bad(values[:mid], offset) + self._all_bad(values[mid:], offset + mid)

    def where(self, block: Any, i: int) -> str:
        """Record ``i`` of ``block`` for messages: ``file:line`` or ``file: record at byte N``."""
        path = block.work_unit.decode("utf-8", "backslashreplace")
        key = int(block.key_ids[i])
        if self.schema.fmt == "csv":
            return f"{path}:{key}"  # the line number
        return f"{path}: record at byte {key}"


def _text(err: InvalidArgumentError, limit: int = 300) -> str:
    lines = _RECORD_IN_MESSAGE.sub("", err.message or str(err)).splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _columns_function(schema: Schema) -> Callable[[Any], list[np.ndarray]]:
    """``records -> columns``; records are a block or an object array of records."""
    fmt = schema.fmt
    if fmt == "csv":
        defaults = schema.record_defaults
        return lambda records: decode_csv(records, record_defaults=defaults)
    if fmt == "tfrecord" and schema.features:
        features, names = schema.features, schema.names
        widths = schema.widths if schema.pad_varlen else {}

        def example(records: Any) -> list[np.ndarray]:
            parsed = parse_example(records, features)
            cols = []
            for n in names:
                v = parsed[n]
                if isinstance(features[n], VarLenFeature):
                    # Ragged values: pad to the longest here (dynamic_pad does
                    # the rest), or to the schema's width.
                    rows, longest = (int(d) for d in v.dense_shape)
                    width = widths.get(n, longest)
                    if longest > width:
                        raise InvalidArgumentError(
                            f"feature {n}: {longest} values, more than the {width} of the longest in the "
                            "schema's sample (a larger --sample may find it)")
                    fill: Any = b"" if v.values.dtype == object else 0
                    dense = np.full((rows, width), fill, dtype=v.values.dtype)
                    dense[v.indices[:, 0], v.indices[:, 1]] = v.values
                    v = dense
                cols.append(v)
            return cols

        return example
    if fmt == "fixed":
        return lambda block: [decode_raw(block, np.uint8)]
    if fmt == "parquet":
        names = schema.names

        def parquet(block: Any) -> list[np.ndarray]:
            vals = block.values()
            return [vals[n] for n in names]

        return parquet
    # lines, raw TFRecords: the record lengths
    return lambda block: [block.lengths.astype(np.int64)]
