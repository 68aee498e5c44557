"""DeviceFeeder on the CPU: order, exact accounting, buffer recycling, replicas, errors.

The staged path (pinned slots, async copies, events) runs here with
``staging=True``: a copy thread stands in for the CUDA side stream, and a
gate on it holds copies back so the tests can see that a slot is refilled
only after its copies are done. A fake CUDA engine with a fake GPU probe
covers the GPU-only branches of the feeder.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedq
from feedq._devices import feeder_thread as _feeder_thread
from feedq._devices import placement as _placement
from feedq._devices.engines import HostEngine
from feedq.devices import (
    DeviceConfig,
    DeviceFeeder,
    device,
    set_device_config,
)
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from tests.conftest import Bg, wait_until

pytestmark = pytest.mark.timeout(15)


@pytest.fixture(autouse=True)
def _no_feeder_threads_left() -> Iterator[None]:
    """Feeder and copy threads are daemons: check by name that each was joined."""
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)
    left = [t.name for t in threading.enumerate() if t.name.startswith("feedq-feeder")]
    assert not left, f"feeder threads left running: {left}"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _placement._GpuProbe(0, "torch 2.13.0+cpu is a CPU-only build")
    monkeypatch.setattr(_placement, "_probe", lambda: probe)


def filled_queue(n: int, close: bool = True, names: list[str] | None = None) -> Any:
    """A closed FIFOQueue of n elements: x = [i, i+0.5] (float32), y = i (int64)."""
    q = feedq.FIFOQueue(max(n, 1), [np.float32, np.int64], shapes=[(2,), ()], names=names)
    x = np.stack([np.arange(n), np.arange(n) + 0.5], axis=1).astype(np.float32)
    y = np.arange(n, dtype=np.int64)
    if n:
        q.enqueue_many(dict(zip(names, [x, y])) if names else [x, y])
    if close:
        q.close()
    return q


def batches(n_batches: int, rows: int = 4) -> list[np.ndarray]:
    return [np.arange(i * rows, (i + 1) * rows, dtype=np.int64) for i in range(n_batches)]


def drain(feeder: DeviceFeeder) -> list[Any]:
    with feeder:
        return list(feeder)


# -- one device, host ----------------------------------------------------------


@pytest.mark.parametrize("staging", [False, True])
def test_queue_batches_in_order_with_exact_accounting(staging: bool) -> None:
    q = filled_queue(10)
    feeder = DeviceFeeder(q, 3, device="cpu", staging=staging, allow_smaller_final_batch=True)
    got = drain(feeder)
    assert [len(y) for _, y in got] == [3, 3, 3, 1]
    assert np.concatenate([y for _, y in got]).tolist() == list(range(10))
    assert np.concatenate([x for x, _ in got])[:, 1].tolist() == [i + 0.5 for i in range(10)]
    stats = feeder.statistics()
    assert (stats.batches_read, stats.batches_delivered, stats.rows_delivered) == (4, 4, 10)
    assert stats.state == "closed" and stats.staged is staging
    assert q.size() == 0


@pytest.mark.parametrize("staging", [False, True])
def test_padding_queue_batches_change_shape(staging: bool) -> None:
    q = feedq.PaddingFIFOQueue(10, [np.int32], shapes=[(None,)])
    for n in [1, 3, 2, 1]:
        q.enqueue(np.arange(1, n + 1, dtype=np.int32))
    q.close()
    got = drain(DeviceFeeder(q, 2, device="cpu", staging=staging))
    assert [g.tolist() for g in got] == [[[1, 0, 0], [1, 2, 3]], [[1, 2], [1, 0]]]


def test_dequeue_many_leaves_the_short_tail_in_the_queue() -> None:
    q = filled_queue(10)
    got = drain(DeviceFeeder(q, 4, device="cpu"))
    assert [y.tolist() for _, y in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert q.size() == 2  # Q27: dequeue_many on a closed queue leaves them queued


def test_named_queue_gives_dicts() -> None:
    q = filled_queue(4, names=["x", "y"])
    (batch,) = drain(DeviceFeeder(q, 4, device="/cpu:0"))
    assert set(batch) == {"x", "y"} and batch["y"].tolist() == [0, 1, 2, 3]


def test_iterable_batches_pass_through_without_copy() -> None:
    data = batches(3)
    got = drain(DeviceFeeder(iter(data), device="cpu", output="numpy"))
    assert all(g is d for g, d in zip(got, data))


def test_torch_output_shares_memory_with_the_batch() -> None:
    torch = pytest.importorskip("torch")
    data = [(np.ones((2, 3), np.float32), np.array([b"a", b"b"], dtype=object))]
    ((x, s),) = drain(DeviceFeeder(data, device="cpu", output="torch"))
    assert isinstance(x, torch.Tensor) and x.data_ptr() == data[0][0].ctypes.data
    assert isinstance(s, np.ndarray) and s is data[0][1]  # strings stay NumPy
    assert isinstance(drain(DeviceFeeder(data, device="cpu", output="torch"))[0], tuple)


@pytest.mark.parametrize("kind", ["ndarray", "list", "tuple", "dict"])
def test_iterable_structures_kept(kind: str) -> None:
    a, b = np.arange(4), np.arange(4, 8).astype(np.float64)
    batch: Any = {"ndarray": a, "list": [a, b], "tuple": (a, b), "dict": {"a": a, "b": b}}[kind]
    (got,) = drain(DeviceFeeder([batch], device="cpu", staging=True))
    assert type(got) is type(batch)
    flat = list(got.values()) if kind == "dict" else [got] if kind == "ndarray" else list(got)
    want = list(batch.values()) if kind == "dict" else [batch] if kind == "ndarray" else batch
    for g, w in zip(flat, want):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()
        assert not np.shares_memory(g, w)  # staged: a copy, through a slot


def test_staged_queue_dequeues_straight_into_slots() -> None:
    q = filled_queue(8)
    outs: list[list[int]] = []
    real = q.dequeue_many

    def spy(n: int, timeout: Any = None, out: Any = None) -> Any:
        outs.append([id(o) for o in out])
        return real(n, timeout=timeout, out=out)

    q.dequeue_many = spy  # type: ignore[method-assign]
    feeder = DeviceFeeder(q, 2, device="cpu", staging=True, prefetch=1)
    got = drain(feeder)
    assert np.concatenate([y for _, y in got]).tolist() == list(range(8))
    slot_ids = [[id(h) for h in s.host] for s in feeder._feed.slots]
    assert len(slot_ids) == 2 and all(o in slot_ids for o in outs)
    assert outs[0] == slot_ids[0] and outs[1] == slot_ids[1] and outs[2] == slot_ids[0]


# -- a batcher stage read as a queue ----------------------------------------------


def batcher(n: int, batch_size: int, *, resumable: bool = False, smaller_final: bool = False,
            names: bool = False) -> tuple[feedq.Pipeline, Any]:
    """A pipeline (not entered) and its batcher over rows x = [i, i+0.5], y = i."""
    pipe = feedq.Pipeline(resumable=resumable)
    with pipe.as_default():
        x = np.stack([np.arange(n), np.arange(n) + 0.5], axis=1).astype(np.float32)
        y = np.arange(n, dtype=np.int64)
        rows = feedq.slice_input_producer({"x": x, "y": y} if names else [x, y], shuffle=False,
                                          num_epochs=1)
        stage = feedq.batch(rows, batch_size, allow_smaller_final_batch=smaller_final)
    return pipe, stage


@pytest.mark.parametrize("resumable", [False, True], ids=["plain", "resumable"])
def test_stage_dequeue_many_writes_into_out_without_its_position_column(resumable: bool) -> None:
    pipe, stage = batcher(12, 4, resumable=resumable, names=True)
    with pipe:
        out = {"x": np.full((4, 2), -1, np.float32), "y": np.full(4, -1, np.int64)}
        got = stage.dequeue_many(4, timeout=10, out=out)
        assert list(got) == ["x", "y"] and got["y"].tolist() == [0, 1, 2, 3]
        assert np.shares_memory(got["x"], out["x"]) and np.shares_memory(got["y"], out["y"])
        assert out["x"][:, 1].tolist() == [0.5, 1.5, 2.5, 3.5]
        assert stage.dequeue(timeout=10)["y"].tolist() == [4, 5, 6, 7]  # the same stream
        assert stage.taken == (2 if resumable else 0)
        with pytest.raises(InvalidArgumentError, match=r"^dequeue_many\(3\) on a batcher of "
                                                       r"batch_size 4: .*one batch$"):
            stage.dequeue_many(3, out=out)
        with pytest.raises(InvalidArgumentError, match="needs a buffer of dtype int64"):
            stage.dequeue_many(4, out={"x": out["x"], "y": out["x"]})


def test_stage_dequeue_many_gives_the_short_final_batch_as_dequeue_does() -> None:
    pipe, stage = batcher(10, 4, smaller_final=True)
    with pipe:
        out = [np.zeros((4, 2), np.float32), np.zeros(4, np.int64)]
        got = [stage.dequeue_many(4, timeout=10, out=out)[1].tolist() for _ in range(3)]
        assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        with pytest.raises(OutOfRangeError):
            stage.dequeue_many(4, timeout=10, out=out)


@pytest.mark.parametrize("shuffle", [False, True], ids=["batch", "shuffle_batch"])
def test_stage_state_is_the_same_whichever_call_took_the_batches(shuffle: bool) -> None:
    """A resumable batcher files the same positions for dequeue_many(out=) as for
    dequeue(): after the same batches, the two states restore to the same rest of
    the run (a state's text also says how far the producer ran ahead, which
    depends on timing, so the states are compared by what they restore)."""
    def run(into: bool | None, state: dict[str, Any] | None = None,
            ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        pipe = feedq.Pipeline(resumable=True, state=state)
        with pipe.as_default():
            rows = feedq.slice_input_producer([np.arange(40, dtype=np.int64)], shuffle=False,
                                              num_epochs=1, seed=1)
            stage = (feedq.shuffle_batch(rows, 4, capacity=16, min_after_dequeue=6, seed=2,
                                         num_threads=1) if shuffle else feedq.batch(rows, 4))
        got, states = [], []
        out = np.zeros(4, np.int64)
        with pipe:
            for k in range(10 if into is None else 5):
                if into:
                    batch = stage.dequeue_many(4, timeout=10, out=out).tolist()
                else:
                    try:
                        batch = stage.dequeue(timeout=10).tolist()
                    except OutOfRangeError:
                        break
                got.append(batch)
                if into is not None and k in (2, 4):
                    states.append(stage.state_dict())
            if into is not None:
                assert stage.taken == 5
                states.append(stage.state_dict(upto=3))
        return got, states

    whole, _ = run(None)
    assert len(whole) == 10
    for into in (True, False):
        got, states = run(into)
        assert got == whole[:5]
        for state, k in zip(states, (3, 5, 3)):
            assert run(None, state)[0] == whole[k:]


@pytest.mark.parametrize("staging", [False, True], ids=["host", "staged"])
def test_feeder_reads_a_batcher_stage_straight_into_its_slots(
        staging: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batcher stage is a queue to the feeder: dequeue_many(out=slot), never a
    second copy into the slot (feedq._devices.source.stage)."""
    from feedq._devices import feeder_thread, source

    copies: list[int] = []
    real = source.stage

    def counting_stage(*args: Any) -> Any:
        copies.append(1)
        return real(*args)

    monkeypatch.setattr(source, "stage", counting_stage)
    monkeypatch.setattr(feeder_thread, "stage", counting_stage)
    pipe, stage = batcher(22, 4, smaller_final=True)
    with pipe:
        feeder = DeviceFeeder(stage, device="cpu", staging=staging, prefetch=1)
        outs: list[list[int]] = []
        real_take = stage.dequeue_many

        def spy(n: int, timeout: Any = None, out: Any = None, *, cancel: Any = None) -> Any:
            outs.append([] if out is None else [id(o) for o in out])
            return real_take(n, timeout=timeout, out=out, cancel=cancel)

        stage.dequeue_many = spy
        got = drain(feeder)
    assert [y.tolist() for _, y in got] == [list(range(i, min(i + 4, 22))) for i in range(0, 22, 4)]
    assert copies == []
    if staging:
        slot_ids = [[id(h) for h in s.host] for s in feeder._feed.slots]
        assert outs and all(o in slot_ids for o in outs)
    else:
        assert outs and all(o == [] for o in outs)  # nothing staged: the batches as they came


def test_feeder_over_a_stage_takes_no_batch_size_and_ends_at_a_clean_stop() -> None:
    pipe, stage = batcher(8, 4)
    with pytest.raises(ValueError, match="batch_size is for queue sources"):
        DeviceFeeder(stage, 4, device="cpu")
    with pipe:
        with DeviceFeeder(stage, device="cpu", staging=True) as feeder:
            assert next(feeder)[1].tolist() == [0, 1, 2, 3]
            pipe.stop()
            rest = list(feeder)
    assert [y.tolist() for _, y in rest] in ([], [[4, 5, 6, 7]])


# -- recycling gated by events ---------------------------------------------------


class GatedEngine(HostEngine):
    """Copies wait for the test to open the gate; counts copies."""

    gate: threading.Event
    copies = 0

    def _copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        if not self.gate.wait(10):
            raise AssertionError("gate never opened")
        super()._copy(dst, src)
        type(self).copies += 1


def test_slot_is_refilled_only_after_its_copies_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    GatedEngine.gate, GatedEngine.copies = threading.Event(), 0
    monkeypatch.setattr(_feeder_thread, "HostEngine", GatedEngine)
    data = batches(6)
    feeder = DeviceFeeder(iter(data), device="cpu", staging=True, prefetch=1)  # 2 slots
    feeder.start()
    # Batches 0 and 1 fill both slots; 1 waits for room behind 0.
    wait_until(lambda: feeder.statistics().waiting_for_room, what="feeder waiting for room")
    consumer = Bg(feeder.get, name="test-devices-consumer")  # takes 0, waits for its copy
    wait_until(lambda: feeder.statistics().waiting_for_slot, what="feeder waiting for slot 0")
    stats = feeder.statistics()
    assert stats.slot_waits == 1 and stats.batches_read == 2 and GatedEngine.copies == 0
    assert feeder._feed.slots[0].host[0].tolist() == data[0].tolist()  # not overwritten by batch 2
    GatedEngine.gate.set()
    got = [consumer.result()] + list(feeder)
    feeder.close()
    assert [g.tolist() for g in got] == [d.tolist() for d in data]
    assert GatedEngine.copies == 6


def test_prefetch_bounds_batches_in_flight() -> None:
    q = filled_queue(40)
    feeder = DeviceFeeder(q, 2, device="cpu", prefetch=3).start()
    wait_until(lambda: feeder.statistics().waiting_for_room, what="feeder full")
    stats = feeder.statistics()
    assert stats.buffered == 3 and stats.batches_read == 4  # 3 buffered + 1 waiting for room
    assert q.size() == 40 - 8
    feeder.close()


# -- replicas ------------------------------------------------------------------


@pytest.mark.parametrize("staging", [False, True])
@pytest.mark.parametrize("rows", [7, 2])
def test_split_shards_every_row_once(staging: bool, rows: int) -> None:
    data = [np.arange(i * rows, (i + 1) * rows) for i in range(5)]
    feeder = DeviceFeeder(data, replicas=["cpu", "/cpu:0", "cpu"], mode="split", staging=staging)
    got = drain(feeder)
    assert len(got) == 5 and all(len(shards) == 3 for shards in got)
    expected = [len(s) for s in np.array_split(np.arange(rows), 3)]
    assert all([len(s) for s in shards] == expected for shards in got)
    flat = np.concatenate([s for shards in got for s in shards]).tolist()
    assert flat == list(range(5 * rows))
    assert feeder.statistics().rows_delivered == 5 * rows


@pytest.mark.parametrize("staging", [False, True])
def test_round_robin_whole_batches_in_turn(staging: bool) -> None:
    q = filled_queue(14)
    got = drain(DeviceFeeder(q, 2, replicas=["cpu", "cpu", "cpu"], mode="round_robin",
                             staging=staging))
    assert [r for r, _ in got] == [0, 1, 2, 0, 1, 2, 0]
    assert np.concatenate([b[1] for _, b in got]).tolist() == list(range(14))


@pytest.mark.parametrize("staging", [False, True])
def test_broadcast_every_replica_sees_every_batch(staging: bool) -> None:
    data = [(np.arange(i, i + 3), np.full(3, i, np.float32)) for i in range(4)]
    feeder = DeviceFeeder(data, replicas=["cpu", "cpu"], mode="broadcast", staging=staging)
    got = drain(feeder)
    for i, copies in enumerate(got):
        assert len(copies) == 2
        for a, b in copies:
            assert a.tolist() == data[i][0].tolist() and b.tolist() == data[i][1].tolist()
        assert np.shares_memory(copies[0][0], copies[1][0]) is not staging
    assert feeder.statistics().rows_delivered == 12


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(1, 9), min_size=1, max_size=6), n=st.integers(1, 4),
       mode=st.sampled_from(["split", "round_robin", "broadcast"]), staging=st.booleans())
def test_replica_accounting(rows: list[int], n: int, mode: str, staging: bool) -> None:
    """Every row reaches its replica(s) exactly once, in order, in every mode."""
    bounds = np.cumsum([0, *rows])
    data = [np.arange(a, b) for a, b in itertools.pairwise(bounds)]
    with DeviceFeeder(data, replicas=["cpu"] * n, mode=mode, staging=staging) as feeder:
        got = list(feeder)
    assert len(got) == len(data)
    everything = list(range(int(bounds[-1])))
    if mode == "round_robin":
        assert [r for r, _ in got] == [i % n for i in range(len(data))]
        assert [x for _, b in got for x in b.tolist()] == everything
        return
    assert all(len(item) == n for item in got)
    if mode == "split":
        assert [x for item in got for shard in item for x in shard.tolist()] == everything
    else:
        for r in range(n):
            assert [x for item in got for x in item[r].tolist()] == everything
    assert feeder.statistics().rows_delivered == len(everything)


def test_component_device_map() -> None:
    q = filled_queue(4, names=["x", "y"])
    feeder = DeviceFeeder(q, 2, device={"x": "/cpu:0", "y": "cpu"})
    assert [[p.torch_device for p in row] for row in feeder.placements] == [["cpu", "cpu"]]
    got = drain(feeder)
    assert [b["y"].tolist() for b in got] == [[0, 1], [2, 3]]


def test_component_map_must_name_the_components() -> None:
    with pytest.raises(InvalidArgumentError, match=r"device map of replica 0 has keys \['x', "
                                                   r"'z'\] but the batch components are "
                                                   r"\['x', 'y'\]"):
        DeviceFeeder(filled_queue(2, names=["x", "y"]), 2, device={"x": "cpu", "z": "cpu"})
    with pytest.raises(InvalidArgumentError):
        DeviceFeeder(filled_queue(2), 2, device={0: "cpu"})


def test_replicas_with_component_maps_for_iterables() -> None:
    data = [[np.arange(4), np.arange(4) * 10] for _ in range(2)]
    feeder = DeviceFeeder(data, replicas=[{0: "cpu", 1: "cpu"}, {0: "cpu", 1: "cpu"}],
                          mode="split")
    got = drain(feeder)
    assert [s[1].tolist() for s in got[0]] == [[0, 10], [20, 30]]
    bad = DeviceFeeder(data, device={0: "cpu"})
    with bad, pytest.raises(InvalidArgumentError, match="device map of replica 0"):
        bad.get()


# -- placement of the feeder ------------------------------------------------------


def test_feeder_placement_uses_contexts_and_logs(caplog: pytest.LogCaptureFixture,
                                                 no_gpu: None) -> None:
    set_device_config(DeviceConfig(log_device_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("/cpu:0"):
        feeder = DeviceFeeder(filled_queue(2), 2, replicas=[None, None], name="f")
    feeder.close()
    assert [r.getMessage() for r in caplog.records] == [
        "f/replica_0: (DeviceFeeder): /job:localhost/replica:0/task:0/device:CPU:0 [cpu]",
        "f/replica_1: (DeviceFeeder): /job:localhost/replica:0/task:0/device:CPU:0 [cpu]"]


def test_feeder_on_missing_gpu_fails_at_creation(no_gpu: None) -> None:
    with pytest.raises(InvalidArgumentError, match="Cannot assign a device for stage 'f'"):
        DeviceFeeder(filled_queue(2), 2, device="cuda:0", name="f")


def test_feeder_soft_placement_falls_back_to_host(caplog: pytest.LogCaptureFixture,
                                                  no_gpu: None) -> None:
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with caplog.at_level(logging.WARNING, logger="feedq.devices"):
        feeder = DeviceFeeder(batches(2), device="/gpu:0", name="f")
        got = drain(feeder)
    assert len(got) == 2 and feeder.statistics().staged is False
    assert caplog.records[0].getMessage().startswith(
        "f: (DeviceFeeder): /job:localhost/replica:0/task:0/device:CPU:0 [cpu] "
        "(soft placement: /device:GPU:0 unavailable: no GPU is visible")


class FakeCudaEngine(HostEngine):
    """The CUDA engine's interface over host copies, for GPU placements on a CPU."""

    made: ClassVar[list[list[int]]] = []

    def __init__(self, name: str, gpus: list[int]) -> None:
        super().__init__(name)
        type(self).made.append(gpus)


def test_gpu_targets_through_fake_cuda(monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    probe = _placement._GpuProbe(2, None, ("Fake", "Fake"), (2**30, 2**30))
    monkeypatch.setattr(_placement, "_probe", lambda: probe)
    monkeypatch.setattr(_feeder_thread, "CudaEngine", FakeCudaEngine)
    FakeCudaEngine.made = []
    set_device_config(DeviceConfig(allow_soft_placement=True))
    q = feedq.FIFOQueue(10, [np.float32, feedq.STRING], shapes=[(), ()], names=["x", "s"])
    q.enqueue_many({"x": np.arange(6, dtype=np.float32), "s": [b"%d" % i for i in range(6)]})
    q.close()
    with caplog.at_level(logging.WARNING, logger="feedq.devices"):
        feeder = DeviceFeeder(q, 3, replicas=["cuda:0", "cuda:1"], mode="split", name="f")
    assert [[p.torch_device for p in row] for row in feeder.placements] == [
        ["cuda:0", "cpu"], ["cuda:1", "cpu"]]
    assert "f/replica_0/s: (DeviceFeeder)" in caplog.records[0].getMessage()
    got = drain(feeder)
    assert FakeCudaEngine.made == [[0, 1]]
    assert all(isinstance(shard["x"], torch.Tensor) for shards in got for shard in shards)
    strings = [s for shards in got for shard in shards for s in shard["s"].tolist()]
    assert strings == [b"%d" % i for i in range(6)]
    slot_memory = [h for slot in feeder._feed.slots for h in slot.host]
    assert not any(np.shares_memory(shard["s"], h)
                   for shards in got for shard in shards for h in slot_memory)
    with pytest.raises(InvalidArgumentError, match="output='numpy' cannot hold"):
        DeviceFeeder(batches(1), device="cuda:0", output="numpy")
    with pytest.raises(InvalidArgumentError, match="staging=False"):
        DeviceFeeder(filled_queue(2), 2, device="cuda:0", staging=False)


class FakeStream:
    def __init__(self, device: Any = None) -> None:
        self.device = device
        self.waited: list[Any] = []

    def wait_event(self, event: Any) -> None:
        self.waited.append(event)


class FakeEvent:
    def __init__(self) -> None:
        self.stream: Any = None

    def record(self, stream: Any) -> None:
        self.stream = stream

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


def test_cuda_engine_calls_with_fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CudaEngine over CPU torch with CUDA's stream/event calls faked:
    pinned slots are what the queue dequeues into, copies go on side streams,
    and each consumer stream waits on its device's event for every batch."""
    import contextlib

    torch = pytest.importorskip("torch")
    probe = _placement._GpuProbe(2, None, ("Fake", "Fake"), (2**30, 2**30))
    monkeypatch.setattr(_placement, "_probe", lambda: probe)
    current = {0: FakeStream(0), 1: FakeStream(1)}
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda i: current[i])
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    real_empty, pinned, on_device = torch.empty, [], []

    def fake_empty(*shape: Any, dtype: Any = None, pin_memory: bool = False,
                   device: Any = None) -> Any:
        tensor = real_empty(*shape, dtype=dtype)
        (pinned if pin_memory else on_device).append((tensor, device))
        return tensor

    monkeypatch.setattr(torch, "empty", fake_empty)
    q = filled_queue(12)
    feeder = DeviceFeeder(q, 4, replicas=["cuda:0", "cuda:1"], mode="split", prefetch=2)
    got = drain(feeder)
    assert [[y.tolist() for _, y in step] for step in got] == [
        [[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]
    assert all(isinstance(x, torch.Tensor) for step in got for x, _ in step)
    # 3 slots x 2 components, pinned, and the queue wrote into exactly them.
    assert len(pinned) == 6 and len(feeder._feed.slots) == 3
    for slot in feeder._feed.slots:
        for host, tensor in zip(slot.host, slot.pinned):
            assert host.ctypes.data == tensor.data_ptr()
    assert sorted({d for _, d in on_device}) == ["cuda:0", "cuda:1"] and len(on_device) == 12
    for index in (0, 1):
        events = current[index].waited
        assert len(events) == 3  # one per batch
        assert all(e.stream is not current[index] and e.stream.device == index
                   for e in events)


# -- errors, timeouts, close ------------------------------------------------------


def test_source_error_reaches_consumer_after_earlier_batches() -> None:
    def source() -> Iterator[np.ndarray]:
        yield np.arange(2)
        yield np.arange(2, 4)
        raise KeyError("bad record 3")

    feeder = DeviceFeeder(source(), device="cpu")
    with feeder:
        assert feeder.get().tolist() == [0, 1]
        assert feeder.get().tolist() == [2, 3]
        with pytest.raises(KeyError, match="bad record 3") as info:
            feeder.get()
        assert any(frame.name == "source" for frame in info.traceback)
        with pytest.raises(KeyError):
            feeder.get()  # stays failed


def test_inconsistent_batches_are_invalid_argument() -> None:
    feeder = DeviceFeeder([np.arange(3), [np.arange(3)]], device="cpu")
    with feeder:
        feeder.get()
        with pytest.raises(InvalidArgumentError, match=r"^feeder_\d+: batch 1: expected one "
                                                       r"array like the first batch, got a list$"):
            feeder.get()
    ragged = DeviceFeeder([[np.arange(3), np.arange(2)]], device="cpu")
    with ragged, pytest.raises(InvalidArgumentError, match="same leading"):
        ragged.get()


def test_end_of_data_raises_out_of_range_from_get() -> None:
    with DeviceFeeder([np.arange(2)], device="cpu") as feeder:
        feeder.get()
        with pytest.raises(OutOfRangeError):
            feeder.get()
        assert list(feeder) == []


def test_get_timeout_loses_nothing() -> None:
    q = filled_queue(0, close=False)
    with DeviceFeeder(q, 2, device="cpu") as feeder:
        with pytest.raises(DeadlineExceededError, match=r"no batch within 0\.02s"):
            feeder.get(timeout=0.02)
        q.enqueue_many([np.zeros((2, 2), np.float32), np.array([7, 8])])
        assert feeder.get(timeout=5)[1].tolist() == [7, 8]


def test_operation_timeout_is_the_default_for_get() -> None:
    set_device_config(DeviceConfig(operation_timeout=0.02))
    with DeviceFeeder(filled_queue(0, close=False), 2, device="cpu") as feeder, \
            pytest.raises(DeadlineExceededError):
        feeder.get()


@pytest.mark.parametrize("timeout", [0.05, 0])
def test_get_timeout_holds_while_another_consumer_is_inside_get(timeout: float) -> None:
    """A second consumer waits for the first one's lock with its own deadline."""
    q = filled_queue(0, close=False)
    feeder = DeviceFeeder(q, 2, device="cpu").start()
    try:
        first = Bg(feeder.get, timeout=float("inf"), name="test-devices-first-consumer")
        wait_until(lambda: feeder.statistics().waiting_consumers == 1,
                   what="first consumer blocked")
        second = Bg(feeder.get, timeout=timeout, name="test-devices-second-consumer")
        error = second.exception(timeout=3)  # unbounded on the consumer lock before the fix
        assert isinstance(error, DeadlineExceededError)
        assert str(error) == (f"{feeder.name}: no batch within {timeout:g}s "
                              f"(another consumer was in get())")
        assert feeder.statistics().waiting_consumers == 1  # the second one left the count
        # Nothing was lost: the first consumer still gets the next batch.
        q.enqueue_many([np.zeros((2, 2), np.float32), np.array([7, 8])])
        assert first.result()[1].tolist() == [7, 8]
        assert feeder.statistics().waiting_consumers == 0
    finally:
        feeder.close()


def test_feeder_created_in_a_closing_scope_registers_itself() -> None:
    """What a Pipeline's `with` block does: it closes the feeders created in it."""
    from feedq._core import scope as _scope

    outside = DeviceFeeder(batches(1), device="cpu")
    with _scope.closing_scope() as taken:
        feeder = DeviceFeeder(filled_queue(4), 2, device="cpu").start()
        with pytest.raises(ValueError):
            DeviceFeeder(batches(1), prefetch=0)  # a failed constructor registers nothing
    assert taken == [feeder]
    for obj in reversed(taken):
        obj.close()
    assert feeder.statistics().state == "closed"
    assert outside.statistics().state == "created"
    outside.close()


def test_every_feeder_thread_is_named_feedq() -> None:
    before = set(threading.enumerate())
    started: set[str] = set()
    feeder = DeviceFeeder(iter(batches(6)), device="cpu", staging=True, prefetch=1,
                          name="named")
    with feeder:
        for _ in feeder:
            started |= {t.name for t in threading.enumerate() if t not in before}
    assert started == {"feedq-feeder-named", "feedq-feeder-named-copy"}


def test_close_wakes_consumer_and_stops_blocked_dequeue() -> None:
    q = filled_queue(0, close=False)
    feeder = DeviceFeeder(q, 2, device="cpu").start()
    consumer = Bg(feeder.get, name="test-devices-consumer")
    wait_until(lambda: feeder.statistics().waiting_consumers == 1, what="consumer blocked")
    feeder.close()
    assert isinstance(consumer.exception(), CancelledError)
    with pytest.raises(CancelledError):
        feeder.get()
    assert not q.is_closed()  # the feeder never closes its source


def test_close_stops_a_feeder_waiting_for_room() -> None:
    feeder = DeviceFeeder(iter(batches(50)), device="cpu", staging=True, prefetch=1).start()
    wait_until(lambda: feeder.statistics().waiting_for_room, what="feeder full")
    feeder.close()
    assert feeder.statistics().state == "closed"


@pytest.mark.parametrize("kwargs, error", [
    ({"prefetch": 0}, ValueError),
    ({"mode": "mirror"}, ValueError),
    ({"output": "jax"}, ValueError),
    ({"device": "cpu", "replicas": ["cpu"]}, ValueError),
    ({"replicas": []}, ValueError),
    ({"replicas": "cpu"}, ValueError),
])
def test_argument_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        DeviceFeeder(batches(1), **kwargs)


def test_queue_arguments_validated() -> None:
    with pytest.raises(ValueError, match="needs batch_size"):
        DeviceFeeder(filled_queue(2), device="cpu")
    with pytest.raises(ValueError, match="batch_size is for queue sources"):
        DeviceFeeder(batches(1), 2)
    with pytest.raises(TypeError):
        DeviceFeeder(3)  # type: ignore[arg-type]
    unshaped = feedq.FIFOQueue(3, np.int32)
    with pytest.raises(InvalidArgumentError, match="need shapes to be dequeued"):
        DeviceFeeder(unshaped, 2, device="cpu")
