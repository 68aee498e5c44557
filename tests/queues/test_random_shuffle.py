"""RandomShuffleQueue: spec rules Q29–Q33 (plus the shared Q/T rules)."""

from __future__ import annotations

import numpy as np
import pytest

from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues import RandomShuffleQueue
from tests.conftest import Bg, wait_blocked

pytestmark = pytest.mark.timeout(20)


def test_q29_min_after_dequeue_must_be_below_capacity() -> None:
    """feedq: validated in the constructor (TF1 failed at first use, X9)."""
    with pytest.raises(ValueError, match=r"^min_after_dequeue 5 must be < capacity 3$"):
        RandomShuffleQueue(3, 5, np.int32)
    with pytest.raises(ValueError, match=r"^min_after_dequeue 3 must be < capacity 3$"):
        RandomShuffleQueue(3, 3, np.int32)
    with pytest.raises(ValueError):
        RandomShuffleQueue(3, -1, np.int32)
    with pytest.raises(ValueError, match="fully defined"):
        RandomShuffleQueue(3, 0, np.int32, shapes=[[None]])
    assert RandomShuffleQueue(-1, 100, np.int32).min_after_dequeue == 100


def test_q30_min_after_dequeue_while_open() -> None:
    q = RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=1)
    q.enqueue_many([[1, 2]])
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0.02)
    q.enqueue(3)
    q.dequeue()
    assert q.size() == 2
    q.enqueue_many([[4, 5]])  # size 4
    bg = Bg(q.dequeue_many, 3)
    wait_blocked(q, consumers=1)
    q.enqueue_many([[6, 7, 8]])  # size 7 in total -> 3 surplus
    out = bg.result()
    assert out.shape == (3,) and q.size() == 4


def test_q30_timed_out_partial_dequeue_many_puts_back() -> None:
    q = RandomShuffleQueue(10, 2, np.int32, shapes=[[]], seed=3)
    q.enqueue_many([np.arange(4)])
    with pytest.raises(DeadlineExceededError, match="put back"):
        q.dequeue_many(5, timeout=0.05)
    assert q.size() == 4
    q.close()
    assert sorted(q.dequeue_up_to(10).tolist()) == [0, 1, 2, 3]


def test_q31_uniform_draws() -> None:
    counts = np.zeros(4, dtype=int)
    q = RandomShuffleQueue(10, 0, np.int32, shapes=[[]], seed=123)
    for _ in range(800):
        q.enqueue_many([np.arange(4, dtype=np.int32)])
        counts[int(q.dequeue())] += 1
        q.dequeue_many(3)
    # Each position comes out first ~200 times; a 5-sigma band.
    assert all(130 < c < 270 for c in counts), counts


def test_q31_dequeue_many_is_a_uniform_subset() -> None:
    rng_counts = np.zeros(20, dtype=int)
    q = RandomShuffleQueue(100, 0, np.int64, shapes=[[]], seed=9)
    for _ in range(500):
        q.enqueue_many([np.arange(20)])
        rng_counts[q.dequeue_many(3)] += 1
        q.dequeue_many(17)
    # 1500 draws over 20 values: ~75 each.
    assert rng_counts.sum() == 1500
    assert rng_counts.min() > 35 and rng_counts.max() < 125, rng_counts


def test_q32_close_drops_min_rule() -> None:
    q = RandomShuffleQueue(10, 5, np.int32, shapes=[[]], seed=0)
    q.enqueue_many([np.arange(3)])
    blocked = Bg(q.dequeue)
    wait_blocked(q, consumers=1)
    q.close()
    first = int(blocked.result())
    with pytest.raises(OutOfRangeError, match=r"\(requested 5, current size 2\)$"):
        q.dequeue_many(5)
    rest = q.dequeue_up_to(5).tolist()
    assert sorted([first] + rest) == [0, 1, 2]
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(1)


def test_q33_seed_reproducible_and_unseeded_varies() -> None:
    def run(seed: int | None) -> list[int]:
        q = RandomShuffleQueue(100, 10, np.int32, shapes=[[]], seed=seed)
        q.enqueue_many([np.arange(60)])
        out = q.dequeue_many(20).tolist() + [int(q.dequeue()) for _ in range(10)]
        q.close()
        return out + q.dequeue_up_to(100).tolist()

    a, b = run(42), run(42)
    assert a == b and sorted(a) == list(range(60))
    assert run(43) != a
    assert len({tuple(run(None)) for _ in range(3)}) > 1


def test_large_draws_and_object_columns_keep_accounting() -> None:
    q = RandomShuffleQueue(-1, 0, [np.int64, str], shapes=[[], []], seed=5)
    n = 5000
    q.enqueue_many([np.arange(n), [str(i) for i in range(n)]])
    seen = []
    for k in (1, 7, 100, 900, 1500):
        ids, names = q.dequeue_many(k)
        assert [int(x) for x in names] == ids.tolist()  # rows stay aligned
        seen += ids.tolist()
    q.close()
    ids, _ = q.dequeue_up_to(n)
    seen += ids.tolist()
    assert sorted(seen) == list(range(n))
    # No references left in the object column after draining.
    assert all(x is None for x in q._cols[1][: q._alloc])


def test_cancel_wakes_blocked_consumer() -> None:
    q = RandomShuffleQueue(10, 3, np.int32, shapes=[[]])
    bg = Bg(q.dequeue)
    wait_blocked(q, consumers=1)
    q.cancel()
    assert isinstance(bg.exception(), CancelledError)
