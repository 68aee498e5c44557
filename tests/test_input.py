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
    with pytest.raises(ValueError, match="scalar bool"), feedq.Pipeline():
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

    with pytest.raises(KeyError, match="bad record 5"), feedq.Pipeline():
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
    with pytest.raises(RuntimeError, match="thread failed"), pipe:
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
        from tests.conftest import wait_until
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
    with pytest.raises(TypeError), feedq.control_dependencies([42]):
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


# -- issue 11: the package, keyword forwarding, the shuffle buffer ----------------------------


def test_input_public_names_keep_their_paths() -> None:
    """feedq.input's public names are feedq's and report ``feedq.input``."""
    import feedq.input as finput

    for name in finput.__all__:
        obj = getattr(finput, name)
        assert getattr(feedq, name) is obj
        assert obj.__module__ == "feedq.input", name


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


# -- issue 11: the pipeline owns shutdown ---------------------------------------------------------


class _Closeable:
    """A stand-in for a reader or device feeder: registers itself with the
    open closing scope, and records what it sees when it is closed."""

    def __init__(self, name: str, log: list, threads: list[threading.Thread] | None = None,
                 register: bool = True) -> None:
        from feedq._core.scope import register_closeable

        self.name, self._log, self._threads = name, log, threads
        self.registered = register_closeable(self) if register else False

    def close(self) -> None:
        alive = [t.name for t in (self._threads or []) if t.is_alive()]
        self._log.append((self.name, alive))


def test_pipeline_closes_registered_objects_after_join_in_reverse_order() -> None:
    """Objects created in `with pipe:` that register themselves, and those
    given to pipe.closing(), close in reverse order of registration, after
    every runner thread has ended."""
    log: list = []
    pipe = feedq.Pipeline()
    early = pipe.closing(_Closeable("early", log, register=False))
    with pipe:
        s = feedq.range_input_producer(5, name="forever")  # keeps running until the stop
        threads = pipe.threads
        first = _Closeable("first", log, threads)
        pipe.closing(_Closeable("given", log, threads, register=False))
        second = _Closeable("second", log, threads)
        assert first.registered and second.registered and not early.registered
        s.dequeue(timeout=5)
        assert log == []
    assert log == [("second", []), ("given", []), ("first", []), ("early", [])]
    outside = _Closeable("outside", log)
    assert not outside.registered  # no scope once the block has ended


def test_pipeline_join_closes_what_it_owns_after_an_explicit_stop() -> None:
    log: list = []
    pipe = feedq.Pipeline()
    with pipe.as_default():
        feedq.range_input_producer(3)
    pipe.closing(_Closeable("reader", log, pipe.threads, register=False))
    pipe.start()
    pipe.stop()
    pipe.join()
    assert log == [("reader", [])]


def test_pipeline_close_errors_do_not_stop_the_others() -> None:
    log: list = []

    class Failing:
        def close(self) -> None:
            log.append("failing")
            raise OSError("disk gone")

    with pytest.raises(OSError, match=r"^disk gone$"), feedq.Pipeline() as pipe:
        _Closeable("a", log)
        pipe.closing(Failing())
        _Closeable("b", log)
    assert log == [("b", []), "failing", ("a", [])]


# -- issue 11: control-dependency gates wait on events -----------------------------------------


@pytest.fixture
def no_gate_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the gate's safety re-check far longer than any test: a gate that
    opens in time was woken by a notification, not by a poll."""
    from feedq import runners as _control

    monkeypatch.setattr(_control, "_GATE_RECHECK_SECS", 60.0)


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_runner_it_waits_for_ends() -> None:
    with feedq.Pipeline():
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([first.runner]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        # first's runner ends after enqueuing its one epoch, without a consumer.
        assert [int(later.dequeue(timeout=5)), int(later.dequeue(timeout=5))] == [0, 1]
        assert first.statistics().runner.threads_alive == 0
        assert [int(v) for v in first] == [0, 1, 2]


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_queue_it_waits_for_is_drained() -> None:
    with feedq.Pipeline():
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([first.queue]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        assert [int(v) for v in first] == [0, 1, 2]  # drained and closed
        assert [int(v) for v in later] == [0, 1]


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_event_is_set_and_a_stop_releases_it() -> None:
    go, never = threading.Event(), threading.Event()
    pipe = feedq.Pipeline(stop_grace_period_secs=5)
    with pipe:
        with feedq.control_dependencies([go]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        with feedq.control_dependencies([never]):
            held = feedq.range_input_producer(2, num_epochs=1, name="held")
        with pytest.raises(feedq.errors.DeadlineExceededError):
            later.dequeue(timeout=0.05)
        go.set()
        assert [int(v) for v in later] == [0, 1]
        assert held.queue.size() == 0
    # The exit's stop released the gate on `never` (join would have named
    # the thread otherwise); its helper thread ends within one slice.
    assert not [t for t in pipe.threads if t.is_alive()]
    from tests.conftest import wait_until

    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("feedq-gate-")],
               what="the gate helpers to end")


# -- issue 11: thread names -------------------------------------------------------------------------


def test_every_thread_feedq_starts_is_named_feedq() -> None:
    before = set(threading.enumerate())
    seen: set[str] = set()
    never = threading.Event()
    pipe = feedq.Pipeline(stop_grace_period_secs=5)
    with pipe:
        s = feedq.slice_input_producer([np.arange(100)], num_epochs=None)
        b = feedq.shuffle_batch(s, 4, capacity=40, min_after_dequeue=10, num_threads=2)
        with feedq.control_dependencies([never]):
            feedq.range_input_producer(3)
        feedq.LooperThread.loop(pipe.coord, 0.01, target=lambda: None)
        late = threading.Thread(target=never.wait, args=(5,), name="user-late")
        late.start()
        pipe.coord.register_thread(late)  # started first: join watches it
        b.dequeue(timeout=5)
        from tests.conftest import wait_until

        # The gated runner's thread starts the gate's helper when it reaches the gate.
        wait_until(lambda: any(t.name.startswith("feedq-gate-") for t in threading.enumerate()),
                   what="the gate's helper thread")
        seen |= {t.name for t in set(threading.enumerate()) - before}
        pipe.stop()
        seen |= {t.name for t in set(threading.enumerate()) - before}
        never.set()  # lets the user's thread end
    ours = sorted(n for n in seen if n != "user-late")
    assert ours and all(n.startswith("feedq-") for n in ours), ours
    assert any(n.startswith("feedq-runner-") for n in ours)
    assert any(n.startswith("feedq-looper-") for n in ours)
    assert any(n.startswith("feedq-gate-") for n in ours)


# -- issue 10: keep_input, match_filenames_once, sparse components -------------------------------


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


def _tagged_records(n: int) -> list[bytes]:
    """Serialized Examples: record i has label i and tags 10*i .. 10*i + i%4 - 1
    (none when i % 4 == 0: the feature is then absent)."""
    from feedq import readers

    out = []
    for i in range(n):
        feats = {"label": np.array([i], np.int64)}
        if i % 4:
            feats["tags"] = np.arange(10 * i, 10 * i + i % 4, dtype=np.int64)
        out.append(readers.serialize_example(feats))
    return out


def _tags_of(label: int) -> list[int]:
    return list(range(10 * label, 10 * label + label % 4))


def _record_reader(records: list[bytes]):
    """A callable parsing one record per call (VarLenFeature -> sparse), then OutOfRange."""
    from feedq import readers

    features = {"tags": readers.VarLenFeature(np.int64), "label": readers.FixedLenFeature([], np.int64)}
    it = iter(records)
    lock = threading.Lock()

    def read() -> dict:
        with lock:
            try:
                rec = next(it)
            except StopIteration:
                raise OutOfRangeError("no more records") from None
        return readers.parse_single_example(rec, features)

    return read


SPARSE_DTYPES = {"tags": __import__("feedq").readers.VarLenFeature(np.int64), "label": np.int64}
SPARSE_SHAPES = {"tags": [None], "label": []}


def _expected_sparse(labels: list[int]) -> tuple[list[list[int]], list[int], list[int]]:
    """TF1's batched SparseTensor of the tags of `labels`: indices, values, dense_shape."""
    rows = [_tags_of(v) for v in labels]
    indices = [[r, j] for r, row in enumerate(rows) for j in range(len(row))]
    values = [x for row in rows for x in row]
    return indices, values, [len(rows), max((len(r) for r in rows), default=0)]


def test_b12_sparse_component_batched_as_one_sparse_value() -> None:
    """A VarLenFeature result through batch(): one SparseTensorValue per batch,
    indices [row, position], values in order, dense_shape [batch, max len]
    (TF1's batching of a SparseTensor; the layout was compared by hand with
    TF 2.21's compat.v1 train.batch)."""
    from feedq import readers

    with feedq.Pipeline():
        b = feedq.batch(_record_reader(_tagged_records(7)), 3, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                        allow_smaller_final_batch=True)
        assert b.dtypes == [np.dtype(np.int64), np.dtype(np.int64)]
        assert b.output_shapes == [(None,), (None, None)]  # label, tags
        batches = list(b)
    assert [x["label"].tolist() for x in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    first = batches[0]["tags"]
    assert isinstance(first, readers.SparseTensorValue)
    assert first.indices.tolist() == [[1, 0], [2, 0], [2, 1]]
    assert first.values.tolist() == [10, 20, 21]
    assert first.dense_shape.tolist() == [3, 2]
    assert first.indices.dtype == np.int64 and first.dense_shape.dtype == np.int64
    for x in batches:
        tags = x["tags"]
        indices, values, shape = _expected_sparse(x["label"].tolist())
        assert (tags.indices.tolist(), tags.values.tolist(), tags.dense_shape.tolist()) == (indices, values, shape)
    assert len(b._sparse_table) == 0  # every value left the side table with its batch


def test_b12_sparse_component_through_shuffle_batch_stays_with_its_element() -> None:
    with feedq.Pipeline():
        b = feedq.shuffle_batch(_record_reader(_tagged_records(40)), 4, capacity=30, min_after_dequeue=10,
                                seed=7, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                                allow_smaller_final_batch=True)
        batches = list(b)
    labels = [v for x in batches for v in x["label"].tolist()]
    assert sorted(labels) == list(range(40)) and labels != list(range(40))
    for x in batches:
        tags = x["tags"]
        indices, values, shape = _expected_sparse(x["label"].tolist())
        assert tags.indices.tolist() == indices
        assert tags.values.tolist() == values
        assert tags.dense_shape.tolist() == shape


def test_b12_sparse_blocks_with_enqueue_many_and_batches_of_batches() -> None:
    """enqueue_many: a parse_example block's sparse value is cut into rows
    (dense_shape[1:] each, as TF1) and re-batched; a batch stage of sparse
    values can feed another batcher."""
    from feedq import readers

    records = _tagged_records(10)
    features = {"tags": readers.VarLenFeature(np.int64), "label": readers.FixedLenFeature([], np.int64)}
    blocks = iter([records[0:4], records[4:7], records[7:10]])
    lock = threading.Lock()

    def read_block() -> dict:
        with lock:
            try:
                block = next(blocks)
            except StopIteration:
                raise OutOfRangeError("done") from None
        return readers.parse_example(block, features)

    with feedq.Pipeline():
        rows = feedq.batch(read_block, 3, enqueue_many=True, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                           allow_smaller_final_batch=True)
        again = feedq.batch(rows, 5, enqueue_many=True, allow_smaller_final_batch=True)
        batches = list(again)
    assert [x["label"].tolist() for x in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    for x in batches:
        tags = x["tags"]
        indices, values, _ = _expected_sparse(x["label"].tolist())
        assert (tags.indices.tolist(), tags.values.tolist()) == (indices, values)
    # A row keeps the width of the batch it came in (TF1), not its own length.
    assert batches[0]["tags"].dense_shape.tolist() == [5, 3]
    assert batches[1]["tags"].dense_shape.tolist() == [5, 3]


def test_b12_sparse_component_errors() -> None:
    from feedq import readers

    with pytest.raises(ValueError, match=r"shared queue"):
        feedq.batch(_record_reader(_tagged_records(2)), 2, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                    shared_name="shared")
    with pytest.raises(ValueError, match=r"^batch: sparse component 1 needs a shape of rank >= 1"):
        feedq.batch(lambda: [1, None], 2, dtypes=[np.int64, readers.VarLenFeature(np.int64)], shapes=[[], []])
    not_sparse = r"^batch: component 'tags' is sparse: expected a SparseTensorValue, got ndarray$"
    with pytest.raises(feedq.errors.InvalidArgumentError, match=not_sparse), feedq.Pipeline():
        b = feedq.batch(lambda: {"tags": np.arange(3), "label": 1}, 2, dtypes=SPARSE_DTYPES,
                        shapes=SPARSE_SHAPES)
        b.dequeue(timeout=5)
