"""The feedq command, end to end in subprocesses (issue 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def feedq(*args: str, check: bool = False, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "feedq.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if check and proc.returncode != 0:
        raise AssertionError(f"feedq {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    for fmt in ("csv", "tfrecord", "fixed", "parquet", "lines"):
        feedq("make-data", str(root / fmt), "--format", fmt, "--records", "3000", "--files", "3", check=True)
    feedq("make-data", str(root / "tfgz"), "--format", "tfrecord", "--records", "1000", "--files", "1",
          "--compression", "gzip", check=True)
    return root


def test_help_on_every_command() -> None:
    for cmd in ([], ["demo"], ["bench"], ["make-data"], ["inspect"]):
        proc = feedq(*cmd, "--help", check=True)
        assert "Usage:" in proc.stdout


@pytest.mark.parametrize("fmt", ["csv", "tfrecord", "fixed", "parquet", "lines"])
def test_bench_json_counts_every_record(data: Path, fmt: str) -> None:
    proc = feedq("bench", str(data / fmt), "--json", "--batch-size", "100", check=True)
    result = json.loads(proc.stdout)
    assert result["format"] == fmt and result["files"] == 3
    assert result["records"] == 3000 and result["stopped_by"] == "end of data"
    assert result["batches"] >= 30 and result["records_per_s"] > 0 and result["skipped_errors"] == 0


def test_bench_epochs_shuffle_and_limits(data: Path) -> None:
    r = json.loads(feedq("bench", str(data / "tfrecord"), "--json", "--epochs", "2", "--shuffle",
                         "--min-after-dequeue", "500", check=True).stdout)
    assert r["records"] == 6000
    r = json.loads(feedq("bench", str(data / "csv"), "--json", "--records", "1000", "--batch-size", "100",
                         check=True).stdout)
    assert r["stopped_by"] == "records" and 1000 <= r["records"] < 1100
    r = json.loads(feedq("bench", str(data / "fixed"), "--json", "--epochs", "1000000", "--duration", "0.5",
                         check=True).stdout)
    assert r["stopped_by"] == "duration"


def test_bench_gzip_detected(data: Path) -> None:
    r = json.loads(feedq("bench", str(data / "tfgz"), "--json", check=True).stdout)
    assert r["records"] == 1000


def test_bench_table_output(data: Path) -> None:
    out = feedq("bench", str(data / "csv"), "--no-progress", check=True).stdout
    assert "records/s" in out and "3,000" in out


def test_inspect(data: Path) -> None:
    csv_file = sorted((data / "csv").iterdir())[0]
    out = feedq("inspect", str(csv_file), check=True).stdout
    assert "1,000 records" in out and "label: int32" in out and "x0: float32" in out
    tf_file = sorted((data / "tfrecord").iterdir())[0]
    report = json.loads(feedq("inspect", str(tf_file), "--json", check=True).stdout)
    assert report["records"] == 1000
    assert report["info"]["features"] == {
        "label": {"kind": "int64_list", "values": 1},
        "x": {"kind": "float_list", "values": 32},
    }
    pq_file = sorted((data / "parquet").iterdir())[0]
    assert "1,000 records" in feedq("inspect", str(pq_file), check=True).stdout


def test_missing_file_is_one_line_error(tmp_path: Path) -> None:
    proc = feedq("bench", str(tmp_path / "nope.tfrecord"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"feedq: error: NotFoundError: {tmp_path / 'nope.tfrecord'}; No such file or directory"]
    proc = feedq("--debug", "bench", str(tmp_path / "nope.tfrecord"))
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_corrupt_tfrecord_fails_unless_skipped(data: Path, tmp_path: Path) -> None:
    src = sorted((data / "tfrecord").iterdir())[0]
    raw = bytearray(src.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(raw))
    proc = feedq("bench", str(bad), "--no-progress")
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("feedq: error: DataLossError:") and str(bad) in proc.stderr
    proc = feedq("bench", str(bad), "--json", "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["skipped_errors"] == 1 and 0 < r["records"] < 1000


def test_unknown_format(tmp_path: Path) -> None:
    weird = tmp_path / "blob.weird"
    weird.write_bytes(b"\x00\x01\x02\x03")
    proc = feedq("bench", str(weird))
    assert proc.returncode == 1 and "cannot tell the format; pass --format" in proc.stderr
    proc = feedq("bench", str(weird), "--format", "nope")
    assert proc.returncode == 2 and "Invalid value for '--format'" in proc.stderr


def test_demo_short(tmp_path: Path) -> None:
    proc = feedq("demo", "--duration", "1.5", "--records", "5000", "--dir", str(tmp_path), "--no-progress",
                 check=True)
    out = proc.stdout
    for fmt in ("csv", "tfrecord", "fixed"):
        assert f"{fmt}: string_input_producer" in out
    assert "training steps" in out and "records/s" in out
    assert (tmp_path / "tfrecord").is_dir()


@pytest.mark.parametrize("fmt", ["csv", "tfrecord", "fixed"])
def test_bench_direct_mode_counts_the_same(data: Path, fmt: str) -> None:
    piped = json.loads(feedq("bench", str(data / fmt), "--json", check=True).stdout)
    direct = json.loads(feedq("bench", str(data / fmt), "--json", "--direct", check=True).stdout)
    assert direct["records"] == piped["records"] == 3000
    assert direct["payload_bytes"] == piped["payload_bytes"]
    assert direct["extra"]["mode"].startswith("direct")
