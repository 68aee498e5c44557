"""Exact resumption after SIGKILL: a training child is killed at a batch,
the pipeline is restored from the last state it saved, and the batches
delivered before and after are checked against an uninterrupted run.

Per format (CSV, TFRecord plain and GZIP, in-memory) seven trials, killed:
mid-epoch, right after the first batch (shuffle buffer just full, queues
filling), right after the epoch boundary, just before the partial final
batch (FIFO and shuffling), at a random time while it runs (not paused),
and, with three reader threads, mid-epoch. Deterministic trials (one runner
thread, seeded) must continue bit for bit; threaded trials must deliver
every record of the epoch exactly once. The children of one format run at
the same time (processes forked from a warm interpreter:
tests/_forkserver.py); the restore runs in this process (a process other
than the killed one).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import _forkserver as forkserver
from tests.resume import _support as rs

SUPPORT = Path(rs.__file__)
EPOCHS = {"exact": 2, "fifo": 2, "threads": 1}


def _trials(total: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    batches = -(-2 * total // rs.BATCH)  # two epochs, the last batch partial
    boundary = total // rs.BATCH
    return [
        {"mode": "exact", "pause_at": int(rng.integers(2, boundary - 2)), "why": "mid-epoch"},
        {"mode": "exact", "pause_at": 0, "why": "first batch, buffer just full"},
        {"mode": "exact", "pause_at": boundary, "why": "after the epoch boundary"},
        {"mode": "exact", "pause_at": batches - 2, "why": "before the partial final batch"},
        {"mode": "fifo", "pause_at": batches - 2, "why": "FIFO, before the partial final batch"},
        {"mode": "exact", "pause_at": -1, "kill_after": int(rng.integers(3, batches - 3)),
         "why": "killed while running"},
        {"mode": "threads", "pause_at": int(rng.integers(2, total // rs.BATCH - 2)),
         "why": "3 reader threads, mid-epoch"},
    ]


def _wait_for(path: Path, proc: forkserver.Child, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child ended ({proc.returncode}) before {path.name}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the child did not write {path.name} in {timeout} s")
        time.sleep(0.02)  # a file written by another process: nothing to wait on


def _saved(out: Path) -> list[dict[str, Any]]:
    files = sorted(out.glob("b*.pkl"))
    got = [pickle.loads(f.read_bytes()) for f in files]
    assert [f.name for f in files] == [f"b{i:05d}.pkl" for i in range(len(files))]
    return got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", rs.FORMATS)
def test_sigkill_and_resume(tmp_path: Path, fmt: str) -> None:
    data = rs.write_data(tmp_path / "data", fmt, seed=rs.FORMATS.index(fmt))
    trials = _trials(data["total"], seed=rs.FORMATS.index(fmt))
    env = {**os.environ, "PYTHONPATH": str(SUPPORT.parents[2])}
    procs = []
    for i, trial in enumerate(trials):
        out = tmp_path / f"trial{i}"
        out.mkdir()
        cfg = {"data": data, "mode": trial["mode"], "epochs": EPOCHS[trial["mode"]],
               "out": str(out), "pause_at": trial["pause_at"],
               "slow": 0.05 if trial["pause_at"] < 0 else 0.0,
               # On a busy machine the running child could finish before the kill
               # lands; it then waits to be killed (the kill is after its last batch).
               "hold": trial["pause_at"] < 0}
        (out / "cfg.json").write_text(json.dumps(cfg))
        proc = forkserver.popen([str(SUPPORT), str(out / "cfg.json")], env=env, stdin_pipe=True)
        procs.append((trial, out, proc))
    try:
        # The child that is not paused first: it must still be running.
        for trial, out, proc in sorted(procs, key=lambda p: p[0]["pause_at"] >= 0):
            at = trial["pause_at"] if trial["pause_at"] >= 0 else trial["kill_after"]
            _wait_for(out / f"b{at:05d}.pkl", proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            assert proc.returncode == -signal.SIGKILL, trial
    finally:
        for _, _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            assert proc.stdin is not None
            proc.stdin.close()
            for text in proc.output():  # shown if the test fails
                sys.stderr.write(text)
    for trial, out, _ in procs:
        mode = trial["mode"]
        before = _saved(out)
        if trial["pause_at"] >= 0:
            assert len(before) == trial["pause_at"] + 1, trial
        state = before[-1]["state"]
        assert state["taken"] == len(before)
        after = rs.run(data, mode, EPOCHS[mode], state=state)
        ids = [b["ids"] for b in before] + [a[0] for a in after]
        other = [b["other"] for b in before] + [a[1] for a in after]
        if mode == "threads":
            flat = np.sort(np.concatenate(ids))
            np.testing.assert_array_equal(flat, np.arange(data["total"]), err_msg=trial["why"])
            continue
        reference = rs.run(data, mode, EPOCHS[mode])
        assert len(ids) == len(reference), trial["why"]
        for k, (i, o, ref) in enumerate(zip(ids, other, reference)):
            np.testing.assert_array_equal(i, ref[0], err_msg=f"{trial['why']}: batch {k}")
            np.testing.assert_array_equal(o, ref[1], err_msg=f"{trial['why']}: batch {k}")
        assert len(ids[-1]) == (2 * data["total"]) % rs.BATCH  # the partial final batch
