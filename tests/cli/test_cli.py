"""The feedq command, end to end in subprocesses (issues 6, 10, 11, 12)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import _forkserver as forkserver
from tests.conftest import sigint_default

pytestmark = pytest.mark.timeout(120)


def feedq(*args: str, check: bool = False, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    """``python -m feedq.cli ARGS`` in a process of its own (forked from a
    warm interpreter: tests/_forkserver.py)."""
    proc = forkserver.run(["-m", "feedq.cli", *args], timeout=timeout,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
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
    csv_file = min((data / "csv").iterdir())
    out = feedq("inspect", str(csv_file), check=True).stdout
    assert "1,000 records" in out and "label: int32" in out and "x0: float32" in out
    tf_file = min((data / "tfrecord").iterdir())
    report = json.loads(feedq("inspect", str(tf_file), "--json", check=True).stdout)
    assert report["records"] == 1000
    assert report["info"]["features"] == {
        "label": {"kind": "int64_list", "values": 1},
        "x": {"kind": "float_list", "values": 32},
    }
    pq_file = min((data / "parquet").iterdir())
    assert "1,000 records" in feedq("inspect", str(pq_file), check=True).stdout


def test_missing_file_is_one_line_error(tmp_path: Path) -> None:
    proc = feedq("bench", str(tmp_path / "nope.tfrecord"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"feedq: error: NotFoundError: {tmp_path / 'nope.tfrecord'}; No such file or directory"]
    proc = feedq("--debug", "bench", str(tmp_path / "nope.tfrecord"))
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_corrupt_tfrecord_fails_unless_skipped(data: Path, tmp_path: Path) -> None:
    src = min((data / "tfrecord").iterdir())
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


# -- issue 11/10: --on-error skip skips everything it promises --------------------------------


def _copy_dir(src: Path, dst: Path) -> list[Path]:
    dst.mkdir()
    for f in sorted(src.iterdir()):
        (dst / f.name).write_bytes(f.read_bytes())
    return sorted(dst.iterdir())


def _corrupt_start(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0xFF  # TFRecord: the first length (its CRC fails); gzip: the magic bytes
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", ["tfrecord", "csv.gz"])
def test_skip_survives_a_corrupt_first_file(data: Path, tmp_path: Path, kind: str) -> None:
    if kind == "csv.gz":
        feedq("make-data", str(tmp_path / "src"), "--format", "csv", "--records", "3000", "--files", "3",
              "--compression", "gzip", check=True)
        files = sorted((tmp_path / "src").iterdir())
    else:
        files = _copy_dir(data / "tfrecord", tmp_path / "src")
    _corrupt_start(files[0])
    proc = feedq("bench", str(tmp_path / "src"), "--no-progress")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedq: error: ") and str(files[0]) in lines[0]
    proc = feedq("bench", str(tmp_path / "src"), "--json", "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["records"] == 2000 and r["skipped_errors"] == 1  # the two good files, all of them
    assert str(files[0]) in proc.stderr  # logged


def _bad_csv(path: Path) -> None:
    rows = ["a,b,label"] + [f"{i}.5,{i * 2}.25,{i % 3}" for i in range(1, 13)]
    rows[5] = "5.5,3"          # line 6: wrong field count
    rows[9] = "9.5,oops,0"     # line 10: not a number
    path.write_text("\n".join(rows) + "\n")


def test_malformed_csv_rows_are_skipped_and_logged(tmp_path: Path) -> None:
    bad = tmp_path / "rows.csv"
    _bad_csv(bad)
    proc = feedq("bench", str(bad), "--json", "--on-error", "skip", "--batch-size", "4")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["records"] == 10 and r["skipped_errors"] == 2
    good_bytes = sum(len(x) for x in bad.read_text().splitlines()[1:]) - len("5.5,3") - len("9.5,oops,0")
    assert r["payload_bytes"] == good_bytes
    assert f"{bad}:6: Expect 3 fields but have 2" in proc.stderr
    assert f"{bad}:10: Field 1 is not a valid float: oops" in proc.stderr
    # --direct decodes through the same path
    r = json.loads(feedq("bench", str(bad), "--json", "--on-error", "skip", "--direct", check=True).stdout)
    assert r["records"] == 10 and r["skipped_errors"] == 2


@pytest.mark.parametrize("direct", [False, True])
def test_malformed_csv_row_without_skip_is_one_line_naming_file_and_line(tmp_path: Path, direct: bool) -> None:
    bad = tmp_path / "rows.csv"
    _bad_csv(bad)
    proc = feedq("bench", str(bad), "--no-progress", *(["--direct"] if direct else []))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"feedq: error: InvalidArgumentError: {bad}:6: Expect 3 fields but have 2"]


def test_bad_example_record_is_skipped_or_named(tmp_path: Path) -> None:
    from feedq.readers import TFRecordWriter, serialize_example

    path = tmp_path / "mixed.tfrecord"
    with TFRecordWriter(str(path)) as w:
        for i in range(20):
            w.write(serialize_example({"x": np.full(4, i, np.float32), "label": i}))
        w.write(serialize_example({"x": np.full(3, 0, np.float32), "label": 20}))  # x has 3 values
        for i in range(21, 30):
            w.write(serialize_example({"x": np.full(4, i, np.float32), "label": i}))
    r = json.loads(feedq("bench", str(path), "--json", "--on-error", "skip", "--sample", "10", check=True).stdout)
    assert r["records"] == 29 and r["skipped_errors"] == 1
    proc = feedq("bench", str(path), "--sample", "10")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"feedq: error: InvalidArgumentError: {path}: record at byte ")


# -- MB/s counts the records delivered ----------------------------------------------------------


@pytest.mark.parametrize("direct", [False, True])
def test_mb_per_s_counts_the_payload_of_records_delivered(data: Path, direct: bool) -> None:
    # Every data line of the basic CSV layout is 65 bytes: 8 x "0.12345," + a 1-digit label.
    lines = min((data / "csv").iterdir()).read_text().splitlines()[1:]
    assert {len(line) for line in lines} == {65}
    r = json.loads(feedq("bench", str(data / "csv"), "--json", "--records", "1500", "--batch-size", "100",
                         *(["--direct"] if direct else []), check=True).stdout)
    assert r["records"] == 1500 and r["stopped_by"] == "records"
    assert r["payload_bytes"] == 65 * 1500
    assert r["mb_per_s"] == pytest.approx(65 * 1500 / 1e6 / r["seconds"])


def test_bench_device_cpu_counts_payload_through_the_feeder(data: Path) -> None:
    r = json.loads(feedq("bench", str(data / "csv"), "--json", "--records", "1000", "--batch-size", "100",
                         "--device", "cpu", check=True).stdout)
    assert r["records"] == 1000 and r["payload_bytes"] == 65 * 1000 and r["extra"]["device"] == "cpu"


# -- inspect: schema from a sample, decoded values, real JSON -----------------------------------


def _uneven_examples(path: Path) -> None:
    from feedq.readers import TFRecordWriter, serialize_example

    with TFRecordWriter(str(path)) as w:
        w.write(serialize_example({"x": np.arange(3, dtype=np.float32), "label": 0}))  # no "ids"
        for i in range(1, 50):
            w.write(serialize_example({"x": np.arange(3, dtype=np.float32) + i, "label": i,
                                       "ids": np.arange(1 + i % 4, dtype=np.int64), "name": b"n%d" % i}))


def test_inspect_schema_is_the_union_of_a_sample(tmp_path: Path) -> None:
    path = tmp_path / "uneven.tfrecord"
    _uneven_examples(path)
    report = json.loads(feedq("inspect", str(path), "--json", check=True).stdout)
    assert report["records"] == 50 and report["sample"] == {"records": 50, "skipped": 0}
    assert report["schema"] == {"ids": "int64[None]", "label": "int64", "name": "string[None]", "x": "float32[3]"}
    assert report["info"]["features"]["ids"] == {"kind": "int64_list", "values": [0, 4], "in_records": 49}
    assert report["info"]["features"]["name"] == {"kind": "bytes_list", "values": [0, 1], "in_records": 49}
    assert report["info"]["features"]["x"] == {"kind": "float_list", "values": 3}
    out = feedq("inspect", str(path), check=True).stdout
    assert "ids: int64[None]" in out and "int64_list, 0..4 values, in 49 of 50 records" in out
    # --sample 1: only record 0, which has no "ids"
    report = json.loads(feedq("inspect", str(path), "--json", "--sample", "1", check=True).stdout)
    assert sorted(report["schema"]) == ["label", "x"] and report["sample"]["records"] == 1
    # bench decodes the union: the varying features come out padded
    r = json.loads(feedq("bench", str(path), "--json", "--batch-size", "10", check=True).stdout)
    assert r["records"] == 50


def test_inspect_csv_union_makes_a_column_float(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    path.write_text("a,b\n1,2\n" + "".join(f"{i},{i}.5\n" for i in range(30)))
    report = json.loads(feedq("inspect", str(path), "--json", check=True).stdout)
    assert report["schema"] == {"a": "int32", "b": "float32"}
    assert report["first_records"][0] == {"key": f"{path}:2", "value": {"a": 1, "b": 2.0}}
    r = json.loads(feedq("bench", str(path), "--json", check=True).stdout)
    assert r["records"] == 31


def test_inspect_shows_decoded_values_as_json(data: Path) -> None:
    tf_file = min((data / "tfrecord").iterdir())
    report = json.loads(feedq("inspect", str(tf_file), "--json", "--head", "2", check=True).stdout)
    first = report["first_records"]
    assert len(first) == 2 and first[0]["key"] == f"{tf_file}:0"
    assert first[0]["value"]["label"] == {"kind": "int64_list", "values": [0]}
    x = first[0]["value"]["x"]
    assert x["kind"] == "float_list" and len(x["values"]) == 32
    assert all(isinstance(v, float) and 0 <= v < 1 for v in x["values"])
    out = feedq("inspect", str(tf_file), "--head", "1", check=True).stdout
    assert "x: float32[32]" in out and "float_list, 32 values" in out
    assert "    label: [0]" in out and "(32 values)" in out and "\\n" not in out and "b'" not in out
    pq_file = min((data / "parquet").iterdir())
    report = json.loads(feedq("inspect", str(pq_file), "--json", check=True).stdout)
    row = report["first_records"][0]["value"]
    assert set(row) == {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "label"}
    assert all(isinstance(row[f"x{i}"], float) for i in range(8)) and row["label"] == 0
    out = feedq("inspect", str(pq_file), check=True).stdout
    assert "np.float32" not in out and '"label": 0' in out
    csv_file = min((data / "csv").iterdir())
    report = json.loads(feedq("inspect", str(csv_file), "--json", check=True).stdout)
    assert report["first_records"][0]["value"]["label"] == 0
    assert isinstance(report["first_records"][0]["value"]["x0"], float)


# -- make-data: no overwriting, nothing left half-done --------------------------------------------


def test_make_data_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "d"
    feedq("make-data", str(out), "--format", "csv", "--records", "100", "--files", "2", check=True)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = feedq("make-data", str(out), "--format", "csv", "--records", "50", "--files", "2", "--seed", "1")
    assert proc.returncode == 1
    message = f"{out / 'part-00000.csv'} exists (and 1 more of the files to write); pass --force to overwrite"
    assert proc.stderr.strip().splitlines() == [f"feedq: error: {message}"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    feedq("make-data", str(out), "--format", "csv", "--records", "50", "--files", "2", "--seed", "1", "--force",
          check=True)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(after) == set(before) and after != before


@pytest.mark.timeout(120)
def test_make_data_interrupted_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "data"
    proc = subprocess.Popen([sys.executable, "-m", "feedq.cli", "make-data", str(out), "--records", "50000000",
                             "--files", "500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 60
        while not any(out.glob(".part-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # a subprocess: the file system is the only signal there is
        assert proc.poll() is None, "make-data ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "feedq: interrupted" in err
    assert not (tmp_path / "new").exists()


def test_make_dataset_failing_midway_leaves_nothing_half_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from feedq.cli import datasets as _datasets

    real = _datasets._write_file
    calls = []

    def flaky(path: Path, *args: object) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_datasets, "_write_file", flaky)
    with pytest.raises(OSError, match="disk full"):
        _datasets.make_dataset(tmp_path / "a" / "b", "csv", 100, files=4)
    assert not (tmp_path / "a").exists()
    # a folder that was there: its files stay as they were, no temporary file is left
    old = tmp_path / "old"
    old.mkdir()
    (old / "part-00001.csv").write_text("old\n")
    calls.clear()
    with pytest.raises(OSError, match="disk full"):
        _datasets.make_dataset(old, "csv", 100, files=4, overwrite=True)
    assert [p.name for p in old.iterdir()] == ["part-00001.csv"] and (old / "part-00001.csv").read_text() == "old\n"


# -- help, epilogs, compression in the summary --------------------------------------------------------


COMMANDS = [["demo"], ["bench"], ["make-data"], ["inspect"], ["cluster"], ["cluster", "serve"],
            ["cluster", "stop"], ["cluster", "resources"]]


@pytest.mark.parametrize("cmd", [[], *COMMANDS], ids=lambda c: " ".join(c) or "feedq")
def test_every_option_has_help_and_every_command_examples(cmd: list[str]) -> None:
    out = feedq(*cmd, "--help", check=True).stdout
    lines = out.splitlines()
    start = lines.index("Options:")
    end = lines.index("", start)
    options = lines[start + 1 : end]
    for i, line in enumerate(options):
        if not line.startswith("  -"):
            continue
        has_text = re.match(r"^  -\S.*?\S {2,}\S", line) is not None
        continued = i + 1 < len(options) and re.match(r"^ {3,}[^ -]", options[i + 1]) is not None
        assert has_text or continued, f"feedq {' '.join(cmd)}: option without help: {line.strip()}"
    examples = lines.index("  Examples:", end)  # the epilog: the last thing shown
    tail = [x.strip() for x in lines[examples + 1 :] if x.strip()]
    assert tail and any(x.startswith(" ".join(["feedq", *cmd])) for x in tail), tail


def test_bench_summary_shows_compression(data: Path) -> None:
    out = feedq("bench", str(data / "tfgz"), "--no-progress", check=True).stdout
    assert re.search(r"^  compression +GZIP$", out, re.MULTILINE)
    assert json.loads(feedq("bench", str(data / "tfgz"), "--json", check=True).stdout)["compression"] == "GZIP"
    assert json.loads(feedq("bench", str(data / "csv"), "--json", check=True).stdout)["compression"] == "none"


# -- feedq cluster: click, feedq's error style ---------------------------------------------------------


def _no_ray_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "FEEDQ_CLUSTER", "TF_CONFIG")}


@pytest.mark.parametrize("front", [["-m", "feedq.cli", "cluster"], ["-m", "feedq.distributed"]])
def test_cluster_errors_follow_the_feedq_style(front: list[str]) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([*front, *args], timeout=60, env=_no_ray_env())

    spec = json.dumps({"ps": ["h0:2221"]})
    proc = run("stop", "--job", "ps", "--task", "0", "--cluster", spec)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedq: error: ") and "no Ray cluster address" in lines[0]
    proc = run("--debug", "stop", "--job", "ps", "--task", "0", "--cluster", spec)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    proc = run("serve", "--job", "chief", "--cluster", spec)
    assert proc.returncode == 1 and proc.stderr.startswith("feedq: error: ") and "no job 'chief'" in proc.stderr
    proc = run("serve", "--task", "0")
    assert proc.returncode == 2 and "Missing option '--job'" in proc.stderr
    proc = run("resources", "--job", "ps", "--task", "1")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"feedq_task_ps_1": 1}


def test_readme_cli_table_lists_every_command() -> None:
    from feedq.cli import main

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## The `feedq` command") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `feedq ([a-z-]+)", section, re.MULTILINE)
    assert sorted(set(rows)) == sorted(main.commands)


# -- make-data realistic layouts --------------------------------------------------------------------


def _tf_example(tf: Any, ids: list[int], label: int, tag: bytes, x: list[float]) -> Any:
    f = tf.train
    return f.Example(features=f.Features(feature={
        "ids": f.Feature(int64_list=f.Int64List(value=ids)),
        "label": f.Feature(int64_list=f.Int64List(value=[label])),
        "tag": f.Feature(bytes_list=f.BytesList(value=[tag])),
        "x": f.Feature(float_list=f.FloatList(value=x)),
    }))


def _map_entries(example: bytes) -> list[bytes]:
    """The Features map entries of a serialized Example, as raw bytes."""
    def varint(b: bytes, i: int) -> tuple[int, int]:
        n = shift = 0
        while True:
            n |= (b[i] & 0x7F) << shift
            shift += 7
            i += 1
            if not b[i - 1] & 0x80:
                return n, i

    assert example[0] == 0x0A
    size, i = varint(example, 1)
    feats = example[i : i + size]
    out, j = [], 0
    while j < len(feats):
        assert feats[j] == 0x0A
        size, k = varint(feats, j + 1)
        out.append(feats[j : k + size])
        j = k + size
    return out


def test_realistic_tfrecord_layout_is_tensorflows_serialisation(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from feedq.readers import tf_record_iterator

    feedq("make-data", str(tmp_path / "tf"), "--layout", "realistic", "--records", "300", "--files", "1",
          check=True)
    records = list(tf_record_iterator(str(tmp_path / "tf" / "part-00000.tfrecord")))
    assert len(records) == 300
    id_counts = set()
    for rec in records:
        parsed = tf.train.Example.FromString(rec).features.feature
        assert sorted(parsed) == ["ids", "label", "tag", "x"]
        ids, label = list(parsed["ids"].int64_list.value), parsed["label"].int64_list.value[0]
        tag, x = parsed["tag"].bytes_list.value[0], list(parsed["x"].float_list.value)
        assert 0 <= len(ids) <= 20 and 0 <= label <= 999 and 3 <= len(tag) <= 12 and len(x) == 32
        id_counts.add(len(ids))
        ex = _tf_example(tf, ids, label, tag, x)
        # TensorFlow's deterministic serialisation, byte for byte
        assert ex.SerializeToString(deterministic=True) == rec
        # Its default one orders map entries per process (upb); the entries are the same bytes.
        assert sorted(_map_entries(ex.SerializeToString())) == sorted(_map_entries(rec))
    assert {0, 20} <= id_counts and len({len(r) for r in records}) > 50  # variable-length records


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_realistic_layouts_are_deterministic_and_readable(tmp_path: Path, fmt: str) -> None:
    def make(name: str, seed: str) -> dict[str, bytes]:
        feedq("make-data", str(tmp_path / name), "--format", fmt, "--layout", "realistic", "--records", "2000",
              "--files", "2", "--seed", seed, check=True)
        return {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}

    a, b, c = make("a", "7"), make("b", "7"), make("c", "8")
    assert a == b and a != c and len(a) == 2
    r = json.loads(feedq("bench", str(tmp_path / "a"), "--json", check=True).stdout)
    assert r["records"] == 2000 and r["skipped_errors"] == 0
    # shuffle_batch cannot pad per batch: variable-length features are padded to the sampled width
    r = json.loads(feedq("bench", str(tmp_path / "a"), "--json", "--shuffle", check=True).stdout)
    assert r["records"] == 2000 and r["skipped_errors"] == 0
    if fmt == "tfrecord":
        # a record longer than any in the sample is a bad record: named, or skipped and counted
        proc = feedq("bench", str(tmp_path / "a"), "--shuffle", "--sample", "2")
        assert proc.returncode == 1 and "more than the" in proc.stderr and "--sample" in proc.stderr
        r = json.loads(feedq("bench", str(tmp_path / "a"), "--json", "--shuffle", "--sample", "2",
                             "--on-error", "skip", check=True).stdout)
        assert r["records"] + r["skipped_errors"] == 2000 and r["skipped_errors"] > 0
    if fmt == "csv":
        text = a["part-00000.csv"].decode()
        lines = text.splitlines()
        assert lines[0] == "id,x0,x1,x2,x3,x4,x5,x6,x7,label"
        assert len({len(x) for x in lines[1:]}) > 20
        fields = [x.split(",") for x in lines[1:]]
        decimals = {len(f.split(".")[1]) if "." in f else 0 for row in fields for f in row[1:9]}
        assert decimals == set(range(8))
        assert {len(row[0]) for row in fields} >= set(range(1, 10))
        assert {len(row[9]) for row in fields} == {1, 2, 3}
        report = json.loads(feedq("inspect", str(tmp_path / "a" / "part-00000.csv"), "--json", check=True).stdout)
        assert report["schema"] == {"id": "int32", **{f"x{i}": "float32" for i in range(8)}, "label": "int32"}


def test_make_data_layout_errors() -> None:
    proc = feedq("make-data", "/nonexistent/x", "--format", "fixed", "--layout", "realistic")
    assert proc.returncode == 2 and "--layout realistic is for csv and tfrecord, not fixed" in proc.stderr
