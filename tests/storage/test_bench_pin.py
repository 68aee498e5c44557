"""benchmarks/remote.py --pin --trace still runs: the two processes on the
CPUs it says, every row with its CPU use, the trace printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="--pin needs two CPUs (Linux)")
def test_remote_benchmark_pinned_runs() -> None:
    pytest.importorskip("moto.server")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "remote.py"), "--records", "2000",
         "--files", "2", "--rounds", "1", "--only", "csv", "--latencies", "0",
         "--pin", f"{cpus[0]}:{cpus[1]}", "--trace"],
        capture_output=True, text=True, timeout=150, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert (f"# pinned: this process (readers, consumer, local rows, ceiling loop) on CPU "
            f"{cpus[0]}; the server + proxies process on CPU {cpus[1]}") in out.stdout
    rows = {r.split("|")[2].strip(): r for r in out.stdout.splitlines() if r.startswith("| csv")}
    assert set(rows) == {"local", "s3 +0 ms", "ceiling +0 ms", "ceiling, no proxy"}, rows
    for r in rows.values():  # CPU s/s of both processes in every row
        assert re.search(r"\| \d+\.\d\d / \d+\.\d\d +\|$", r), r
    assert "# csv s3 +0 ms trace: 2 files," in out.stdout, out.stdout


def test_pin_rejects_overlapping_or_unknown_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.remote import parse_pin

    cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    with pytest.raises(SystemExit, match="disjoint"):
        parse_pin(f"{cpu}:{cpu}")
    with pytest.raises(SystemExit, match="disjoint"):
        parse_pin(f"{cpu}:99999")
