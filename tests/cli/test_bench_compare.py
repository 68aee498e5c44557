"""``feedq bench --compare`` (issue 15): the same files through tf.data and
torch DataLoader, in the same run, each delivering every record with the same
payload; a loader that is not installed is a row saying so, not an error.

In-process (click's CliRunner): TensorFlow and torch are imported once for
the module, which keeps these tests to seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from feedq.cli import main
from feedq.cli.datasets import make_dataset

pytestmark = pytest.mark.timeout(120)

LOADERS = ["feedq", "tf.data", "DataLoader, 0 workers", "DataLoader, 2 workers"]


def bench(*args: str) -> Result:
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


def bench_json(*args: str) -> dict[str, Any]:
    res = bench(*args, "--json", "--no-progress")
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    make_dataset(root / "tfrecord", "tfrecord", 600, files=2, layout="realistic")
    make_dataset(root / "csv", "csv", 600, files=2, layout="realistic")
    make_dataset(root / "fixed", "fixed", 600, files=2)
    make_dataset(root / "tfgz", "tfrecord", 300, files=2, compression="GZIP")
    return root


@pytest.mark.parametrize("fmt", ["tfrecord", "csv", "fixed", "tfgz"])
def test_every_loader_delivers_every_record_with_the_same_payload(data: Path, fmt: str) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    out = bench_json(str(data / fmt), "--compare", "--repeats", "1", "--batch-size", "64")
    rows = out["compare"]
    assert [r["system"] for r in rows] == LOADERS
    n = 300 if fmt == "tfgz" else 600
    assert out["records"] == n
    for r in rows:
        assert r["status"] == "ok" and r["runs"] == 1, r
        assert r["records"] == n, r
        # The same records decoded: the same payload bytes as feedq counts.
        assert r["payload_bytes"] == out["payload_bytes"] > 0, r
        assert r["records_per_s"] > 0 and r["mb_per_s"] > 0 and r["cpu_s"] > 0, r
        assert r["ratio"] == pytest.approx(rows[0]["records_per_s"] / r["records_per_s"])
    assert rows[0]["ratio"] == 1.0


def test_limits_and_repeats_apply_to_every_loader(data: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    out = bench_json(str(data / "tfrecord"), "--compare", "--repeats", "2", "--batch-size", "50",
                     "--records", "200")
    for r in out["compare"]:
        # Each stops at the end of the batch that reaches 200 records.
        assert r["runs"] == 2 and len(r["records_per_s_runs"]) == 2, r
        assert r["records"] == 200, r
    assert out["stopped_by"] == "records" and out["records"] == 200


def test_text_output_has_a_row_per_loader_and_says_what_each_does(data: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    res = bench(str(data / "csv"), "--compare", "--repeats", "1", "--no-progress")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("compared on the same files"))
    header = lines[start + 1].split()
    assert header == ["loader", "records/s", "MB/s", "CPU", "s", "feedq", "x", "records/s", "range"]
    for i, name in enumerate(LOADERS):
        row = lines[start + 2 + i]
        assert row.strip().startswith(name), row
        # records/s, MB/s, CPU s, ratio, the range over rounds (one round: min = max)
        rate, _mb, _cpu, ratio, low, dash, high = row.strip()[len(name):].split()
        assert ratio.endswith("x") and dash == "-" and low == high == rate, row
    assert any(x.strip().startswith("tf.data: TextLineDataset(") and "decode_csv" in x
               for x in lines)
    assert any(x.strip().startswith("DataLoader: IterableDataset") for x in lines)


def test_a_loader_not_installed_is_a_row_saying_so(data: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import feedq.cli._compare as compare

    monkeypatch.setattr(compare, "import_tensorflow", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch...` raises ImportError
    out = bench_json(str(data / "fixed"), "--compare", "--repeats", "1")
    rows = {r["system"]: r for r in out["compare"]}
    assert list(rows) == LOADERS
    assert rows["feedq"]["status"] == "ok" and rows["feedq"]["records"] == 600
    assert rows["tf.data"]["status"] == "not installed (pip install tensorflow)"
    for name in LOADERS[2:]:
        assert rows[name]["status"] == "not installed (pip install torch)"
        assert rows[name]["runs"] == 0 and rows[name]["ratio"] is None
    res = bench(str(data / "fixed"), "--compare", "--repeats", "1", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "tf.data                not installed (pip install tensorflow)" in res.stdout


def test_compare_refuses_a_device(data: Path) -> None:
    res = CliRunner().invoke(main, ["bench", str(data / "fixed"), "--compare", "--device", "cpu"])
    assert res.exit_code == 2 and "--compare delivers batches on the host" in res.output


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_shuffle_and_epochs_apply_to_every_loader(data: Path, fmt: str) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    out = bench_json(str(data / fmt), "--compare", "--repeats", "1", "--shuffle",
                     "--min-after-dequeue", "100", "--epochs", "2", "--batch-size", "50")
    assert out["records"] == 1200
    for r in out["compare"]:
        assert r["records"] == 1200 and r["payload_bytes"] == out["payload_bytes"], r
    res = bench(str(data / fmt), "--compare", "--repeats", "1", "--shuffle", "--min-after-dequeue",
                "100", "--batch-size", "50", "--no-progress")
    assert ".shuffle(150).batch(50)" in res.stdout
    assert "shuffled file order and a shuffle buffer of 150 records" in res.stdout


def test_help_says_what_each_loader_does() -> None:
    res = CliRunner().invoke(main, ["bench", "--help"], terminal_width=100)
    text = " ".join(res.stdout.split())
    for words in ("TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "decode_csv",
                  "parse_example", "decode_raw", "DataLoader with 0 and 2 workers",
                  "IterableDataset", "--repeats"):
        assert words in text, words


def test_parquet_has_no_tf_data_row_but_dataloader_reads_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    make_dataset(tmp_path / "pq", "parquet", 400, files=2)
    out = bench_json(str(tmp_path / "pq"), "--compare", "--repeats", "1")
    rows = {r["system"]: r for r in out["compare"]}
    assert rows["tf.data"]["status"] == "not supported: TensorFlow has no Parquet dataset"
    # ... and no footnote describes a tf.data pipeline that did not run.
    from feedq.cli._compare import render, what_they_do
    from feedq.cli._schema import infer_schema

    schema = infer_schema([str(p) for p in sorted((tmp_path / "pq").iterdir())], "parquet", None, None,
                          on_error="raise", sample=10)
    notes = what_they_do(schema, 256, 2)
    assert "tf.data" not in notes and "DataLoader" in notes
    from feedq.cli._compare import CompareRow

    lines = render([CompareRow("tf.data", "", "not supported")], 1, notes)
    assert not [line for line in lines if line.lstrip().startswith("tf.data:")]
    for name in LOADERS[2:]:
        assert rows[name]["records"] == 400 and rows[name]["payload_bytes"] == out["payload_bytes"]


def test_a_loader_that_fails_is_a_row_saying_why(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    paths = make_dataset(tmp_path / "csv", "csv", 400, files=2, layout="realistic")
    with open(paths[0], "a") as f:
        f.write("1,2,oops\n")  # a malformed row: feedq skips it with --on-error skip
    out = bench_json(str(tmp_path / "csv"), "--compare", "--repeats", "1", "--on-error", "skip")
    rows = {r["system"]: r for r in out["compare"]}
    assert out["records"] == 400 and out["skipped_errors"] == 1
    assert rows["feedq"]["status"] == "ok"
    assert rows["tf.data"]["status"].startswith("failed: InvalidArgumentError: ")
    assert rows["DataLoader, 0 workers"]["status"] == (
        "failed: ValueError: 3 fields, expected 10: '1,2,oops'")
    assert rows["DataLoader, 2 workers"]["status"].startswith("failed: ValueError: ")
    for name in LOADERS[1:]:
        assert rows[name]["runs"] == 0 and rows[name]["ratio"] is None


def test_ctrl_c_ends_the_rounds_and_shows_what_was_measured(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import feedq.cli._compare as compare
    from feedq.cli._measure import Limits, Measure, System

    calls = []

    def run(limits: Limits) -> Measure:
        calls.append(limits)
        if len(calls) == 3:  # warm-up, round 1, then Ctrl-C in round 2
            raise KeyboardInterrupt
        return Measure(limits.max_records or 600, 1000, 0.5, 0.25)

    fake = System("fake", "a fake loader", run)
    monkeypatch.setattr(compare, "competitors", lambda *a, **k: [fake])
    res = bench(str(data / "fixed"), "--compare", "--repeats", "3", "--json", "--no-progress")
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout)
    assert out["stopped_by"] == "interrupted" and out["records"] == 600
    feedq_row, fake_row = out["compare"]
    assert feedq_row["runs"] == 2 and fake_row["runs"] == 1
    assert fake_row["records_per_s"] == 1200.0 and fake_row["cpu_s"] == 0.25


def test_shuffle_buffered_is_a_permutation_and_mixes() -> None:
    """The baselines' shuffle buffer (what a DataLoader user writes) hands out
    every item once; with a buffer it changes the order, without it keeps it."""
    import random

    from feedq.cli._compare_torch import shuffle_buffered

    items = list(range(1000))
    out = list(shuffle_buffered(iter(items), 64, random.Random(1)))
    assert sorted(out) == items
    assert out != items
    assert list(shuffle_buffered(iter(items), 0, random.Random(1))) == items
    # A buffer larger than the input: all of it comes out shuffled at the end.
    assert sorted(shuffle_buffered(iter(range(10)), 100, random.Random(2))) == list(range(10))
