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
