"""Pipeline statistics (issue 15): per-stage timing, the bottleneck verdict,
stall reports, periodic reports and export.

The verdict tests build one four-stage pipeline (a producer of ids, a
reader runner, a decoder runner, a batcher, then the consumer) and make one
of them slow with a per-element delay standing for I/O or compute; the
verdict must name that stage. Every test checks that each id comes out
exactly once, and is bounded in time.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._observe import stall as _stall
from feedq._observe.statistics import ConsumerTiming, StageTiming, verdict
from feedq.errors import MissingExtraError
from feedq.queues import FIFOQueue
from feedq.runners import QueueRunner
from tests.conftest import Bg, FakeClock, wait_blocked, wait_until

pytestmark = pytest.mark.timeout(20)

N = 96
BATCH = 4
SLOW = 0.004  # seconds per element (or per batch x BATCH for the consumer)


def _work(seconds: float) -> None:
    """Stand-in for reading or decoding one element: it takes this long."""
    if seconds:
        time.sleep(seconds)


def _run_pipeline(
    read_s: float = 0.0, decode_s: float = 0.0, batch_s: float = 0.0, consume_s: float = 0.0,
    **pipe_kwargs: Any,
) -> tuple[feedq.PipelineStatistics, list[int], str]:
    """ids -> reader -> decoder -> batcher -> consumer; returns the final
    statistics, the ids the consumer got, and the report."""
    with feedq.Pipeline(**pipe_kwargs) as pipe:
        ids = feedq.range_input_producer(N, num_epochs=1, shuffle=False, capacity=8, name="ids")
        raw = FIFOQueue(4, [np.int64], shapes=[()], name="reader")
        decoded = FIFOQueue(4, [np.float32], shapes=[(2,)], name="decoder")

        def read() -> None:
            i = ids.dequeue()
            _work(read_s)
            raw.enqueue(i)

        def decode() -> None:
            i = raw.dequeue()
            _work(decode_s)
            decoded.enqueue(np.array([i, -i], np.float32))

        def take_decoded() -> list[Any]:
            v = decoded.dequeue()
            _work(batch_s)
            return [v]

        pipe.add_runner(QueueRunner(raw, [read]))
        pipe.add_runner(QueueRunner(decoded, [decode]))
        batches = feedq.batch(take_decoded, BATCH, capacity=8, shapes=[(2,)],
                              dtypes=[np.float32], name="batcher")
        got: list[int] = []
        for b in batches:
            _work(consume_s)
            got.extend(int(v) for v in b[:, 0])
        stats = pipe.statistics()
        report = pipe.report()
    return stats, got, report


@pytest.mark.parametrize(
    ("slow", "expected"),
    [
        ("read_s", "reader"),
        ("decode_s", "decoder"),
        ("batch_s", "batcher/fifo_queue"),
        ("consume_s", None),
    ],
)
def test_verdict_names_the_slow_stage(slow: str, expected: str | None) -> None:
    # The consumer's case runs 3x longer, so that the wait for the first batch
    # (thread start-up on a loaded machine) stays well under 10 % of the run.
    delay = SLOW * BATCH * 3 if slow == "consume_s" else SLOW
    stats, got, report = _run_pipeline(**{slow: delay})
    assert sorted(got) == list(range(N))  # every id exactly once
    assert stats.bottleneck.stage == expected, report
    assert [(s.name, s.kind) for s in stats.stages] == [
        ("ids", "producer"), ("reader", "runner"), ("decoder", "runner"),
        ("batcher/fifo_queue", "batcher"),
    ]
    assert stats.consumer.takes >= N // BATCH  # the last take found the end
    by_name = {s.name: s for s in stats.stages}
    if expected is not None:
        s = by_name[expected]
        # The delay is the stage's busy time: N elements x delay, give or take.
        assert N * delay * 0.9 <= s.busy_s <= N * delay * 3 + 0.5, report
        assert expected in stats.bottleneck.reason
        assert stats.consumer.readiness < 0.5, report
    else:
        assert "consumer is the limit" in stats.bottleneck.reason
        # The stages waited on their full queues while the consumer worked.
        assert by_name["batcher/fifo_queue"].output_wait_s > 0.2, report
    assert report.splitlines()[-1].startswith("bottleneck: ")


def test_figures_account_for_every_record_and_wait() -> None:
    stats, got, _ = _run_pipeline(decode_s=SLOW)
    assert len(got) == N
    by_name = {s.name: s for s in stats.stages}
    assert by_name["ids"].records_out == N
    assert by_name["reader"].records_out == N
    assert by_name["decoder"].records_out == N
    assert by_name["batcher/fifo_queue"].records_out == N
    assert by_name["decoder"].bytes_out == N * 2 * 4  # two float32 per element
    assert by_name["reader"].bytes_out == N * 8
    for s in stats.stages:
        assert s.threads == 1
        total = s.busy_s + s.input_wait_s + s.output_wait_s
        assert total <= stats.elapsed * 1.05 + 0.05, s
    # The reader waits on the slow decoder's input queue being full.
    assert by_name["reader"].output_wait_s > 0.5 * N * SLOW
    # The batcher waits on its input (the decoder's queue).
    assert by_name["batcher/fifo_queue"].input_wait_s > 0.5 * N * SLOW
    queues = {q.name: q for q in stats.queues}
    assert set(queues) == {"ids", "reader", "decoder", "batcher/fifo_queue"}
    assert queues["reader"].capacity == 4
    assert queues["reader"].max_fill == 1.0  # the reader filled it up
    assert queues["reader"].enqueue_wait_s > 0.5 * N * SLOW
    assert queues["decoder"].dequeue_wait_s > 0.5 * N * SLOW
    assert 0.0 <= queues["decoder"].mean_fill < 0.5
    assert all(q.size == 0 for q in stats.queues)  # drained
    c = stats.consumer
    assert c.takes == N // BATCH + 1  # + the take that found the end
    assert 0 < c.waited_takes <= c.takes
    assert c.readiness == pytest.approx(1 - c.waited_takes / c.takes)


def test_as_dict_is_json_serialisable() -> None:
    stats, _, _ = _run_pipeline()
    d = stats.as_dict()
    back = json.loads(json.dumps(d))
    assert back == d
    assert set(d) == {"elapsed", "stages", "queues", "consumer", "bottleneck", "shuffle_buffers",
                      "storage"}
    assert d["shuffle_buffers"] == [] and d["storage"] is None
    assert [s["name"] for s in d["stages"]] == ["ids", "reader", "decoder", "batcher/fifo_queue"]
    assert d["consumer"]["takes"] == stats.consumer.takes
    assert d["bottleneck"] == {"stage": stats.bottleneck.stage, "reason": stats.bottleneck.reason,
                               "cause": stats.bottleneck.cause}


def test_format_report_is_the_report() -> None:
    stats, _, report = _run_pipeline()
    text = feedq.format_report(stats)
    for name in ("ids", "reader", "decoder", "batcher/fifo_queue"):
        assert name in text
    b = stats.bottleneck
    assert text.splitlines()[-1] == f"bottleneck: {b.stage or 'none'} - {b.reason}"
    assert f"consumer: {stats.consumer.takes} takes" in text
    assert report.splitlines()[1] == text.splitlines()[1]  # the same table header


# -- the verdict as a function ----------------------------------------------------------


def _stage(name: str, busy: float, inp: float, out: float) -> StageTiming:
    return StageTiming(name=name, kind="runner", threads=1, busy_s=busy, input_wait_s=inp,
                       output_wait_s=out, records_out=0, bytes_out=0)


def test_verdict_walks_upstream_past_starved_stages() -> None:
    stages = [_stage("a", 1.0, 0.0, 8.5), _stage("b", 9.0, 0.5, 0.0), _stage("c", 0.5, 9.4, 0.0)]
    waiting = ConsumerTiming(takes=100, waited_takes=90, wait_s=9.0, readiness=0.1)
    b = verdict(10.0, stages, waiting)
    assert b.stage == "b"
    assert "'c' waits 94% of its time on input" in b.reason
    ready = ConsumerTiming(takes=100, waited_takes=2, wait_s=0.1, readiness=0.98)
    assert verdict(10.0, stages, ready).stage is None
    assert verdict(10.0, [], waiting).stage is None
    # Nothing taken, the last stage blocked on its full queue: the consumer.
    blocked = [_stage("a", 0.0, 0.0, 10.0)]
    b = verdict(10.0, blocked, ConsumerTiming(0, 0, 0.0, 1.0))
    assert b.stage is None and "taken nothing" in b.reason


# -- stall reports -------------------------------------------------------------------------

STALL = 0.3


def _stall_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "feedq" and r.levelno == logging.WARNING and "stalled" in r.getMessage()]


def _advance(clock: FakeClock, monitor: _stall.Monitor, seconds: float,
             until: Any = None) -> float:
    """Move the pipeline's clock on by ``seconds``, one monitor tick at a
    time, each handled by the monitor before the next (or stop early once
    ``until()`` holds); the seconds advanced."""
    advanced = 0.0
    while advanced < seconds - 1e-9 and not (until is not None and until()):
        wait_until(lambda: clock.waiting == 1, 10.0, "the monitor to wait for its tick")
        ticks = monitor.ticks
        clock.advance(monitor._tick)
        advanced += monitor._tick
        wait_until(lambda t=ticks: monitor.ticks > t, 10.0, "the monitor's tick")
    return advanced


def _monitor_of(pipe: feedq.Pipeline) -> _stall.Monitor:
    monitor = pipe._monitor
    assert monitor is not None
    return monitor


def test_deadlocked_enqueue_loop_gives_exactly_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The seed's single-thread enqueue loop into a full queue nobody reads.
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(2, [np.int64], shapes=[()], name="nobody_reads")
    counter = iter(range(1_000_000))

    def enqueue_loop() -> None:
        q.enqueue(next(counter))

    clock = FakeClock()
    with feedq.Pipeline(stall_timeout=STALL, _clock=clock) as pipe:
        pipe.add_runner(QueueRunner(q, [enqueue_loop]))
        wait_blocked(q, producers=1)
        clock.sync()
        monitor = _monitor_of(pipe)
        assert _stall_records(caplog) == []  # no time has passed on the pipeline's clock
        advanced = _advance(clock, monitor, STALL + 1.0, until=lambda: bool(_stall_records(caplog)))
        assert _stall_records(caplog), "no stall warning"
        # Reported once stall_timeout had passed with nothing moving (the
        # monitor's first look takes the baseline), not before.
        assert STALL - 1e-9 <= advanced <= STALL + 2 * monitor._tick + 1e-9
        # Nothing else for the rest of stall_timeout + 1 s.
        _advance(clock, monitor, STALL + 1.0 - advanced)
        records = _stall_records(caplog)
        assert q.size() == 2
        # The wait in progress counts: blocked on its output all along.
        stats = pipe.statistics()
    assert len(records) == 1
    (timing,) = stats.stages
    assert timing.output_wait_s >= STALL + 0.9
    assert timing.busy_s < 0.1 and timing.records_out == 2
    assert stats.queues[0].enqueue_wait_s >= STALL + 0.9
    assert stats.bottleneck.stage is None and "taken nothing" in stats.bottleneck.reason
    msg = records[0].getMessage()
    assert "enqueue of 1 element(s) on full queue 'nobody_reads' (size 2/2" in msg
    assert "no thread is dequeuing from it" in msg
    assert "thread 'feedq-runner-nobody_reads-0-enqueue_loop'" in msg
    # The blocked thread's Python stack, down to the user's op.
    assert "Stacks of the blocked threads" in msg
    assert "in enqueue_loop" in msg and "q.enqueue(next(counter))" in msg
    # Accounting: 2 stored, the third cancelled at exit (nothing else taken).
    assert next(counter) == 3


def _drive(clock: FakeClock, monitor: _stall.Monitor, q: Any, caplog: pytest.LogCaptureFixture,
           consumers: int = 0, producers: int = 0) -> float:
    """In a helper thread: once the test's thread is blocked on ``q``, move
    the clock until the stall warning is logged; the seconds advanced."""
    wait_blocked(q, producers=producers, consumers=consumers, timeout=10.0)
    clock.sync()
    advanced = _advance(clock, monitor, STALL + 1.0, until=lambda: bool(_stall_records(caplog)))
    assert _stall_records(caplog), "no stall warning"
    return advanced


def test_consumer_blocked_on_a_never_started_runner_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(2, [np.int64], shapes=[()], name="never_filled")
    pipe = feedq.Pipeline(stall_timeout=STALL)
    pipe.add_runner(QueueRunner(q, [lambda: q.enqueue(1)]))  # added, never started
    clock = FakeClock()
    with pipe.as_default():
        pipe._started_at = clock.now()
        monitor = _stall.Monitor(pipe, STALL, None, clock=clock)
        monitor.start()
        try:
            def drive() -> None:
                _drive(clock, monitor, q, caplog, consumers=1)
                q.close()  # lets the blocked dequeue end

            driver = Bg(drive, name="driver")
            with pytest.raises(feedq.errors.OutOfRangeError):
                q.dequeue(timeout=30)
            driver.result(10.0)
        finally:
            monitor.stop()
    records = _stall_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    assert "dequeue of 1 element(s) on empty queue 'never_filled'" in msg
    assert "its runner 'never_filled' was never started" in msg
    assert f"thread {threading.current_thread().name!r}" in msg
    assert "q.dequeue(timeout=30)" in msg
    assert q.size() == 0


def test_a_hung_read_is_shown_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    # The consumer waits on a queue whose runner is stuck inside its op (a
    # read that never returns): the report shows that thread busy, and where.
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(2, [np.int64], shapes=[()], name="hung_reader")
    release = threading.Event()

    def hung_read() -> None:
        release.wait(10)  # stands for a read blocked in I/O
        q.enqueue(1)

    clock = FakeClock()
    with feedq.Pipeline(stall_timeout=STALL, _clock=clock) as pipe:
        pipe.add_runner(QueueRunner(q, [hung_read]))

        def drive() -> None:
            _drive(clock, _monitor_of(pipe), q, caplog, consumers=1)
            release.set()

        driver = Bg(drive, name="driver")
        assert q.dequeue(timeout=30) == 1
        driver.result(10.0)
    records = _stall_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    assert "dequeue of 1 element(s) on empty queue 'hung_reader'" in msg
    assert "fed by runner 'hung_reader', 1 thread(s) alive: " in msg
    assert "'feedq-runner-hung_reader-0-hung_read' busy in its op for" in msg
    assert "in hung_read" in msg and "release.wait(10)" in msg


# -- the user's own thread, blocked on a queue nothing of the pipeline feeds (issue 24) --


def test_main_thread_blocked_in_enqueue_on_a_full_queue_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(1, [np.int64], shapes=[()], name="users_full")
    clock = FakeClock()
    with feedq.Pipeline(stall_timeout=STALL, _clock=clock) as pipe:
        q.enqueue(1)

        def drive() -> float:
            advanced = _drive(clock, _monitor_of(pipe), q, caplog, producers=1)
            assert q.dequeue(timeout=5) == 1  # makes room: the blocked enqueue ends
            return advanced

        driver = Bg(drive, name="driver")
        q.enqueue(2)  # blocks: the queue is full and nothing takes from it
        advanced = driver.result(10.0)
        assert q.dequeue(timeout=5) == 2
    assert STALL - 1e-9 <= advanced <= STALL + 2 * pipe.stall_timeout / 4 + 1e-9
    records = _stall_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    me = threading.current_thread().name
    assert f"  thread {me!r} blocked " in msg
    assert "in enqueue of 1 element(s) on full queue 'users_full' (size 1/1; " \
           "no thread is dequeuing from it)" in msg
    assert f"Thread {me!r} (ident {threading.get_ident()}):" in msg
    assert "q.enqueue(2)  # blocks" in msg  # the user's line in its stack


def test_main_thread_blocked_in_dequeue_on_a_queue_nothing_feeds_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # TF1's classic hang: the queue's runners were never started.
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(4, [np.int64], shapes=[()], name="users_empty")
    clock = FakeClock()
    with feedq.Pipeline(stall_timeout=STALL, _clock=clock) as pipe:

        def drive() -> None:
            _drive(clock, _monitor_of(pipe), q, caplog, consumers=1)
            q.enqueue(7)  # the blocked dequeue ends

        driver = Bg(drive, name="driver")
        assert q.dequeue() == 7  # blocks: nothing feeds the queue
        driver.result(10.0)
    records = _stall_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    me = threading.current_thread().name
    assert f"  thread {me!r} blocked " in msg
    assert "in dequeue of 1 element(s) on empty queue 'users_empty' (size 0/4; " \
           "no runner of the pipeline fills it)" in msg
    assert "assert q.dequeue() == 7  # blocks" in msg


def test_main_thread_working_on_its_own_queue_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A user loop whose queue calls do not block long: no warning however
    long the pipeline runs (the clock moves 3 stall timeouts per element)."""
    caplog.set_level(logging.WARNING, logger="feedq")
    q = FIFOQueue(2, [np.int64], shapes=[()], name="users_busy")
    clock = FakeClock()
    with feedq.Pipeline(stall_timeout=STALL, _clock=clock) as pipe:
        monitor = _monitor_of(pipe)
        got = []
        for i in range(5):
            q.enqueue(i)
            got.append(int(q.dequeue()))
            clock.sync()
            _advance(clock, monitor, 3 * STALL)
    assert got == list(range(5))
    assert _stall_records(caplog) == [] and monitor.warnings == 0


def test_healthy_pipeline_logs_no_stall(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    stats, got, _ = _run_pipeline(decode_s=SLOW, stall_timeout=STALL)
    assert sorted(got) == list(range(N))
    assert stats.elapsed > STALL  # long enough for the monitor to look
    assert _stall_records(caplog) == []


def test_default_stall_timeout_applies(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    assert feedq.get_stall_timeout() is None
    previous = feedq.set_stall_timeout(STALL)
    try:
        assert previous is None
        pipe = feedq.Pipeline()
        assert pipe.stall_timeout == STALL
        assert feedq.Pipeline(stall_timeout=5).stall_timeout == 5.0
    finally:
        feedq.set_stall_timeout(previous)
    assert feedq.Pipeline().stall_timeout is None
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="stall timeout"):
            feedq.set_stall_timeout(bad)
        with pytest.raises(ValueError, match="report_every"):
            feedq.Pipeline(report_every=bad)
    assert feedq.set_stall_timeout(float("inf")) is None
    assert feedq.get_stall_timeout() is None


def test_report_every_logs_the_table(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="feedq")

    def reports() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name == "feedq" and r.levelno == logging.INFO
                and r.getMessage().startswith("pipeline statistics")]

    q = FIFOQueue(2, [np.int64], shapes=[()], name="reported")
    with feedq.Pipeline(report_every=0.05) as pipe:
        pipe.add_runner(QueueRunner(q, [lambda: q.enqueue(7)]))
        wait_until(lambda: len(reports()) >= 2, 5.0, "two periodic reports")
        assert q.size() == 2
    assert not any(t.name.startswith("feedq-monitor") for t in threading.enumerate())
    text = reports()[0]
    assert "reported" in text and text.splitlines()[-1].startswith("bottleneck: ")


# -- Prometheus ---------------------------------------------------------------------------


def test_prometheus_collector_output_parses() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    stats_holder: list[feedq.PipelineStatistics] = []
    with feedq.Pipeline() as pipe:
        ids = feedq.range_input_producer(N, num_epochs=1, shuffle=False, capacity=8, name="ids")
        batches = feedq.batch(ids, BATCH, capacity=8, name="b")
        got = [int(v) for b in batches for v in b]
        registry = CollectorRegistry()
        registry.register(feedq.prometheus_collector(pipe, labels={"job": "test"}))
        text = generate_latest(registry).decode()
        stats_holder.append(pipe.statistics())
    assert sorted(got) == list(range(N))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    takes = families["feedq_consumer_takes"].samples[0]
    assert takes.labels == {"job": "test"}
    assert takes.value == stats_holder[0].consumer.takes == N // BATCH + 1
    records = {s.labels["stage"]: s.value for s in families["feedq_stage_records"].samples
               if s.name == "feedq_stage_records_total"}
    assert records == {"ids": N, "b/fifo_queue": N}
    caps = {s.labels["queue"]: s.value for s in families["feedq_queue_capacity"].samples}
    assert caps == {"ids": 8, "b/fifo_queue": 8}
    assert {"feedq_stage_busy_seconds", "feedq_queue_mean_fill", "feedq_bottleneck",
            "feedq_consumer_readiness"} <= set(families)


def test_prometheus_collector_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingExtraError, match=r"feedq\[prometheus\]"):
        feedq.prometheus_collector(feedq.Pipeline())


@pytest.fixture(autouse=True)
def _no_default_stall() -> Iterator[None]:
    previous = feedq.set_stall_timeout(None)
    yield
    feedq.set_stall_timeout(previous)


def test_stalled_process_worker_is_named(caplog: pytest.LogCaptureFixture) -> None:
    from tests.process import _builds as builds

    caplog.set_level(logging.WARNING, logger="feedq")
    with feedq.Pipeline(stall_timeout=STALL) as pipe:
        stage = feedq.process_stage(builds.blocked_after_one, 1)
        assert stage.dequeue(timeout=30).tolist() == [0]
        pid = stage.pids[0]
        with pytest.raises(feedq.errors.DeadlineExceededError):
            stage.dequeue(timeout=STALL + 0.8)  # worker 0 sleeps after one batch
        stats = pipe.statistics()
    records = _stall_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    assert f"waiting for worker 0 (pid {pid}, alive, 1 batches received)" in msg
    assert "stage.dequeue(timeout=STALL + 0.8)" in msg  # the consumer's stack
    (timing,) = stats.stages
    assert (timing.kind, timing.threads, timing.records_out) == ("process", 1, 1)
    # One batch taken (whether it waited for the worker to start depends on
    # the machine); the timed-out call took nothing, but its wait counts.
    assert stats.consumer.takes == 1 and stats.consumer.waited_takes <= 1
    assert stats.consumer.wait_s >= STALL + 0.8


def test_bytes_of_ragged_elements_are_estimated_from_the_elements_stored() -> None:
    """A PaddingFIFOQueue stores [None] numeric rows in blocks; the estimate
    reads the elements, not the (block, row) slots that hold them."""
    from feedq._observe.statistics import _row_bytes
    from feedq.queues import PaddingFIFOQueue

    q = PaddingFIFOQueue(10, [np.int64, np.float32, "string"], shapes=[[None], [], [None]])
    q.enqueue_many([np.zeros((4, 3), np.int64), np.zeros(4, np.float32), [[b"ab"]] * 4])
    assert _row_bytes(q) == 3 * 8 + 4 + 8  # a string row: an object array of one reference


def test_statistics_read_after_the_with_block_describe_the_run() -> None:
    """The elapsed time stops at the end of ``with pipe:`` (join): a report
    printed afterwards gives the run's rates, not rates diluted by the time
    since."""
    clock = FakeClock()
    with feedq.Pipeline(_clock=clock) as pipe:
        src = feedq.range_input_producer(100, num_epochs=1, shuffle=False)
        stage = feedq.batch([lambda: src.dequeue_many(10)], 10, enqueue_many=True,
                            dtypes=[np.int32], shapes=[[]])
        clock.advance(2.0)
        assert sum(len(b) for b in stage) == 100
    first = pipe.statistics()
    clock.advance(30.0)
    later = pipe.statistics()
    assert first.elapsed == pytest.approx(2.0) and later.elapsed == first.elapsed
    assert later.stages == first.stages and later.consumer == first.consumer
