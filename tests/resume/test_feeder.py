"""Resuming a DeviceFeeder: its state is its source's state as of the batches
the consumer received; batches it prefetched (read, staged, being copied)
come again after a restore.

Sources: :class:`tests.resume._builds.ListStage` (the resumable-stage
interface in miniature) and a process stage. Every test waits until the
feeder has prefetched all it may before saving, and checks the concatenated
batches against the uninterrupted run.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.devices import DeviceFeeder
from feedq.errors import FailedPreconditionError
from feedq.process import process_stage
from tests.conftest import wait_until
from tests.process._support import no_process_leaks  # noqa: F401
from tests.resume import _builds as builds

pytestmark = pytest.mark.timeout(60)

Tag = tuple[int, int, int]
ITEMS = builds.items_for(2, 0, 5)  # 9 items
FULL = [(2, 0, i) for i in ITEMS]


def tag(batch: Any) -> Tag:
    w, e, i = (int(v) for v in np.asarray(batch))
    return (w, e, i)


def list_stage() -> builds.ListStage:
    return builds.ListStage(2, 0, list(ITEMS))


def wait_prefetched(feeder: DeviceFeeder) -> None:
    """Wait until the feeder has read all it may: its buffer full and one
    more batch read (its thread waits for room), or the source's end reached."""
    def full() -> bool:
        s = feeder.statistics()
        return s.waiting_for_room or s.state == "finished"

    wait_until(full, 10.0, "the feeder's prefetch")


@pytest.mark.parametrize("staging", [False, True], ids=["host", "staged"])
@pytest.mark.parametrize("k", [0, 1, 4, 8, 9])
def test_prefetched_batches_are_delivered_again(staging: bool, k: int) -> None:
    source = list_stage()
    with DeviceFeeder(source, prefetch=3, staging=staging) as feeder:
        got = [tag(feeder.get(timeout=10)) for _ in range(k)]
        wait_prefetched(feeder)
        assert source.taken > k or k == len(FULL)  # read ahead of the consumer
        state = pickle.loads(pickle.dumps(feeder.state_dict()))
    assert state == {"pos": k, "n": len(FULL)}
    source = list_stage()
    feeder = DeviceFeeder(source, prefetch=3, staging=staging)
    feeder.load_state_dict(state)
    with feeder:
        rest = [tag(b) for b in feeder]
    assert got + rest == FULL


def test_state_before_start_and_after_the_end() -> None:
    source = list_stage()
    next(iter(source))  # one taken before the feeder: not the feeder's to count
    with DeviceFeeder(source, prefetch=2) as feeder:
        assert feeder.state_dict() == {"pos": 1, "n": len(FULL)}  # not started yet
        rest = [tag(b) for b in feeder]
        assert feeder.state_dict() == {"pos": len(FULL), "n": len(FULL)}
    assert rest == FULL[1:]


def test_process_stage_source() -> None:
    """A feeder over a process stage: the stage's state as of what the
    feeder's consumer got, prefetched batches not delivered."""
    expected = builds.expected(2, 1, 3)
    with process_stage(builds.stateful_rows, 2, seed=3) as stage:
        with DeviceFeeder(stage, prefetch=4) as feeder:
            got = [tag(feeder.get(timeout=10)) for _ in range(5)]
            wait_prefetched(feeder)
            assert stage.taken > 5
            state = feeder.state_dict()
    assert state["received"] == [3, 2]
    with process_stage(builds.stateful_rows, 2, seed=3) as stage:
        feeder = DeviceFeeder(stage, prefetch=4)
        feeder.load_state_dict(pickle.loads(pickle.dumps(state)))
        with feeder:
            rest = [tag(b) for b in feeder]
    assert got + rest == expected


def test_sources_without_positions_are_refused() -> None:
    q = feedq.FIFOQueue(10, [np.int64], shapes=[[2]])
    q.enqueue_many([np.zeros((4, 2), np.int64)])
    with DeviceFeeder(q, batch_size=2) as feeder:
        feeder.get(timeout=10)
        with pytest.raises(FailedPreconditionError, match=r"the source is a queue, which holds "
                                                          r"no positions"):
            feeder.state_dict()
    with DeviceFeeder([np.zeros(3)]) as feeder:
        with pytest.raises(FailedPreconditionError, match=r"\(list\) is not resumable"):
            feeder.state_dict()
        with pytest.raises(FailedPreconditionError, match=r"\(list\) is not resumable"):
            feeder.load_state_dict({})


def test_load_after_start_is_refused() -> None:
    source = list_stage()
    with DeviceFeeder(source) as feeder:
        feeder.get(timeout=10)
        with pytest.raises(FailedPreconditionError, match=r"before the feeder starts$"):
            feeder.load_state_dict({"pos": 0, "n": len(FULL)})
        assert tag(feeder.get(timeout=10)) == FULL[1]  # unchanged


@pytest.mark.parametrize("whose", ["feeder", "pipeline"])
def test_a_resumable_pipeline_stage_as_the_source(tmp_path: Any, whose: str) -> None:
    """A real pipeline (one shuffle_batch, exact mode): the feeder's state is
    the pipeline's state as of the batches the consumer got, and so is
    ``pipe.state_dict()`` of the pipeline the feeder was built in (its
    prefetched batches are not delivered); restored with
    ``feedq.Pipeline(state=...)`` (the stage restores as it is built)."""
    from tests.resume import _support as rs

    data = rs.write_data(tmp_path, "memory", files=3)
    reference = [ids for ids, _ in rs.run(data, "exact", 1)]
    with feedq.Pipeline(resumable=True) as pipe:
        stage = rs.build(pipe, data, "exact", 1)
        with DeviceFeeder(stage, prefetch=4) as feeder:
            got = [np.asarray(feeder.get(timeout=10)[0]).copy() for _ in range(6)]
            wait_prefetched(feeder)
            assert stage.taken > 6  # the feeder read ahead
            saved = feeder.state_dict() if whose == "feeder" else pipe.state_dict()
            state = pickle.loads(pickle.dumps(saved))
    with feedq.Pipeline(state=state) as pipe:
        stage = rs.build(pipe, data, "exact", 1)
        with DeviceFeeder(stage, prefetch=4) as feeder:
            rest = [np.asarray(b[0]).copy() for b in feeder]
    assert len(got) + len(rest) == len(reference)
    for a, b in zip(got + rest, reference):
        np.testing.assert_array_equal(a, b)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_two_feeders_on_the_pipeline_output_refuse_a_pipeline_state() -> None:
    """Which feeder's consumer defines the state is ambiguous: refused, by name."""
    with feedq.Pipeline(resumable=True) as pipe:
        rows = feedq.slice_input_producer([np.arange(100)], num_epochs=1, seed=1)
        stage = feedq.batch(rows, 10)
        with DeviceFeeder(stage, prefetch=1), DeviceFeeder(stage, prefetch=1):
            with pytest.raises(feedq.errors.InvalidArgumentError,
                               match=r"^2 device feeders read this pipeline's output; save each "
                                     r"feeder's state_dict\(\) instead of the pipeline's$"):
                pipe.state_dict()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
def test_batches_in_flight_to_a_gpu_are_delivered_again() -> None:
    """Staged in pinned memory and copied on a side stream: not delivered
    until get() returns them. (Runs on a GPU machine: pytest -m gpu.)"""
    source = list_stage()
    with DeviceFeeder(source, prefetch=3, device="cuda:0", output="torch") as feeder:
        got = [tag(feeder.get(timeout=10).cpu()) for _ in range(3)]
        wait_prefetched(feeder)
        state = feeder.state_dict()
    source = list_stage()
    feeder = DeviceFeeder(source, prefetch=3, device="cuda:0", output="torch")
    feeder.load_state_dict(state)
    with feeder:
        rest = [tag(b.cpu()) for b in feeder]
    assert got + rest == FULL
