"""The feedq command on pipes and devices, on files it cannot sniff, on ZSTD
files and on a closed stdout (found trying the command as a user).

A named pipe can be read only once: ``bench`` / ``inspect`` must not read its
first bytes to tell the format or infer a schema (the records read are lost
to the measurement, or the writer is gone and the next open waits forever);
they read it once (lines, fixed) or refuse it with a clear usage error.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import _forkserver as forkserver

pytestmark = pytest.mark.timeout(120)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")


def feedq(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m feedq.cli ARGS`` in a process of its own (forked from a
    warm interpreter: tests/_forkserver.py)."""
    return forkserver.run(["-m", "feedq.cli", *args], timeout=timeout,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))


class PipeWriter(threading.Thread):
    """Writes ``data`` into the FIFO ``path`` once a reader has it open; gives
    up (never blocks) when no reader comes within ``patience`` seconds."""

    def __init__(self, path: Path, data: bytes, patience: float = 30.0) -> None:
        super().__init__(name="test-fifo-writer", daemon=True)
        self.path, self.data, self.patience = path, data, patience
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                    self.error = exc
                    return
                time.sleep(0.01)
        try:
            os.set_blocking(fd, True)
            view = memoryview(self.data)
            while self.written < len(view):
                self.written += os.write(fd, view[self.written:])
        except BrokenPipeError as exc:
            self.error = exc
        finally:
            os.close(fd)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "stream"
    os.mkfifo(p)
    return p


@needs_fifo
def test_bench_a_pipe_without_format_is_refused_at_once(fifo: Path) -> None:
    # Old: detect_format opened the pipe to read magic bytes and waited for a writer.
    proc = feedq("bench", str(fifo), timeout=30)
    assert proc.returncode == 1
    assert "is a pipe or device" in proc.stderr and "--format" in proc.stderr


@needs_fifo
def test_bench_a_pipe_of_lines_counts_every_line(fifo: Path) -> None:
    # Old: --format given, the compression was still sniffed from the pipe's first
    # bytes; the writer then died of SIGPIPE and the reader waited forever.
    lines = b"".join(b"%d\n" % i for i in range(50_000))
    writer = PipeWriter(fifo, lines)
    writer.start()
    proc = feedq("bench", str(fifo), "--format", "lines", "--json", timeout=60)
    writer.join(10)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["records"] == 50_000 and result["stopped_by"] == "end of data"
    assert writer.error is None and writer.written == len(lines)


@needs_fifo
def test_inspect_a_pipe_of_lines_reads_it_once(fifo: Path) -> None:
    lines = b"".join(b"line %d\n" % i for i in range(1, 1001))
    writer = PipeWriter(fifo, lines)
    writer.start()
    proc = feedq("inspect", str(fifo), "--format", "lines", "--json", timeout=60)
    writer.join(10)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["records"] == 1000
    assert [r["value"]["text"] for r in report["first_records"]] == ["line 1", "line 2", "line 3"]


@needs_fifo
@pytest.mark.parametrize("cmd", ["bench", "inspect"])
@pytest.mark.parametrize("fmt", ["csv", "tfrecord"])
def test_a_schema_from_a_pipe_is_refused_rather_than_losing_its_first_records(
        fifo: Path, cmd: str, fmt: str) -> None:
    # Old: the schema sample consumed the first records (or the writer died), and
    # bench reported fewer records as "end of data", or waited forever.
    proc = feedq(cmd, str(fifo), "--format", fmt, "--compression", "none", timeout=30)
    assert proc.returncode == 2
    assert "can be read only once" in proc.stderr and "schema" in proc.stderr


@needs_fifo
def test_a_second_epoch_of_a_pipe_is_refused(fifo: Path) -> None:
    proc = feedq("bench", str(fifo), "--format", "lines", "--epochs", "2", timeout=30)
    assert proc.returncode == 2 and "--epochs > 1" in proc.stderr


def test_format_given_does_not_need_ascii_first_bytes(tmp_path: Path) -> None:
    # Old: "cannot tell the format; pass --format" although --format csv was passed.
    f = tmp_path / "prices"
    f.write_text("nom,prix\ncafé,1.5\nthé,2.0\n", encoding="utf-8")
    proc = feedq("inspect", str(f), "--format", "csv", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["records"] == 2 and report["schema"] == {"nom": "string", "prix": "float32"}
    r = json.loads(feedq("bench", str(f), "--format", "csv", "--json").stdout)
    assert r["records"] == 2


def test_zstd_tfrecords_by_name_magic_and_option(tmp_path: Path) -> None:
    pytest.importorskip("zstandard")
    from feedq.readers import TFRecordWriter

    for name in ("a.tfrecord.zst", "b"):
        with TFRecordWriter(str(tmp_path / name), options="ZSTD") as w:
            for i in range(300):
                w.write(b"x" * (i % 50))
    for name in ("a.tfrecord.zst", "b"):  # the extension, then the magic bytes
        r = json.loads(feedq("bench", str(tmp_path / name), "--json").stdout)
        assert (r["format"], r["compression"], r["records"]) == ("tfrecord", "ZSTD", 300)
    r = json.loads(feedq("bench", str(tmp_path / "b"), "--format", "tfrecord", "--compression", "zstd",
                         "--json").stdout)
    assert r["records"] == 300


def test_a_closed_stdout_ends_inspect_quietly(tmp_path: Path) -> None:
    f = tmp_path / "many.txt"
    f.write_text("".join(f"line number {i}\n" for i in range(20_000)))
    with subprocess.Popen([sys.executable, "-m", "feedq.cli", "inspect", str(f), "--head", "20000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, PYTHONWARNINGS="ignore")) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(str(f).encode())
        proc.stdout.close()  # as `| head -1` does
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141
    assert "BrokenPipeError" not in err and "Traceback" not in err
