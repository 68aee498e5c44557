"""Process stages: batches from worker processes through shared memory.

Every test is bounded, accounts for every batch exactly once (batches carry
[worker, epoch, seq] tags), and leaves no worker process or segment behind
(``no_process_leaks``). Most use the default start method (forkserver on
Linux: one server per test session, then workers fork in milliseconds).
"""

from __future__ import annotations

import functools
import gc
import itertools
import sys
import threading
import time
import types
from collections import Counter
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import (
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.process import ProcessStage, process_stage
from feedq.readers import RaggedTensorValue, SparseTensorValue
from tests.process import _builds as builds
from tests.process._support import no_process_leaks, own_segments, wait_dead  # noqa: F401
from tests.resume import _builds as resume_builds

pytestmark = pytest.mark.timeout(60)


def tags(batches: list[Any]) -> list[tuple[int, ...]]:
    out = []
    for b in batches:
        t = b["tag"] if isinstance(b, dict) else b
        out.append(tuple(int(v) for v in t))
    return out


def round_robin(counts: list[int]) -> list[int]:
    """The worker sequence of the deterministic order for per-worker counts."""
    left = list(counts)
    seq: list[int] = []
    rotation = list(range(len(counts)))
    turn = 0
    while rotation:
        turn %= len(rotation)
        w = rotation[turn]
        if left[w] == 0:
            del rotation[turn]
            continue
        seq.append(w)
        left[w] -= 1
        turn += 1
    return seq


# -- the hand-off ---------------------------------------------------------------


def test_arrays_are_views_of_shared_memory_and_copy_gives_private_ones() -> None:
    with process_stage(builds.counting, 1) as stage:
        batch = stage.dequeue(timeout=30)
        x = batch["x"]
        assert not x.flags.owndata and x.flags.writeable
        base = x.base
        assert isinstance(base, np.ndarray) and base.dtype == np.uint8
        assert isinstance(base.base, memoryview)  # over the slot's mmap
        np.testing.assert_array_equal(x, np.full((4, 3), 0, np.float32))
        assert batch["name"].tolist() == [b"w0-0", b"", "é".encode()]
    with process_stage(builds.counting, 1, copy=True) as stage:
        batch = stage.dequeue(timeout=30)
        assert batch["x"].flags.owndata and batch["tag"].flags.owndata
        assert stage.statistics().held == 0  # the slot went back at once


def test_every_batch_of_every_worker_and_epoch_exactly_once() -> None:
    with process_stage(builds.counting, 3, epochs=2) as stage:
        got = []
        for _ in range(2):
            got.extend(tags(list(stage)))
        stats = stage.statistics()
    expected = [(w, e, s) for e in range(2) for w in range(3) for s in range(builds.count_for(w))]
    assert sorted(got) == sorted(expected) and len(got) == len(expected)
    assert stats.received == stats.produced == tuple(2 * builds.count_for(w) for w in range(3))
    assert stats.takes == len(expected)


def test_structures_round_trip() -> None:
    with process_stage(builds.structures, 1) as stage:
        (got,) = list(stage)
    want = builds.structure_batch()

    def same(a: Any, b: Any) -> None:
        assert type(a) is type(b), (a, b)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tolist() == b.tolist()
        elif isinstance(a, dict):
            assert list(a) == list(b)
            for k in a:
                same(a[k], b[k])
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b)
            for u, v in zip(a, b):
                same(u, v)
        else:
            assert a == b

    same(got, want)
    assert isinstance(got[1]["sparse"], SparseTensorValue)
    assert isinstance(got[1]["ragged"], RaggedTensorValue)
    assert got[1]["text"][0, 1] == "é"


def test_automatic_prefetch_keeps_more_small_batches_in_flight() -> None:
    from feedq.process._worker import auto_slots

    assert [auto_slots(n) for n in (32 << 10, 1 << 20, 8 << 20, 64 << 20)] == [18, 10, 4, 4]
    with process_stage(builds.many, 1) as stage:  # 8 KB batches: a ring of 16 + 2
        it = iter(stage)
        first = next(it)
        deadline = time.monotonic() + 30
        while stage.statistics().segments < 18 and time.monotonic() < deadline:
            stage._pump(0.05)  # the worker fills every slot but the one we hold
        assert stage.statistics().segments == 18
        handle = stage._handles[0]
        # No more: a worker announces every segment before it creates one, and
        # over the whole run (40 batches, one size, nothing kept) it announced
        # exactly the ring's 18 -- none while the ring was full.
        assert int(first[0]) == 0 and [int(b[0]) for b in it] == list(range(1, 40))
        assert len(handle.announced) == 18 and stage.statistics().retained == 0


def test_slots_grow_for_bigger_batches() -> None:
    with process_stage(builds.growing, 1, prefetch=1) as stage:
        sizes = []
        for seq, batch in enumerate(stage):
            assert int(batch.min()) == int(batch.max()) == seq
            sizes.append(batch.nbytes)
    assert sizes == [k * 1024 for k in (1, 4, 64, 1024, 4096, 16)]


# -- the end of the last epoch ---------------------------------------------------------


@pytest.mark.parametrize("build", [resume_builds.stateful_rows, resume_builds.plain_rows],
                         ids=["stateful", "replayed"])
def test_the_last_epoch_taken_releases_the_workers_and_their_segments(build: Any) -> None:
    """Issue 24: once the consumer took the last epoch's end, no worker process
    and no segment is left, the batches still held stay valid, and state
    requests are answered as the workers would have answered them."""
    with process_stage(build, 2, epochs=2, seed=3) as stage:
        pids = stage.pids
        batches = [b for _ in range(2) for b in stage]
        got = [tuple(int(v) for v in b) for b in batches]
        assert got == resume_builds.expected(2, 2, 3)
        assert wait_dead(pids, 5.0) == []
        assert own_segments() == []
        stats = stage.statistics()
        assert stats.workers_alive == 0 and stats.segments == 0 and stats.held == len(batches)
        end = stage.state_dict()
        back = stage.state_dict(upto=stage.taken - 3)
        del batches
        gc.collect()
        assert stage.statistics().held == 0
        with pytest.raises(OutOfRangeError):
            iter(stage)
    assert end["epoch"] == 1 and end["epoch_done"] is True
    with process_stage(build, 2, epochs=2, seed=3, state=back) as again:
        rest = [tuple(int(v) for v in b) for b in again]
    assert rest == got[-3:]
    with process_stage(build, 2, epochs=2, seed=3, state=end) as done, \
            pytest.raises(OutOfRangeError):
        iter(done)


# -- batch lifetime -----------------------------------------------------------------


def test_kept_batches_are_never_overwritten() -> None:
    with process_stage(builds.many, 1, prefetch=1) as stage:
        kept = list(stage)  # holds every batch: the ring (3 slots) cannot spare them
        assert [int(b[0]) for b in kept] == list(range(40))
        assert all(int(b.min()) == int(b.max()) == k for k, b in enumerate(kept))
        stats = stage.statistics()
        assert stats.retained >= 40 - 3 and stats.held == 40
        del kept
        gc.collect()
        stage.release()
        assert stage.statistics().held == 0


def test_a_plain_loop_recycles_slots_without_retaining() -> None:
    with process_stage(builds.many, 1, prefetch=1) as stage:
        total = 0
        for batch in stage:
            total += int(batch[0])
        stats = stage.statistics()
    assert total == sum(range(40))
    assert stats.retained == 0 and stats.segments <= 3


def test_slices_and_torch_tensors_keep_their_batch() -> None:
    torch = pytest.importorskip("torch")
    with process_stage(builds.many, 1, prefetch=1) as stage:
        it = iter(stage)
        first = next(it)
        view = first[10:20]
        tensor = torch.from_numpy(first)
        del first
        rest = [int(b[0]) for b in it]  # the other 39 batches go through the ring
        assert rest == list(range(1, 40))
        assert view.tolist() == [0] * 10 and int(tensor.sum()) == 0
        assert stage.statistics().retained >= 1


def test_release_gives_the_slot_back_once_unreferenced() -> None:
    with process_stage(builds.many, 1) as stage:
        batch = stage.dequeue(timeout=30)
        stage.release()
        assert stage.statistics().held == 1  # still referenced: kept
        assert int(batch.sum()) == 0
        del batch
        stage.release()
        assert stage.statistics().held == 0
        assert int(stage.dequeue(timeout=30)[0]) == 1


def test_a_slot_overwritten_under_the_consumer_is_a_data_loss_error() -> None:
    # The worker never writes a slot the consumer owns; simulate a writer
    # that does (a bug, or a foreign process) by bumping the generation in a
    # queued batch's slot header: the take checks it.
    import struct

    from feedq.process._worker import HEADER_FORMAT, MAGIC

    with process_stage(builds.many, 1) as stage:
        handle = stage._handles[0]
        deadline = time.monotonic() + 30
        while not handle.inbox and time.monotonic() < deadline:
            stage._pump(0.1)
        _, _, slot, seg, gen, nbytes, _, _ = handle.inbox[0]
        struct.pack_into(HEADER_FORMAT, seg.mm, 0, MAGIC, gen + 1, nbytes, 0)
        with pytest.raises(DataLossError, match=rf"slot {slot} holds generation {gen + 1} .* the worker "
                                               rf"announced {gen} .*overwritten while the consumer owned it"):
            stage.dequeue(timeout=30)


# -- order ------------------------------------------------------------------------------


def test_deterministic_order_is_round_robin_whatever_the_timing() -> None:
    runs = []
    for _ in range(2):
        with process_stage(builds.jittered, 3, order="deterministic") as stage:
            runs.append(tags(list(stage)))
    counts = [5, 5, 2]
    assert [t[0] for t in runs[0]] == round_robin(counts)
    assert runs[0] == runs[1]
    for w in range(3):  # each worker's own batches in order
        assert [t[2] for t in runs[0] if t[0] == w] == list(range(counts[w]))


def test_first_ready_takes_batches_as_they_come() -> None:
    with process_stage(builds.slow_worker_zero, 2, order="first_ready") as stage:
        got = tags(list(stage))
    assert Counter(t[0] for t in got) == {0: 2, 1: 4}
    assert sorted(got) == sorted({(0, 0, s) for s in range(2)} | {(1, 0, s) for s in range(4)})
    assert [t[0] for t in got[:4]] == [1, 1, 1, 1]  # worker 0 sleeps 0.4 s per batch


# -- epochs -------------------------------------------------------------------------------


def test_one_for_loop_is_one_epoch() -> None:
    with process_stage(builds.counting, 2, epochs=3) as stage:
        per_epoch = []
        for epoch in range(3):
            got = tags(list(stage))
            assert {t[1] for t in got} == {epoch}
            assert stage.epoch == epoch
            per_epoch.append(len(got))
        assert per_epoch == [7, 7, 7]
        with pytest.raises(OutOfRangeError, match=r"^end of data: the process stage's 3 epochs were read$"):
            iter(stage)
        with pytest.raises(OutOfRangeError):
            stage.dequeue(timeout=5)


def test_a_loop_left_early_is_continued_by_the_next() -> None:
    with process_stage(builds.counting, 1, epochs=2) as stage:
        first = []
        for batch in stage:
            first.append(tags([batch])[0])
            if len(first) == 2:
                break
        first += tags(list(stage))  # the rest of epoch 0
        second = tags(list(stage))  # epoch 1
    assert first == [(0, 0, s) for s in range(3)]
    assert second == [(0, 1, s) for s in range(3)]


def test_dequeue_crosses_epochs_then_ends() -> None:
    with process_stage(builds.counting, 2, epochs=2) as stage:
        got = []
        while True:
            try:
                got.append(stage.dequeue(timeout=30))
            except OutOfRangeError:
                break
    assert [(t[1], t[0]) for t in tags(got)] == [(e, w) for e in range(2) for w in round_robin([3, 4])]


def test_peek_returns_the_next_batch_without_taking_it() -> None:
    with process_stage(builds.counting, 1, epochs=2) as stage:
        peeked = stage.peek(timeout=30)
        assert stage.peek() is peeked
        assert tags([peeked]) == [(0, 0, 0)]
        assert tags(list(stage)) == [(0, 0, s) for s in range(3)]  # the peeked one first
        assert tags([stage.peek(timeout=30)]) == [(0, 1, 0)]  # starts epoch 1
        assert tags([stage.dequeue(timeout=30)]) == [(0, 1, 0)]
        assert tags(list(stage)) == [(0, 1, 1), (0, 1, 2)]
        with pytest.raises(OutOfRangeError):
            stage.peek()


def test_endless_epochs() -> None:
    with process_stage(builds.counting, 1, epochs=None) as stage:
        for epoch in range(4):
            assert [t[1] for t in tags(list(stage))] == [epoch] * 3
        assert stage.epochs is None


def test_workers_know_their_index_epoch_and_seed() -> None:
    with process_stage(builds.worker_infos, 2, epochs=2, seed=7) as stage:
        got = [b.tolist() for _ in range(2) for b in stage]
    assert got == [[w, 2, e, 7, 7 + 1_000_003 * e + w] for e in range(2) for w in range(2)]


# -- feedq pipelines in the workers -------------------------------------------------------


@pytest.mark.parametrize("num_processes", [1, 2])
def test_feedq_pipelines_in_workers(num_processes: int) -> None:
    with process_stage(builds.feedq_rows, num_processes, epochs=2) as stage:
        for epoch in range(2):
            rows, labels = [], []
            for r, lab in stage:
                rows.extend(r.tolist())
                labels.extend(lab.tolist())
            assert sorted(rows) == list(range(100))
            assert labels == [r * 10 + epoch for r in rows]


def test_inside_a_pipeline_the_pipeline_closes_the_stage() -> None:
    with feedq.Pipeline() as pipe:
        stage = process_stage(builds.endless, 2)
        assert pipe.output is stage
        first = [tuple(b.tolist()) for b in itertools.islice(stage, 4)]
        pids = stage.pids
    assert first == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert wait_dead(pids, 3.0) == []
    with pytest.raises(CancelledError, match="closed"):
        stage.dequeue(timeout=1)


# -- waiting and closing ----------------------------------------------------------------


def test_timeout_and_close_from_another_thread() -> None:
    stage = process_stage(builds.blocked_after_one, 1)
    try:
        assert stage.dequeue(timeout=30).tolist() == [0]
        with pytest.raises(DeadlineExceededError):
            stage.dequeue(timeout=0.2)
        errors: list[BaseException] = []
        entered = threading.Event()

        def consume() -> None:
            entered.set()
            try:
                stage.dequeue(timeout=30)
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        t = threading.Thread(target=consume, name="consumer")
        t.start()
        entered.wait(5)
    finally:
        stage.close()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], CancelledError)


def test_statistics_count_takes_and_readiness() -> None:
    with process_stage(builds.many, 1, prefetch=4) as stage:
        for _ in stage:
            pass
        s = stage.statistics()
    assert s.takes == 40 and s.received == (40,) and s.produced == (40,)
    assert 0 <= s.ready <= s.takes and s.bytes_received == 40 * 8000
    assert s.num_processes == 1 and s.order == "deterministic"


# -- arguments and bad batches ------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"num_processes": 0}, "num_processes"),
    ({"order": "random"}, "order"),
    ({"epochs": 0}, "epochs"),
    ({"prefetch": 0}, "prefetch"),
    ({"start_method": "thread"}, "start_method"),
])
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        process_stage(builds.counting, **kwargs)


def test_a_lambda_needs_fork() -> None:
    with pytest.raises(TypeError, match="picklable"):
        process_stage(lambda i, n: [], start_method="spawn")


def test_a_build_from_an_interactive_main_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # like python -c

    def build(worker_index: int, num_workers: int) -> list[Any]:
        return []

    build.__module__ = "__main__"
    for fn in (build, functools.partial(build)):
        with pytest.raises(TypeError, match=r"interactive session .* or pass start_method='fork'$"):
            process_stage(fn)


def test_an_object_column_is_refused_naming_it() -> None:
    with process_stage(builds.object_column, 1) as stage:
        with pytest.raises(InvalidArgumentError, match=r"batch component \['x'\]: an object array of"):
            stage.dequeue(timeout=30)


def test_build_must_return_an_iterable() -> None:
    with process_stage(builds.returns_int, 1) as stage:
        with pytest.raises(TypeError, match=r"build\(0, 1\) returned int"):
            list(stage)


# -- start methods ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_other_start_methods(method: str) -> None:
    with process_stage(builds.counting, 2, start_method=method) as stage:
        got = tags(list(stage))
        assert stage.statistics().start_method == method
    assert sorted(got) == sorted((w, 0, s) for w in range(2) for s in range(builds.count_for(w)))


def test_public_names() -> None:
    assert feedq.process_stage is process_stage
    assert feedq.ProcessStage is ProcessStage
    assert ProcessStage.__module__ == "feedq.process"
