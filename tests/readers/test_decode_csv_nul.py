"""decode_csv and NUL bytes (D4): shown escaped in errors, kept whole in strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from feedq.errors import InvalidArgumentError
from feedq.readers import TextLineReader, decode_csv
from tests.conftest import closed_queue


def _block(reader: Any, path: Path) -> Any:
    return reader.read_block(closed_queue([str(path)]), 100)


def test_decode_csv_nul_byte_is_shown_escaped_and_named(tmp_path: Path) -> None:
    path = tmp_path / "nul.csv"
    path.write_bytes(b"1,2\n3,4\x005\n6,a\x00b\n")
    block = _block(TextLineReader(), path)
    with pytest.raises(InvalidArgumentError) as info:  # the pyarrow path
        decode_csv(block, [[0], [0]])
    assert info.value.message == rf"Field 1 in {path}:2 is not a valid int32: 4\x005"
    with pytest.raises(InvalidArgumentError) as info:  # the per-record path
        decode_csv(list(block.values()), [[0], [0.0]])
    assert info.value.message == r"Field 1 in record 1 is not a valid float: 4\x005"
    # In a string column the NUL is data, kept whole on both paths (no truncation).
    for records in (block, list(block.values())):
        _, text = decode_csv(records, [[0], [""]])
        assert text.tolist() == [b"2", b"4\x005", b"a\x00b"]
