"""feedq._native.read_window: both cores read a file's bytes by position after
a buffer's unread tail, into one new bytes object, the same way (the reader's
buffer refills with it: _Buffer.fill)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

import feedq._native as nat
from tests.native._cores import CORES

DATA = np.random.default_rng(7).integers(0, 256, 100_000, dtype=np.uint8).tobytes()


@pytest.fixture
def fd(tmp_path: Path):
    p = tmp_path / "f.bin"
    p.write_bytes(DATA)
    f = os.open(p, os.O_RDONLY)
    yield f
    os.close(f)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize(
    "offset, tail, n",
    [(0, b"", 0), (0, b"", 10), (0, b"tail", 65_536), (99_990, b"x" * 100, 50), (100_000, b"ab", 10),
     (200_000, b"", 10), (12_345, memoryview(DATA)[50:3000], 87_655)],
)
def test_tail_then_the_bytes_at_offset(core: nat.Kernels, fd: int, offset: int, tail: bytes, n: int) -> None:
    os.lseek(fd, 17, os.SEEK_SET)
    window, got, err = core.read_window(fd, offset, tail, n)
    want = DATA[offset : offset + n]
    assert type(window) is bytes and err == 0
    assert (window, got) == (bytes(tail) + want, len(want))  # short at the end of the file
    assert os.lseek(fd, 0, os.SEEK_CUR) == 17  # the file position is neither used nor moved


@pytest.mark.parametrize("core", CORES)
def test_an_os_error_keeps_the_tail_and_reports_errno(core: nat.Kernels, tmp_path: Path) -> None:
    d = os.open(tmp_path, os.O_RDONLY)  # reading a directory: EISDIR
    try:
        assert core.read_window(d, 0, b"kept", 10) == (b"kept", 0, errno.EISDIR)
    finally:
        os.close(d)
    with pytest.raises(ValueError):
        core.read_window(0, -1, b"", 1)
    with pytest.raises(ValueError):
        core.read_window(0, 0, b"", -1)
