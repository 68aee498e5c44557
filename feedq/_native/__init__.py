"""feedq's native core: the per-record loops, compiled, with a pure-Python twin.

One API, two implementations with identical results and errors:

* ``feedq._native._core`` (C, built by ``pip install`` / ``python setup.py
  build_ext --inplace``; optional): the loops run with the GIL released over
  whole buffers;
* ``feedq._native._pure``: the same loops in Python, used when the extension
  is not built or ``FEEDQ_PURE_PYTHON=1`` is set in the environment.

:data:`CORE` says which one is in use (``"native"`` or ``"python"``).

Kernels (buffers in, NumPy arrays out; nothing here imports the rest of feedq):

* :func:`crc32c`, :func:`masked_crc32c` -- CRC32C (SSE4.2 instruction when
  the CPU has it, slicing-by-8 tables otherwise);
* :func:`scan_tfrecords` -- TFRecord framing with both CRCs checked;
* :func:`parse_examples` -- ``tf.train.Example`` records into columns;
* :func:`pad_ragged` -- values + row splits into a dense padded array;
* :func:`take_bytes` -- (start, end) offsets into a buffer -> bytes objects;
* :func:`find_byte` -- the positions of one byte value in a buffer (line
  ends: memchr, GIL released);
* :func:`read_window` -- a file's bytes read after the unread tail of a
  buffer, straight into one new bytes object (pread, GIL released).
* :func:`resample_bilinear` -- the box of an RGB image resampled (Pillow's
  antialiased bilinear, fixed point) into an output array, flip folded in;
* :func:`shuffle_take`, :func:`shuffle_sources` -- a RandomShuffleQueue's
  draws (partial Fisher-Yates against the tail): rows out of byte columns and
  the storage compacted in one call, or the same draws as index moves.

:data:`NATIVE` (None when the extension is not built) and :data:`PURE` are
the two implementations as :class:`Kernels` objects, for tests and
benchmarks that compare them.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from feedq._native import _pure
from feedq._native._api import (
    DEFAULT_MAX_RECORD_BYTES,
    EX_BAD_GROUP,
    EX_BAD_LENGTH,
    EX_BAD_PACKED,
    EX_BAD_TAG,
    EX_BAD_UTF8,
    EX_BAD_VARINT,
    EX_BAD_WIRE_TYPE,
    EX_OK,
    EX_REASONS,
    EX_TOO_DEEP,
    EX_TRUNCATED,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT64,
    SCAN_BAD_DATA_CRC,
    SCAN_BAD_LENGTH_CRC,
    SCAN_INCOMPLETE,
    SCAN_LENGTH_TOO_LARGE,
    SCAN_OK,
    FeatureRequest,
    Kernels,
    ParsedExamples,
    TFRecordScan,
)

__all__ = [
    "CORE",
    "DEFAULT_MAX_RECORD_BYTES",
    "EX_BAD_GROUP",
    "EX_BAD_LENGTH",
    "EX_BAD_PACKED",
    "EX_BAD_TAG",
    "EX_BAD_UTF8",
    "EX_BAD_VARINT",
    "EX_BAD_WIRE_TYPE",
    "EX_OK",
    "EX_REASONS",
    "EX_TOO_DEEP",
    "EX_TRUNCATED",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT64",
    "NATIVE",
    "NATIVE_IMPORT_ERROR",
    "PURE",
    "SCAN_BAD_DATA_CRC",
    "SCAN_BAD_LENGTH_CRC",
    "SCAN_INCOMPLETE",
    "SCAN_LENGTH_TOO_LARGE",
    "SCAN_OK",
    "FeatureRequest",
    "Kernels",
    "ParsedExamples",
    "TFRecordScan",
    "crc32c",
    "find_byte",
    "masked_crc32c",
    "pad_ragged",
    "parse_examples",
    "read_window",
    "resample_bilinear",
    "scan_tfrecords",
    "shuffle_sources",
    "shuffle_take",
    "take_bytes",
]

#: The environment variable that forces the pure-Python twin (any value but "" or "0").
PURE_PYTHON_ENV = "FEEDQ_PURE_PYTHON"


def _load_native() -> tuple[ModuleType | None, str | None]:
    try:
        core = importlib.import_module(f"{__name__}._core")
    except ImportError as exc:  # not built (or built for another Python)
        return None, str(exc)
    return core, None


_core_module, NATIVE_IMPORT_ERROR = _load_native()
#: The compiled kernels, or None when the extension is not built.
NATIVE: Kernels | None = (
    Kernels(_core_module, "native", fallback=_pure) if _core_module is not None else None
)
#: The pure-Python twin.
PURE: Kernels = Kernels(_pure, "python")

_forced_pure = os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")
_ACTIVE: Kernels = PURE if (_forced_pure or NATIVE is None) else NATIVE

#: ``"native"`` (the C core) or ``"python"`` (the twin).
CORE: str = _ACTIVE.name

crc32c = _ACTIVE.crc32c
masked_crc32c = _ACTIVE.masked_crc32c
scan_tfrecords = _ACTIVE.scan_tfrecords
parse_examples = _ACTIVE.parse_examples
pad_ragged = _ACTIVE.pad_ragged
take_bytes = _ACTIVE.take_bytes
find_byte = _ACTIVE.find_byte
read_window = _ACTIVE.read_window
resample_bilinear = _ACTIVE.resample_bilinear
shuffle_take = _ACTIVE.shuffle_take
shuffle_sources = _ACTIVE.shuffle_sources
