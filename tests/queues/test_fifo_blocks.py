"""FIFOQueue's blocks by reference (issue 22): a batch that arrives while
the ring holds no row is kept as a block (copied once, or not at all when
handed over), and a dequeue of one whole block gets that block itself.

The differential tests rerun ``test_fifo_hooks``'s comparison with every
batch kept as a block (``_block_min_rows = 1``), so that the line of blocks
meets every other path: single elements, put-backs, closes, timed-out calls
(Q15, Q27, T2, T3) and the copies outside the lock. The threaded test checks
exact accounting under timeouts and tokens (every element out exactly once,
in order, or still queued).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from feedq.errors import CancelledError, DeadlineExceededError
from feedq.queues import CancelToken, FIFOQueue
from feedq.queues._fifo import OwnedColumns
from tests.queues.test_fifo_hooks import SPECS, WRAPS, GenericFIFO, _run, ops

pytestmark = pytest.mark.timeout(60)


class BlockFIFO(FIFOQueue):
    """Every batch that may be a block is one."""

    _block_min_rows = 1


class BlockSmallCopyFIFO(FIFOQueue):
    """Blocks, and batches of >= 64 bytes copied outside the lock."""

    _block_min_rows = 1
    _unlocked_copy_bytes = 64


@pytest.mark.parametrize("spec", sorted(SPECS))
@settings(max_examples=50, deadline=None)
@given(seq=ops, capacity=st.sampled_from([3, 5, 12, -1]), seed=st.integers(0, 2**16))
@example(seq=WRAPS, capacity=5, seed=1)
def test_block_hooks_match_shift_hooks(spec: str, seq: list[Any], capacity: int, seed: int) -> None:
    _run(BlockFIFO, GenericFIFO, spec, capacity, seq, seed)


@pytest.mark.parametrize("spec", ["1", "2"])
@settings(max_examples=30, deadline=None)
@given(seq=ops, capacity=st.sampled_from([12, -1]), seed=st.integers(0, 2**16))
def test_block_hooks_match_shift_hooks_unlocked_copies(
    spec: str, seq: list[Any], capacity: int, seed: int
) -> None:
    _run(BlockSmallCopyFIFO, GenericFIFO, spec, capacity, seq, seed)


def _rows(n: int, start: int = 0) -> np.ndarray[Any, Any]:
    return (np.arange(start, start + n, dtype=np.float32)[:, None] * np.ones(4, np.float32)).copy()


def test_a_whole_block_is_handed_out_without_a_copy() -> None:
    q = FIFOQueue(1024, np.float32, shapes=[[4]])
    a = _rows(256)
    q.enqueue_many(a)
    stored = q._blocks[0][0]
    assert stored is not a  # copied once, on the way in
    a[:] = -1  # the caller may reuse its array at once
    out = q.dequeue_many(256)
    assert out is stored  # ... and not again on the way out
    assert out.tolist() == _rows(256).tolist()
    assert q.size() == 0 and not q._blocks and q._bn == 0


def test_handed_over_columns_are_kept_as_they_are() -> None:
    q = FIFOQueue(1024, [np.float32, np.int64], shapes=[[4], []])
    a, b = _rows(64), np.arange(64)
    q._put_path(OwnedColumns([a, b]), 64, None, None, False)
    x, y = q.dequeue_many(64)
    assert x is a and y is b


def test_parts_of_blocks_are_views_and_edges_are_copied() -> None:
    q = FIFOQueue(-1, np.float32, shapes=[[4]])
    q.enqueue_many(_rows(100))
    q.enqueue_many(_rows(100, 100))
    block = q._blocks[0][0]
    first = q.dequeue_many(60)
    assert first.base is block  # within one block: a view
    cross = q.dequeue_many(80)  # rows 60..139 cross the edge: copied
    assert cross.base is None
    assert cross[:, 0].tolist() == list(range(60, 140))
    assert q.size() == 60 and q._bn == 60
    assert q.dequeue_many(60)[:, 0].tolist() == list(range(140, 200))
    assert first[:, 0].tolist() == list(range(60))


def test_the_line_goes_into_the_ring_in_order() -> None:
    # One element in, a put-back, one element out: the order stays FIFO.
    q = FIFOQueue(64, np.float32, shapes=[[4]])
    q.enqueue_many(_rows(20))
    q.enqueue_many(_rows(20, 20))
    assert q.dequeue()[0] == 0  # from the line
    q.enqueue(_rows(1, 40)[0])  # the line is copied into the ring first
    assert not q._blocks
    got = q.dequeue_many(10)
    q.put_back(got)
    assert q.dequeue_many(40)[:, 0].tolist() == list(range(1, 41))


def test_a_waiting_dequeue_collects_across_blocks() -> None:
    q = FIFOQueue(64, np.float32, shapes=[[4]])
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(q.dequeue_many(50, timeout=10)))
    t.start()
    for i in range(5):
        q.enqueue_many(_rows(20, 20 * i), timeout=10)
    t.join(10)
    assert out[0][:, 0].tolist() == list(range(50))
    assert q.dequeue_many(50, timeout=10)[:, 0].tolist() == list(range(50, 100))


def test_a_waiting_dequeue_many_gets_a_whole_block_without_a_copy() -> None:
    q = FIFOQueue(1024, np.float32, shapes=[[4]])
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(q.dequeue_many(256, timeout=10)))
    t.start()
    while not q.statistics().waiting_consumers:
        t.join(0.001)
    a = _rows(256)
    q._put_path(OwnedColumns([a]), 256, None, None, False)
    t.join(10)
    assert out[0] is a


def test_a_timed_out_dequeue_puts_block_rows_back_in_order() -> None:
    # T3: what a timed-out dequeue collected from the line goes back in front.
    q = FIFOQueue(64, np.float32, shapes=[[4]])
    q.enqueue_many(_rows(20))
    with pytest.raises(DeadlineExceededError):
        q.dequeue_many(30, timeout=0.05)
    assert q.size() == 20
    q.enqueue_many(_rows(20, 20))
    assert q.dequeue_many(40)[:, 0].tolist() == list(range(40))


class SmallCopyFIFO(FIFOQueue):
    """Batches of >= 64 bytes (4 rows of float32[4], 4 of int64[2]) are
    copied outside the lock: as blocks when they join the line."""

    _unlocked_copy_bytes = 64


def test_a_block_reserved_before_a_put_back_is_committed_after_it() -> None:
    # A put-back while a block is being copied in lays the line out in the
    # ring; the block's commit then writes its rows after them (Q16, T3).
    q = SmallCopyFIFO(-1, np.float32, shapes=[[4]])
    q.enqueue_many(_rows(20))  # copied outside the lock, as a block
    assert q._bn == 20
    taken = q.dequeue_many(5)  # a claim from the line: a view
    assert taken.base is q._blocks[0][0].base
    with q._mutex:
        res = q._reserve([_rows(20, 100)], 20)
        assert res.as_block and q._engine.in_busy == 20
        q._engine.restore([[taken]])  # the put-back: into the ring
        assert not q._blocks
    q._copy_in(res)
    with q._mutex:
        q._commit_put(res, True)
    assert q.size() == 40 and q._engine.in_busy == 0
    q.close()
    assert q.dequeue_up_to(100)[:, 0].tolist() == list(range(20)) + list(range(100, 120))


def test_the_line_never_overwrites_slots_still_being_copied_out() -> None:
    # A block committed while an older claim still copies its ring slots
    # out; a put-back then lays the line out in the ring: not over them.
    q = SmallCopyFIFO(-1, np.float32, shapes=[[4]])
    assert q._alloc == 64
    with q._mutex:
        res = q._reserve([_rows(20, 100)], 20)  # a block: the queue is empty
        q._engine.restore([[_rows(8)]])  # into the ring's last 8 slots
        claim = q._claim(8, None, 0)  # from the ring: slots busy until finished
        assert q._engine.out_busy == 8
    q._copy_in(res)
    with q._mutex:
        q._commit_put(res, True)  # the ring holds no row: the block joins the line
        assert q._bn == 20
    q.enqueue_many(_rows(40, 200))  # the line: 60 rows, more than the free slots
    with q._mutex:
        q._engine.restore([[_rows(2, 50)]])
    rows = q._copy_out(claim)
    with q._mutex:
        q._finish_claim(claim, True)
    assert rows[0][:, 0].tolist() == list(range(8))
    q.close()
    assert q.dequeue_up_to(100)[:, 0].tolist() == [50, 51] + list(range(100, 120)) + list(range(200, 240))


def test_an_interrupted_block_copy_releases_its_reservation() -> None:
    q = SmallCopyFIFO(-1, np.float32, shapes=[[4]])
    with q._mutex:
        res = q._reserve([_rows(20)], 20)
        q._commit_put(res, False)  # as run_reserved does when the copy raised
    assert q.size() == 0 and q._engine.in_busy == 0 and not q._blocks
    q.enqueue_many(_rows(20))
    assert q.dequeue_many(20)[:, 0].tolist() == list(range(20))


def test_an_interrupted_block_claim_puts_its_rows_back_in_front() -> None:
    q = SmallCopyFIFO(-1, np.float32, shapes=[[4]])
    q.enqueue_many(_rows(20))
    q.enqueue_many(_rows(20, 20))
    with q._mutex:
        claim = q._claim(30, None, 0)  # across the edge: copied at the claim
        assert q.size() == 10
        q._finish_claim(claim, False)  # as run_claimed does when interrupted
    assert q.size() == 40
    assert q.dequeue_many(40)[:, 0].tolist() == list(range(40))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [FIFOQueue, SmallCopyFIFO])
def test_threaded_blocks_lose_nothing_under_timeouts_and_tokens(cls: Any) -> None:
    # 1 producer, 1 consumer; batches and single elements in, batches and
    # single elements out, short timeouts (dequeues that time out put what
    # they collected back, T3), fired tokens, put-backs of whole batches:
    # every row comes out exactly once and in order, or is still queued
    # (Q15: num_enqueued rows went in). SmallCopyFIFO: most batches are
    # copied outside the lock (blocks reserved and committed, claims).
    rng = np.random.default_rng(5)
    q = cls(160, np.int64, shapes=[[2]])
    total = 30_000
    sent: list[int] = []
    got: list[np.ndarray[Any, Any]] = []
    sizes = rng.integers(1, 120, 4000).tolist()
    takes = rng.integers(1, 200, 8000).tolist()

    def produce() -> None:
        nxt = 0
        for k in sizes:
            if nxt >= total:
                break
            k = min(k, total - nxt)
            if k % 5 == 0:  # one element: the line goes into the ring
                q.enqueue(np.array([nxt, nxt]), timeout=5)
                nxt += 1
                continue
            block = np.repeat(np.arange(nxt, nxt + k)[:, None], 2, axis=1)
            token = CancelToken()
            if k % 7 == 0:
                token.fire()
            try:
                q.enqueue_many(block, timeout=0.001 if k % 3 == 0 else 5, cancel=token)
                nxt += k
            except (DeadlineExceededError, CancelledError) as exc:
                nxt += exc.num_enqueued  # type: ignore[attr-defined]
        sent.append(nxt)
        q.close()

    t = threading.Thread(target=produce)
    t.start()
    i = 0
    while True:
        n = takes[i % len(takes)]
        i += 1
        try:
            if n % 9 == 0:
                got.append(q.dequeue(timeout=5)[None])
            elif n % 4 == 0:
                # Often more than is there: times out with rows collected.
                got.append(q.dequeue_many(n, timeout=0.0005))
            else:
                batch = q.dequeue_up_to(n, timeout=5)
                if n % 11 == 0:
                    q.put_back(batch)  # at the front: taken again next
                else:
                    got.append(batch)
        except DeadlineExceededError:
            continue
        except Exception:  # noqa: BLE001 - OutOfRange: closed and empty
            break
    t.join(60)
    rows = np.concatenate(got) if got else np.empty((0, 2), np.int64)
    assert (rows[:, 0] == rows[:, 1]).all()
    assert rows[:, 0].tolist() == list(range(sent[0]))
    assert q.size() == 0
