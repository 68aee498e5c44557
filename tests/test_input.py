"""Input producers and batching: spec sections 8 and 9 (IP1–IP6, B1–B13) and
the pain points X1–X5, X12."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

import feedq
from feedq.errors import CancelledError, FailedPreconditionError, OutOfRangeError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def drain(stage: feedq.Stage) -> list:
    return list(stage)


# -- producers ------------------------------------------------------------------------


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


# -- X1: never-started runners --------------------------------------------------------


def test_x1_never_started_runner_is_an_error_naming_it() -> None:
    s = feedq.range_input_producer(3, num_epochs=1, name="forgotten")
    b = feedq.batch(s, 2)
    with pytest.raises(FailedPreconditionError, match=r"never started: 'batch/fifo_queue', 'forgotten'"):
        b.dequeue(timeout=5)
    with pytest.raises(FailedPreconditionError, match=r"never started: 'forgotten'"):
        s.dequeue(timeout=5)


def test_x1_start_queue_runners_makes_it_work() -> None:
    s = feedq.range_input_producer(5, num_epochs=1, shuffle=False)
    b = feedq.batch(s, 2, allow_smaller_final_batch=True)
    coord = feedq.Coordinator()
    threads = feedq.start_queue_runners(coord)
    try:
        assert [x.tolist() for x in b] == [[0, 1], [2, 3], [4]]
    finally:
        coord.request_stop()
        coord.join(threads)


# -- batching ---------------------------------------------------------------------------


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
    with pytest.raises(ValueError, match="scalar bool"):
        with feedq.Pipeline():
            bad = feedq.maybe_batch([np.arange(3)], lambda v: np.array([True, False]), 2)
            with pytest.raises(ValueError, match="scalar bool"):
                bad.dequeue(timeout=5)  # the runner's error reaches the consumer (X3)


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


# -- errors and shutdown ------------------------------------------------------------------


def test_x3_producer_error_reaches_consumer_with_traceback() -> None:
    count = [0]

    def flaky() -> int:
        count[0] += 1
        if count[0] == 5:
            raise KeyError("bad record 5")
        return count[0]

    with pytest.raises(KeyError, match="bad record 5"):
        with feedq.Pipeline():
            b = feedq.batch(flaky, 2, dtypes=np.int64, shapes=[[]])
            seen = []
            with pytest.raises(KeyError) as info:
                for x in b:
                    seen.extend(x.tolist())
            assert "flaky" in "".join(__import__("traceback").format_tb(info.value.__traceback__))
            assert seen == [1, 2, 3, 4]
    # ...and Pipeline.__exit__ re-raised it from join(), as TF's coord.join does.


def test_x3_error_in_one_of_several_threads_travels_down_two_stages() -> None:
    state = {"n": 0}
    lock = threading.Lock()

    def src() -> int:
        with lock:
            state["n"] += 1
            n = state["n"]
        if n == 50:
            raise RuntimeError("thread failed")
        return n

    pipe = feedq.Pipeline()
    with pytest.raises(RuntimeError, match="thread failed"):
        with pipe:
            first = feedq.batch(src, 4, num_threads=3, dtypes=np.int64, shapes=[[]])
            second = feedq.batch(first, 3, enqueue_many=True)
            with pytest.raises(RuntimeError, match="thread failed"):
                for _ in second:
                    pass


def test_x5_stop_wakes_blocked_runners_and_consumers() -> None:
    upstream_blocked = feedq.FIFOQueue(4, np.int64, shapes=[[]])  # nobody ever fills it

    def read() -> int:
        return int(upstream_blocked.dequeue())

    pipe = feedq.Pipeline(stop_grace_period_secs=5)
    with pipe:
        full = feedq.batch(feedq.limit_epochs(np.arange(1000)), 2, enqueue_many=True, capacity=3,
                           dtypes=np.int64, shapes=[[]])
        starved = feedq.batch(read, 2, dtypes=np.int64, shapes=[[]])
        # Runner of `full` blocks on a full queue; runner of `starved` blocks
        # upstream; a consumer blocks on `starved`.
        consumer_error: list[BaseException] = []

        def consume() -> None:
            try:
                starved.dequeue()
            except BaseException as exc:  # noqa: BLE001
                consumer_error.append(exc)

        t = threading.Thread(target=consume, name="consumer")
        t.start()
        from .conftest import wait_until
        wait_until(lambda: starved.queue.statistics().waiting_consumers == 1)
        wait_until(lambda: full.queue.statistics().waiting_producers == 1)
        # The upstream queue is not part of the pipeline: cancel it as a user
        # would register it (a runner owns only its own queue, QR9).
        pipe.coord.add_stop_callback(upstream_blocked.cancel)
        pipe.stop()
        t.join(5)
        assert not t.is_alive()
        assert isinstance(consumer_error[0], CancelledError)
    assert all(not th.is_alive() for th in pipe.threads)


def test_pipeline_iteration_and_clean_exit_without_request_stop() -> None:
    with feedq.Pipeline() as pipe:
        s = feedq.range_input_producer(6, num_epochs=1, shuffle=False)
        feedq.batch(s, 3)
        assert [x.tolist() for x in pipe] == [[0, 1, 2], [3, 4, 5]]
    coord = feedq.Coordinator()
    s = feedq.range_input_producer(3, num_epochs=1, shuffle=False)
    threads = feedq.start_queue_runners(coord)
    assert [int(v) for v in s] == [0, 1, 2]
    coord.join(threads)  # returns without request_stop (no QR11 hang)


def test_control_dependencies_postpone_a_runner() -> None:
    gate = threading.Event()
    with feedq.Pipeline() as pipe:
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([gate, first]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        assert later.queue.size() == 0
        assert [int(v) for v in first] == [0, 1, 2]
        assert later.queue.size() == 0  # still waiting for the event
        gate.set()
        assert [int(v) for v in later] == [0, 1]
        del pipe
    with pytest.raises(TypeError):
        with feedq.control_dependencies([42]):
            pass


def test_control_dependencies_gate_released_by_stop() -> None:
    never = threading.Event()
    with feedq.Pipeline():
        with feedq.control_dependencies([never]):
            s = feedq.range_input_producer(2, num_epochs=1)
        with pytest.raises(feedq.errors.DeadlineExceededError):
            s.dequeue(timeout=0.05)
    # exiting stopped the pipeline; the gated runner thread ended cleanly


def test_parallel_independent_runners() -> None:
    barrier = threading.Barrier(2, timeout=5)

    def meet() -> list:
        barrier.wait()  # both runners must be running at once to pass
        raise OutOfRangeError("done")

    with feedq.Pipeline():
        a = feedq.batch(meet, 1, dtypes=np.int32, shapes=[[]])
        b = feedq.batch(meet, 1, dtypes=np.int32, shapes=[[]])
        assert list(a) == [] and list(b) == []


def test_stop_mid_epoch_accounting() -> None:
    """Every element a consumer got is distinct, and came from the data."""
    data = np.arange(10_000)
    with feedq.Pipeline() as pipe:
        s = feedq.slice_input_producer([data], num_epochs=1, shuffle=False)
        b = feedq.batch(s, 64, num_threads=2, capacity=256)
        got: list[int] = []
        for x in b:
            got.extend(x.tolist())
            if len(got) >= 3000:
                break
        pipe.stop()
    assert len(set(got)) == len(got) and set(got) <= set(range(10_000))


CTRL_C_SCRIPT = r"""
import sys, numpy as np, feedq
try:
    with feedq.Pipeline() as pipe:
        s = feedq.slice_input_producer([np.arange(1000)], num_epochs=None)
        b = feedq.shuffle_batch(s, 32, capacity=500, min_after_dequeue=100, num_threads=2)
        for i, x in enumerate(b):
            if i == 10:
                print("running", flush=True)
except KeyboardInterrupt:
    alive = [t.name for t in pipe.threads if t.is_alive()]
    print("stopped cleanly", alive, flush=True)
    sys.exit(130)
"""


@pytest.mark.timeout(60)
def test_ctrl_c_stops_cleanly() -> None:
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "stopped cleanly []" in out


def test_pipeline_closing_closes_readers_after_join(tmp_path) -> None:
    readers = pytest.importorskip("feedq.readers")
    import gzip

    path = tmp_path / "lines.txt.gz"
    # Larger than a read block (4 MiB) once inflated, so reading stops mid-stream.
    path.write_bytes(gzip.compress(b"".join(b"%07d\n" % i for i in range(1_500_000)), compresslevel=1))
    before = {t.name for t in threading.enumerate()}
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer([str(path)], num_epochs=1)
        reader = pipe.closing(readers.TextLineReader(compression="GZIP"))

        def read() -> list:
            return [reader.read_block(files, 1000).lengths]

        b = feedq.batch(read, 100, enqueue_many=True, dtypes=[np.int64], shapes=[[]])
        b.dequeue(timeout=10)  # mid-file: the read-ahead thread is running
    left = {t.name for t in threading.enumerate()} - before
    assert not [n for n in left if n.startswith("feedq-inflate")], left
    with pytest.raises(TypeError, match="no close"):
        pipe.closing(object())
