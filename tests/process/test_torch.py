"""``feedq.as_torch_dataset(build)``: one feedq pipeline per DataLoader worker,
one epoch per DataLoader pass; and a process stage as a DataLoader source."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import InvalidArgumentError
from tests.process import _builds as builds
from tests.process._support import no_process_leaks  # noqa: F401

torch = pytest.importorskip("torch")
DataLoader = torch.utils.data.DataLoader

pytestmark = pytest.mark.timeout(120)


def one_pass(loader: Any) -> tuple[list[int], list[int], set[int]]:
    rows: list[int] = []
    labels: list[int] = []
    workers: set[int] = set()
    for batch in loader:
        assert isinstance(batch["row"], torch.Tensor) and batch["row"].ndim == 1
        rows += batch["row"].tolist()
        labels += batch["label"].tolist()
        workers |= set(batch["worker"].tolist())
    return rows, labels, workers


@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_dataloader_pass_is_one_epoch_of_every_row(num_workers: int) -> None:
    ds = feedq.as_torch_dataset(builds.torch_rows)
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers)
    for epoch in range(2):
        rows, labels, workers = one_pass(loader)
        assert sorted(rows) == list(range(100)) and len(rows) == 100  # each row once
        assert labels == [r * 10 + epoch for r in rows]  # the pass is the epoch
        assert workers == set(range(max(1, num_workers)))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_and_fork_server_workers_unpickle_the_dataset(method: str) -> None:
    # Python 3.14 starts DataLoader workers by fork server on Linux by default.
    ds = feedq.as_torch_dataset(builds.torch_rows)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method)
    for epoch in range(2):
        rows, labels, workers = one_pass(loader)
        assert sorted(rows) == list(range(100)) and len(rows) == 100
        assert labels == [r * 10 + epoch for r in rows]  # the pass counter is shared
        assert workers == {0, 1}


def test_persistent_workers_count_epochs_too() -> None:
    ds = feedq.as_torch_dataset(builds.torch_rows)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        for epoch in range(2):
            rows, labels, _ = one_pass(loader)
            assert sorted(rows) == list(range(100))
            assert labels == [r * 10 + epoch for r in rows]
    finally:
        del loader  # shuts the persistent workers down


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_batch_size_is_refused_with_the_fix(num_workers: int) -> None:
    loader = DataLoader(feedq.as_torch_dataset(builds.torch_rows), num_workers=num_workers)  # batch_size=1
    it = None
    message = ""
    try:  # num_workers=0 refuses at iter(), a worker process at the first batch
        it = iter(loader)
        next(it)
    except InvalidArgumentError as exc:  # not pytest.raises: its traceback would keep `it` alive
        message = str(exc)
    del it
    gc.collect()  # the DataLoader's worker goes with its iterator (torch takes 5 s after an error)
    assert "use DataLoader(dataset, batch_size=None)" in message


def test_as_torch_dataset_build_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size=None"):
        feedq.as_torch_dataset(builds.torch_rows, batch_size=4)
    with pytest.raises(TypeError, match="only seed="):
        feedq.as_torch_dataset(builds.torch_rows, prefetch=3)


def test_a_breaking_loop_stops_the_pipeline() -> None:
    ds = feedq.as_torch_dataset(builds.torch_rows)
    it = iter(DataLoader(ds, batch_size=None))
    first = next(it)
    assert first["row"].tolist() == list(range(8))
    del it  # the generator is closed: the pipeline's threads stop (the
    # conftest fixture fails the test on feedq- threads left running)


def test_a_process_stage_as_the_source_of_a_dataloader() -> None:
    with feedq.process_stage(builds.feedq_rows, 2) as stage:
        ds = feedq.as_torch_dataset(stage)
        rows = []
        for r, _label in DataLoader(ds, batch_size=None):
            assert isinstance(r, torch.Tensor)
            rows += r.tolist()
    assert sorted(rows) == list(range(100))
    assert np.array_equal(np.sort(rows), np.arange(100))


@pytest.mark.parametrize("staging", [False, True])
def test_a_device_feeder_reads_a_process_stage(staging: bool) -> None:
    # staging=True: each batch is copied once, from the shared-memory view
    # into the feeder's staging slot (pinned memory on a GPU); the view is
    # dropped then, so the worker's slots come back (nothing retained).
    with feedq.process_stage(builds.feedq_rows, 2) as stage:
        with feedq.DeviceFeeder(stage, device="cpu", staging=staging, output="numpy") as feeder:
            rows = [int(v) for r, _label in feeder for v in r]
        stats = stage.statistics()
    assert sorted(rows) == list(range(100))
    assert stats.received == stats.produced
    if staging:
        assert stats.retained == 0
