"""PaddingFIFOQueue with blocks of ragged rows (Q34-Q38), as a dynamic_pad
batcher fed by parse_example gets them: one copy per enqueued block, and
batches padded without a Python step per row -- the same results as padding
row by row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    stored = [q._cols[0][i] for i in range(4)]  # the elements as stored
    # One copy of the whole block, its rows stored as views of it.
    assert all(r.base is not None and r.base is stored[0].base for r in stored)
    assert stored[0].base is not block
    assert q.dequeue_many(4).tolist() == np.arange(12).reshape(4, 3).tolist()


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
