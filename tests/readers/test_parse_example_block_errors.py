"""parse_example on a reader's block names the bad record: file and byte
offset (P1, R13), on the native kernel and on the walker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
import feedq.readers._example as example_mod
from feedq.errors import InvalidArgumentError
from feedq.readers import (
    FixedLenFeature,
    TFRecordReader,
    TFRecordWriter,
    parse_example,
    serialize_example,
)
from tests.conftest import closed_queue


def _block(reader: Any, path: Path) -> Any:
    return reader.read_block(closed_queue([str(path)]), 100)


def _write(path: Path, records: list[bytes]) -> list[int]:
    """Write ``records``; their byte offsets (R13 keys)."""
    offsets, at = [], 0
    with TFRecordWriter(str(path)) as w:
        for r in records:
            offsets.append(at)
            at += len(r) + 16
            w.write(r)
    return offsets


@pytest.mark.parametrize("kernel", [True, False], ids=["native", "walker"])
def test_parse_example_block_error_names_file_and_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: bool
) -> None:
    if kernel and not example_mod._KERNEL:
        pytest.skip("the native core is not built here")  # the walker case still runs
    monkeypatch.setattr(example_mod, "_KERNEL", kernel)
    path = tmp_path / "bad.tfrecord"
    good = serialize_example({"a": np.array([1], np.int64)})
    offsets = _write(path, [good, good, b"\n\xff\xff\xff", good])
    block = _block(TFRecordReader(), path)
    feats = {"a": FixedLenFeature([], np.int64)}
    where = f"{path}:{offsets[2]}"
    with pytest.raises(InvalidArgumentError) as info:
        parse_example(block, feats)
    assert info.value.message == rf"{where}: Could not parse example input, value: '\n\xff\xff\xff'"
    # A plain list keeps TF's message (P1): nothing to name.
    with pytest.raises(InvalidArgumentError, match=r"^Could not parse example input"):
        parse_example(block.values(), feats)


def test_parse_example_block_names_the_record_of_a_feature_error(tmp_path: Path) -> None:
    path = tmp_path / "missing.tfrecord"
    offsets = _write(path, [serialize_example({"a": np.array([1], np.int64)}),
                            serialize_example({"a": np.array([1, 2], np.int64)}),
                            serialize_example({"b": np.array([1], np.int64)})])
    block = _block(TFRecordReader(), path)
    with pytest.raises(InvalidArgumentError) as info:
        parse_example(block, {"a": FixedLenFeature([], np.int64)})
    assert info.value.message.startswith(f"{path}:{offsets[1]}: Key: a, Index: 1.  ")
    with pytest.raises(InvalidArgumentError) as info:
        parse_example(block, {"a": FixedLenFeature([], np.int64, default_value=0)})
    assert info.value.message.startswith(f"{path}:{offsets[1]}: Key: a, Index: 1.  ")
    with pytest.raises(InvalidArgumentError) as info:
        parse_example(block, {"a": feedq.readers.VarLenFeature(np.int64),
                              "b": FixedLenFeature([], np.int64)})
    assert info.value.message == \
        f"{path}:{offsets[0]}: Feature: b (data type: int64) is required but could not be found."
