"""Resuming the torch adapters: ``as_torch_dataset(...)`` implements the
``state_dict`` / ``load_state_dict`` protocol that torchdata's
``StatefulDataLoader`` calls.

Round trips through ``StatefulDataLoader`` (torchdata is installed here;
the tests skip without it) with ``num_workers=0`` and ``2``: save after k
batches, a NEW dataset and loader load the state, and the concatenation
equals the uninterrupted run; plus the protocol called directly (refusals).
Batches are ``[worker, epoch, item]`` (``tests.resume._builds``).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import FailedPreconditionError, InvalidArgumentError
from tests.process._support import no_process_leaks  # noqa: F401
from tests.resume import _builds as builds

torch = pytest.importorskip("torch")


def StatefulDataLoader(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands for the class
    """torchdata's StatefulDataLoader (a dev dependency; a test that needs
    it skips without it, the protocol tests run anyway)."""
    module = pytest.importorskip("torchdata.stateful_dataloader")
    return module.StatefulDataLoader(*args, **kwargs)

pytestmark = [
    pytest.mark.timeout(120),
    # torchdata 0.11 calls torch.set_vital, deprecated in this torch: not ours.
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
]

Tag = tuple[int, int, int]
SEED = 3


def tags(batches: Any) -> list[Tag]:
    out = []
    for b in batches:
        w, e, i = (int(v) for v in b)
        out.append((w, e, i))
    return out


def loader(build: Callable[[int, int], Any], num_workers: int) -> Any:
    return StatefulDataLoader(feedq.as_torch_dataset(build, seed=SEED), batch_size=None,
                              num_workers=num_workers)


def expected_pass(num_workers: int, epoch: int) -> list[Tag]:
    """One DataLoader pass: workers take turns (DataLoader's round robin over
    its workers, the same rule as the process stage's deterministic order)."""
    return [t for t in builds.expected(max(1, num_workers), epoch + 1, SEED) if t[1] == epoch]


@pytest.mark.parametrize("build", [builds.stateful_rows, builds.plain_rows],
                         ids=["stage_state", "replay"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_round_trip(build: Callable[[int, int], Any],
                                        num_workers: int) -> None:
    first, second = expected_pass(num_workers, 0), expected_pass(num_workers, 1)
    uninterrupted = loader(build, num_workers)
    assert [tags(uninterrupted), tags(uninterrupted)] == [first, second]
    # Mid-epoch, one worker's last batch of the epoch taken, and the end.
    for k in sorted({2, len(first) - 1, len(first)}):
        saver = loader(build, num_workers)
        it = iter(saver)
        got = tags(next(it) for _ in range(k))
        state = pickle.loads(pickle.dumps(saver.state_dict()))
        del it
        restored = loader(build, num_workers)
        restored.load_state_dict(state)
        rest = tags(restored)
        if k == len(first) and num_workers == 0:
            assert rest == []  # the pass had not seen its end: an empty rest
            rest = tags(restored)  # then the next epoch
        else:
            assert got + rest[:len(first) - k] == first
            rest = rest[len(first) - k:] or tags(restored)
        assert rest == second, k  # the passes count on from the restored epoch


def test_a_resumable_stage_as_the_source() -> None:
    """as_torch_dataset(stage): the stage's state as of the batches yielded
    (the feeder's prefetched batches are not delivered)."""
    items = builds.items_for(1, 0, SEED)
    full = [(1, 0, i) for i in items]

    def make() -> Any:
        ds = feedq.as_torch_dataset(builds.ListStage(1, 0, list(items)), prefetch=3)
        return ds, StatefulDataLoader(ds, batch_size=None, num_workers=0)

    ds, saver = make()
    assert ds.state_dict()["source"] == {"pos": 0, "n": len(items)}  # before any pass
    it = iter(saver)
    got = tags(next(it) for _ in range(3))
    state = pickle.loads(pickle.dumps(saver.state_dict()))
    del it
    assert ds.state_dict()["source"] == {"pos": 3, "n": len(items)}  # after the pass ended
    _, restored = make()
    restored.load_state_dict(state)
    assert got + tags(restored) == full


def test_a_process_stage_as_the_source() -> None:
    expected = builds.expected(2, 1, SEED)
    with feedq.process_stage(builds.stateful_rows, 2, seed=SEED) as stage:
        saver = StatefulDataLoader(feedq.as_torch_dataset(stage), batch_size=None)
        it = iter(saver)
        got = tags(next(it) for _ in range(5))
        state = saver.state_dict()
        del it
    with feedq.process_stage(builds.stateful_rows, 2, seed=SEED) as stage:
        restored = StatefulDataLoader(feedq.as_torch_dataset(stage), batch_size=None)
        restored.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = tags(restored)
    assert got + rest == expected


def test_protocol_refusals() -> None:
    ds = feedq.as_torch_dataset(builds.stateful_rows, seed=SEED)
    assert ds.state_dict()["epoch"] is None  # nothing started
    with pytest.raises(InvalidArgumentError, match=r"^not a state of as_torch_dataset\(build\)"):
        ds.load_state_dict({"format": "feedq.torch_source/1"})
    with pytest.raises(InvalidArgumentError, match=r"^bad state of as_torch_dataset"):
        ds.load_state_dict(dict(ds.state_dict(), epoch=0))
    # A worker's state loaded into another worker count.
    one = feedq.as_torch_dataset(builds.stateful_rows, seed=SEED)
    it = iter(one)
    next(it)
    state = one.state_dict()
    it.close()
    assert (state["worker"], state["num_workers"], state["epoch"]) == (0, 1, 0)
    other = feedq.as_torch_dataset(builds.stateful_rows, seed=SEED)
    other.load_state_dict(dict(state, worker=1, num_workers=2))
    with pytest.raises(InvalidArgumentError, match=r"saved by DataLoader worker 1 of 2; it is "
                                                   r"loaded in worker 0 of 1"):
        iter(other)
    # A queue source has no positions.
    q = feedq.FIFOQueue(4, ["int64"], shapes=[[2]])
    with pytest.raises(FailedPreconditionError, match=r"the source is a queue"):
        feedq.as_torch_dataset(q, batch_size=2).state_dict()
    with pytest.raises(InvalidArgumentError, match=r"^not a state of as_torch_dataset\(source\)"):
        feedq.as_torch_dataset(q, batch_size=2).load_state_dict({"format": "x"})


def test_csv_pipelines_in_dataloader_workers(tmp_path: Path) -> None:
    """Real pipelines (``feedq.Pipeline(resumable=True)`` per DataLoader
    worker): a StatefulDataLoader restored mid-epoch gives exactly the rest."""
    from tests.resume import _support as rs

    rs.write_data(tmp_path, "csv", files=4)
    build = functools.partial(builds.csv_pipeline, str(tmp_path), False)

    def make() -> Any:
        ds = feedq.as_torch_dataset(build, seed=SEED, resumable=True)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)

    full = [b[0].numpy().copy() for b in make()]
    saver = make()
    it = iter(saver)
    got = [next(it)[0].numpy().copy() for _ in range(7)]
    state = pickle.loads(pickle.dumps(saver.state_dict()))
    del it
    restored = make()
    restored.load_state_dict(state)
    rest = [b[0].numpy().copy() for b in restored]
    assert len(got) + len(rest) == len(full)
    for a, b in zip(got + rest, full):
        np.testing.assert_array_equal(a, b)
