"""feedq._native.shuffle_take and shuffle_sources (a RandomShuffleQueue's
draws): native vs the Python twin exactly (outs, whole column buffers,
moves, errors), both vs the rule written out one draw at a time, and no byte
written outside the buffers given."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedq._native as nat
from tests.native._cores import CORES, NOT_BUILT

pytestmark = pytest.mark.timeout(120)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GUARD = 16  # bytes either side of every buffer, which no call may change


def rule(n: int, raw: list[int], col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The draw rule one draw at a time (the queue's dequeue): draw j picks
    slot raw[j] * (n - j) >> 64 and moves the last stored row into it."""
    col = col.copy()
    out = []
    size = n
    for x in raw:
        r = (x * size) >> 64
        out.append(col[r].copy())
        col[r] = col[size - 1]
        size -= 1
    return np.array(out).reshape((len(raw), *col.shape[1:])), col


def guarded(rows: int, row_bytes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random (rows, row_bytes) uint8 view inside a larger buffer, and that buffer."""
    whole = rng.integers(0, 256, size=rows * row_bytes + 2 * GUARD, dtype=np.uint8)
    return whole[GUARD : GUARD + rows * row_bytes].reshape(rows, row_bytes), whole


def run_take(kernels: Any, n: int, raw: np.ndarray, widths: list[int], seed: int,
             spare: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """shuffle_take on one column per width; the whole guarded buffers after."""
    rng = np.random.default_rng(seed)
    cols, outs, wholes = [], [], []
    for w in widths:
        col, whole_c = guarded(n + spare, w, rng)
        out, whole_o = guarded(len(raw), w, rng)
        cols.append(col)
        outs.append(out)
        wholes += [whole_c, whole_o]
    before = [w.copy() for w in wholes]
    kernels.shuffle_take(n, raw, cols, outs)
    for b, a in zip(before, wholes):
        assert np.array_equal(b[:GUARD], a[:GUARD]) and np.array_equal(b[-GUARD:], a[-GUARD:])
    return [w.copy() for w in wholes], before


@pytest.mark.parametrize("kernels", CORES)
def test_shuffle_take_follows_the_rule_one_draw_at_a_time(kernels: Any) -> None:
    rng = np.random.default_rng(3)
    for n, k, width in [(1, 1, 8), (5, 5, 4), (100, 7, 128), (64, 64, 3), (1000, 256, 8), (9, 0, 8)]:
        raw = rng.integers(0, 2**64, size=k, dtype=np.uint64)
        after, before = run_take(kernels, n, raw, [width], seed=n)
        col0 = before[0][GUARD:-GUARD].reshape(n, width)
        want_out, want_col = rule(n, raw.tolist(), col0)
        assert np.array_equal(after[1][GUARD:-GUARD].reshape(k, width), want_out)
        assert np.array_equal(after[0][GUARD:-GUARD].reshape(n, width), want_col)


@pytest.mark.parametrize("kernels", CORES)
def test_shuffle_sources_give_the_same_layout_as_shuffle_take(kernels: Any) -> None:
    rng = np.random.default_rng(4)
    n, k = 300, 120
    raw = rng.integers(0, 2**64, size=k, dtype=np.uint64)
    col = np.arange(n, dtype=np.int64) * 10
    src, dst, dsrc = kernels.shuffle_sources(n, raw)
    moved = col.copy()
    out = moved[src]
    moved[dst] = moved[dsrc]
    want_out, want_col = rule(n, raw.tolist(), col)
    assert np.array_equal(out, want_out) and np.array_equal(moved, want_col)
    assert len(set(dst.tolist())) == len(dst) <= k  # each slot written once, in first-written order
    assert np.all(dsrc >= n - k)  # only rows of the tail move


@pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)
@FUZZ
@given(
    n=st.integers(0, 70),
    frac=st.floats(0, 1),
    widths=st.lists(st.sampled_from([0, 1, 2, 3, 4, 8, 12, 16, 32, 64, 128, 256, 520]), min_size=0, max_size=3),
    spare=st.integers(0, 3),
    extreme=st.sampled_from([None, 0, 2**64 - 1]),
    seed=st.integers(0, 2**32 - 1),
)
def test_fuzz_native_and_twin_write_the_same_bytes(n: int, frac: float, widths: list[int], spare: int,
                                                   extreme: int | None, seed: int) -> None:
    assert nat.NATIVE is not None
    k = int(n * frac)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2**64, size=k, dtype=np.uint64)
    if extreme is not None:
        raw[::2] = np.uint64(extreme)
    got_c, _ = run_take(nat.NATIVE, n, raw, widths, seed, spare)
    got_p, _ = run_take(nat.PURE, n, raw, widths, seed, spare)
    for c, p in zip(got_c, got_p):
        assert np.array_equal(c, p)  # whole buffers: rows kept, rows out, the tail, the guards
    for a, b in zip(nat.NATIVE.shuffle_sources(n + spare, raw), nat.PURE.shuffle_sources(n + spare, raw)):
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b)


@pytest.mark.parametrize("kernels", CORES)
def test_shuffle_take_sets_done_once_every_column_is_done(kernels: Any) -> None:
    col = np.arange(10, dtype=np.int64)
    out = np.empty(3, np.int64)
    done = np.zeros(1, np.uint8)
    kernels.shuffle_take(10, np.array([1, 2, 3], np.uint64), [col], [out], done)
    assert done[0] == 1
    done[0] = 0
    with pytest.raises(ValueError):
        kernels.shuffle_take(2, np.array([1, 2, 3], np.uint64), [col], [out], done)
    assert done[0] == 0


def bad_calls() -> list[tuple[str, Any, Any]]:
    col = np.arange(12, dtype=np.float32).reshape(3, 4)
    ro = col.copy()
    ro.flags.writeable = False
    one = np.zeros((1, 4), np.float32)
    return [
        ("read-only column", (3, [1], [ro], [one]), ValueError),
        ("strided column", (3, [1], [col[:, ::2]], [one[:, ::2]]), ValueError),
        ("more draws than rows", (3, [1, 2, 3, 4], [col], [np.zeros((4, 4), np.float32)]), ValueError),
        ("column shorter than n rows", (5, [1], [col], [one]), ValueError),
        ("out not whole rows", (3, [1, 2], [col], [np.zeros(3, np.uint8)]), ValueError),
        ("columns and outs of different lengths", (3, [1], [col], [one, one]), TypeError),
        ("a column that is not a buffer", (3, [1], [[1, 2]], [one]), TypeError),
        ("empty done flag", (3, [1], [col], [one], np.zeros(0, np.uint8)), ValueError),
    ]


@pytest.mark.parametrize("kernels", CORES)
@pytest.mark.parametrize(("what", "args", "exc"), bad_calls(), ids=[c[0] for c in bad_calls()])
def test_bad_arguments_raise_before_anything_is_written(kernels: Any, what: str, args: Any, exc: type) -> None:
    snapshot = [np.array(a, copy=True) for a in args[2] if isinstance(a, np.ndarray)]
    with pytest.raises(exc):
        kernels.shuffle_take(*args)
    assert all(np.array_equal(s, a) for s, a in zip(snapshot, [a for a in args[2] if isinstance(a, np.ndarray)]))


@pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)
def test_native_and_twin_name_the_same_errors() -> None:
    assert nat.NATIVE is not None
    for _what, args, _exc in bad_calls():
        msgs = []
        for kernels in (nat.NATIVE, nat.PURE):
            with pytest.raises(Exception) as info:  # noqa: PT011 - compared below
                kernels.shuffle_take(*args)
            msgs.append((type(info.value), str(info.value)))
        assert msgs[0] == msgs[1]


@pytest.mark.parametrize("kernels", CORES)
def test_shuffle_sources_rejects_more_draws_than_rows(kernels: Any) -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        kernels.shuffle_sources(2, np.array([1, 2, 3], np.uint64))


@pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)
def test_a_large_take_matches_the_twin() -> None:
    """A take above the native core's GIL-release size (256 KiB of rows)."""
    assert nat.NATIVE is not None
    rng = np.random.default_rng(8)
    n, k = 20_000, 5_000
    raw = rng.integers(0, 2**64, size=k, dtype=np.uint64)
    base = rng.integers(0, 1 << 60, size=(n, 8), dtype=np.int64)
    res = []
    for kernels in (nat.NATIVE, nat.PURE):
        col, out = base.copy(), np.empty((k, 8), np.int64)
        kernels.shuffle_take(n, raw, [col], [out])
        res.append((col, out))
    assert np.array_equal(res[0][0], res[1][0]) and np.array_equal(res[0][1], res[1][1])
    assert np.array_equal(np.sort(np.concatenate([res[0][0][: n - k, 0], res[0][1][:, 0]])), np.sort(base[:, 0]))


def test_the_twin_scales_draws_exactly_at_any_size() -> None:
    """The twin computes raw * (n - j) >> 64 in 64-bit halves (n <= 2**32)
    or in Python ints: both the exact product's high half."""
    from feedq._native._pure import _draw_slots

    rng = np.random.default_rng(6)
    for n in [1, 2, 3, 1000, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40]:
        k = min(n, 300)
        raw = rng.integers(0, 2**64, size=k, dtype=np.uint64)
        raw[:3] = np.uint64(2**64 - 1)
        raw[3:5] = 0
        assert _draw_slots(n, raw) == [(int(x) * (n - j)) >> 64 for j, x in enumerate(raw.tolist())]
