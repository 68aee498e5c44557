"""Readers (file cursors over a filename queue) and decoders (pure functions).

Readers follow TF1 (spec section 5, R1-R15); decoders follow sections 6-7
(D1-D9, P1-P4). TF1 code ports with the same names::

    reader = TextLineReader(skip_header_lines=1)
    key, value = reader.read(filename_queue)           # b"file.csv:2", b"1.0,2.0,0"
    x1, x2, y = decode_csv(value, record_defaults=[[0.0], [0.0], [0]])

The block API (batch-first, X10)
--------------------------------
``reader.read_block(queue, n)`` returns up to ``n`` consecutive records of
ONE file as a :class:`RecordBlock`: the read buffer (``data``, immutable
bytes) plus int64 arrays ``starts`` / ``ends`` / ``key_ids`` -- no Python
object per record. Every decoder accepts a block and decodes it in one call:

* ``decode_csv(block, ...)`` hands the block's byte ``span`` (its lines,
  newlines included) to ``pyarrow.csv`` in one call;
* ``decode_raw(block, dtype)`` views ``block.fixed`` (``[k, record_bytes]``
  uint8, a view of the buffer for back-to-back fixed-length records, a
  strided view for equal-length TFRecords) with ``np.frombuffer`` semantics;
* ``parse_example(block, features)`` walks the serialized Examples in place.

``read_block`` may return fewer than ``n`` records at a buffer boundary
(``block_bytes``, default 4 MiB, at most 16 MiB, which bounds a reader's
memory whatever the file size) as well as at the end of a file; pass
``fill=True`` -- or use ``read_up_to`` -- for TF1's "fewer only at the end of
a file". Blocks stay valid after later reads (buffers are never reused).
``block.keys()`` / ``block.values()`` materialise TF1's object arrays.

Bad input is reported once and then skipped past: ``NotFoundError`` for a
missing file, ``DataLossError`` naming file and byte offset for a corrupt or
truncated record (file and row group for Parquet), after the good records
before it (R8, R9, R12, X6); ``on_error="skip"`` logs and counts instead.
``decode_csv`` names a bad line of a reader's block by its key
(``file.csv:20002``).

WebDataset-style tar shards: ``TarReader`` gives one record per sample
(members grouped by key) as a ``TarBlock``; ``block["jpg"]`` is a
``RecordBlock`` of that field for the image decoders (``feedq.image``).

Compression: ``""``, ``"GZIP"``, ``"ZLIB"``, and ``"ZSTD"`` with the
``zstd`` extra (``pip install "feedq[zstd]"``), for TFRecord, text and
fixed-length files alike. Named pipes, devices and ``/proc`` files are
streamed to their end; waiting for their data honours the read's
``timeout`` and ``close()``. ``state_dict()`` /
``load_state_dict()`` save and restore a reader's file, offset and counters.
``reader.close()`` (or ``with reader:``) closes the current file and ends its
read-ahead thread at once; the reader keeps its place, and its next read
reopens the file at the next record.
"""

from __future__ import annotations

from feedq._native import masked_crc32c
from feedq.readers._base import ReaderBase
from feedq.readers._block import RecordBlock
from feedq.readers._csv import decode_csv
from feedq.readers._example import parse_example, parse_single_example
from feedq.readers._example_pb import (
    example_class,
    sequence_example_class,
    serialize_example,
    serialize_sequence_example,
)
from feedq.readers._example_spec import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedTensorValue,
    SparseFeature,
    SparseTensorValue,
    VarLenFeature,
)
from feedq.readers._fixed import FixedLengthRecordReader
from feedq.readers._parquet import ColumnBlock, ParquetReader
from feedq.readers._raw import decode_raw
from feedq.readers._sequence_example import parse_sequence_example, parse_single_sequence_example
from feedq.readers._tar import TarBlock, TarReader
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
    "RaggedFeature",
    "RaggedTensorValue",
    "ReaderBase",
    "RecordBlock",
    "SparseFeature",
    "SparseTensorValue",
    "TFRecordCompressionType",
    "TFRecordOptions",
    "TFRecordReader",
    "TFRecordWriter",
    "TarBlock",
    "TarReader",
    "TextLineReader",
    "VarLenFeature",
    "WholeFileReader",
    "decode_csv",
    "decode_raw",
    "example_class",
    "masked_crc32c",
    "parse_example",
    "parse_sequence_example",
    "parse_single_example",
    "parse_single_sequence_example",
    "sequence_example_class",
    "serialize_example",
    "serialize_sequence_example",
    "tf_record_iterator",
]

# masked_crc32c (TFRecord's checksum) is the native core's (feedq._native:
# the C core, or its pure-Python twin), the one CRC32C of feedq; it is
# exported here for TFRecord writers outside this package (feedq.cli.datasets).

# Show the public path in reprs and docs (feedq.readers.TextLineReader, not
# feedq.readers._text.TextLineReader).
for _name in __all__:
    _obj = globals()[_name]
    try:
        _obj.__module__ = __name__
    except (AttributeError, TypeError):  # pragma: no cover - builtins
        pass
del _name, _obj
