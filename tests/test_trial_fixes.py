"""Defects from a user trial: each test reproduces one, then pins the fix.

inspect on SequenceExample files, parse_example errors naming the record
(P1, R13), decode_csv and NUL bytes (D4), FixedLengthRecordReader's trailing
partial record (R11), Variable dtypes, and a process-stage loop left early.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
import feedq.readers._example as example_mod
from feedq._core.arrays import variable_array
from feedq._devices import variables as variables_mod
from feedq.cli._inspect import inspect_file, render_text
from feedq.errors import InvalidArgumentError, OutOfRangeError
from feedq.process import process_stage
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    decode_csv,
    parse_example,
    serialize_example,
    serialize_sequence_example,
)
from tests.conftest import closed_queue
from tests.process import _builds as builds
from tests.process._support import no_process_leaks  # noqa: F401


def _block(reader: Any, path: Path) -> Any:
    return reader.read_block(closed_queue([str(path)]), 100)


# -- 1. feedq inspect on SequenceExample records ----------------------------------------------


def _write(path: Path, records: list[bytes]) -> list[int]:
    """Write ``records``; their byte offsets (R13 keys)."""
    offsets, at = [], 0
    with TFRecordWriter(str(path)) as w:
        for r in records:
            offsets.append(at)
            at += len(r) + 16
            w.write(r)
    return offsets


def test_inspect_shows_sequence_example_feature_lists(tmp_path: Path) -> None:
    path = tmp_path / "seq.tfrecord"
    _write(path, [
        serialize_sequence_example(
            {"id": np.array([i], np.int64)},
            {"tok": [np.array([t, t + 1], np.int64) for t in range(i + 2)],
             "w": [[0.1 * t] for t in range(i + 2)]},
        )
        for i in range(3)
    ])
    report = inspect_file(str(path), "tfrecord", None, record_bytes=None, sample=100, head=2,
                          on_error="raise")
    info = report["info"]
    assert report["records"] == 3 and report["schema"] == {"id": "int64"}
    assert info["sequence"] is True
    assert info["feature_lists"] == {
        "tok": {"kind": "int64_list", "steps": [2, 4], "values": 2},
        "w": {"kind": "float_list", "steps": [2, 4], "values": 1},
    }
    first = report["first_records"][1]
    assert first["value"] == {"id": {"kind": "int64_list", "values": [1]}}
    assert first["feature_lists"]["tok"]["values"] == [[0, 1], [1, 2], [2, 3]]
    assert first["feature_lists"]["w"]["values"] == [[0.0], [0.1], [0.2]]  # float32 shown short
    text = "\n".join(render_text(report))
    assert "feature lists:\n  tok: int64_list, 2..4 steps, 2 values per step\n" in text
    assert "  w: float_list, 2..4 steps, 1 value per step" in text
    assert "    tok: 3 steps [[0, 1], [1, 2], [2, 3]]" in text


def test_inspect_sequence_examples_without_context(tmp_path: Path) -> None:
    path = tmp_path / "lists.tfrecord"
    _write(path, [serialize_sequence_example({}, {"x": [[1.0, 2.0]] * n}) for n in (1, 1, 3)]
           + [serialize_sequence_example({}, {})])
    report = inspect_file(str(path), "tfrecord", None, record_bytes=None, sample=100, head=1,
                          on_error="raise")
    assert report["schema"] == {"bytes": "int64"}  # bench reads these as raw records
    assert report["info"]["feature_lists"] == {
        "x": {"kind": "float_list", "steps": [1, 3], "values": 2, "in_records": 3}}
    assert report["first_records"][0]["feature_lists"] == {
        "x": {"kind": "float_list", "values": [[1.0, 2.0]]}}
    assert "x: float_list, 1..3 steps, 2 values per step, in 3 of 4 records" in \
        "\n".join(render_text(report))


def test_inspect_plain_examples_have_no_feature_lists(tmp_path: Path) -> None:
    path = tmp_path / "ex.tfrecord"
    _write(path, [serialize_example({"a": np.array([i], np.int64)}) for i in range(2)])
    report = inspect_file(str(path), "tfrecord", None, record_bytes=None, sample=10, head=1,
                          on_error="raise")
    assert "sequence" not in report["info"] and "feature_lists" not in report["first_records"][0]
    assert "feature lists" not in "\n".join(render_text(report))


# -- 2. parse_example on a block names the bad record (P1, R13) -------------------------------


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


# -- 3. decode_csv and NUL bytes (D4) -----------------------------------------------------------


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


# -- 4. FixedLengthRecordReader: the trailing partial record (R11) ----------------------------


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


# -- 5. Variable dtypes ---------------------------------------------------------------------------


@pytest.mark.parametrize("torch_present", [True, False], ids=["torch", "numpy"])
def test_variable_dtype_of_python_data(monkeypatch: pytest.MonkeyPatch, torch_present: bool) -> None:
    if not torch_present:
        monkeypatch.setattr(variables_mod, "_torch", lambda: None)
    dtypes = {repr(v): str(feedq.Variable(v).dtype).replace("torch.", "")
              for v in (3.0, [1.0, 2.0], 3, True, 1j, np.float64(2.0), np.int32(3))}
    assert dtypes == {"3.0": "float32", "[1.0, 2.0]": "float32", "3": "int64", "True": "bool",
                      "1j": "complex64", "np.float64(2.0)": "float64", "np.int32(3)": "int32"}


def test_variable_array_is_what_distributed_variables_hold() -> None:
    assert variable_array(0.0).dtype == np.float32
    assert variable_array(0.0, np.float64).dtype == np.float64  # an explicit dtype wins
    assert variable_array(np.zeros(2)).dtype == np.float64  # NumPy keeps its dtype
    assert variable_array([1, 2]).dtype == np.int64


# -- 6. process stage: a for loop left early ------------------------------------------------------


def test_process_stage_break_keeps_the_epoch_for_the_next_loop() -> None:
    # Worker w makes 3 + w batches per epoch: 7 per epoch with 2 workers.
    with process_stage(builds.counting, 2, epochs=2) as stage:
        first = []
        for batch in stage:
            first.append(tuple(batch["tag"].tolist()))
            if len(first) == 3:
                break
        assert stage.epoch == 0
        rest = [tuple(b["tag"].tolist()) for b in stage]  # continues epoch 0
        second = [tuple(b["tag"].tolist()) for b in stage]  # then epoch 1
    epoch0 = first + rest
    assert len(epoch0) == 7 and sorted(epoch0) == sorted(
        [(w, 0, s) for w in range(2) for s in range(3 + w)])  # each batch once, none lost
    assert sorted(second) == sorted([(w, 1, s) for w in range(2) for s in range(3 + w)])
