"""Pipeline (feedq/pipeline.py): iteration, errors reaching the consumer (X3),
stop and shutdown (X5), Ctrl-C, closing scopes, thread names."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import feedq
from feedq.errors import CancelledError, OutOfRangeError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


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


def test_parallel_independent_runners() -> None:
    barrier = threading.Barrier(2, timeout=5)

    def meet() -> list:
        barrier.wait()  # both runners must be running at once to pass
        raise OutOfRangeError("done")

    with feedq.Pipeline():
        a = feedq.batch(meet, 1, dtypes=np.int32, shapes=[[]])
        b = feedq.batch(meet, 1, dtypes=np.int32, shapes=[[]])
        assert list(a) == [] and list(b) == []


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

    from tests.conftest import sigint_default

    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reaped here, not in a later test's garbage collection
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


IGNORED_SIGINT_SCRIPT = r"""
import signal, numpy as np, feedq
assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
with feedq.Pipeline(stall_timeout=5):
    s = feedq.range_input_producer(4, num_epochs=1, shuffle=False)
    b = feedq.batch(s, 2)
    assert [x.tolist() for x in b] == [[0, 1], [2, 3]]
import feedq.cli  # the command's module too
print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)
"""


@pytest.mark.timeout(60)
def test_a_process_that_ignores_sigint_keeps_ignoring_it() -> None:
    """Started with SIGINT ignored (``nohup``, ``cmd &``), a program using
    feedq keeps that choice: feedq installs no SIGINT handler of its own."""
    import signal
    import subprocess
    import sys

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.run([sys.executable, "-c", IGNORED_SIGINT_SCRIPT], capture_output=True,
                          text=True, timeout=50, preexec_fn=ignore_sigint, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
