"""feedq.distributed without Ray: cluster specs, sharding, the local
accumulator, codecs, placement, and the semantic cases on the local backend.

The semantic cases (``test_sem_*``) take the ``dist`` fixture; the Ray test
module imports them and runs them again against the Ray backend, so both
backends are held to the same rules (Q, T, QR, C, A).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import feedq
import feedq.distributed as fd
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    UnavailableError,
)
from feedq.queues import ConditionalAccumulator
from tests.conftest import Bg, wait_until

SPEC = {"ps": ["127.0.0.1:2221", "127.0.0.1:2223"], "worker": ["127.0.0.1:2222", "127.0.0.1:2224"],
        "spare": ["127.0.0.1:2231", "127.0.0.1:2232", "127.0.0.1:2233"]}
# The tasks the semantic cases change settings on (never the spare ones they stop).
DIST_TASKS = ("/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0")
PS0, PS1, W0 = "/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0"


@dataclass
class Dist:
    """What a semantic case needs: the backend and a way to make unique names."""

    backend: str
    cluster: fd.LocalCluster

    def name(self, prefix: str = "q") -> str:
        return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def _local_cluster() -> Iterator[fd.LocalCluster]:
    lc = fd.LocalCluster(SPEC, backend="local", namespace=f"test_{uuid.uuid4().hex[:6]}")
    lc.start()
    yield lc
    lc.stop()


@pytest.fixture()
def dist(_local_cluster: fd.LocalCluster) -> Iterator[Dist]:
    fd.connect(SPEC, backend="local", namespace=_local_cluster.namespace)
    yield Dist("local", _local_cluster)
    for task in DIST_TASKS:
        fd.default_session().set_operation_timeout(None, task=task)


# ---------------------------------------------------------------------------
# ClusterSpec and task names (pure Python)


def test_cluster_spec_from_dict_json_and_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = fd.ClusterSpec({"ps": ["a:2221"], "worker": ["a:2222", "b:2222"]})
    assert spec.jobs == ["ps", "worker"]
    assert spec.num_tasks("worker") == 2
    assert spec.task_address("worker", 1) == "b:2222"
    assert spec.as_dict() == {"ps": ["a:2221"], "worker": ["a:2222", "b:2222"]}
    assert fd.ClusterSpec(spec.to_json()) == spec
    assert fd.ClusterSpec(spec) == spec
    assert [str(t) for t in spec.tasks()] == ["/job:ps/task:0", "/job:worker/task:0",
                                               "/job:worker/task:1"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": spec.as_dict(),
                                                "task": {"type": "worker", "index": 1}}))
    assert fd.ClusterSpec.from_tf_config() == spec
    sparse = fd.ClusterSpec({"worker": {1: "b:1", 3: "c:1"}})
    assert sparse.task_indices("worker") == [1, 3]
    assert sparse.as_dict() == {"worker": {1: "b:1", 3: "c:1"}}


def test_cluster_spec_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^duplicate task address 'a:1': used by "
                       r"/job:ps/task:0 and /job:worker/task:0$"):
        fd.ClusterSpec({"ps": ["a:1"], "worker": ["a:1"]})
    spec = fd.ClusterSpec(SPEC)
    with pytest.raises(InvalidArgumentError, match=r"^no job 'chief' in the cluster"):
        spec.num_tasks("chief")
    with pytest.raises(InvalidArgumentError, match=r"^no task 5 in job 'ps' \(tasks: \[0, 1\]\)$"):
        spec.check_task("/job:ps/task:5")
    with pytest.raises(InvalidArgumentError, match=r"^cluster spec is not valid JSON"):
        fd.ClusterSpec("{nope")
    with pytest.raises(InvalidArgumentError, match=r"^job 'ps' has no tasks$"):
        fd.ClusterSpec({"ps": []})
    with pytest.raises(InvalidArgumentError, match=r"^'/cpu:0' does not name a task"):
        fd.TaskName.parse("/cpu:0")
    assert fd.TaskName.parse("/job:ps/replica:0/task:1/device:CPU:0") == fd.TaskName("ps", 1)


def test_import_without_ray_and_missing_ray_message(monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import sys, feedq, feedq.distributed as fd; "
            "assert 'ray' not in sys.modules, 'ray imported eagerly'")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    from feedq.distributed import _ray

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ImportError, match=r'^feedq.distributed with backend="ray" needs Ray, '
                       r'which is not installed: pip install "feedq\[ray\]"$'):
        _ray.require_ray()


# ---------------------------------------------------------------------------
# Sharding


def test_worker_info_from_torchrun_and_tf_config() -> None:
    assert fd.worker_info({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == \
        fd.WorkerInfo(3, 4, 1, "torchrun")
    cfg = {"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]},
           "task": {"type": "worker", "index": 1}}
    assert fd.worker_info({"TF_CONFIG": json.dumps(cfg)}) == fd.WorkerInfo(2, 3, 2, "TF_CONFIG")
    cfg["task"] = {"type": "ps", "index": 0}
    with pytest.raises(InvalidArgumentError, match=r"^TF_CONFIG task ps:0 is not a worker"):
        fd.worker_info({"TF_CONFIG": json.dumps(cfg)})
    assert fd.worker_info({}) == fd.WorkerInfo(0, 1, 0, "single")
    with pytest.raises(InvalidArgumentError, match=r"^invalid worker: rank 4 of world size 4$"):
        fd.worker_info({"RANK": "4", "WORLD_SIZE": "4"})


def test_shard_files_reads_every_file_once_per_epoch() -> None:
    files = [f"f{i}" for i in range(10)]
    shards = [fd.shard_files(files, r, 3) for r in range(3)]
    flat = sorted(f for s in shards for f in s)
    assert flat == sorted(files)
    with pytest.raises(InvalidArgumentError, match=r"^2 files for 3 workers: some workers would "
                       r"read nothing; pass split_records=True"):
        fd.shard_files(files[:2], 0, 3)
    split = [fd.shard_files(files[:2], r, 3, split_records=True) for r in range(3)]
    records = list(range(11))
    seen = sorted(x for s in split for x in fd.shard_records(records, s[0].index, s[0].count))
    assert seen == records


# ---------------------------------------------------------------------------
# The local ConditionalAccumulator (A1–A4)


def test_local_accumulator_a1_to_a4() -> None:
    with pytest.raises(TypeError, match=r"^ConditionalAccumulator needs a floating dtype, got int32"):
        ConditionalAccumulator(np.int32)
    acc = ConditionalAccumulator(np.float32, shape=None)
    assert acc.apply_grad([1.0, 2.0]) is True
    with pytest.raises(InvalidArgumentError, match=r"^accumulator '.*': Shape mismatch: expected "
                       r"\[2\], got \[3\]$"):
        acc.apply_grad([1.0, 2.0, 3.0])
    acc.apply_grad([3.0, 4.0])
    acc.apply_grad([5.0, 6.0], local_step=7)  # ahead of the global step: accepted (A2)
    np.testing.assert_allclose(acc.take_grad(2), [3.0, 4.0])  # mean of all three (A3)
    assert acc.global_step() == 1
    assert acc.apply_grad([1.0, 1.0], local_step=0) is False  # stale: dropped (A2)
    assert acc.statistics().dropped_stale == 1
    with pytest.raises(InvalidArgumentError, match=r"^Argument num_required must be positive, but was 0$"):
        acc.take_grad(0)
    acc.apply_grad([2.0, 2.0], local_step=1)
    with pytest.raises(DeadlineExceededError):
        acc.take_grad(2, timeout=0.05)
    assert acc.num_accumulated() == 1  # untouched by the timeout (A3)
    acc.set_global_step(3)
    acc.apply_grad([2.0, 2.0], local_step=3)
    np.testing.assert_allclose(acc.take_grad(1), [2.0, 2.0])
    assert acc.global_step() == 4  # A4: set 3, take -> 4
    total = ConditionalAccumulator(np.float64, [1], reduction_type="SUM", shared_name="acc_sum")
    again = ConditionalAccumulator(np.float64, [1], reduction_type="SUM", shared_name="acc_sum")
    total.apply_grad([1.0])
    again.apply_grad([2.0])
    np.testing.assert_allclose(total.take_grad(2), [3.0])
    with pytest.raises(InvalidArgumentError, match=r"^Shared accumulator 'acc_sum' has shape \[1\] "
                       r"but requested shape was \[2\]$"):
        ConditionalAccumulator(np.float64, [2], reduction_type="SUM", shared_name="acc_sum")
    feedq.queues.reset_shared_accumulators()


def test_local_accumulator_blocked_take_released_by_apply() -> None:
    acc = ConditionalAccumulator(np.float32, [1])
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(acc.take_grad(2, timeout=5)), name="taker")
    t.start()
    wait_until(lambda: acc.statistics().waiting_takers == 1, what="the taker to block")
    acc.apply_grad([1.0])
    acc.apply_grad([3.0])
    t.join(5)
    np.testing.assert_allclose(out[0], [2.0])


# ---------------------------------------------------------------------------
# Codecs and placement (pure)


def test_codecs_round_trip_and_save_bytes() -> None:
    from feedq.distributed._compression import decode, encode

    x = np.linspace(-3, 3, 1024, dtype=np.float32).reshape(32, 32)
    for codec, tol, ratio in (("float16", 2e-3, 0.5), ("bfloat16", 2e-2, 0.5), ("int8", 0.03, 0.25)):
        stats = [0, 0]
        y = decode(encode([x, np.arange(3)], codec, stats))
        assert y[0].dtype == np.float32 and y[0].shape == x.shape
        np.testing.assert_allclose(y[0], x, atol=tol)
        np.testing.assert_array_equal(y[1], np.arange(3))  # ints travel exactly
        assert stats == [x.nbytes, int(x.nbytes * ratio)]
    with pytest.raises(ValueError, match=r"^compression must be None or one of"):
        fd.FIFOQueue(1, np.float32, compression="zip", task=PS0)


def test_replica_device_setter_round_robin_like_the_seed() -> None:
    from feedq.devices import PlacementRequest, current_device

    with feedq.devices.device(fd.replica_device_setter(ps_tasks=2)):
        got = [current_device(PlacementRequest(f"v{i}", "Variable")).to_string() for i in range(5)]
        other = current_device(PlacementRequest("add", "Add")).to_string()
    assert got == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:1",
                   "/job:ps/task:0"]
    assert other == ""
    setter = fd.replica_device_setter(cluster=SPEC, worker_device="/job:worker/task:0")
    with feedq.devices.device(setter):
        assert current_device(PlacementRequest("q", "FIFOQueue")).task == 0
        assert current_device(PlacementRequest("q", "FIFOQueue")).task == 1
        assert current_device(PlacementRequest("x", "Add")).job == "worker"


# ---------------------------------------------------------------------------
# Semantic cases: run here on the local backend, and on Ray by test_distributed_ray.


def test_sem_fifo_round_trip_by_value(dist: Dist) -> None:
    name = dist.name()
    q = fd.FIFOQueue(10, [np.float32, np.int64], shapes=[[3], []], shared_name=name, task=PS0)
    q.enqueue_many([np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(4)])
    q.enqueue([np.full(3, 9, np.float32), 9])
    assert q.size() == 5
    x, y = q.dequeue()
    np.testing.assert_array_equal(x, [0, 1, 2])
    assert y == 0
    xs, ys = q.dequeue_many(3)
    assert xs.shape == (3, 3) and xs.dtype == np.float32
    np.testing.assert_array_equal(ys, [1, 2, 3])
    out = [np.zeros((4, 3), np.float32), np.zeros(4, np.int64)]
    q.close()
    got = q.dequeue_up_to(4, out=out)
    assert got[1].tolist() == [9] and got[0].base is out[0]
    with pytest.raises(OutOfRangeError):
        q.dequeue()
    with pytest.raises(CancelledError, match=r"^FIFOQueue '.*' is closed\.$"):
        q.enqueue([np.zeros(3, np.float32), 1])
    assert q.is_closed()


def test_sem_shared_name_reopen(dist: Dist) -> None:
    name = dist.name()
    a = fd.FIFOQueue(5, np.int64, shapes=[[]], shared_name=name, task=PS1)
    b = fd.FIFOQueue(5, np.int64, shapes=[[]], shared_name=name, task=PS1)
    a.enqueue(7)
    assert b.dequeue() == 7
    with pytest.raises(InvalidArgumentError, match=rf"^Shared queue '{name}' has capacity 5 but "
                       r"requested capacity was 6$"):
        fd.FIFOQueue(6, np.int64, shapes=[[]], shared_name=name, task=PS1)
    with pytest.raises(InvalidArgumentError, match=rf"^Shared queue '{name}' has component types "
                       r"\[int64\] but requested component types were \[float32\]$"):
        fd.FIFOQueue(5, np.float32, shapes=[[]], shared_name=name, task=PS1)
    with pytest.raises(InvalidArgumentError, match=rf"^Shared queue '{name}' is a FIFOQueue but a "
                       r"PriorityQueue was requested$"):
        fd.PriorityQueue(5, [np.int64], shapes=[[]], shared_name=name, task=PS1)


def test_sem_timeouts_are_lossless(dist: Dist) -> None:
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=PS0)
    q.enqueue_many(np.arange(3))
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError, match=r"the 3 collected were put back$"):
        q.dequeue_many(5, timeout=0.3)
    assert 0.25 < time.monotonic() - t0 < 3.0  # T1: after about the timeout
    assert q.size() == 3  # T3: put back, in order
    np.testing.assert_array_equal(q.dequeue_many(3), [0, 1, 2])
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0)
    full = fd.FIFOQueue(1, np.int64, shapes=[[]], shared_name=dist.name(), task=PS0)
    full.enqueue(1)
    with pytest.raises(DeadlineExceededError):
        full.enqueue(2, timeout=0.1)  # T2: nothing inserted
    assert full.size() == 1
    with pytest.raises(ValueError, match=r"^timeout must be >= 0 seconds or None, got -1"):
        q.dequeue(timeout=-1)


def test_sem_cluster_default_timeout(dist: Dist) -> None:
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=PS0)
    for task in DIST_TASKS:
        fd.default_session().set_operation_timeout(0.2, task=task)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        q.dequeue()
    assert time.monotonic() - t0 < 3.0
    for task in DIST_TASKS:
        fd.default_session().set_operation_timeout(None, task=task)
    feedq.set_default_timeout(0.1)  # the process default wins over the cluster one
    with pytest.raises(DeadlineExceededError):
        q.dequeue()


def test_sem_blocked_dequeue_released_by_other_client(dist: Dist) -> None:
    name = dist.name()
    q = fd.FIFOQueue(-1, np.float32, shapes=[[2]], shared_name=name, task=PS1)
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(q.dequeue_many(4, timeout=10)),
                         name="blocked-consumer")
    t.start()
    other = fd.FIFOQueue(-1, np.float32, shapes=[[2]], shared_name=name, task=PS1)
    wait_until(lambda: other.statistics().waiting_consumers == 1, what="the consumer to block")
    other.enqueue_many(np.ones((2, 2), np.float32))
    other.enqueue_many(np.zeros((2, 2), np.float32))
    t.join(10)
    assert results[0].shape == (4, 2)
    np.testing.assert_array_equal(results[0][:, 0], [1, 1, 0, 0])


def test_sem_cancel_wakes_waiters(dist: Dist) -> None:
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=PS0)
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            q.dequeue(timeout=10)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=consume, name="cancelled-consumer")
    t.start()
    wait_until(lambda: q.statistics().waiting_consumers == 1, what="the consumer to block")
    q.cancel(RuntimeError("stop"))
    t.join(10)
    assert isinstance(errors[0], CancelledError)


def test_sem_other_queue_kinds(dist: Dist) -> None:
    rs = fd.RandomShuffleQueue(10, 2, np.int64, shapes=[[]], seed=1, shared_name=dist.name(), task=PS0)
    rs.enqueue_many(np.arange(6))
    first = rs.dequeue_many(4).tolist()
    assert rs.size() == 2
    with pytest.raises(DeadlineExceededError):
        rs.dequeue(timeout=0.05)  # min_after_dequeue holds while open (Q30)
    rs.close()
    rest = rs.dequeue_up_to(5).tolist()  # after close everything drains (Q32)
    assert sorted(first + rest) == list(range(6))
    pad = fd.PaddingFIFOQueue(5, np.int32, shapes=[[None]], shared_name=dist.name(), task=PS1)
    pad.enqueue(np.array([1, 2], np.int32))
    pad.enqueue(np.array([3], np.int32))
    np.testing.assert_array_equal(pad.dequeue_many(2), [[1, 2], [3, 0]])
    pq = fd.PriorityQueue(5, [np.float32], shapes=[[]], shared_name=dist.name(), task=PS0)
    pq.enqueue_many([np.array([3, 1, 2]), np.array([30, 10, 20], np.float32)])
    prio, vals = pq.dequeue_many(3)
    assert prio.tolist() == [1, 2, 3] and vals.tolist() == [10, 20, 30]


def test_sem_named_components_and_torch_free(dist: Dist) -> None:
    q = fd.FIFOQueue(4, [np.float32, np.int64], shapes=[[2], []], names=["x", "y"],
                     shared_name=dist.name(), task=PS0)
    q.enqueue({"x": [1.0, 2.0], "y": 3})
    got = q.dequeue()
    assert set(got) == {"x", "y"} and got["y"] == 3
    with pytest.raises(ValueError, match=r"must enqueue a dictionary$"):
        q.enqueue([[1.0, 2.0], 3])


def test_sem_compression_reports_bytes_saved(dist: Dist) -> None:
    name = dist.name()
    tx = fd.FIFOQueue(-1, np.float32, shapes=[[32]], shared_name=name, task=PS1, compression="bfloat16")
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    tx.enqueue_many(x)
    rx = fd.FIFOQueue(-1, np.float32, shapes=[[32]], shared_name=name, task=PS1, compression="float16")
    y = rx.dequeue_many(64)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x, rtol=2e-2, atol=2e-2)
    assert tx.wire_statistics().saved_bytes == x.nbytes // 2
    assert rx.wire_statistics().saved_bytes == x.nbytes // 2


def test_sem_variables_shared_atomic_and_reset(dist: Dist) -> None:
    name = dist.name("x")
    x = fd.Variable(0.0, name=name, task=PS0)
    again = fd.Variable(5.0, name=name, task=PS0)  # exists: keeps its value
    assert float(again.read()) == 0.0

    def bump() -> None:
        for _ in range(20):
            x.assign_add(1.0)

    threads = [threading.Thread(target=bump, name=f"bump{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert float(again.read()) == 80.0
    assert x.compare_and_set(80.0, 1.0) and not x.compare_and_set(80.0, 2.0)
    assert float(x.read()) == 1.0
    with pytest.raises(InvalidArgumentError, match=r"shape mismatch: expected \[\], got \[2\]$"):
        x.assign([1.0, 2.0])
    with pytest.raises(FailedPreconditionError, match=r"^Attempting to use uninitialized value"):
        fd.Variable(name=dist.name("missing"), task=PS0)
    fd.Variable(1.0, name="in_c", task=PS1, container="c1")
    assert fd.reset(PS1, containers=["c1"]) == 1
    with pytest.raises(FailedPreconditionError):
        fd.Variable(name="in_c", task=PS1, container="c1")
    q = fd.FIFOQueue(1, np.int64, shared_name="q_in_c", task=PS1, container="c2")
    fd.reset(PS1, containers=["c2"])
    with pytest.raises(NotFoundError, match=r"^Resource c2/q_in_c does not exist on /job:ps/task:1$"):
        q.size()


def test_sem_replica_device_setter_places_resources(dist: Dist) -> None:
    with feedq.devices.device(fd.replica_device_setter(ps_tasks=2)):
        vs = [fd.Variable(float(i), name=dist.name(f"v{i}")) for i in range(1, 6)]
        q = fd.FIFOQueue(1, np.int64, shared_name=dist.name())
    assert [v.device for v in vs] == [PS0, PS1, PS0, PS1, PS0]
    assert q.device == PS1
    with feedq.devices.device("/job:worker/task:0"):
        assert fd.Variable(1.0, name=dist.name()).device == W0
    with pytest.raises(InvalidArgumentError, match=r"no task to place it on"):
        fd.Variable(1.0, name=dist.name())
    with pytest.raises(InvalidArgumentError, match=r"^no task 7 in job 'ps'"):
        fd.Variable(1.0, name=dist.name(), task="/job:ps/task:7")


def test_sem_accumulator_on_a_task(dist: Dist) -> None:
    name = dist.name("acc")
    acc = fd.ConditionalAccumulator(np.float32, [2], shared_name=name, task=PS1)
    other = fd.ConditionalAccumulator(np.float32, [2], shared_name=name, task=PS1)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(acc.take_grad(2, timeout=10)), name="chief")
    t.start()
    assert other.apply_grad([1.0, 2.0], local_step=0)
    assert other.apply_grad([3.0, 4.0], local_step=0)
    t.join(10)
    np.testing.assert_allclose(out[0], [2.0, 3.0])
    assert acc.global_step() == 1
    assert other.apply_grad([9.0, 9.0], local_step=0) is False  # stale (A2)
    with pytest.raises(DeadlineExceededError):
        acc.take_grad(1, timeout=0.1)
    with pytest.raises(TypeError):
        fd.ConditionalAccumulator(np.int32, [2], shared_name=dist.name(), task=PS1)


def test_sem_cluster_coordinator_stops_runners_everywhere(dist: Dist) -> None:
    name = dist.name("coord")
    a = fd.ClusterCoordinator(name, task=PS0, origin="/job:worker/task:0")
    b = fd.ClusterCoordinator(name, task=PS0, origin="/job:worker/task:1")
    q = fd.FIFOQueue(4, np.int64, shapes=[[]], shared_name=dist.name(), task=PS1)
    qr = feedq.QueueRunner(q, [lambda: q.enqueue(1, timeout=10)])
    threads = qr.create_threads(coord=a, start=True)
    t0 = time.monotonic()
    b.request_stop(ValueError("bad batch"))
    assert a.wait_for_stop(5.0)
    assert time.monotonic() - t0 < 1.5  # C: reaches every process within a second
    with pytest.raises(ValueError, match=r"^bad batch\n\(reported to the cluster coordinator "
                       r"by /job:worker/task:1\)$") as info:
        a.join(threads, stop_grace_period_secs=10)
    assert info.value.task == "/job:worker/task:1"  # type: ignore[attr-defined]
    # The runner's cancel_op runs on stop (QR7), in the thread that saw the
    # stop; its remote call may land just after the runner thread ended.
    wait_until(q.is_closed, what="the runner's cancel_op to close the queue")
    for c in (a, b):
        c.close()


def test_sem_unknown_task_and_duplicate_server(dist: Dist) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^no job 'chief' in the cluster"):
        fd.Server(SPEC, "chief", 0, backend=dist.backend, namespace=dist.cluster.namespace)
    with pytest.raises(InvalidArgumentError, match=r"duplicate task"):
        fd.Server(SPEC, "ps", 0, backend=dist.backend, namespace=dist.cluster.namespace)


def test_sem_stopped_server_gives_unavailable(dist: Dist) -> None:
    task = "/job:spare/task:0"
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=task)
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            q.dequeue(timeout=30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=consume, name="consumer-of-stopped")
    t.start()
    wait_until(lambda: q.statistics().waiting_consumers == 1, what="the consumer to block")
    server = dist.cluster.servers.pop(task)
    t0 = time.monotonic()
    server.stop()
    t.join(10)
    assert time.monotonic() - t0 < 5.0
    assert isinstance(errors[0], UnavailableError)
    assert "/job:spare/task:0" in str(errors[0])
    with pytest.raises(UnavailableError, match=r"^task /job:spare/task:0 is unavailable|"
                       r"^task /job:spare/task:0 was stopped"):
        q.size()
    # Restart it for the next run of this case (no auto-restart: explicit).
    dist.cluster.servers[task] = fd.Server(SPEC, "spare", 0, backend=dist.backend,
                                           namespace=dist.cluster.namespace)




# ---------------------------------------------------------------------------
# The host's protections, driven directly (what the Ray transport relies on)


class FakeClock:
    """A monotonic clock the test advances (STYLE 17): the host's delivery
    ages, client liveness and tombstones read it, so no test sleeps them out."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _host_with_queue(client_timeout: float = 3.0, clock: FakeClock | None = None) -> Any:
    from feedq.distributed._host import Host

    host = Host(fd.TaskName("ps", 0), client_timeout=client_timeout, clock=clock or FakeClock())
    host.open("queue", ("", "q"), {"kind": "FIFOQueue",
                                   "kwargs": {"capacity": -1, "dtypes": np.int64, "shapes": [[]]}})
    host.call("queue", ("", "q"), "enqueue_many", (np.arange(5),), {"timeout": None})
    return host


def test_host_puts_back_deliveries_of_dead_clients_only() -> None:
    clock = FakeClock()
    host = _host_with_queue(client_timeout=3.0, clock=clock)
    key = ("", "q")
    got = host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c1", "alive")
    host.ack(["c1"])  # received: forgotten
    lost = host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c2", "dying")
    assert got.tolist() == [0, 1] and lost.tolist() == [2, 3]
    assert host.info()["inflight"] == 1
    clock.advance(2.9)
    assert host.reap() == []  # silent, but not for client_timeout yet
    assert host.info()["inflight"] == 1
    clock.advance(0.2)
    host.heartbeat("alive")
    assert host.reap() == ["dying"]
    # The dead client's two elements are back at the front, in order; nothing duplicated.
    assert host.call("queue", key, "dequeue_many", (3,), {"timeout": 1.0}).tolist() == [2, 3, 4]
    assert host.info()["put_back"] == 1


def test_host_abort_ends_a_blocked_call_losslessly() -> None:
    host = _host_with_queue(client_timeout=60)
    key = ("", "q")
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            host.call("queue", key, "dequeue_many", (8,), {"timeout": 30.0}, "c9", "client")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=blocked, name="blocked-on-host")
    t.start()
    wait_until(lambda: host.info()["pending_calls"] == 1, what="the call to block on the host")
    t0 = time.monotonic()
    host.abort(["c9"])
    t.join(5)
    assert time.monotonic() - t0 < 1.0
    assert isinstance(errors[0], CancelledError)
    assert str(errors[0]) == "call on /job:ps/task:0 was abandoned by its caller"
    # The 5 it had collected went back, in order (T3).
    assert host.call("queue", key, "dequeue_many", (5,), {"timeout": 1.0}).tolist() == [0, 1, 2, 3, 4]


def test_set_cluster_default_timeout_reaches_every_task() -> None:
    spec = {"ps": ["h:1", "h:2"]}
    with fd.LocalCluster(spec, backend="local", namespace=f"t_{uuid.uuid4().hex[:6]}") as lc:
        qs = [fd.FIFOQueue(1, np.int64, shared_name="q", task=f"/job:ps/task:{i}") for i in (0, 1)]
        fd.set_cluster_default_timeout(0.05)
        for q in qs:
            with pytest.raises(DeadlineExceededError):
                q.dequeue()
        assert [lc.session.info(t)["operation_timeout"] for t in ("/job:ps/task:0", "/job:ps/task:1")] \
            == [0.05, 0.05]  # type: ignore[union-attr]
        fd.set_cluster_default_timeout(math.inf)
        assert lc.session.info("/job:ps/task:0")["operation_timeout"] is None  # type: ignore[union-attr]
    with pytest.raises(FailedPreconditionError, match=r"^not connected to a cluster"):
        fd.default_session()


def test_command_line_resources_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from feedq.cli._cluster import main

    assert main(["resources", "--job", "ps", "--task", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"feedq_task_ps_1": 1}
    assert main(["serve", "--job", "chief", "--task", "0", "--cluster", json.dumps(SPEC)]) == 1
    assert capsys.readouterr().err.startswith("feedq: error: InvalidArgumentError: no job 'chief' in the cluster")


def test_sem_dequeue_available(dist: Dist) -> None:
    if not hasattr(feedq.FIFOQueue, "dequeue_available"):
        pytest.skip("the local queues have no dequeue_available in this tree")
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=PS0)
    q.enqueue_many(np.arange(3))
    assert q.dequeue_available(10).tolist() == [0, 1, 2]
    with pytest.raises(DeadlineExceededError):
        q.dequeue_available(4, timeout=0.05)


def test_unreachable_cluster_is_one_clear_error() -> None:
    from feedq.distributed._ray import _probe

    with pytest.raises(UnavailableError, match=r"^no Ray cluster reachable at '127.0.0.1:1': "):
        _probe("127.0.0.1:1")
    with pytest.raises(InvalidArgumentError, match=r"^Ray cluster address must be 'host:port'"):
        _probe("nonsense")


def test_host_abort_before_the_call_starts_is_remembered() -> None:
    host = _host_with_queue(client_timeout=60)
    host.abort(["early"])  # the abort overtook its call
    with pytest.raises(CancelledError, match=r"^call on /job:ps/task:0 was abandoned by its caller$"):
        host.call("queue", ("", "q"), "dequeue_many", (2,), {"timeout": 1.0}, "early", "client")
    assert host.call("queue", ("", "q"), "size", (), {}) == 5  # nothing taken


def test_host_confirms_an_ack_only_while_it_holds_the_delivery() -> None:
    """A deliverer hands elements out only on a confirmed ack: one that comes
    after the host put them back (dead client, late ack) is refused."""
    from feedq.distributed._host import ACK_WINDOW, Host

    clock = FakeClock()
    host = Host(fd.TaskName("ps", 0), client_timeout=60, clock=clock)
    host.open("queue", ("", "q"), {"kind": "FIFOQueue",
                                   "kwargs": {"capacity": -1, "dtypes": np.int64, "shapes": [[]]}})
    key = ("", "q")
    host.call("queue", key, "enqueue_many", (np.arange(6),), {"timeout": None})
    assert host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c1", "me").tolist() \
        == [0, 1]
    assert host.ack(["c1"]) is True  # in time: the caller keeps [0, 1]
    assert host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c2", "me").tolist() \
        == [2, 3]
    host.abort(["c2"])  # e.g. reaped: [2, 3] went back ...
    assert host.ack(["c2"]) is False  # ... so the caller must not keep them
    assert host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c3", "me").tolist() \
        == [2, 3]
    clock.advance(ACK_WINDOW + 0.1)
    assert host.ack(["c3"]) is False  # too late: back they go, once
    assert host.call("queue", key, "dequeue_many", (4,), {"timeout": 1.0}).tolist() == [2, 3, 4, 5]
    assert host.info()["inflight"] == 0


def test_host_reaps_deliveries_never_acknowledged() -> None:
    from feedq.distributed._host import ACK_WINDOW, Host

    clock = FakeClock()
    host = Host(fd.TaskName("ps", 0), client_timeout=60, clock=clock)
    host.open("queue", ("", "q"), {"kind": "FIFOQueue",
                                   "kwargs": {"capacity": -1, "dtypes": np.int64, "shapes": [[]]}})
    key = ("", "q")
    host.call("queue", key, "enqueue_many", (np.arange(3),), {"timeout": None})
    host.call("queue", key, "dequeue_many", (2,), {"timeout": 1.0}, "c1", "alive")
    clock.advance(ACK_WINDOW - 0.1)
    host.heartbeat("alive")
    host.reap()
    assert host.info()["inflight"] == 1  # within the window: still out
    clock.advance(0.2)
    host.heartbeat("alive")
    host.reap()
    assert host.call("queue", key, "dequeue_many", (3,), {"timeout": 1.0}).tolist() == [0, 1, 2]


def test_host_puts_back_padded_batches_unpadded() -> None:
    from feedq.distributed._host import Host

    host = Host(fd.TaskName("ps", 0), client_timeout=60)
    key = ("", "q")
    host.open("queue", key, {"kind": "PaddingFIFOQueue",
                             "kwargs": {"capacity": 10, "dtypes": np.int32, "shapes": [[None]]}})
    host.call("queue", key, "enqueue", (np.array([1, 2], np.int32),), {"timeout": 1})
    host.call("queue", key, "enqueue", (np.array([3], np.int32),), {"timeout": 1})
    got = host.call("queue", key, "dequeue_many", (2,), {"timeout": 1}, "cid", "client")
    assert got.tolist() == [[1, 2], [3, 0]]
    host.abort(["cid"])
    assert host.call("queue", key, "dequeue", (), {"timeout": 1}).tolist() == [1, 2]
    assert host.call("queue", key, "dequeue", (), {"timeout": 1}).tolist() == [3]  # not [3, 0]
    # A single dequeue after a batch one keeps its own put-back rows.
    host.call("queue", key, "enqueue", (np.array([4, 5, 6], np.int32),), {"timeout": 1})
    got = host.call("queue", key, "dequeue", (), {"timeout": 1}, "cid2", "client")
    host.abort(["cid2"])
    assert host.call("queue", key, "dequeue", (), {"timeout": 1}).tolist() == [4, 5, 6]


def test_host_puts_back_a_padded_batch_of_a_dead_client_exactly() -> None:
    """A padded batch delivered to a client that dies goes back as the rows
    that were stored (dequeue padded=False, then put_back), behind nothing."""
    from feedq.distributed._host import Host

    clock = FakeClock()
    host = Host(fd.TaskName("ps", 0), client_timeout=3.0, clock=clock)
    key = ("", "q")
    host.open("queue", key, {"kind": "PaddingFIFOQueue",
                             "kwargs": {"capacity": 3, "dtypes": [np.int32, np.float32],
                                        "shapes": [[None], []], "names": ["ids", "w"]}})
    for ids in ([1, 2, 3], [4], [5, 6]):
        host.call("queue", key, "enqueue", ({"ids": np.array(ids, np.int32), "w": len(ids)},),
                  {"timeout": 1})
    got = host.call("queue", key, "dequeue_up_to", (2,), {"timeout": 1}, "cid", "dying")
    assert got["ids"].tolist() == [[1, 2, 3], [4, 0, 0]] and got["w"].tolist() == [3, 1]
    clock.advance(3.5)
    assert host.reap() == ["dying"]
    assert host.info()["put_back"] == 1
    assert [host.call("queue", key, "dequeue", (), {"timeout": 1})["ids"].tolist()
            for _ in range(3)] == [[1, 2, 3], [4], [5, 6]]


def test_host_container_kind_clashes_and_reset() -> None:
    """One (container, shared_name) holds one resource of one kind: opening
    or calling it as another kind names both kinds; reset drops a container."""
    from feedq.distributed._host import Host

    host = Host(fd.TaskName("ps", 0), clock=FakeClock())
    host.open("variable", ("", "x"), {"initial_value": 1.0})
    spec = {"kind": "FIFOQueue", "kwargs": {"capacity": 1, "dtypes": np.int64}}
    with pytest.raises(InvalidArgumentError,
                       match=r"^Shared resource 'x' is a variable but a queue was requested$"):
        host.open("queue", ("", "x"), spec)
    with pytest.raises(InvalidArgumentError,
                       match=r"^Shared resource 'x' is a variable but a queue was requested$"):
        host.call("queue", ("", "x"), "size", (), {})
    host.open("queue", ("c", "x"), spec)  # another container: another resource
    assert host.info()["resources"] == ["/x", "c/x"]
    assert host.reset(["c"]) == 1 and host.info()["resources"] == ["/x"]
    with pytest.raises(NotFoundError, match=r"^Resource c/x does not exist on /job:ps/task:0$"):
        host.call("queue", ("c", "x"), "size", (), {})


def test_host_inline_attempts_do_nothing_when_they_would_wait() -> None:
    """The Ray actor's inline try: a call that would have to wait raises
    WouldBlock having inserted and taken nothing; a batch call is never tried
    inline (with timeout=0 it could move in part)."""
    from feedq.distributed._host import Host, WouldBlock

    host = Host(fd.TaskName("ps", 0), clock=FakeClock())
    key = ("", "q")
    host.open("queue", key, {"kind": "FIFOQueue",
                             "kwargs": {"capacity": 2, "dtypes": np.int64, "shapes": [[]]}})
    with pytest.raises(WouldBlock):
        host.call("queue", key, "dequeue", (), {"timeout": None}, "c1", "me", inline=True)
    with pytest.raises(WouldBlock):
        host.call("queue", key, "enqueue_many", (np.arange(3),), {"timeout": None}, "c2", "me",
                  inline=True)
    stats = host.call("queue", key, "statistics", (), {})
    assert (stats.size, stats.enqueued, stats.dequeued, stats.waiting_consumers) == (0, 0, 0, 0)
    host.call("queue", key, "enqueue", (7,), {"timeout": None}, "c3", "me", inline=True)
    host.call("queue", key, "enqueue", (8,), {"timeout": None}, "c4", "me", inline=True)
    with pytest.raises(WouldBlock):
        host.call("queue", key, "enqueue", (9,), {"timeout": None}, "c5", "me", inline=True)
    assert host.call("queue", key, "dequeue", (), {"timeout": None}, "c6", "me", inline=True) == 7
    assert host.ack(["c6"]) is True
    assert host.info()["pending_calls"] == 0
    assert host.call("queue", key, "dequeue_many", (1,), {"timeout": 1}).tolist() == [8]


def test_host_call_ends_when_the_callers_token_fires() -> None:
    """An in-process caller's CancelToken ends its call on the host like an
    abort: the call raises the token's cause and gives back what it held."""
    from feedq.queues import CancelToken

    host = _host_with_queue()
    token = CancelToken()
    call = Bg(host.call, "queue", ("", "q"), "dequeue_many", (8,), {"timeout": 30.0}, "c1",
              cancel=token, name="feedq-test-cancelled-call")
    wait_until(lambda: host.info()["pending_calls"] == 1, what="the call to block")
    token.fire(KeyError("caller left"))
    assert isinstance(call.exception(), KeyError)
    assert host.info()["pending_calls"] == 0
    assert host.call("queue", ("", "q"), "dequeue_many", (5,), {"timeout": 1}).tolist() == [0, 1, 2, 3, 4]


def test_stop_record_waits_on_events_for_the_next_generation() -> None:
    """wait_stop(after=g) skips the stop of generation g (already applied by
    the watcher), returns at the next stop, and ends when its token fires."""
    from feedq.distributed._hosted import StopRecord
    from feedq.queues import CancelToken

    record = StopRecord()
    assert record.wait_stop(0.0) == (False, None, None, 0)
    err = ValueError("x")
    assert record.request_stop(err, "A") and not record.request_stop(None, "B")
    assert record.wait_stop(None) == (True, err, "A", 0)  # stopped: at once
    assert record.wait_stop(0.0, after=0) == (True, err, "A", 0)  # generation 0 applied: waits, times out
    waiter = Bg(record.wait_stop, None, None, 0, name="feedq-test-stop-waiter")
    record.clear()
    assert not waiter.done.wait(0.05)  # cleared, not stopped again: still waiting
    record.request_stop(None, "B")
    assert waiter.result() == (True, None, "B", 1)
    token = CancelToken()
    blocked = Bg(record.wait_stop, None, token, 1, name="feedq-test-stop-cancelled")
    token.fire(KeyError("closed"))
    assert isinstance(blocked.exception(), KeyError)
    assert record._waiters == set()


def test_cluster_coordinator_watcher_is_named_and_closes_at_once(dist: Dist) -> None:
    """The watcher waits in one cancellable call (no long-poll): close()
    ends it at once; its thread carries the feedq- prefix."""
    name = dist.name("coord")
    coord = fd.ClusterCoordinator(name, task=PS1, origin="A")

    def host_info() -> dict[str, Any]:
        return fd.default_session().info(PS1)

    try:
        wait_until(lambda: host_info()["pending_calls"] == 1, what="the watcher's wait on the record")
        names = [t.name for t in threading.enumerate()]
        assert f"feedq-cluster-coord-{name}-watcher" in names
    finally:
        t0 = time.monotonic()
        coord.close()
        closed_s = time.monotonic() - t0
    assert closed_s < 0.5
    assert not any(t.name.endswith(f"{name}-watcher") for t in threading.enumerate())
    assert host_info()["pending_calls"] == 0


@pytest.mark.parametrize("codec", ["float16", "bfloat16", "int8"])
def test_codecs_send_what_they_cannot_represent_exactly(codec: str) -> None:
    from feedq.distributed._compression import decode, encode

    stats = [0, 0, 0]
    cases = [np.array([1.0, 2.0, np.nan, 4.0], np.float32),
             np.array([1.0, -np.inf, 4.0], np.float32)]
    if codec == "float16":
        cases.append(np.array([1e5, 1.0], np.float32))
    for x in cases:
        np.testing.assert_array_equal(decode(encode(x, codec, stats)), x)
    assert stats[2] == len(cases)
    assert stats[0] == stats[1]  # nothing saved on those
    y = np.linspace(-1, 1, 64, dtype=np.float32)
    out = decode(encode(y, codec, stats))
    assert np.isfinite(out).all() and np.abs(out - y).max() < 0.01
    assert stats[2] == len(cases) and stats[1] < stats[0]


def test_probe_refuses_a_listener_that_is_not_a_ray_gcs() -> None:
    import socket

    from feedq.distributed._ray import _probe

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def answer_http1() -> None:
        for _ in range(1):
            conn, _addr = srv.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    t = threading.Thread(target=answer_http1, name="fake-dashboard", daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=r"^no Ray cluster at '127.0.0.1:\d+': something "
                           r"listens there, but not a Ray GCS"):
            _probe(f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 6.0
    finally:
        t.join(5)
        srv.close()


def test_sem_cluster_coordinator_stops_again_after_clear(dist: Dist) -> None:
    name = dist.name("coord")
    a = fd.ClusterCoordinator(name, task=PS0, origin="A")
    b = fd.ClusterCoordinator(name, task=PS0, origin="B")
    try:
        b.request_stop()
        assert a.wait_for_stop(5.0)
        a.clear_stop()
        b.clear_stop()
        assert not a.should_stop() and not b.should_stop()
        b.request_stop(ValueError("second"))
        assert a.wait_for_stop(5.0)  # the watcher outlived the first stop
        with pytest.raises(ValueError, match=r"^second"):
            a.join(stop_grace_period_secs=1)
        a.clear_stop()  # after join too
        b.clear_stop()
        a.request_stop(KeyError("third"))
        assert b.wait_for_stop(5.0)
    finally:
        a.close()
        b.close()


SEMANTIC_CASES = [name for name in dict(globals()) if name.startswith("test_sem_")]
