"""The queue engine is a part of a queue, not its base class (issue 20).

A :class:`QueueBase` has one :class:`QueueEngine` (the lock, the two lines of
waiting calls, the close state, the counters) and one ``ElementCodec``; the
kinds add storage hooks only. The fast paths hold direct references to the
engine's lock and lines, which must stay the very objects the engine uses.
The timing figures come out as a named record. Nothing in feedq asks a lock
``_is_owned()`` (the Ctrl-C guarantees do without it, see ``_cancel.Waiter``).
"""

from __future__ import annotations

import ast
import pathlib
import threading

import numpy as np
import pytest

import feedq
from feedq.queues import FIFOQueue, PaddingFIFOQueue, PriorityQueue, RandomShuffleQueue
from feedq.queues._engine import BlockedCall, QueueEngine, TimingRecord
from feedq.queues._queue import QueueBase
from feedq.queues._spec import ElementCodec

pytestmark = pytest.mark.timeout(30)


def _kinds() -> list[QueueBase]:
    return [
        FIFOQueue(4, np.int64, shapes=[[]]),
        PaddingFIFOQueue(4, np.int64, shapes=[[None]]),
        RandomShuffleQueue(4, 0, np.int64, shapes=[[]], seed=0),
        PriorityQueue(4, [np.int64], shapes=[[]]),
    ]


def test_a_queue_has_an_engine_and_a_codec_rather_than_being_them() -> None:
    assert not issubclass(QueueBase, QueueEngine)
    assert not issubclass(QueueBase, ElementCodec)
    engines = set()
    for q in _kinds():
        assert not isinstance(q, (QueueEngine, ElementCodec))
        assert type(q._engine) is QueueEngine and q._engine.store is q
        assert isinstance(q._codec, ElementCodec)
        # The fast paths' direct references are the engine's own objects.
        assert q._mutex is q._engine.mutex
        assert q._producers is q._engine.producers and q._consumers is q._engine.consumers
        engines.add(id(q._engine))
    assert len(engines) == 4  # one each


def test_the_engine_counts_what_the_fast_paths_and_the_lines_move() -> None:
    q = FIFOQueue(2, np.int64, shapes=[[]])
    q.enqueue_many(np.arange(2))  # fast path
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(q.enqueue(7)))  # waits in line: full
    t.start()
    while not q._engine.blocked():
        threading.Event().wait(0.001)
    (call,) = q._engine.blocked()
    assert isinstance(call, BlockedCall) and call.is_enqueue and call.elements == 1
    assert int(q.dequeue()) == 0  # fast path; the flush lets the waiting enqueue in
    t.join(10)
    assert not t.is_alive() and got == [None]
    assert q.dequeue_many(2).tolist() == [1, 7]
    t_rec = q._timing()
    assert isinstance(t_rec, TimingRecord)
    assert (t_rec.size, t_rec.peak, t_rec.enqueued, t_rec.dequeued) == (0, 2, 3, 3)
    assert t_rec.takes == 2 and t_rec.enqueue_waits == 1 and t_rec.dequeue_waits == 0
    s = q.statistics()
    assert (s.size, s.enqueued, s.dequeued, s.waiting_producers) == (0, 3, 3, 0)


def test_close_and_cancel_go_through_the_engine() -> None:
    q = FIFOQueue(4, np.int64, shapes=[[]])
    q.enqueue(1)
    q.close()
    assert q.is_closed() and q._engine.state is feedq.queues.QueueState.CLOSED
    assert int(q.dequeue()) == 1
    with pytest.raises(feedq.errors.OutOfRangeError):
        q.dequeue()
    r = FIFOQueue(4, np.int64, shapes=[[]])
    cause = RuntimeError("stop")
    r.cancel(cause)
    with pytest.raises(feedq.errors.CancelledError) as info:
        r.enqueue(1)
    assert info.value.__cause__ is cause and r._engine.cancelled


def _owned_queries(source: str) -> list[int]:
    """Lines of ``source`` that read an ``_is_owned`` attribute (code, not text)."""
    return [
        node.lineno for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "_is_owned"
    ]


def test_nothing_in_feedq_asks_a_lock_whether_it_is_owned() -> None:
    assert _owned_queries("if self._mutex._is_owned():\n    pass\n") == [1]  # the check can fail
    assert _owned_queries('"""needs no RLock._is_owned()"""\n') == []  # words about it are fine
    root = pathlib.Path(feedq.__file__).parent
    found = [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        for line in _owned_queries(path.read_text(encoding="utf-8"))
    ]
    assert found == []
