"""The shuffle buffer behind shuffle_batch (feedq/input/_shuffle.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import feedq

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def test_shuffle_buffer_draws_full_batches_and_drains_at_the_end() -> None:
    """ShuffleBuffer: keeps min_after_dequeue elements, moves whole batches to
    `out`, and the last writer empties it; every element exactly once."""
    from feedq.input._shuffle import ShuffleBuffer

    out = feedq.FIFOQueue(100, [np.int64], shapes=[[]])
    buf = ShuffleBuffer(out, batch_size=4, min_after_dequeue=5, seed=3, writers=2,
                        dtypes=[np.dtype(np.int64)], shapes=[[]], name="t")
    buf.put([np.arange(8)], many=True)
    assert (out.size(), buf.queue.size()) == (0, 8)  # 8 < 5 + 4: nothing drawn yet
    buf.put([np.arange(8, 12)], many=True)
    assert out.size() % 4 == 0 and out.size() + buf.queue.size() == 12
    assert buf.queue.size() >= 5
    buf.put([np.int64(12)], many=False)
    buf.writer_done()
    assert buf.queue.size() + out.size() == 13  # one writer is still running
    buf.writer_done()
    assert buf.queue.size() == 0 and buf.queue.is_closed()
    got = out.dequeue_many(out.size(), timeout=0).tolist()
    assert sorted(got) == list(range(13)) and got != list(range(13))


def _big_rows(n: int, width: int = 4096) -> np.ndarray:
    """n rows of `width` int32, row i filled with i."""
    return np.repeat(np.arange(n, dtype=np.int32)[:, None], width, axis=1)


@pytest.mark.parametrize("threads", [1, 2])
def test_draws_reach_the_consumer_without_another_copy(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """A draw is a new array nobody else holds: the output FIFO keeps it as
    a block without copying and hands it out as the consumer's batch.
    Every row exactly once and whole; batches the consumer keeps stay as
    they came."""
    handed: list[np.ndarray] = []
    owned = feedq.FIFOQueue._enqueue_owned

    def record(self: feedq.FIFOQueue, cols: list[np.ndarray]) -> None:
        handed.append(cols[0])
        owned(self, cols)

    monkeypatch.setattr(feedq.FIFOQueue, "_enqueue_owned", record)
    rows = _big_rows(640)
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    with feedq.Pipeline():
        q = feedq.slice_input_producer([rows], num_epochs=1, shuffle=False)
        b = feedq.shuffle_batch(q, 64, capacity=256, min_after_dequeue=128, seed=1,
                                num_threads=threads, allow_smaller_final_batch=True)
        for x in b:
            assert (x == x[:, :1]).all()  # each row whole: one value throughout
            kept.append((x, x[:, 0].copy()))
    assert sorted(int(v) for x, _ in kept for v in x[:, 0]) == list(range(640))
    for x, first in kept:
        np.testing.assert_array_equal(x[:, 0], first)
    assert len(handed) == 10  # every draw was handed over...
    if threads == 1:
        # ...and, one draw at a time (with two runner threads a draw that
        # arrives while another is being put goes through the ring), came
        # out as it went in: the batch, or a view of it
        assert sum(any(x is d or x.base is d for d in handed) for x, _ in kept) == 10


def test_draws_into_a_queue_of_another_spec_are_copied() -> None:
    """The output queue's dtypes differ from the buffer's (a conversion is
    needed): draws go through enqueue_many, rows converted."""
    from feedq.input._shuffle import ShuffleBuffer

    out = feedq.FIFOQueue(1000, [np.int64], shapes=[[8]])
    buf = ShuffleBuffer(out, batch_size=16, min_after_dequeue=16, seed=2, writers=1,
                        dtypes=[np.dtype(np.int32)], shapes=[[8]], name="t")
    assert not buf._owned
    for s in range(0, 64, 16):
        buf.put([_big_rows(64, 8)[s : s + 16]], many=True)
    buf.writer_done()
    got = out.dequeue_many(out.size(), timeout=0)
    assert got.dtype == np.int64 and sorted(got[:, 0].tolist()) == list(range(64))
