"""Process stages when things go wrong: a worker raises, dies or exits; the
parent gets Ctrl-C or is killed; a dead run's segments; time to the first
batch. Each failure has a bound, and nothing is left behind."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from feedq.errors import AbortedError, CancelledError, UnavailableError
from feedq.process import WorkerTraceback, process_stage, warm_up
from feedq.process._shm import Segment, segment_name
from tests.conftest import sigint_default
from tests.process import _builds as builds
from tests.process._support import no_process_leaks, own_segments, wait_dead  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


# -- a worker fails ---------------------------------------------------------------------


def test_a_worker_exception_reaches_the_consumer_with_its_traceback() -> None:
    with process_stage(builds.failing, 3) as stage:
        got = []
        with pytest.raises(ValueError, match=r"^bad record 42 in worker 1$") as info:
            for batch in stage:
                got.append(tuple(batch.tolist()))
        pid = stage.pids[1]
    # Round-robin: every batch worker 1 sent comes before its error (in
    # worker 1's turn); worker 0 and 2's batches up to then.
    assert got == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 2)]
    remote = info.value.__cause__
    assert isinstance(remote, WorkerTraceback)
    assert (remote.worker_index, remote.pid) == (1, pid)
    assert "_fail_in_worker" in remote.traceback and "raise ValueError" in remote.traceback
    assert str(remote).startswith(f"in feedq process stage worker 1 (pid {pid}):\nTraceback")
    with pytest.raises(CancelledError, match="worker failed"):
        stage.dequeue(timeout=1)


def test_an_exception_that_cannot_be_rebuilt_arrives_as_text() -> None:
    with process_stage(builds.failing_oddly, 1) as stage:
        assert stage.dequeue(timeout=30).tolist() == [0]
        with pytest.raises(AbortedError, match=r"worker 0 \(pid \d+\) failed in epoch 0: OddError: odd 1 2$") as info:
            stage.dequeue(timeout=30)
    assert "raise OddError(1, 2)" in str(info.value.__cause__)


def test_a_killed_worker_is_named_within_a_second() -> None:
    with process_stage(builds.blocked_after_one, 2) as stage:
        assert [b.tolist() for b in (stage.dequeue(timeout=30), stage.dequeue(timeout=30))] == [[0], [1]]
        victim = stage.pids[1]
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=rf"^process stage worker 1 \(pid {victim}\) was killed by SIGKILL; the stage is stopped$"):
            stage.dequeue(timeout=30)  # the consumer was waiting for worker 0
        assert time.monotonic() - t0 < 1.0
        pids = stage.pids
    assert wait_dead(pids, 3.0) == []


def test_batches_sent_before_a_death_are_delivered_first() -> None:
    with process_stage(builds.kills_itself, 1) as stage:
        assert stage.dequeue(timeout=30).tolist() == [0]
        with pytest.raises(UnavailableError, match=r"worker 0 \(pid \d+\) was killed by SIGKILL"):
            stage.dequeue(timeout=30)


def test_a_worker_that_exits_without_finishing() -> None:
    with process_stage(builds.exits_early, 1) as stage:
        got = []
        with pytest.raises(UnavailableError, match=r"worker 0 \(pid \d+\) exited with code 3;"):
            for b in stage:
                got.append(b.tolist())
    assert got == [[0]]


# -- time to the first batch ------------------------------------------------------------


def test_time_to_first_batch_does_not_depend_on_the_dataset(tmp_path: Path) -> None:
    warm_up()  # the fork server starts once per process; not part of the bound
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB of 128-byte records (sparse: instant to make)
    t0 = time.perf_counter()
    with process_stage(functools.partial(builds.fixed_records, str(big)), 2) as stage:
        first = stage.dequeue(timeout=30)
        elapsed = time.perf_counter() - t0
    assert first.shape == (256, 32)
    assert elapsed < 1.0, f"first batch after {elapsed:.2f} s"


# -- the parent is interrupted or killed -------------------------------------------------

PARENT = """
import json, os, sys, time
import feedq
from tests.process import _builds as builds

def main():
    mode = sys.argv[1]
    if mode == "pipeline":
        with feedq.Pipeline():
            stage = feedq.process_stage(builds.endless, 2)
            it = iter(stage)
            next(it)
            print(json.dumps(stage.pids), flush=True)
            for _ in it:
                pass
    else:
        stage = feedq.process_stage(builds.endless, 2)
        if mode == "consume":
            it = iter(stage)
            next(it)
            print(json.dumps(stage.pids), flush=True)
            for _ in it:
                pass
        else:  # "idle": workers fill their slots, nothing is taken
            mine = f"feedq_{os.getpid()}_"
            while not any(n.startswith(mine) for n in os.listdir("/dev/shm")):
                time.sleep(0.01)
            print(json.dumps(stage.pids), flush=True)
            time.sleep(3600)

if __name__ == "__main__":
    main()
"""


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` now (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _start_parent(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(script), mode], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_default)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        err = proc.stderr.read() if proc.stderr else ""
        _end(proc)
        pytest.fail(f"parent did not start: {err}")
    workers = json.loads(line)
    return proc, workers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["pipeline", "consume"])
def test_ctrl_c_in_the_parent_stops_every_worker_within_2_s(tmp_path: Path, mode: str) -> None:
    proc, workers = _start_parent(tmp_path, mode)
    try:
        family = _descendants(proc.pid)  # workers, fork server, resource tracker
        assert set(workers) <= set(family)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        assert wait_dead(family, max(0.0, 2.0 - (time.monotonic() - t0))) == []
        elapsed = time.monotonic() - t0
        assert elapsed < 2.0, f"{elapsed:.2f} s"
        assert own_segments(proc.pid) == []
        assert proc.stderr is not None and "KeyboardInterrupt" in proc.stderr.read()
    finally:
        _end(proc)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")
@pytest.mark.timeout(90)
def test_workers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    proc, workers = _start_parent(tmp_path, "idle")
    try:
        family = _descendants(proc.pid)
        assert own_segments(proc.pid), "the workers' prefetched slots have names"
        proc.kill()
        proc.wait(10)
        assert wait_dead(family, 3.0) == []
        assert own_segments(proc.pid) == []  # the workers unlinked theirs
    finally:
        _end(proc)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")
@pytest.mark.timeout(90)
def test_segments_of_a_run_killed_whole_are_swept_at_the_next_start(tmp_path: Path) -> None:
    proc, workers = _start_parent(tmp_path, "idle")
    family = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)  # parent and workers at once: nobody cleans up
    for pid in family:
        if pid not in workers:
            os.kill(pid, signal.SIGKILL)  # fork server / resource tracker: own sessions? no; be sure
    _end(proc)
    assert wait_dead(family, 3.0) == []
    left = own_segments(proc.pid)
    assert left, "a run killed whole leaves its segments"
    with process_stage(builds.counting, 1) as stage:  # any start sweeps
        assert len(list(stage)) == 3
    assert own_segments(proc.pid) == []


def test_sweep_spares_segments_of_live_processes() -> None:
    name = segment_name(os.getppid(), "abcd", 0, 0)  # pytest's parent is alive
    seg = Segment.create(name, 4096)
    try:
        with process_stage(builds.counting, 1) as stage:
            list(stage)
        assert name in os.listdir("/dev/shm")
    finally:
        seg.close()
        from feedq.process._shm import unlink

        unlink(name)
