"""decode_raw (spec D9)."""

from __future__ import annotations

import numpy as np
import pytest

from feedq.errors import InvalidArgumentError
from feedq.readers import decode_raw

pytestmark = pytest.mark.timeout(10)


def test_d9_shape_is_input_shape_plus_items() -> None:
    one = np.arange(3, dtype="<f4").tobytes()
    assert decode_raw(one, np.float32).tolist() == [0.0, 1.0, 2.0]
    batch = decode_raw([[one, one]], "float32")
    assert batch.shape == (1, 2, 3)


@pytest.mark.parametrize(
    "dtype",
    [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
     np.uint16, np.complex64, np.complex128, np.bool_],
)
def test_d9_types_round_trip(dtype) -> None:
    x = np.ones(4, dtype=dtype)
    np.testing.assert_array_equal(decode_raw([x.tobytes()] * 2, dtype), np.stack([x, x]))


def test_d9_bfloat16_when_ml_dtypes_is_there() -> None:
    ml = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2], dtype=ml.bfloat16)
    np.testing.assert_array_equal(decode_raw(x.tobytes(), "bfloat16"), x)


def test_d9_big_endian() -> None:
    # int32 bytes of [1, 256] read big endian -> [16777216, 65536].
    raw = np.array([1, 256], dtype="<i4").tobytes()
    out = decode_raw(raw, np.int32, little_endian=False)
    assert out.tolist() == [16777216, 65536] and out.dtype == np.int32


def test_d9_string_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"out_type must be numeric"):
        decode_raw(b"abcd", "string")


def test_d9_length_not_a_multiple() -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"^Input to DecodeRaw has length 5 that is not a multiple of 4, the size of float$",
    ):
        decode_raw(b"12345", np.float32)


def test_d9_unequal_lengths() -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"^DecodeRaw requires input strings to all be the same size, but element 1 has size 8 != 4$",
    ):
        decode_raw([b"1234", b"12345678"], np.int32)


def test_d9_empty() -> None:
    assert decode_raw(b"", np.int32).shape == (0,)
    assert decode_raw([b"", b""], np.int32).shape == (2, 0)


def test_uint8_block_is_decoded_without_copy_when_asked() -> None:
    block = np.frombuffer(np.arange(8, dtype="<i4").tobytes(), dtype=np.uint8).reshape(2, 16)
    view = decode_raw(block, np.int32, copy=False)
    assert view.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert np.shares_memory(view, block)
    assert not np.shares_memory(decode_raw(block, np.int32), block)
