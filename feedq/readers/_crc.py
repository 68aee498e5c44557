"""Masked CRC32C as TFRecord files use it (R14).

The checksum comes from a maintained C-backed package (``crc32c``, or
``google-crc32c``), imported on first use so that ``import feedq`` works
without either; a Python loop would be ~100x slower than the reading it
guards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["crc32c_function", "mask_crc_array", "masked_crc32c"]

_MASK_DELTA = 0xA282EAD8
_crc_fn: Callable[[bytes | memoryview], int] | None = None


def crc32c_function() -> Callable[[bytes | memoryview], int]:
    """The CRC32C implementation: ``crc32c.crc32c`` or ``google_crc32c.value``.

    Raises:
        ImportError: neither package is installed (one clear message).
    """
    global _crc_fn
    if _crc_fn is not None:
        return _crc_fn
    try:
        import crc32c as _c  # ICRAR crc32c: hardware accelerated, accepts buffers

        fn: Callable[[bytes | memoryview], int] = _c.crc32c
    except ImportError:
        try:
            import google_crc32c as _g

            fn = _g.value
        except ImportError as exc:
            raise ImportError(
                "TFRecord files need a CRC32C package: pip install crc32c "
                "(or google-crc32c)"
            ) from exc
    _crc_fn = fn
    return fn


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC32C of ``data`` (R14)."""
    crc = crc32c_function()(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def mask_crc_array(crcs: np.ndarray) -> np.ndarray:
    """Mask an array of raw CRC32C values at once (uint32 in, uint32 out)."""
    c = crcs.astype(np.uint32, copy=False)
    return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)
