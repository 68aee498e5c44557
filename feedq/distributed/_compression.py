"""Optional lossy wire compression of float batches (the seed's "Bandwidth" cell).

Dropping float32 to float16 or bfloat16 halves the bytes on the wire; 8-bit
quantisation (per-array min/max, 256 levels) quarters them. Only floating
components are touched; everything else travels exactly. The default is
exact transfer (no codec).

An array the codec cannot represent faithfully travels exactly instead (and
is counted in :attr:`WireStatistics.uncompressed_arrays`): one with NaN or
infinite values (int8 would turn the whole array into NaN), or, for float16,
one with finite values beyond float16's range (they would become inf).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CODECS", "Encoded", "WireStatistics", "check_codec", "decode", "encode"]

CODECS = ("float16", "bfloat16", "int8")


@dataclass(frozen=True)
class Encoded:
    """A float array in wire form."""

    codec: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]
    lo: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class WireStatistics:
    """Bytes of float components before and after the codec.

    Attributes:
        raw_bytes: bytes the float components would have taken exactly.
        wire_bytes: bytes they took on the wire.
        saved_bytes: ``raw_bytes - wire_bytes``.
        uncompressed_arrays: float arrays sent exactly although a codec was
            set, because it could not represent them (non-finite values, or
            values beyond float16's range).
    """

    raw_bytes: int
    wire_bytes: int
    uncompressed_arrays: int = 0

    @property
    def saved_bytes(self) -> int:
        return self.raw_bytes - self.wire_bytes


def check_codec(codec: str | None) -> str | None:
    """Validate a codec name.

    Raises:
        ValueError: an unknown codec.
    """
    if codec is not None and codec not in CODECS:
        raise ValueError(f"compression must be None or one of {CODECS}, got {codec!r}")
    return codec


#: Marks an array sent exactly because the codec could not represent it.
_EXACT = "exact"
_FLOAT16_MAX = float(np.finfo(np.float16).max)


def _encodable(arr: np.ndarray[Any, Any], codec: str) -> bool:
    if arr.size == 0:
        return True
    if not np.isfinite(arr).all():
        return False
    if codec == "float16":
        return float(np.abs(arr).max()) <= _FLOAT16_MAX
    if codec == "bfloat16":
        # float32's range; a wider (float64) value would overflow to inf.
        return float(np.abs(arr).max()) <= float(np.finfo(np.float32).max)
    # int8: the span must be finite too (float64 extremes overflow it).
    return bool(np.isfinite(float(arr.max()) - float(arr.min())))


def _encode_array(arr: np.ndarray[Any, Any], codec: str) -> Encoded:
    if not _encodable(arr, codec):
        return Encoded(_EXACT, arr.dtype.str, arr.shape, arr)
    if codec == "float16":
        return Encoded(codec, arr.dtype.str, arr.shape, arr.astype(np.float16))
    if codec == "bfloat16":
        # Round to nearest even on the upper 16 bits of the float32 pattern.
        bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
        rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        return Encoded(codec, arr.dtype.str, arr.shape, (rounded >> np.uint32(16)).astype(np.uint16))
    lo = float(arr.min()) if arr.size else 0.0
    hi = float(arr.max()) if arr.size else 0.0
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    q = np.rint((arr.astype(np.float64) - lo) / scale).astype(np.uint8)
    return Encoded(codec, arr.dtype.str, arr.shape, q, lo, scale)


def _decode_array(enc: Encoded) -> np.ndarray[Any, Any]:
    dtype = np.dtype(enc.dtype)
    if enc.codec == _EXACT:
        return enc.data
    if enc.codec == "float16":
        return enc.data.astype(dtype)
    if enc.codec == "bfloat16":
        return (enc.data.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(dtype, copy=False)
    return (enc.data.astype(np.float64) * enc.scale + enc.lo).astype(dtype)


_stats_lock = threading.Lock()


def _count(stats: list[int], raw: int, enc: Encoded) -> None:
    with _stats_lock:
        stats[0] += raw
        stats[1] += enc.data.nbytes
        if enc.codec == _EXACT and len(stats) > 2:
            stats[2] += 1


def encode(value: Any, codec: str | None, stats: list[int] | None = None) -> Any:
    """Encode the float arrays in a value (array, list, tuple or dict).

    Args:
        value: what a queue call sends or returns.
        codec: a name from :data:`CODECS`, or None (returns ``value``).
        stats: a ``[raw_bytes, wire_bytes]`` accumulator, updated in place.
    """
    if codec is None:
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.dtype.itemsize > 2:
        enc = _encode_array(value, codec)
        if stats is not None:
            _count(stats, value.nbytes, enc)
        return enc
    if isinstance(value, (np.floating, float)) and not isinstance(value, np.float16):
        return value  # scalars: too small to matter, keep them exact
    if isinstance(value, list):
        return [encode(v, codec, stats) for v in value]
    if isinstance(value, tuple):
        return tuple(encode(v, codec, stats) for v in value)
    if isinstance(value, dict):
        return {k: encode(v, codec, stats) for k, v in value.items()}
    return value


def decode(value: Any, stats: list[int] | None = None) -> Any:
    """Undo :func:`encode` (exact values pass through); ``stats`` as for encode."""
    if isinstance(value, Encoded):
        arr = _decode_array(value)
        if stats is not None:
            _count(stats, arr.nbytes, value)
        return arr
    if isinstance(value, list):
        return [decode(v, stats) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v, stats) for v in value)
    if isinstance(value, dict):
        return {k: decode(v, stats) for k, v in value.items()}
    return value
