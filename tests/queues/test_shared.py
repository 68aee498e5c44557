"""Shared resources (Q7: one registry, re-opens return the same object, the
RandomShuffleQueue seed check) and QueueBase.from_list."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.errors import InvalidArgumentError
from feedq.queues import (
    CancelToken,
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueBase,
    RandomShuffleQueue,
    ResourceManager,
    SelectedQueue,
    reset_shared_accumulators,
)
from tests.conftest import Bg, wait_blocked

pytestmark = pytest.mark.timeout(30)


# -- the registry -------------------------------------------------------------------


def test_q7_reopen_returns_the_same_queue_object() -> None:
    a = FIFOQueue(5, np.int32, shapes=[[]], shared_name="same")
    b = FIFOQueue(5, np.int32, shapes=[[]], shared_name="same")
    assert a is b
    c = FIFOQueue(5, np.int32, shapes=[[]])
    assert c is not a and c.shared_name is None
    feedq.reset_shared_queues("same")
    assert FIFOQueue(5, np.int32, shapes=[[]], shared_name="same") is not a


def test_q7_reopen_does_not_use_a_name() -> None:
    first = FIFOQueue(5, np.int32, shapes=[[]], shared_name="named")
    FIFOQueue(5, np.int32, shapes=[[]], shared_name="named")
    assert first.name.startswith("fifo_queue")
    with pytest.raises(InvalidArgumentError):
        FIFOQueue(6, np.int32, shapes=[[]], shared_name="named")
    assert first.capacity == 5


def test_q7_shared_accumulator_is_the_same_object() -> None:
    try:
        a = ConditionalAccumulator(np.float32, [2], shared_name="acc")
        b = ConditionalAccumulator(np.float32, [2], shared_name="acc")
        assert a is b
        with pytest.raises(InvalidArgumentError, match="reduction_type"):
            ConditionalAccumulator(np.float32, [2], shared_name="acc", reduction_type="SUM")
    finally:
        reset_shared_accumulators()


def test_q7_concurrent_opens_create_one_queue() -> None:
    got: list[Any] = []
    barrier = threading.Barrier(8)

    def open_it() -> None:
        barrier.wait()
        got.append(FIFOQueue(5, np.int32, shapes=[[]], shared_name="race"))

    threads = [threading.Thread(target=open_it, name=f"feedq-test-open-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8 and all(q is got[0] for q in got)


def test_q33_reopen_with_another_seed_is_invalid_argument() -> None:
    """TF: a re-open that gives seeds must give the queue's; none is fine."""
    q = RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=1, shared_name="rs")
    assert RandomShuffleQueue(10, 2, np.int32, shapes=[[]], shared_name="rs") is q
    assert RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=1, shared_name="rs") is q
    with pytest.raises(InvalidArgumentError, match=r"^Shared queue 'rs' has seed 1 but requested seed was 2$"):
        RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=2, shared_name="rs")
    RandomShuffleQueue(10, 2, np.int32, shapes=[[]], shared_name="unseeded")
    with pytest.raises(InvalidArgumentError, match="has seed None but requested seed was 3"):
        RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=3, shared_name="unseeded")
    with pytest.raises(InvalidArgumentError, match="min_after_dequeue"):
        RandomShuffleQueue(10, 3, np.int32, shapes=[[]], shared_name="rs")


def test_check_reopen_compares_a_requested_queue() -> None:
    """For registries other than the process's (a cluster task's container)."""
    q = FIFOQueue(5, np.int32, shapes=[[]], name="q")
    q.check_reopen(FIFOQueue(5, np.int32, shapes=[[]]), "q")
    with pytest.raises(InvalidArgumentError, match=r"^Shared queue 'q' has capacity 5 but requested capacity was 6$"):
        q.check_reopen(FIFOQueue(6, np.int32, shapes=[[]]), "q")
    with pytest.raises(InvalidArgumentError, match="is a FIFOQueue but a PriorityQueue was requested"):
        q.check_reopen(PriorityQueue(5, [np.int32], shapes=[[]]), "q")
    acc = ConditionalAccumulator(np.float32, [2], name="acc")
    acc.check_reopen(ConditionalAccumulator(np.float32, [2]))
    with pytest.raises(InvalidArgumentError, match=r"^Shared accumulator 'acc' has shape \[2\]"):
        acc.check_reopen(ConditionalAccumulator(np.float32, [3]))


def test_resource_manager_get_or_create() -> None:
    m = ResourceManager()
    made: list[int] = []

    def factory() -> list[int]:
        made.append(1)
        return [len(made)]

    first = m.get_or_create("queue", ("", "a"), factory, label="a")
    assert m.get_or_create("queue", ("", "a"), factory) is first and made == [1]
    with pytest.raises(InvalidArgumentError, match=r"^Shared resource 'a' is a queue but a variable was requested$"):
        m.get_or_create("variable", ("", "a"), factory, label="a")

    def refuse(existing: Any) -> None:
        raise InvalidArgumentError("does not match")

    with pytest.raises(InvalidArgumentError, match="does not match"):
        m.get_or_create("queue", ("", "a"), factory, refuse)

    def broken() -> Any:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        m.get_or_create("queue", ("", "b"), broken)
    assert ("", "b") not in m and m.kind_of(("", "a")) == "queue"
    m.get_or_create("variable", ("c2", "v"), lambda: "v")
    assert m.pop_where(lambda key: key[0] == "c2") == ["v"]  # type: ignore[index]
    assert m.names() == [("", "a")] and len(m) == 1
    assert m.pop(("", "a")) is first and m.get(("", "a")) is None
    assert m.clear() == []


# -- from_list ------------------------------------------------------------------------


def test_from_list_routes_every_call_to_the_selected_queue() -> None:
    q0 = FIFOQueue(5, np.int64, shapes=[[2]], name="q0")
    q1 = FIFOQueue(5, np.int64, shapes=[[2]], name="q1")
    sel = QueueBase.from_list(1, [q0, q1])
    assert isinstance(sel, SelectedQueue) and sel.queue is q1 and sel.name == "q1"
    sel.enqueue(np.array([1, 2]))
    sel.enqueue_many(np.arange(4).reshape(2, 2))
    assert (q0.size(), q1.size(), sel.size()) == (0, 3, 3)
    np.testing.assert_array_equal(sel.dequeue(), [1, 2])
    np.testing.assert_array_equal(sel.dequeue_many(1), [[0, 1]])
    sel.put_back(np.array([[7, 7]]))
    np.testing.assert_array_equal(sel.dequeue_available(5), [[7, 7], [2, 3]])
    assert sel.statistics().name == "q1"
    sel.close()
    assert q1.is_closed() and not q0.is_closed() and sel.is_closed()


def test_from_list_reads_a_0d_index_at_every_call() -> None:
    qs = [FIFOQueue(5, np.int64, shapes=[[]]) for _ in range(3)]
    index = np.array(0)
    sel = QueueBase.from_list(index, qs)
    sel.enqueue(10)
    index[()] = 2
    sel.enqueue(12)
    assert [q.size() for q in qs] == [1, 0, 1] and sel.index == 2
    assert sel.dequeue() == 12
    index[()] = 3
    with pytest.raises(InvalidArgumentError, match=r"queue index 3 is not in \[0, 3\)"):
        sel.dequeue()
    assert QueueBase.from_list(np.array(1, dtype=np.int32), qs).queue is qs[1]
    assert QueueBase.from_list(np.int64(0), qs).queue is qs[0]


def test_from_list_blocking_calls_keep_their_semantics() -> None:
    qs = [FIFOQueue(5, np.int64, shapes=[[]]) for _ in range(2)]
    sel = QueueBase.from_list(0, qs)
    token = CancelToken()
    bg = Bg(sel.dequeue_many, 2, cancel=token, name="feedq-test-sel")
    wait_blocked(qs[0], consumers=1)
    qs[0].enqueue(1)
    token.fire()
    assert isinstance(bg.exception(), feedq.errors.CancelledError)
    assert qs[0].dequeue(timeout=0) == 1  # put back (T3)


def test_from_list_common_shapes_names_and_dtypes() -> None:
    a = PaddingFIFOQueue(5, [np.int64, np.float32], shapes=[[2, 3], [4]], names=["x", "y"])
    b = PaddingFIFOQueue(5, [np.int64, np.float32], shapes=[[2, 5], [None]], names=["x", "y"])
    sel = QueueBase.from_list(0, [a, b])
    assert sel.shapes == [(2, None), (None,)]
    assert sel.names == ["x", "y"]
    assert sel.dtypes == [np.dtype(np.int64), np.dtype(np.float32)]
    c = FIFOQueue(5, [np.int64, np.float32], shapes=[[2], []], names=["x", "y"])
    assert QueueBase.from_list(0, [a, c]).shapes == [None, None]  # ranks differ
    p = PriorityQueue(5, [np.int64], shapes=[[]])
    assert QueueBase.from_list(0, [p, p]).dtypes == [np.dtype(np.int64)] * 2


def test_from_list_rejects_mismatched_queues_and_bad_indexes() -> None:
    a = FIFOQueue(5, np.int64, shapes=[[]])
    with pytest.raises(ValueError, match="component dtypes"):
        QueueBase.from_list(0, [a, FIFOQueue(5, np.int32, shapes=[[]])])
    with pytest.raises(ValueError, match="component counts"):
        QueueBase.from_list(0, [a, FIFOQueue(5, [np.int64, np.int64])])
    with pytest.raises(ValueError, match="component names"):
        QueueBase.from_list(0, [a, FIFOQueue(5, np.int64, shapes=[[]], names=["n"])])
    for bad in ([], (), "q", [a, "q"], None):
        with pytest.raises(TypeError, match="A list of queues expected"):
            QueueBase.from_list(0, bad)  # type: ignore[arg-type]
    bad_indexes: list[Any] = [1.0, True, np.array(0.0), np.array([0])]
    for index in bad_indexes:
        with pytest.raises(TypeError, match="index must be an int"):
            QueueBase.from_list(index, [a])
    for index in (1, -1):
        with pytest.raises(InvalidArgumentError, match="is not in"):
            QueueBase.from_list(index, [a])
