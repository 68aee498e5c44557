"""Resuming a process stage: ``state_dict`` / ``load_state_dict``.

Each test saves at chosen points (mid-epoch, at an epoch boundary, with
batches waiting in the shared-memory rings, after ``peek``, ``upto`` behind
the consumer), restores into a NEW stage (once in a new process after the
saving one was SIGKILLed) and checks that the concatenated batches equal the
uninterrupted run (deterministic order) or cover every batch exactly once
(first-ready order). Batches are ``[worker, epoch, item]``
(``tests.resume._builds``). Bounded, and nothing is left behind
(``no_process_leaks``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.process import ProcessStage, process_stage
from tests import _forkserver as forkserver
from tests.conftest import wait_until
from tests.process._support import no_process_leaks, own_segments, wait_dead  # noqa: F401
from tests.resume import _builds as builds
from tests.resume import _support as rs

pytestmark = pytest.mark.timeout(60)

Tag = tuple[int, int, int]
N, EPOCHS, SEED = 3, 2, 7
EXPECTED = builds.expected(N, EPOCHS, SEED)
EPOCH0 = sum(1 for t in EXPECTED if t[1] == 0)  # 21 batches: 5 + 7 + 9


def tag(batch: Any) -> Tag:
    w, e, i = (int(v) for v in batch)
    return (w, e, i)


def take(stage: ProcessStage, n: int) -> list[Tag]:
    return [tag(stage.dequeue(timeout=10)) for _ in range(n)]


def drain(stage: ProcessStage) -> list[Tag]:
    out = []
    while True:
        try:
            out.append(tag(stage.dequeue(timeout=10)))
        except OutOfRangeError:
            return out


def new_stage(build: Callable[[int, int], Any] = builds.stateful_rows, n: int = N,
              **kwargs: Any) -> ProcessStage:
    kwargs.setdefault("epochs", EPOCHS)
    kwargs.setdefault("seed", SEED)
    return process_stage(build, n, **kwargs)


def restored_rest(state: dict[str, Any], build: Callable[[int, int], Any] = builds.stateful_rows,
                  **kwargs: Any) -> list[Tag]:
    """What a new stage restored from ``state`` (after a pickle round trip) delivers."""
    state = pickle.loads(pickle.dumps(state))
    with new_stage(build, **kwargs) as stage:
        stage.load_state_dict(state)
        return drain(stage)


def wait_rings_full(stage: ProcessStage) -> None:
    """Wait until every worker has sent all its batches of the epoch (they
    sit in the shared-memory rings, not taken). Reads the stage's private
    inboxes: the point is to have batches in flight when the state is taken."""
    def sent_all() -> bool:
        stage._pump(0.01)
        return all(any(ev[0] == "end" for ev in h.inbox) or h.index not in stage._merge.rotation
                   for h in stage._handles)

    wait_until(sent_all, 10.0, "every worker's epoch in its ring")


def test_uninterrupted_run_is_the_expected_order() -> None:
    with new_stage() as stage:
        assert drain(stage) == EXPECTED
        assert stage.taken == len(EXPECTED)


@pytest.mark.parametrize("build", [builds.stateful_rows, builds.plain_rows],
                         ids=["stage_state", "replay"])
@pytest.mark.parametrize("k", [0, 1, 5, 13, EPOCH0 - 1, EPOCH0, EPOCH0 + 1, len(EXPECTED)])
def test_resume_after_k_batches_gives_the_rest(build: Callable[[int, int], Any], k: int) -> None:
    with new_stage(build) as stage:
        got = take(stage, k)
        if 0 < k < EPOCH0:
            wait_rings_full(stage)  # prefetched batches must not count as delivered
        state = stage.state_dict()
    assert state["epoch"] == (0 if k <= EPOCH0 else 1)
    assert sum(state["received"]) == (k if k <= EPOCH0 else k - EPOCH0)
    assert got + restored_rest(state, build) == EXPECTED


def test_for_loop_epochs_resume_at_the_boundary() -> None:
    with new_stage() as stage:
        first = [tag(b) for b in stage]  # epoch 0, to its end
        state = stage.state_dict()
    assert state["epoch_done"] and state["workers"] is None
    with new_stage() as stage:
        stage.load_state_dict(state)
        second = [tag(b) for b in stage]  # the next loop is epoch 1
        last = stage.state_dict()
        with pytest.raises(OutOfRangeError):
            iter(stage)
    assert first + second == EXPECTED
    with new_stage() as stage:  # restored after the last epoch: nothing left
        stage.load_state_dict(last)
        with pytest.raises(OutOfRangeError):
            iter(stage)
        with pytest.raises(OutOfRangeError):
            stage.dequeue(timeout=10)


def test_state_is_taken_again_after_a_restore() -> None:
    """Positions add up across restores (the restored workers count from 0)."""
    got: list[Tag] = []
    state = None
    for k in (4, 6, 15, 3):
        with new_stage() as stage:
            if state is not None:
                stage.load_state_dict(state)
            got += take(stage, k)
            state = stage.state_dict()
    assert got + restored_rest(state) == EXPECTED


@pytest.mark.parametrize("k, behind", [(10, 4), (EPOCH0 + 2, 5), (EPOCH0, 0), (3, 3)])
def test_upto_leaves_the_last_batches_undelivered(k: int, behind: int) -> None:
    """A feeder's prefetched batches: taken from the stage, not delivered."""
    with new_stage() as stage:
        got = take(stage, k)
        state = stage.state_dict(upto=k - behind)
        with pytest.raises(InvalidArgumentError, match=r"^upto must be an int in \[0, "):
            stage.state_dict(upto=k + 1)
    assert got[:k - behind] + restored_rest(state) == EXPECTED


def test_peeked_batch_is_not_delivered() -> None:
    with new_stage() as stage:
        got = take(stage, 4)
        peeked = tag(stage.peek(timeout=10))
        assert stage.taken == 4
        state = stage.state_dict()
        assert tag(stage.dequeue(timeout=10)) == peeked
    rest = restored_rest(state)
    assert rest[0] == peeked
    assert got + rest == EXPECTED
    with new_stage() as stage:  # a stage that peeked (an adapter) may still be restored
        stage.peek(timeout=10)
        stage.load_state_dict(state)
        assert drain(stage) == rest


@pytest.mark.parametrize("build", [builds.stateful_rows, builds.plain_rows],
                         ids=["stage_state", "replay"])
def test_first_ready_resume_delivers_each_batch_once(build: Callable[[int, int], Any]) -> None:
    with new_stage(build, order="first_ready") as stage:
        got = take(stage, 9)
        state = stage.state_dict()
    assert state["next_worker"] is None
    rest = restored_rest(state, build, order="first_ready")
    assert sorted(got + rest) == sorted(EXPECTED)
    assert len(set(got + rest)) == len(EXPECTED)


def test_mismatched_restores_are_refused() -> None:
    with new_stage() as stage:
        take(stage, 3)
        state = stage.state_dict()
    with new_stage(n=2) as other:
        with pytest.raises(InvalidArgumentError, match=r"saved by a process stage of 3 workers; "
                                                       r"this one has 2"):
            other.load_state_dict(state)
        with pytest.raises(InvalidArgumentError, match=r"^not a process stage state"):
            other.load_state_dict({"format": "something else"})
        assert sorted(drain(other)) == sorted(builds.expected(2, EPOCHS, SEED))  # unchanged
    late = dict(state, epoch=1)
    with new_stage(epochs=1) as one_epoch:
        with pytest.raises(InvalidArgumentError, match=r"in epoch 1; this process stage reads 1"):
            one_epoch.load_state_dict(late)
        one_epoch.dequeue(timeout=10)
        with pytest.raises(FailedPreconditionError, match=r"before the process stage's first"):
            one_epoch.load_state_dict(state)
    # A pipeline state restored into a build that returns a plain iterable.
    with new_stage(builds.plain_rows) as stage:
        stage.load_state_dict(state)
        with pytest.raises(InvalidArgumentError, match=r"has no load_state_dict"):
            drain(stage)


def test_state_is_plain_small_data() -> None:
    with new_stage() as stage:
        take(stage, 5)
        state = stage.state_dict()
    assert set(state) == {"format", "num_processes", "order", "epoch", "epoch_done",
                          "next_worker", "received", "workers"}
    assert state["workers"] == [{"mode": "state", "state": {"pos": p, "n": n}}
                                for p, n in zip(state["received"], [5, 7, 9])]
    assert len(pickle.dumps(state)) < 1000
    assert np.array_equal(state["received"], [2, 2, 1])


# -- real pipelines in the workers (feedq.Pipeline(resumable=True)) -------------------------


@pytest.fixture(scope="module")
def csv_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("csv")
    rs.write_data(folder, "csv", files=6)
    return str(folder)


def ids_of(stage: ProcessStage, n: int | None = None) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    while n is None or len(out) < n:
        try:
            batch = stage.dequeue(timeout=20)
        except OutOfRangeError:
            break
        out.append(np.asarray(batch[0]).copy())
    return out


def csv_stages(build: Callable[[int, int], Any], **kwargs: Any) -> rs.Subject:
    """Process stages over ``build`` for the save/restore harness."""

    @contextlib.contextmanager
    def open_(state: dict[str, Any] | None) -> Iterator[ProcessStage]:
        with process_stage(build, 2, seed=5, resumable=True, **kwargs) as s:
            if state is not None:
                s.load_state_dict(state)
            yield s

    return rs.Subject(open_, ids_of, lambda s, upto: s.state_dict(upto=upto))


def test_csv_pipelines_resume_exactly(csv_folder: str) -> None:
    """One reader and runner thread per worker: the restored run delivers
    the very batches of the uninterrupted one, across the epoch boundary."""
    stages = csv_stages(functools.partial(builds.csv_pipeline, csv_folder, False), epochs=2)
    full, _ = rs.run_to(stages)
    total = sum(len(b) for b in full)
    assert sorted(np.concatenate(full).tolist()) == sorted(list(range(total // 2)) * 2)
    rs.check_save_restore(stages, (5, len(full) // 2 + 1), full=full)  # mid-epoch 0, in epoch 1


def test_threaded_csv_pipelines_deliver_every_record_once(csv_folder: str) -> None:
    """3 readers per worker, first-ready order: timing decides the order, and
    every record not delivered before the save comes exactly once after."""
    stages = csv_stages(functools.partial(builds.csv_pipeline, csv_folder, True),
                        order="first_ready")
    (r,) = rs.save_restore(stages, (5,), ahead=2)  # two taken, not delivered
    ids = np.concatenate(r.before[:5] + r.after).tolist()
    assert sorted(ids) == list(range(len(ids)))


def test_a_pipeline_stage_needs_resumable_true(csv_folder: str) -> None:
    build = functools.partial(builds.csv_pipeline, csv_folder, False)
    with process_stage(build, 2, seed=5) as s:
        ids_of(s, 1)
        with pytest.raises(InvalidArgumentError, match=r"process_stage\(\.\.\., resumable=True\)"):
            s.state_dict()


def test_restore_in_a_new_process_after_sigkill(tmp_path: Path, csv_folder: str) -> None:
    """The saving process (CSV pipelines in 2 workers) dies by SIGKILL
    mid-epoch, batches in flight; a new stage here restores its state and
    delivers exactly the rest of the uninterrupted run."""
    out = tmp_path / "state.pkl"
    script = textwrap.dedent(f"""
        import functools, os, pickle, time
        import numpy as np
        from feedq.process import process_stage
        from tests.resume import _builds as builds

        if __name__ == "__main__":
            build = functools.partial(builds.csv_pipeline, {csv_folder!r}, False)
            stage = process_stage(build, 2, seed=5, resumable=True)
            got = [np.asarray(stage.dequeue(timeout=20)[0]).copy() for _ in range(9)]
            state = stage.state_dict()
            with open({str(out)!r} + ".tmp", "wb") as f:
                pickle.dump((got, state, os.getpid(), stage.pids), f)
            os.replace({str(out)!r} + ".tmp", {str(out)!r})
            time.sleep(60)  # killed here, workers and segments alive
    """)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *sys.path]))
    proc = forkserver.popen(["-c", script], env=env)  # a process of its own, forked warm
    try:
        wait_until(out.exists, 40.0, "the saving process's state file")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        for text in proc.output():  # shown if the test fails
            sys.stderr.write(text)
    assert proc.returncode == -signal.SIGKILL
    got, state, pid, worker_pids = pickle.loads(out.read_bytes())
    assert wait_dead(worker_pids, 5.0) == []  # the orphaned workers leave
    build = functools.partial(builds.csv_pipeline, csv_folder, False)
    with process_stage(build, 2, seed=5, resumable=True) as s:
        full = ids_of(s)
    with process_stage(build, 2, seed=5, resumable=True) as s:  # also sweeps dead segments
        s.load_state_dict(state)
        rest = ids_of(s)
    assert len(got) + len(rest) == len(full)
    for a, b in zip(got + rest, full):
        np.testing.assert_array_equal(a, b)
    assert own_segments(pid) == []


def test_inside_a_resumable_pipeline(csv_folder: str) -> None:
    """feedq.Pipeline(resumable=True) around a process stage: the stage is
    the pipeline's output (pipe.state_dict() is its state, worker pipelines
    resumable), and Pipeline(state=...) starts its workers restored."""
    build = functools.partial(builds.csv_pipeline, csv_folder, False)
    with feedq.Pipeline(resumable=True) as pipe:
        full = ids_of(process_stage(build, 2, seed=5))
    with feedq.Pipeline(resumable=True) as pipe:
        got = ids_of(process_stage(build, 2, seed=5), 4)
        state = pickle.loads(pickle.dumps(pipe.state_dict()))
    with feedq.Pipeline(state=state) as pipe:
        stage = process_stage(build, 2, seed=5)
        rest = ids_of(stage)
    assert len(got) + len(rest) == len(full)
    for a, b in zip(got + rest, full):
        np.testing.assert_array_equal(a, b)
    later = feedq.Pipeline(resumable=True)  # built, then loaded before it starts
    with later.as_default():
        stage = process_stage(build, 2, seed=5)
    later.load_state_dict(state)
    with later, stage:
        assert len(ids_of(stage)) == len(rest)


def test_state_keyword_starts_the_workers_restored() -> None:
    with new_stage() as stage:
        got = take(stage, 8)
        state = stage.state_dict()
    with new_stage(state=pickle.loads(pickle.dumps(state))) as stage:
        pids = stage.pids
        rest = drain(stage)
        assert stage.pids == pids  # started once, restored
    assert got + rest == EXPECTED
    with pytest.raises(InvalidArgumentError, match=r"of 3 workers; this one has 2"):
        new_stage(n=2, state=state)
