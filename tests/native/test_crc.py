"""feedq._native CRC32C: both cores (and the C table path) against the ``crc32c``
package, every length 0..300, large buffers, unaligned offsets (R14)."""

from __future__ import annotations

import platform
from collections.abc import Iterator

import numpy as np
import pytest

import feedq._native as nat
from feedq._native import _pure
from tests.native._cores import CORES, NOT_BUILT

crc32c_pkg = pytest.importorskip("crc32c")

needs_native = pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)


def masked(c: int) -> int:
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@pytest.fixture
def table_path() -> Iterator[None]:
    """Run the C core on its slicing-by-8 tables instead of the CPU instruction."""
    assert nat.NATIVE is not None
    was = nat.NATIVE.backend.use_hardware_crc(False)
    try:
        yield
    finally:
        nat.NATIVE.backend.use_hardware_crc(was)


RNG = np.random.default_rng(1234)
SMALL = [RNG.integers(0, 256, n, dtype=np.uint8).tobytes() for n in range(301)]


@pytest.mark.parametrize("core", CORES)
def test_every_length_0_to_300_matches_the_crc32c_package(core: nat.Kernels) -> None:
    for b in SMALL:
        want = crc32c_pkg.crc32c(b)
        assert core.crc32c(b) == want, len(b)
        assert core.masked_crc32c(b) == masked(want), len(b)


@needs_native
@pytest.mark.usefixtures("table_path")
def test_table_path_every_length_and_offset() -> None:
    assert nat.NATIVE is not None
    assert nat.NATIVE.backend.crc_implementation() == "table"
    big = RNG.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    for b in SMALL:
        assert nat.NATIVE.crc32c(b) == crc32c_pkg.crc32c(b), len(b)
    for off in range(8):
        mv = memoryview(big)[off : len(big) - 3]
        assert nat.NATIVE.crc32c(mv) == crc32c_pkg.crc32c(mv), off


def test_pure_table_function_is_the_definition() -> None:
    # The twin uses the crc32c package when present; its own table loop must
    # agree with it (it is the fallback without the package).
    for b in SMALL[::7]:
        assert _pure.crc32c_table(b) == crc32c_pkg.crc32c(b)
        assert _pure.crc32c_sw(b, 5) == crc32c_pkg.crc32c(b, 5)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("size", [4093, 65536, 65536 + 7, 3 << 20])
def test_large_buffers_at_unaligned_offsets(core: nat.Kernels, size: int) -> None:
    big = RNG.integers(0, 256, size + 16, dtype=np.uint8)
    for off in (0, 1, 3, 5, 7):
        view = big[off : off + size]
        want = crc32c_pkg.crc32c(view.tobytes())
        assert core.crc32c(view) == want  # a NumPy array: the buffer protocol
        assert core.crc32c(memoryview(big.tobytes())[off : off + size]) == want


@pytest.mark.parametrize("core", CORES)
def test_extending_a_crc(core: nat.Kernels) -> None:
    a, b = SMALL[100], SMALL[77]
    assert core.crc32c(b, core.crc32c(a)) == crc32c_pkg.crc32c(a + b)
    assert core.crc32c(b"", 0x12345678) == 0x12345678
    assert core.crc32c(bytearray(b"123456789")) == 0xE3069283  # the standard check value


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("value", [-1, 1 << 32])
def test_value_out_of_range(core: nat.Kernels, value: int) -> None:
    with pytest.raises(ValueError, match=r"^value must be in \[0, 2\*\*32\)$"):
        core.crc32c(b"x", value)


@needs_native
def test_hardware_instruction_used_where_the_cpu_has_it() -> None:
    assert nat.NATIVE is not None
    impl = nat.NATIVE.backend.crc_implementation()
    flags = ""
    if platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64"):
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    if " sse4_2" in flags:
        assert impl == "sse4.2"
    else:
        assert impl in ("sse4.2", "table")


@pytest.mark.parametrize("core", CORES)
def test_masked_crc_of_both_cores_is_tfrecords_and_the_readers_use_it(core: nat.Kernels) -> None:
    # One CRC32C in feedq: TFRecord readers and writers use the native core's.
    from feedq.readers import masked_crc32c

    assert masked_crc32c is nat.masked_crc32c
    for b in SMALL[::13]:
        assert core.masked_crc32c(b) == masked(crc32c_pkg.crc32c(b))
