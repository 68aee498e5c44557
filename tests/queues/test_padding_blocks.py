"""PaddingFIFOQueue with blocks of ragged rows (Q34-Q38), as a dynamic_pad
batcher fed by parse_example gets them: one copy per enqueued block, no
array per row, and batches padded without a Python step per row -- the same
results as padding row by row, whatever order takes and put-backs leave the
rows in."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedq.errors import DeadlineExceededError, OutOfRangeError
from feedq.queues import PaddingFIFOQueue

pytestmark = pytest.mark.timeout(60)
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_pad(rows: list[np.ndarray], fill: Any, dtype: Any) -> np.ndarray:
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def test_enqueue_many_copies_a_block_once() -> None:
    q = PaddingFIFOQueue(100, [np.int64], shapes=[[None]])
    block = np.arange(12, dtype=np.int64).reshape(4, 3)
    q.enqueue_many([block])
    block[:] = -1  # the caller's later changes do not reach the queue
    col = q._cols[0][:4]  # the elements as stored: (block, row code) each
    # One copy of the whole block, referenced by every row; no array per row.
    blk = col[0, 0]
    assert all(ref is blk for ref in col[:, 0])
    assert not isinstance(blk, np.ndarray) and blk.values.base is not block
    assert blk.values.tolist() == list(range(12))
    assert col[:, 1].tolist() == [0, 1, 2, 3]
    out = q.dequeue_many(4)
    assert out.tolist() == np.arange(12).reshape(4, 3).tolist()
    assert not np.shares_memory(out, blk.values)  # a batch is the caller's own
    assert q._cols[0][:4].tolist() == [[None, None]] * 4  # no reference kept (nothing handed out is held)


def test_q36_a_block_row_comes_alone_at_the_blocks_row_shape() -> None:
    """Q38: rows of an enqueue_many share the batch's shape; Q36: dequeue
    returns that shape (the block's padding included), and a batch pads to
    the largest such row (Q37), not to a width of its own."""
    q = PaddingFIFOQueue(100, [np.int64, np.int32], shapes=[[], [None]], padding_values=[0, -1])
    q.enqueue_many([np.arange(3), np.array([[1, 2, 0], [3, 0, 0], [4, 5, 6]], np.int32)])
    q.enqueue([9, np.array([8], np.int32)])
    q.enqueue_many([np.arange(2), np.array([[7, 7], [6, 6]], np.int32)])
    i, row = q.dequeue()
    assert i == 0 and row.dtype == np.int32 and row.tolist() == [1, 2, 0]
    ids, batch = q.dequeue_many(4)
    assert ids.tolist() == [1, 2, 9, 0]
    assert batch.tolist() == [[3, 0, 0], [4, 5, 6], [8, -1, -1], [7, 7, -1]]
    assert q.dequeue_many(1)[1].tolist() == [[6, 6]]


def test_bool_and_float_blocks_pad_with_their_values() -> None:
    q = PaddingFIFOQueue(10, [bool, np.float32], shapes=[[None], [None]], padding_values=[True, 0.5])
    q.enqueue_many([np.zeros((2, 1), bool), np.ones((2, 2), np.float32)])
    q.enqueue([np.zeros(3, bool), np.ones(1, np.float32)])
    flags, xs = q.dequeue_many(3)
    assert flags.dtype == bool and flags.tolist() == [[False, True, True]] * 2 + [[False] * 3]
    assert xs.dtype == np.float32 and xs.tolist() == [[1, 1], [1, 1], [1, 0.5]]


def test_a_waiting_dequeue_gets_a_block_row() -> None:
    q = PaddingFIFOQueue(10, np.int64, shapes=[[None]])
    got: list[np.ndarray] = []
    t = threading.Thread(target=lambda: got.append(q.dequeue(timeout=10)))
    t.start()
    while not q.statistics().waiting_consumers:
        time.sleep(0.001)
    q.enqueue_many(np.array([[5, 6], [7, 8]]))
    t.join(10)
    assert not t.is_alive()
    assert got[0].tolist() == [5, 6] and q.dequeue().tolist() == [7, 8]


def test_a_dequeue_many_that_times_out_gives_its_rows_back_in_order() -> None:
    q = PaddingFIFOQueue(10, np.int64, shapes=[[None]])
    q.enqueue_many(np.arange(6).reshape(3, 2))
    with pytest.raises(DeadlineExceededError):
        q.dequeue_many(5, timeout=0.05)
    assert q.size() == 3 and q.statistics().dequeued == 0
    assert q.dequeue_many(3).tolist() == [[0, 1], [2, 3], [4, 5]]


def test_padded_false_put_back_of_rows_of_several_lengths_keeps_each_shape() -> None:
    q = PaddingFIFOQueue(10, np.int64, shapes=[[None]], padding_values=-1)
    q.enqueue(np.array([1]))
    q.enqueue(np.array([2, 3, 4]))
    q.enqueue_many(np.array([[5, 6]]))
    rows = q.dequeue_many(3, padded=False)
    assert [r.tolist() for r in rows] == [[1], [2, 3, 4], [5, 6]]
    q.put_back(rows)  # one block of three lengths
    assert q.stack(rows).tolist() == [[1, -1, -1], [2, 3, 4], [5, 6, -1]]
    assert q.dequeue_many(2).tolist() == [[1, -1, -1], [2, 3, 4]]
    assert q.dequeue().tolist() == [5, 6]


@FUZZ
@given(
    blocks=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 5)),  # (rows, width) per enqueue_many
        min_size=1, max_size=6,
    ),
    singles=st.lists(st.integers(0, 7), max_size=4),  # elements enqueued one at a time
    take=st.integers(1, 9),
    kind=st.sampled_from(["int64", "float32", "string"]),
)
def test_padded_batches_equal_row_by_row_padding(
    blocks: list[tuple[int, int]], singles: list[int], take: int, kind: str
) -> None:
    dtype: Any = np.int64 if kind == "int64" else np.float32 if kind == "float32" else "string"
    fill: Any = -7 if kind == "int64" else 0.5 if kind == "float32" else b"-"
    q = PaddingFIFOQueue(1000, [np.int64, dtype], shapes=[[], [None]], padding_values=[0, fill])
    rows: list[np.ndarray] = []
    ids: list[int] = []

    def values(n: int, start: int) -> np.ndarray:
        v = np.arange(start, start + n)
        return np.array([b"v%d" % x for x in v], dtype=object) if kind == "string" else v.astype(dtype)

    counter = 0
    for k, w in blocks:
        block = values(k * w, counter).reshape(k, w)
        counter += k * w
        q.enqueue_many([np.arange(len(ids), len(ids) + k), block])
        rows.extend(block[i].copy() for i in range(k))
        ids.extend(range(len(ids), len(ids) + k))
    for n in singles:
        v = values(n, counter)
        counter += n
        q.enqueue([len(ids), v])
        rows.append(v)
        ids.append(len(ids))
    q.close()
    seen = 0
    np_dtype = object if kind == "string" else dtype
    while seen < len(rows):
        got_ids, got = q.dequeue_up_to(take)
        n = len(got_ids)
        assert got_ids.tolist() == ids[seen : seen + n]
        want = reference_pad(rows[seen : seen + n], fill, np_dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tolist() == want.tolist()
        seen += n
    assert q.size() == 0


def test_rank_two_components_still_pad_every_dimension() -> None:
    q = PaddingFIFOQueue(10, [np.float32], shapes=[[None, None]])
    q.enqueue(np.ones((1, 3), np.float32))
    q.enqueue_many([np.full((2, 2, 1), 2, np.float32)])
    out = q.dequeue_many(3)
    assert out.shape == (3, 2, 3)
    assert out[0].tolist() == [[1, 1, 1], [0, 0, 0]]
    assert out[1].tolist() == [[2, 0, 0], [2, 0, 0]]


def test_rows_of_a_block_given_back_out_of_order_come_out_as_given_back() -> None:
    """Three takes of one row given back B, C, A leave [A, C, B, D] in front:
    first and last rows are the block's rows 0 and 3, yet not in order."""
    q = PaddingFIFOQueue(10, np.int64, shapes=[[None]])
    q.enqueue_many(np.arange(8).reshape(4, 2))
    with q._mutex:  # what takes do before their rows reach the caller
        a, b, c = (q._take(1, None, 0) for _ in range(3))
        q._engine.size -= 3
        for chunk in (b, c, a):  # interrupted, each gives its row back in front
            q._engine.restore([chunk])
    assert q.dequeue_many(4).tolist() == [[0, 1], [4, 5], [2, 3], [6, 7]]


@FUZZ
@given(
    blocks=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 4)), min_size=1, max_size=5),
    singles=st.lists(st.integers(0, 3), max_size=3),
    takes=st.lists(st.integers(1, 3), max_size=6),
    order=st.randoms(use_true_random=False),
    take=st.integers(1, 9),
)
def test_put_back_in_any_order_then_batches_equal_row_by_row_padding(
    blocks: list[tuple[int, int]], singles: list[int], takes: list[int], order: Any, take: int,
) -> None:
    """Takes of a few rows given back in any order (as interrupted takes of
    several consumers give them back, each at the front) leave rows of a
    block out of order: the batches still hold the right rows, padded as row
    by row. Every element comes out exactly once."""
    q = PaddingFIFOQueue(1000, [np.int64, np.int64], shapes=[[], [None]], padding_values=[0, -1])
    model: list[int] = []  # element ids, front first
    rows: dict[int, np.ndarray] = {}
    for k, w in blocks:
        ids = np.arange(len(rows), len(rows) + k)
        block = (ids[:, None] * 10 + np.arange(w)).astype(np.int64)
        q.enqueue_many([ids, block])
        for i, r in zip(ids.tolist(), block):
            rows[i] = r.copy()
        model += ids.tolist()
    for n in singles:
        i = len(rows)
        rows[i] = np.arange(n, dtype=np.int64) + 10 * i
        q.enqueue([i, rows[i]])
        model.append(i)
    held: list[tuple[list[np.ndarray], list[int]]] = []
    with q._mutex:  # what takes do before their rows reach the caller
        for n in takes:
            n = min(n, len(model))
            if n:
                held.append((q._take(n, None, 0), model[:n]))
                q._engine.size -= n
                del model[:n]
        order.shuffle(held)
        for chunk, ids in held:  # interrupted: each gives its rows back in front
            q._engine.restore([chunk])
            model[:0] = ids
    q.close()
    out: list[int] = []
    while True:
        try:
            got_ids, got = q.dequeue_up_to(take)
        except OutOfRangeError:
            break
        ids = got_ids.tolist()
        assert got.tolist() == reference_pad([rows[i] for i in ids], -1, np.int64).tolist()
        out += ids
    assert out == model and sorted(out) == sorted(rows)


def test_block_rows_beside_a_batch_copied_outside_the_lock() -> None:
    """A large dense component makes enqueue_many / dequeue_many copy with
    the lock released (reserve, claim); the block column goes along."""
    q = PaddingFIFOQueue(2000, [np.float32, np.int64], shapes=[[1024], [None]])
    assert q._unlocked_rows == 256
    x = np.arange(600, dtype=np.float32)[:, None] * np.ones(1024, np.float32)
    ids = (np.arange(600)[:, None] * 10 + np.arange(3)).astype(np.int64)
    q.enqueue_many([x, ids])
    got_x, got_ids = q.dequeue_many(300)
    assert got_x[:, 0].tolist() == list(range(300)) and got_ids.tolist() == ids[:300].tolist()
    q.close()
    got_x, got_ids = q.dequeue_up_to(1000)
    assert got_x[:, 0].tolist() == list(range(300, 600)) and got_ids.tolist() == ids[300:].tolist()


def test_single_elements_across_growth_and_the_ring_end() -> None:
    """Elements enqueued one at a time (stored as themselves) and block rows,
    while the storage grows and the ring wraps: each comes out once, in order."""
    q = PaddingFIFOQueue(-1, np.int64, shapes=[[None]])
    want: list[list[int]] = []
    got: list[list[int]] = []
    for i in range(300):
        if i % 7 == 0:
            block = np.full((3, i % 4), i, np.int64)
            q.enqueue_many(block)
            want += block.tolist()
        else:
            q.enqueue(np.full(i % 5, i, np.int64))
            want.append([i] * (i % 5))
        if i % 3 == 0:
            got.append(q.dequeue().tolist())
    while q.size():
        got.append(q.dequeue().tolist())
    assert got == want
