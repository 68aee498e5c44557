"""RandomShuffleQueue keeps its storage in uniformly random order (each new
row lands in a random slot, the row there moves to the end) and dequeues
take the last rows. These check that what comes out is still a uniformly
random draw (Q31) on every insert path, and that seeds still reproduce (Q33).
"""

from __future__ import annotations

from collections import Counter
from itertools import permutations

import numpy as np
import pytest

from feedq.queues import RandomShuffleQueue

pytestmark = pytest.mark.timeout(60)


def _chi2(counts: Counter[tuple[int, ...]], cells: list[tuple[int, ...]], trials: int) -> float:
    expected = trials / len(cells)
    return sum((counts.get(c, 0) - expected) ** 2 / expected for c in cells)


@pytest.mark.parametrize("how", ["batch", "mixed", "put_back"])
def test_q31_every_order_is_equally_likely(how: str) -> None:
    """Five elements in, four out: all 120 ordered outcomes are equally
    likely whether they went in as one batch, through single enqueues and
    small batches, or partly through put_back."""
    trials = 2400
    counts: Counter[tuple[int, ...]] = Counter()
    for seed in range(trials):
        q = RandomShuffleQueue(10, 0, np.int64, shapes=[[]], seed=seed)
        if how == "batch":
            q.enqueue_many(np.arange(5))
        elif how == "mixed":
            q.enqueue_many(np.arange(2))
            q.enqueue(2)
            q.enqueue_many(np.arange(3, 5))
        else:
            q.enqueue_many(np.arange(3))
            q.put_back(np.arange(3, 5))
        counts[tuple(q.dequeue_many(4).tolist())] += 1
    cells = list(permutations(range(5), 4))
    assert set(counts) <= set(cells)
    # 119 degrees of freedom: mean 119, sd 15.4; 5 sd above the mean.
    assert _chi2(counts, cells, trials) < 196, counts.most_common(5)


def test_q31_a_small_batch_into_a_large_pool_lands_uniformly() -> None:
    """The sparse insert path (many stored rows, few new ones): each new
    row's position, and the new rows' order among themselves, is uniform."""
    trials, pool, k = 600, 200, 10
    positions = np.zeros(pool + k, dtype=int)
    first_of_pair = 0
    for seed in range(trials):
        q = RandomShuffleQueue(-1, 0, np.int64, shapes=[[]], seed=seed)
        q.enqueue_many(np.arange(pool))
        q.enqueue_many(np.arange(pool, pool + k))
        out = q.dequeue_many(pool + k).tolist()
        assert sorted(out) == list(range(pool + k))
        where = {v: i for i, v in enumerate(out)}
        for v in range(pool, pool + k):
            positions[where[v]] += 1
        first_of_pair += where[pool] < where[pool + 1]
    # 6000 positions over 210 slots, grouped into 10 bands of 21 slots:
    # 600 expected per band, sd ~23; 5 sd.
    bands = positions.reshape(10, -1).sum(axis=1)
    assert np.all(np.abs(bands - 600) < 5 * 23.2), bands
    # The new rows are in random order too: 300 expected, sd ~12.2.
    assert abs(first_of_pair - 300) < 5 * 12.3


def test_q33_a_seed_reproduces_a_mixed_sequence() -> None:
    def run(seed: int) -> list[int]:
        q = RandomShuffleQueue(50, 5, np.int64, shapes=[[]], seed=seed)
        out: list[int] = []
        for i in range(30):
            q.enqueue_many(np.arange(10 * i, 10 * i + 1 + i % 9))
            if i % 3 == 0:
                q.enqueue(-i - 1)
            out += q.dequeue_many(min(q.size() - 5, 1 + i % 7)).tolist() if q.size() > 5 else []
            if i % 5 == 0 and q.size() > 5:
                out.append(int(q.dequeue()))
        q.close()
        return out + q.dequeue_up_to(1000).tolist()

    a = run(7)
    assert a == run(7) and a != run(8)
    assert len(a) == len(set(a))


def test_dense_rows_and_object_columns_stay_aligned() -> None:
    """Rows move as units across components on both insert paths."""
    q = RandomShuffleQueue(-1, 0, [np.int64, np.float32, str], shapes=[[], [2, 3], []], seed=3)
    ids = np.arange(300)
    q.enqueue_many([ids[:5], np.repeat(ids[:5], 6).reshape(5, 2, 3).astype(np.float32), [str(i) for i in ids[:5]]])
    for lo in (5, 50, 120):  # dense path, then sparse
        hi = lo + (45 if lo == 5 else 70 if lo == 50 else 180)
        part = ids[lo:hi]
        q.enqueue_many([part, np.repeat(part, 6).reshape(-1, 2, 3).astype(np.float32), [str(i) for i in part]])
        got, xs, names = q.dequeue_many(7)
        assert np.all(xs == got[:, None, None]) and [int(s) for s in names] == got.tolist()
    q.close()
    got, xs, names = q.dequeue_up_to(1000)
    assert np.all(xs == got[:, None, None]) and [int(s) for s in names] == got.tolist()
    assert all(x is None for x in q._cols[2][: q._alloc])
