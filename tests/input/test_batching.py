"""Batching: batch, batch_join, shuffle_batch(_join), the maybe_ variants and
keep_input (spec section 9, B1-B13; X4, X12), and the wrappers' keyword
forwarding. Sparse components are in test_sparse.py."""

from __future__ import annotations

import threading
from collections import Counter
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


def test_b1_b5_batch_in_order_with_one_thread() -> None:
    with feedq.Pipeline():
        s = feedq.range_input_producer(8, num_epochs=1, shuffle=False)
        b = feedq.batch(s, 4, capacity=5)
        out = [x.tolist() for x in b]
    assert out == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert b.queue.capacity == 5 and b.output_shapes == [(4,)]


def test_b2_structures() -> None:
    x = np.arange(4)
    with feedq.Pipeline():
        single = feedq.batch([feedq.range_input_producer(4, num_epochs=1, shuffle=False)], 2)
        assert isinstance(single.dequeue(timeout=5), np.ndarray)  # one-element list -> bare
    with feedq.Pipeline():
        d = feedq.batch({"b": x, "a": x * 10}, 2, enqueue_many=True)
        first = d.dequeue(timeout=5)
        assert list(first) == ["a", "b"] and first["a"].tolist() == [0, 10]
    with feedq.Pipeline():
        s = feedq.slice_input_producer({"img": np.ones((4, 2)), "label": np.arange(4)}, num_epochs=1, shuffle=False)
        b = feedq.batch(s, 4)
        out = b.dequeue(timeout=5)
        assert set(out) == {"img", "label"} and out["img"].shape == (4, 2)


def test_b3_shapes_required() -> None:
    with pytest.raises(ValueError, match="dtypes="):
        feedq.batch(lambda: 1, 2)
    with pytest.raises(ValueError, match="shapes="):
        feedq.batch(lambda: 1, 2, dtypes=np.int32)
    with pytest.raises(ValueError, match="All shapes must be fully defined"):
        feedq.batch(lambda: np.zeros(3), 2, dtypes=np.float32, shapes=[[None]])


def test_b4_output_shapes() -> None:
    s = feedq.slice_input_producer([np.zeros((4, 3), np.float32)], num_epochs=1)
    assert feedq.batch(s, 2).output_shapes == [(2, 3)]
    assert feedq.batch(s, 2, allow_smaller_final_batch=True).output_shapes == [(None, 3)]


@pytest.mark.parametrize("smaller", [False, True])
def test_b6_end_of_input_and_dropped_count(smaller: bool) -> None:
    with feedq.Pipeline():
        s = feedq.range_input_producer(10, num_epochs=1, shuffle=False)
        b = feedq.batch(s, 4, allow_smaller_final_batch=smaller)
        out = [x.tolist() for x in b]
        with pytest.raises(OutOfRangeError):
            b.dequeue(timeout=1)
    if smaller:
        assert out == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert b.statistics().dropped == 0
    else:
        assert out == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert b.statistics().dropped == 2  # X4: observable, not silent


def test_b7_dynamic_pad() -> None:
    rows = iter([np.arange(1), np.arange(2), np.arange(3)])
    lock = threading.Lock()

    def next_row() -> np.ndarray:
        with lock:
            try:
                return next(rows)
            except StopIteration:
                raise OutOfRangeError("done") from None

    with feedq.Pipeline():
        b = feedq.batch(next_row, 2, dtypes=[np.int64], shapes=[[None]], dynamic_pad=True,
                        allow_smaller_final_batch=True)
        out = [x.tolist() for x in b]
    assert out == [[[0, 0], [0, 1]], [[0, 1, 2]]]


def test_b8_enqueue_many_reslices_rows() -> None:
    data = np.arange(5)
    calls = feedq.limit_epochs(data, num_epochs=2)
    with feedq.Pipeline():
        b = feedq.batch(calls, 3, enqueue_many=True, dtypes=np.int64, shapes=[[]],
                        allow_smaller_final_batch=True)
        out = [x.tolist() for x in b]
    assert out == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]


def test_b9_batch_join_each_element_once() -> None:
    with feedq.Pipeline():
        a = feedq.slice_input_producer([np.arange(0, 50)], num_epochs=1, shuffle=False)
        b = feedq.slice_input_producer([np.arange(100, 150)], num_epochs=1, shuffle=False)
        j = feedq.batch_join([a, b], 7, allow_smaller_final_batch=True)
        assert len(j.runner.enqueue_ops) == 2
        got = Counter(v for x in j for v in x.tolist())
    assert got == Counter(list(range(50)) + list(range(100, 150)))


def test_b9_batch_join_type_mismatch() -> None:
    a = feedq.slice_input_producer([np.arange(3, dtype=np.int32)])
    b = feedq.slice_input_producer([np.arange(3, dtype=np.float32)])
    with pytest.raises(TypeError, match=r"^Expected types to be consistent: int32 vs\. float32\.$"):
        feedq.batch_join([a, b], 2)


def test_b10_shuffle_batch_validation_and_drain() -> None:
    with pytest.raises(ValueError, match=r"^capacity 5 must be bigger than min_after_dequeue 5\.$"):
        feedq.shuffle_batch([np.arange(3)], 2, capacity=5, min_after_dequeue=5, enqueue_many=True)
    with feedq.Pipeline():
        s = feedq.range_input_producer(10, num_epochs=1, shuffle=False)
        b = feedq.shuffle_batch(s, 3, capacity=8, min_after_dequeue=5, seed=1)
        out = [x.tolist() for x in b]
    assert len(out) == 3 and all(len(x) == 3 for x in out)
    assert b.statistics().dropped == 1
    with feedq.Pipeline():
        s = feedq.range_input_producer(10, num_epochs=1, shuffle=False)
        b = feedq.shuffle_batch(s, 3, capacity=8, min_after_dequeue=5, seed=1, allow_smaller_final_batch=True)
        out = [v for x in b for v in x.tolist()]
    assert sorted(out) == list(range(10))


def test_x12_shuffle_batch_reproducible_with_seed_one_thread() -> None:
    def run(seed: int) -> list[list[int]]:
        with feedq.Pipeline():
            s = feedq.slice_input_producer([np.arange(300)], num_epochs=2, seed=seed)
            b = feedq.shuffle_batch(s, 16, capacity=120, min_after_dequeue=50, seed=seed,
                                    allow_smaller_final_batch=True)
            return [x.tolist() for x in b]

    a = run(5)
    assert a == run(5)
    assert a != run(6)
    flat = Counter(v for x in a for v in x)
    assert flat == Counter({i: 2 for i in range(300)})


def test_b11_shuffle_batch_join() -> None:
    with feedq.Pipeline():
        srcs = [feedq.slice_input_producer([np.arange(k * 100, k * 100 + 40)], num_epochs=1) for k in range(3)]
        b = feedq.shuffle_batch_join(srcs, 8, capacity=60, min_after_dequeue=20, allow_smaller_final_batch=True)
        got = Counter(v for x in b for v in x.tolist())
    assert got == Counter(v for k in range(3) for v in range(k * 100, k * 100 + 40))


def test_b12_maybe_batch_keep_input() -> None:
    with feedq.Pipeline():
        s = feedq.range_input_producer(10, num_epochs=1, shuffle=False)
        seen_shapes = set()

        def even(vals: list) -> bool:
            seen_shapes.add(np.shape(vals[0]))
            return bool(vals[0] % 2 == 0)  # a per-element predicate (B12)

        b = feedq.maybe_batch(s, even, 5, allow_smaller_final_batch=True, enqueue_many=False)
        out = [v for x in b for v in x.tolist()]
    # The stage is read batch-first, yet keep_input sees one element at a time.
    assert out == [0, 2, 4, 6, 8]
    assert seen_shapes == {()}
    with feedq.Pipeline():
        b = feedq.maybe_shuffle_batch([np.arange(6)], 2, 5, 1, keep_input=np.array([1, 0, 1, 0, 1, 0], bool),
                                      enqueue_many=True, seed=0)
        first = b.dequeue(timeout=5)
        assert set(first.tolist()) <= {0, 2, 4}
        feedq.current_pipeline().stop()
    with pytest.raises(ValueError, match="scalar bool"), feedq.Pipeline():
        bad = feedq.maybe_batch([np.arange(3)], lambda v: np.array([True, False]), 2)
        with pytest.raises(ValueError, match="scalar bool"):
            bad.dequeue(timeout=5)  # the runner's error reaches the consumer (X3)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: feedq.maybe_batch([np.arange(3)], np.array([True, False]), 2),
         r"scalar bool when enqueue_many=False, got shape \[2\]$"),
        (lambda: feedq.maybe_batch([np.arange(6)], np.ones((2, 3), bool), 2, enqueue_many=True),
         r"bool vector when enqueue_many=True, got dtype bool and shape \[2, 3\]$"),
        (lambda: feedq.maybe_shuffle_batch([np.arange(3)], 2, 10, 2, keep_input=[True, True]),
         r"scalar bool when enqueue_many=False, got shape \[2\]$"),
        (lambda: feedq.maybe_batch_join([[np.arange(3)]], [[True]], 2),
         r"scalar bool when enqueue_many=False, got shape \[1, 1\]$"),
        (lambda: feedq.maybe_shuffle_batch_join([[np.arange(3)]], 2, 10, 2, keep_input=np.zeros((1, 1), bool),
                                                enqueue_many=True),
         r"bool vector when enqueue_many=True, got dtype bool and shape \[1, 1\]$"),
    ],
)
def test_b12_invalid_constant_keep_input_fails_when_built(build, message: str) -> None:
    with pytest.raises(ValueError, match=r"^maybe_batch: keep_input must be a " + message):
        build()
    assert feedq.get_queue_runners() == []  # nothing was built


def test_b13_end_to_end_reference(tmp_path) -> None:
    readers = pytest.importorskip("feedq.readers")
    lines = {"f0": ["1,a", "2,b", "3,c"], "f1": ["4,d"], "f2": ["5,e", "6,f"]}
    paths = []
    for n, rows in lines.items():
        p = tmp_path / n
        p.write_text("\n".join(rows) + "\n")
        paths.append(str(p))
    reader = readers.TextLineReader()
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer(paths, num_epochs=1, shuffle=False)

        def read_one() -> list:
            key, value = reader.read(files.queue)
            num, text = readers.decode_csv(value, record_defaults=[[0], [""]])
            return [key, num, text]

        b = feedq.batch(read_one, 4, dtypes=[str, np.int32, str], shapes=[[], [], []],
                        allow_smaller_final_batch=True)
        keys, nums, _ = b.dequeue(timeout=10)
        assert nums.tolist() == [1, 2, 3, 4]
        assert [k.decode().rsplit("/", 1)[1] for k in keys] == ["f0:1", "f0:2", "f0:3", "f1:1"]
        _, nums, _ = b.dequeue(timeout=10)
        assert nums.tolist() == [5, 6]
        with pytest.raises(OutOfRangeError):
            b.dequeue(timeout=10)
    assert pipe.coord.should_stop()  # the with-block stopped and joined cleanly


@pytest.mark.parametrize(
    ("wrapper", "target", "args"),
    [
        ("batch", "maybe_batch", ([np.arange(4)], 2)),
        ("batch_join", "maybe_batch_join", ([[np.arange(4)]], 2)),
        ("shuffle_batch", "maybe_shuffle_batch", ([np.arange(4)], 2, 10, 2)),
        ("shuffle_batch_join", "maybe_shuffle_batch_join", ([[np.arange(4)]], 2, 10, 2)),
    ],
)
def test_wrappers_forward_every_argument_by_keyword(
    monkeypatch: pytest.MonkeyPatch, wrapper: str, target: str, args: tuple
) -> None:
    from feedq.input import _batching

    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(_batching, target, lambda *a, **k: calls.append((a, k)))
    getattr(feedq.input, wrapper)(*args, name="w")
    [(positional, keywords)] = calls
    assert positional == ()
    assert keywords["keep_input"] is None and keywords["name"] == "w"
