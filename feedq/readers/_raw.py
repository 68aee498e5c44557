"""decode_raw (D9): bytes to numbers, one record or a whole block at once."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers._block import RecordBlock

__all__ = ["decode_raw"]

_TF_NAMES = {
    np.dtype(np.float16): "half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.complex64): "complex64",
    np.dtype(np.complex128): "complex128",
    np.dtype(np.bool_): "bool",
}


def _out_dtype(out_type: Any) -> np.dtype:
    if out_type in ("string", str, bytes, object) or (
        isinstance(out_type, np.dtype) and out_type.kind in "OSU"
    ):
        raise TypeError(f"decode_raw cannot produce {out_type!r}: out_type must be numeric")
    if out_type in ("bfloat16",) or getattr(out_type, "__name__", "") == "bfloat16":
        try:
            import ml_dtypes  # optional: numpy has no bfloat16 of its own
        except ImportError as exc:
            raise TypeError("decode_raw to bfloat16 needs the ml_dtypes package") from exc
        bf16: np.dtype = np.dtype(ml_dtypes.bfloat16)
        return bf16
    try:
        dt: np.dtype = np.dtype(out_type)
    except TypeError:
        raise TypeError(f"decode_raw: unsupported out_type {out_type!r}") from None
    if dt.kind in "OSUV" or (dt not in _TF_NAMES and dt.name != "bfloat16"):
        raise TypeError(f"decode_raw: unsupported out_type {dt}")
    return dt


def decode_raw(
    input_bytes: Any, out_type: Any, little_endian: bool = True, *, copy: bool = True
) -> np.ndarray:
    """Reinterpret bytes as numbers (``tf.io.decode_raw``, D9).

    Output shape = input shape + ``[len / itemsize]``. ``input_bytes`` may be
    one bytes object, any array/list of equal-length bytes, a
    :class:`RecordBlock` (decoded with one ``np.frombuffer`` on its buffer,
    no per-record loop), or a ``[k, L]`` uint8 array such as
    ``RecordBlock.fixed``.

    Args:
        input_bytes: the bytes (see above).
        out_type: float16/32/64, bfloat16, int8/16/32/64, uint8/16,
            complex64/128 or bool (a NumPy dtype or its name).
        little_endian: False byte-swaps (the input is big endian).
        copy: False may return a read-only view of the input buffer.

    Returns:
        A NumPy array of ``out_type``.

    Raises:
        TypeError: ``out_type`` is a string or unsupported type.
        InvalidArgumentError: a length is not a multiple of the item size, or
            a batch holds strings of different sizes.
    """
    dt = _out_dtype(out_type)
    src_dt = dt if little_endian else dt.newbyteorder(">")
    if dt.kind not in "c" and dt.itemsize == 1:
        src_dt = dt
    name = _TF_NAMES.get(dt, dt.name)
    width = dt.itemsize

    def check_len(n: int) -> None:
        if n % width:
            raise InvalidArgumentError(
                f"Input to DecodeRaw has length {n} that is not a multiple of {width}, "
                f"the size of {name}"
            )

    if isinstance(input_bytes, RecordBlock):
        if input_bytes.fixed is not None:
            input_bytes = input_bytes.fixed
        else:
            input_bytes = input_bytes.values()
    if isinstance(input_bytes, (bytes, bytearray, memoryview)):
        check_len(len(input_bytes))
        out = np.frombuffer(input_bytes, dtype=src_dt)
        return _finish(out, dt, copy)
    if isinstance(input_bytes, np.ndarray) and input_bytes.dtype == np.uint8:
        if input_bytes.ndim < 1:
            raise InvalidArgumentError("decode_raw: a uint8 array input needs a record axis")
        check_len(input_bytes.shape[-1])
        arr = np.ascontiguousarray(input_bytes)
        out = arr.view(src_dt).reshape(*arr.shape[:-1], arr.shape[-1] // width)
        # ascontiguousarray already copied a strided view: no second copy.
        return _finish(out, dt, copy and arr is input_bytes)
    arr = np.asarray(input_bytes, dtype=object)
    flat = arr.reshape(-1).tolist()
    if not flat:
        return np.zeros(arr.shape + (0,), dtype=dt)
    flat = [x.encode() if isinstance(x, str) else bytes(x) for x in flat]
    n0 = len(flat[0])
    for i, x in enumerate(flat):
        if len(x) != n0:
            raise InvalidArgumentError(
                "DecodeRaw requires input strings to all be the same size, but element "
                f"{i} has size {len(x)} != {n0}"
            )
    check_len(n0)
    out = np.frombuffer(b"".join(flat), dtype=src_dt).reshape(arr.shape + (n0 // width,))
    return _finish(out, dt, copy)


def _finish(out: np.ndarray, dt: np.dtype, copy: bool) -> np.ndarray:
    if out.dtype != dt:  # big endian input: convert to native order (copies)
        return out.astype(dt)
    return out.copy() if copy else out
