"""FixedLengthRecordReader: the trailing partial record of a file is dropped
as TF1 does, with one warning per file (R11)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any

import pytest

from feedq.errors import OutOfRangeError
from feedq.readers import FixedLengthRecordReader
from tests.conftest import closed_queue


def _read_fixed(files: list[Path], **kwargs: Any) -> list[bytes]:
    reader = FixedLengthRecordReader(10, **kwargs)
    q = closed_queue([str(f) for f in files])
    keys: list[bytes] = []
    while True:
        try:
            keys += reader.read_up_to(q, 100)[0].tolist()
        except OutOfRangeError:
            return keys


def test_fixed_length_trailing_bytes_warn_once_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short, exact = tmp_path / "short.bin", tmp_path / "exact.bin"
    short.write_bytes(bytes(range(25)))
    exact.write_bytes(bytes(20))
    packed = tmp_path / "short.bin.gz"
    packed.write_bytes(gzip.compress(bytes(27)))
    with caplog.at_level(logging.WARNING, logger="feedq.readers"):
        keys = _read_fixed([short, exact, short], block_bytes=10)
        keys_gz = _read_fixed([packed], encoding="GZIP")
    assert len(keys) == 6 and len(keys_gz) == 2  # TF1's records: the partial ones dropped
    msgs = [r.getMessage() for r in caplog.records if r.name == "feedq.readers"]
    assert msgs == [
        f"{short}: 5 trailing bytes after the last whole record dropped (record_bytes=10)",
        f"{short}: 5 trailing bytes after the last whole record dropped (record_bytes=10)",
        f"{packed}: 7 trailing bytes after the last whole record dropped (record_bytes=10)",
    ]


@pytest.mark.parametrize(
    ("kwargs", "records", "trailing"),
    [
        ({"hop_bytes": 5}, 4, 0),  # overlapping records: none of their bytes is left over
        ({"hop_bytes": 12}, 2, 1),  # gaps between records are not counted
        ({"footer_bytes": 3}, 2, 2),
        ({"header_bytes": 20}, 0, 5),  # not even one record
    ],
)
def test_fixed_length_trailing_bytes_with_hops_and_footers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kwargs: dict[str, int], records: int,
    trailing: int,
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(25))
    with caplog.at_level(logging.WARNING, logger="feedq.readers"):
        assert len(_read_fixed([path], **kwargs)) == records
    msgs = [r.getMessage() for r in caplog.records if r.name == "feedq.readers"]
    assert msgs == ([f"{path}: {trailing} trailing bytes after the last whole record dropped "
                     "(record_bytes=10)"] if trailing else [])
