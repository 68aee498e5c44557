"""``feedq bench --progress`` / ``feedq demo`` live progress (issue 15): fill
bars redrawn in place on a terminal; plain lines, no escape codes, when
stderr is not one; never anything on stdout (``--json`` stays parseable)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from feedq.cli._progress import LiveProgress, bar
from feedq.cli.datasets import make_dataset
from tests import _forkserver as forkserver

pytestmark = pytest.mark.timeout(60)


@dataclass
class Q:
    name: str
    size: int
    capacity: int


@dataclass
class R:
    records: int = 1000
    records_per_s: float = 2000.0
    mb_per_s: float = 1.5
    seconds: float = 0.5


def test_bar_fills_its_fraction() -> None:
    assert bar(0.5, 10) == "[#####.....]"
    assert bar(0.0, 4) == "[....]" and bar(1.0, 4) == "[####]"
    assert bar(2.0, 4) == "[####]" and bar(-1.0, 4) == "[....]"  # clamped


def test_terminal_bars_are_redrawn_in_place() -> None:
    out = io.StringIO()
    live = LiveProgress(out, tty=True)
    queues = [Q("input_producer", 3, 4), Q("batch_join/fifo_queue", 0, 8192)]
    live(R(), queues)
    first = out.getvalue()
    lines = first.splitlines()
    assert len(lines) == 3 and not first.startswith("\x1b[3F")
    assert "1,000 records" in lines[0] and "2,000 rec/s" in lines[0]
    assert lines[1] == f"\x1b[2K  input_producer         {bar(0.75)}  75%  3/4"
    assert lines[2] == f"\x1b[2K  batch_join/fifo_queue  {bar(0.0)}   0%  0/8,192"
    live(R(records=2000), queues)
    second = out.getvalue()[len(first):]
    assert second.startswith("\x1b[3F")  # back up over the 3 lines drawn
    assert "2,000 records" in second and second.count("\n") == 3
    live.message("round 1/3: done")
    live(R(records=3000), queues)
    third = out.getvalue()[len(first) + len(second):]
    # A message is not drawn over: the next drawing starts below it.
    assert third.startswith("round 1/3: done\n\x1b[2K")


def test_off_a_terminal_plain_lines_no_escapes_and_throttled() -> None:
    out = io.StringIO()
    live = LiveProgress(out, tty=False, every=3600)
    queues = [Q("input_producer", 1, 4)]
    live(R(), queues)
    live(R(records=2000), queues)  # within `every` of the first: nothing
    text = out.getvalue()
    assert "\x1b" not in text and text.count("\n") == 1
    assert text.startswith("1,000 records") and text.rstrip().endswith("queues: input_producer 25%")


def test_bench_progress_into_a_pipe_keeps_json_clean(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", "fixed", 20_000, files=2)
    proc = forkserver.run(  # a process of its own, forked warm
        ["-m", "feedq.cli", "bench", str(tmp_path / "d"), "--progress", "--json",
         "--epochs", "1000000", "--duration", "1.0", "--batch-size", "64"],
        timeout=50, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout: the JSON and nothing else
    assert result["stopped_by"] == "duration" and result["records"] > 0
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if " rec/s " in x]
    assert lines and all("queues: input_producer" in x for x in lines), proc.stderr


def test_bench_on_a_terminal_draws_bars_by_default(tmp_path: Path) -> None:
    pty = pytest.importorskip("pty")
    make_dataset(tmp_path / "d", "fixed", 20_000, files=2)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "feedq.cli", "bench", str(tmp_path / "d"), "--json",
             "--epochs", "1000000", "--duration", "1.0", "--batch-size", "64"],
            stdout=subprocess.PIPE, stderr=slave, text=True,
            env=dict(os.environ, PYTHONWARNINGS="ignore"))
        os.close(slave)
        slave = -1
        out, _ = proc.communicate(timeout=50)
        chunks = []
        while True:  # the child has exited: read what it wrote to the terminal
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: nothing more
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0
    assert json.loads(out)["stopped_by"] == "duration"  # stdout: JSON only
    err = b"".join(chunks).decode()
    assert "\x1b[2K" in err and "input_producer" in err and "batch_join/fifo_queue" in err
    assert "\x1b[3F" in err  # redrawn in place
