"""Readers (file cursors over a filename queue) and decoders (pure functions).

Readers follow TF1 (spec section 5, R1-R15) and add a batch-first block API,
``read_block``, that hands decoders one buffer per block instead of one
Python object per record; bad files are reported once and skipped past
(R9/X6), and every reader can save and restore its position.

Decoders (sections 6-7: D1-D9, P1-P4) take single records, arrays of
records, or a reader's :class:`RecordBlock`::

    reader = TextLineReader(skip_header_lines=1)
    block = reader.read_block(filename_queue, 4096)
    x1, x2, label = decode_csv(block, record_defaults=[[0.0], [0.0], [0]])
"""

from __future__ import annotations

from feedq.readers._base import ReaderBase, RecordBlock
from feedq.readers._csv import decode_csv
from feedq.readers._example import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    SparseTensorValue,
    VarLenFeature,
    parse_example,
    parse_single_example,
)
from feedq.readers._example_pb import serialize_example
from feedq.readers._fixed import FixedLengthRecordReader
from feedq.readers._parquet import ColumnBlock, ParquetReader
from feedq.readers._raw import decode_raw
from feedq.readers._text import TextLineReader
from feedq.readers._tfrecord import (
    TFRecordCompressionType,
    TFRecordOptions,
    TFRecordReader,
    TFRecordWriter,
    tf_record_iterator,
)
from feedq.readers._whole import WholeFileReader

__all__ = [
    "ColumnBlock",
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "FixedLengthRecordReader",
    "ParquetReader",
    "ReaderBase",
    "RecordBlock",
    "SparseTensorValue",
    "TFRecordCompressionType",
    "TFRecordOptions",
    "TFRecordReader",
    "TFRecordWriter",
    "TextLineReader",
    "VarLenFeature",
    "WholeFileReader",
    "decode_csv",
    "decode_raw",
    "parse_example",
    "parse_single_example",
    "serialize_example",
    "tf_record_iterator",
]

# Show the public path in reprs and docs (feedq.readers.TextLineReader, not
# feedq.readers._text.TextLineReader).
for _name in __all__:
    _obj = globals()[_name]
    try:
        _obj.__module__ = __name__
    except (AttributeError, TypeError):  # pragma: no cover - builtins
        pass
del _name, _obj
