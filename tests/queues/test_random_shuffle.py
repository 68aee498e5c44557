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


def _mixed_run(seed: int, calls: list[int]) -> list[int]:
    """Elements 0..199 in; then ``calls`` (k: dequeue_many(k), 0: dequeue())."""
    q = RandomShuffleQueue(-1, 0, np.int64, shapes=[[]], seed=seed)
    q.enqueue_many([np.arange(200)])
    out: list[int] = []
    for k in calls:
        if k == 0:
            out.append(int(q.dequeue()))
        else:
            out += q.dequeue_many(k).tolist()
    return out


def test_q33_dequeue_is_dequeue_many_of_one() -> None:
    """One draw rule for both (docs/queue-api.md): k dequeues give what one
    dequeue_many(k) gives, so mixes of the two stay reproducible (X12)."""
    singles = _mixed_run(7, [0] * 150)
    assert _mixed_run(7, [150]) == singles
    assert _mixed_run(7, [3, 0, 0, 40, 0, 100, 4]) == singles
    assert sorted(_mixed_run(7, [200])) == list(range(200))


def test_q33_draws_do_not_depend_on_how_producers_split_blocks() -> None:
    def run(blocks: list[int]) -> list[int]:
        q = RandomShuffleQueue(-1, 0, [np.int64, str], shapes=[[], []], seed=3)
        start = 0
        for b in blocks:
            q.enqueue_many([np.arange(start, start + b), [str(i) for i in range(start, start + b)]])
            start += b
        ids, names = q.dequeue_many(start)
        assert [int(x) for x in names] == ids.tolist()
        return list(ids.tolist())

    assert run([1024]) == run([1, 1023]) == run([100] * 10 + [24])


def _chi_square_bound(df: int, z: float = 5.0) -> float:
    """The chi-square quantile ~z sigma above the mean (Wilson-Hilferty)."""
    return float(df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3)


def test_q31_each_position_of_a_dequeue_many_is_uniform() -> None:
    """Chi-square over (element, position in the batch) of dequeue_many(10)
    from 40 stored: every cell should see 1/40 of the batches."""
    n, k, trials = 40, 10, 4000
    counts = np.zeros((n, k), dtype=np.int64)
    q = RandomShuffleQueue(-1, 0, np.int64, shapes=[[]], seed=11)
    for _ in range(trials):
        q.enqueue_many([np.arange(n)])
        counts[q.dequeue_many(k), np.arange(k)] += 1
        q.dequeue_many(n - k)
    expected = trials / n
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert stat < _chi_square_bound(n * k - k), stat
    # And it can fail: the same statistic for a rule that favours low slots.
    biased = counts.copy()
    biased[: n // 2] += 25
    assert float(((biased - expected) ** 2 / expected).sum()) > _chi_square_bound(n * k - k)


def test_q31_draws_are_uniform_after_rows_moved() -> None:
    """The rows kept are reordered by the moves; later draws stay uniform
    over them (the count each element comes out first, over many runs)."""
    n, trials = 30, 3000
    first = np.zeros(n, dtype=np.int64)
    q = RandomShuffleQueue(-1, 0, np.int64, shapes=[[]], seed=5)
    for _ in range(trials):
        q.enqueue_many([np.arange(n)])
        q.dequeue_many(7)
        rest = q.dequeue_many(n - 7)
        first[rest[0]] += 1
    # Each element is among the 23 kept with probability 23/30, then first with 1/23.
    expected = trials / n
    stat = float(((first - expected) ** 2 / expected).sum())
    assert stat < _chi_square_bound(n - 1), (stat, first)


def test_strided_out_buffers_get_the_same_rows() -> None:
    def take(out: bool) -> list[np.ndarray]:
        q = RandomShuffleQueue(-1, 0, [np.float32, np.int64], shapes=[[3], []], seed=2)
        q.enqueue_many([np.arange(150, dtype=np.float32).reshape(50, 3), np.arange(50)])
        if not out:
            return list(q.dequeue_many(20))
        a = np.zeros((20, 6), np.float32)[:, ::2]  # strided rows
        b = np.zeros(40, np.int64)[::2]
        q.dequeue_many(20, out=[a, b])
        return [a, b]

    plain, strided = take(False), take(True)
    assert all(np.array_equal(p, s) for p, s in zip(plain, strided))
    assert np.array_equal(strided[0][:, 0], 3 * strided[1])


_ORDER_SCRIPT = """
import json, numpy as np
from feedq.queues import RandomShuffleQueue
import feedq._native as nat
q = RandomShuffleQueue(-1, 5, [np.int64, str, np.float32, str], shapes=[[], [], [2], [2]], seed=4)
for start in range(0, 300, 37):
    ids = np.arange(start, min(start + 37, 300))
    q.enqueue_many([ids, [str(i) for i in ids], np.stack([ids, ids], 1).astype(np.float32),
                    [[str(i), "x"] for i in ids]])
out = [int(q.dequeue()[0]) for _ in range(9)]
for k in (1, 50, 3, 120):
    got = q.dequeue_many(k)
    assert [int(s) for s in got[1]] == got[0].tolist() and (got[2][:, 0] == got[0]).all()
    assert [int(s) for s in got[3][:, 0]] == got[0].tolist()
    out += got[0].tolist()
q.close()
out += q.dequeue_up_to(1000)[0].tolist()
print(json.dumps([nat.CORE, out]))
"""


def test_the_pure_python_core_draws_the_same_order() -> None:
    """The queue under FEEDQ_PURE_PYTHON=1 (object moves for every column)
    hands out exactly what it does on the native core (one kernel call)."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = []
    for pure in ("0", "1"):
        env = dict(os.environ, FEEDQ_PURE_PYTHON=pure, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        done = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=60, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[1][0] == "python"
    assert runs[0][1] == runs[1][1]
    assert sorted(runs[0][1]) == list(range(300))
