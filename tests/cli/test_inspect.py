"""feedq inspect on SequenceExample records: context features, feature lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from feedq.cli._inspect import inspect_file, render_text
from feedq.readers import TFRecordWriter, serialize_example, serialize_sequence_example


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


# -- every row is decoded, not only the sample ------------------------------------------------


def _csv_with_bad_rows(path: Path, rows: int, bad: dict[int, str]) -> None:
    lines = ["a,b,label"] + [f"{i}.5,{i},{i % 3}" for i in range(rows)]
    for row, text in bad.items():
        lines[row + 1] = text
    path.write_text("\n".join(lines) + "\n")


def test_inspect_reports_a_malformed_row_past_the_sample(tmp_path: Path) -> None:
    import pytest

    from feedq.errors import InvalidArgumentError

    path = tmp_path / "rows.csv"
    _csv_with_bad_rows(path, 3000, {2500: "1.0,oops"})  # line 2502 of the file
    with pytest.raises(InvalidArgumentError, match=r"rows\.csv:2502: Expect 3 fields but have 2"):
        inspect_file(str(path), "csv", None, record_bytes=None, sample=100, head=3, on_error="raise")


def test_inspect_skips_and_counts_bad_rows_once(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    # One bad row among the records shown, one past the sample.
    _csv_with_bad_rows(path, 3000, {1: "1.0,2.0,x", 2500: "1.0,oops"})
    report = inspect_file(str(path), "csv", None, record_bytes=None, sample=100, head=3, on_error="skip")
    assert (report["records"], report["skipped_errors"]) == (2998, 2)
    assert [r["key"] for r in report["first_records"]] == [f"{path}:2", f"{path}:4", f"{path}:5"]


def test_inspect_refuses_a_folder_by_name(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from feedq.cli.main import main

    _csv_with_bad_rows(tmp_path / "part-0.csv", 10, {})
    res = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert res.exit_code == 2
    assert f"{tmp_path} is a folder: inspect reads one file of it" in res.output


def test_inspect_refuses_a_pattern_by_name(tmp_path: Path) -> None:
    """A glob (local or a store's) is a usage error saying inspect reads one
    file, not a NotFoundError for a file named with a '*'."""
    from click.testing import CliRunner

    from feedq.cli.main import main

    _csv_with_bad_rows(tmp_path / "part-0.csv", 10, {})
    for pattern in (str(tmp_path / "*.csv"), "s3://bucket/prefix/*.tfrecord"):
        res = CliRunner().invoke(main, ["inspect", pattern])
        assert res.exit_code == 2, res.output
        assert f"{pattern} is a pattern: inspect reads one file" in res.output
