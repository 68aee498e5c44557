"""Input producers: limit_epochs, input_producer, string / range / slice
producers, match_filenames_once (spec section 8, IP1-IP5)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import feedq
from feedq.errors import OutOfRangeError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def test_ip1_limit_epochs() -> None:
    f = feedq.limit_epochs(np.arange(3), num_epochs=2)
    f()
    f()
    with pytest.raises(OutOfRangeError, match=r"^Reached limit of 2$"):
        f()
    assert feedq.limit_epochs(7)() == 7
    with pytest.raises(ValueError, match=r"^num_epochs must be > 0 not 0\.$"):
        feedq.limit_epochs(1, 0)


def test_ip2_epochs_contiguous_and_end_of_data() -> None:
    with feedq.Pipeline():
        s = feedq.input_producer(np.arange(5), num_epochs=3, shuffle=True, seed=4)
        out = [int(v) for v in s]
    assert len(out) == 15
    for e in range(3):
        assert sorted(out[5 * e : 5 * e + 5]) == [0, 1, 2, 3, 4]  # each block a permutation
    assert s.statistics().epochs_started == 3
    with pytest.raises(OutOfRangeError):
        s.dequeue(timeout=1)


def test_ip2_validation() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        feedq.input_producer(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="element_shape"):
        feedq.input_producer(np.zeros((3, 2)), element_shape=[3])
    with pytest.raises(ValueError, match="num_epochs must be > 0"):
        feedq.input_producer(np.zeros(3), num_epochs=0)


def test_ip2_forever_queue_sits_full() -> None:
    with feedq.Pipeline() as pipe:
        s = feedq.input_producer(np.arange(4), shuffle=False, capacity=6)
        got = [int(s.dequeue(timeout=5)) for _ in range(10)]
        assert got == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
        pipe.stop()


def test_ip3_string_input_producer() -> None:
    with pytest.raises(ValueError, match=r"^string_input_producer requires a non-null input tensor$"):
        feedq.string_input_producer([])
    with feedq.Pipeline():
        s = feedq.string_input_producer(["a.txt", "b.txt"], num_epochs=2, shuffle=False)
        assert s.queue.name == "input_producer"
        assert [bytes(v) for v in s] == [b"a.txt", b"b.txt"] * 2


def test_ip4_range_and_slice_producers() -> None:
    with feedq.Pipeline():
        r = feedq.range_input_producer(4, num_epochs=1, shuffle=False)
        assert [int(v) for v in r] == [0, 1, 2, 3]
        assert r.dtypes == [np.dtype(np.int32)]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([10, 11, 12])
    with feedq.Pipeline():
        s = feedq.slice_input_producer([x, y], num_epochs=1, shuffle=False)
        rows = list(s)
    assert [(r[0].tolist(), int(r[1])) for r in rows] == [([0, 1], 10), ([2, 3], 11), ([4, 5], 12)]
    with pytest.raises(ValueError):
        feedq.slice_input_producer([])
    with pytest.raises(ValueError, match="same leading size"):
        feedq.slice_input_producer([np.zeros(3), np.zeros(4)])


def test_ip5_seeded_order_replays_and_unseeded_varies() -> None:
    def order(seed: int | None) -> list[int]:
        with feedq.Pipeline():
            return [int(v) for v in feedq.range_input_producer(20, num_epochs=2, seed=seed)]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert len({tuple(order(None)) for _ in range(3)}) > 1
    with feedq.Pipeline():
        plain = [int(v) for v in feedq.range_input_producer(5, num_epochs=2, shuffle=False)]
    assert plain == [0, 1, 2, 3, 4] * 2


def test_match_filenames_once_feeds_string_input_producer(tmp_path) -> None:
    pattern = str(tmp_path / "*.txt")
    files = feedq.match_filenames_once(pattern)
    assert feedq.input.match_filenames_once is feedq.match_filenames_once
    for n in ["b.txt", "a.txt", "c.csv"]:  # written after the call, before the first use
        (tmp_path / n).write_text(n)
    expected = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    with feedq.Pipeline():
        s = feedq.string_input_producer(files, num_epochs=1, shuffle=False)
        assert [bytes(v).decode() for v in s] == expected
    (tmp_path / "d.txt").write_text("later")
    assert list(files) == expected and len(files) == 2  # listed once
    both = feedq.match_filenames_once([str(tmp_path / "*.csv"), pattern])
    assert list(both) == sorted([str(tmp_path / "c.csv"), *expected, str(tmp_path / "d.txt")])


def test_match_filenames_once_without_a_match_names_the_pattern(tmp_path) -> None:
    pattern = str(tmp_path / "*.nothing")
    files = feedq.match_filenames_once(pattern)  # not listed yet: no error
    with pytest.raises(feedq.errors.NotFoundError,
                       match=r"^match_filenames_once: no files match '.*\*\.nothing'$"):
        feedq.string_input_producer(files)
    assert feedq.get_queue_runners() == []
