"""feedq._native.find_byte: both cores give the positions of one byte value
from ``start`` on, the same way (TextLineReader's newline index: _refill)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq._native as nat
from tests.native._cores import CORES

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize(
    "buf, start, want",
    [(b"", 0, []), (b"abc", 0, []), (b"\n", 0, [0]), (b"\n", 1, []), (b"a\nbb\n\nc", 0, [1, 4, 5]),
     (b"a\nbb\n\nc", 2, [4, 5]), (b"a\nbb\n\nc", 5, [5]), (b"a\nbb\n\nc\n", 7, [7]), (b"\n" * 3000, 1, list(range(1, 3000)))],
)
def test_positions_from_start(core: nat.Kernels, buf: bytes, start: int, want: list[int]) -> None:
    got = core.find_byte(buf, start, 10)
    assert got.dtype == np.int64 and got.ndim == 1
    assert got.tolist() == want
    got[:] = 0  # writable: the reader shifts it in place


@pytest.mark.parametrize("core", CORES)
def test_any_buffer_and_byte(core: nat.Kernels) -> None:
    data = bytearray(b"x,y,,z")
    assert core.find_byte(data, 0, ord(",")).tolist() == [1, 3, 4]
    assert core.find_byte(memoryview(data)[2:], 0, ord(",")).tolist() == [1, 2]  # a slice: positions in it
    assert core.find_byte(np.frombuffer(bytes(data), np.uint8), 0, 0).tolist() == []
    assert core.find_byte(b"\x00\xff\x00", 1, 0).tolist() == [2]


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("start", [-1, 4, 2**40])
def test_never_reads_outside_the_buffer(core: nat.Kernels, start: int) -> None:
    with pytest.raises(ValueError, match=rf"^find_byte: start {start} is outside the buffer of 3 bytes$"):
        core.find_byte(b"a\nb", start, 10)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("byte", [-1, 256])
def test_byte_must_be_one_byte(core: nat.Kernels, byte: int) -> None:
    with pytest.raises(ValueError, match=rf"^find_byte: byte {byte} is not in \[0, 255\]$"):
        core.find_byte(b"a\nb", 0, byte)


@FUZZ
@given(
    buf=st.binary(max_size=300) | st.lists(st.sampled_from([b"\n", b"a", b"\r\n", b"\x00"]), max_size=200).map(b"".join),
    start=st.integers(-2, 310),
    byte=st.sampled_from([0, 10, 13, 97, 255]),
)
def test_native_equals_twin(buf: bytes, start: int, byte: int) -> None:
    results = []
    for k in (nat.PURE, nat.NATIVE):
        if k is None:
            continue
        try:
            results.append(("ok", k.find_byte(buf, start, byte).tolist()))
        except ValueError as exc:
            results.append(("error", str(exc)))
    assert all(r == results[0] for r in results)
    if 0 <= start <= len(buf):
        assert results[0] == ("ok", [i for i in range(start, len(buf)) if buf[i] == byte])
    else:
        assert results[0][0] == "error"
