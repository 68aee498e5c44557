"""Verdicts and figures found wrong in a user trial: a batch queue smaller
than its batches, the shuffle buffer, the stage table's units, and the
bench's advice on readers under CPU contention.

The verdict and the advice are pure functions of the figures: most tests
build the figures and check the words; the pipeline tests check that the
figures the verdict needs (batch size, capacity, the shuffle buffer) are
collected, with every element out exactly once.
"""

from __future__ import annotations

import logging

import pytest

import feedq
from feedq._observe.statistics import (
    Bottleneck,
    ConsumerTiming,
    PipelineStatistics,
    QueueTiming,
    StageTiming,
    format_report,
    verdict,
)
from feedq.cli._bench import BenchResult, cpu_advice, verdict_line
from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(20)


def _batcher(busy: float, out: float, *, capacity: int, batch_size: int = 100,
             inp: float = 0.0) -> StageTiming:
    return StageTiming(name="batch/fifo_queue", kind="batcher", threads=1, busy_s=busy,
                       input_wait_s=inp, output_wait_s=out, records_out=1000, bytes_out=8000,
                       batch_size=batch_size, capacity=capacity)


PRODUCER = StageTiming("input_producer", "producer", 1, 0.1, 0.0, 9.0, 1000, 8000)
WAITING = ConsumerTiming(takes=100, waited_takes=100, wait_s=3.1, readiness=0.0)


# -- D3: capacity < batch_size ---------------------------------------------------------


def test_verdict_names_a_capacity_below_the_batch_size() -> None:
    # The trial's figures: the batcher busy 24 %, blocked on its output 74 %,
    # the consumer waiting 31 % of the time, no take ever ready.
    b = verdict(10.0, [PRODUCER, _batcher(2.4, 7.4, capacity=32)], WAITING)
    assert b.stage == "batch/fifo_queue" and b.cause == "capacity"
    assert b.reason.startswith(
        "queue capacity 32 < batch_size 100: the consumer's take waits for the batcher, "
        "which waits for room")
    assert "waits 74% of its time for room" in b.reason and "busy 24%" in b.reason
    assert "the consumer waits 31% of the time" in b.reason
    assert b.reason.endswith("raise capacity to >= 2 x batch_size (200)")
    # The same figures with a big enough queue are not a capacity verdict
    # (a stage mostly blocked on its output below 50 % of its time).
    b = verdict(10.0, [PRODUCER, _batcher(5.5, 4.4, capacity=1000)], WAITING)
    assert b.cause == "stage" and "is busy 55%" in b.reason


def test_verdict_names_a_queue_too_small_for_the_takes() -> None:
    # capacity >= batch_size, but the stage mostly waits for room while the
    # consumer waits for it: the queue holds too little ahead of the takes.
    b = verdict(10.0, [PRODUCER, _batcher(2.0, 7.5, capacity=150)], WAITING)
    assert b.cause == "capacity" and b.stage == "batch/fifo_queue"
    assert b.reason.startswith("queue capacity 150 holds too little ahead of the consumer's takes")
    assert b.reason.endswith("raise capacity to >= 2 x batch_size (200)")


def test_a_full_queue_that_readies_every_take_is_the_consumers_limit() -> None:
    # A user trial (bench on fixed-length records, 0.12 s): the batcher
    # waited 57 % of its time on a queue of 16384 rows, 6 of 1564 takes
    # waited (the first ones), 12 % of the time. That was advice to raise
    # the capacity to 512; the consumer is the limit.
    started = ConsumerTiming(takes=1564, waited_takes=6, wait_s=0.014, readiness=0.996)
    b = verdict(0.12, [PRODUCER, _batcher(0.03, 0.068, capacity=16384, batch_size=256)], started)
    assert (b.stage, b.cause) == (None, "consumer")
    assert b.reason == ("no bottleneck: the consumer is the limit (it waited 12% of the time, in 6 "
                        "of 1564 takes (0.014 s); data was ready for 100% of its takes and "
                        "'batch/fifo_queue' waited 57% of its time for room in its full queue)")
    # Takes that did wait on that full queue are not told to grow a queue
    # that already holds two batches either.
    b = verdict(10.0, [PRODUCER, _batcher(2.0, 7.5, capacity=16384, batch_size=256)], WAITING)
    assert b.cause != "capacity" and "raise capacity" not in b.reason


def test_a_busy_batcher_is_still_the_bottleneck_with_a_note_on_capacity() -> None:
    b = verdict(10.0, [PRODUCER, _batcher(8.0, 1.5, capacity=32)], WAITING)
    assert b.cause == "stage" and b.stage == "batch/fifo_queue"
    assert b.reason.startswith("batcher 'batch/fifo_queue' is busy 80% of its time")
    assert "capacity 32 < batch_size 100 also makes every take wait" in b.reason


def test_a_consumer_that_does_not_wait_is_the_limit_whatever_the_capacity() -> None:
    ready = ConsumerTiming(takes=100, waited_takes=1, wait_s=0.2, readiness=0.99)
    b = verdict(10.0, [PRODUCER, _batcher(2.4, 7.4, capacity=32)], ready)
    assert b.stage is None and b.cause == "consumer"


def test_batch_with_capacity_below_batch_size_warns_and_delivers_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    n = 2000
    with feedq.Pipeline() as pipe:
        ids = feedq.range_input_producer(n, num_epochs=1, shuffle=False)
        batches = feedq.batch(ids, 100, capacity=32)
        got = [int(v) for b in batches for v in b]
        stats = pipe.statistics()
    assert sorted(got) == list(range(n))
    warned = [r.getMessage() for r in caplog.records if r.name == "feedq"]
    assert len(warned) == 1
    assert "capacity 32 < batch_size 100" in warned[0] and ">= 2 x batch_size (200)" in warned[0]
    (batcher,) = [s for s in stats.stages if s.kind == "batcher"]
    assert (batcher.batch_size, batcher.capacity) == (100, 32)
    (producer,) = [s for s in stats.stages if s.kind == "producer"]
    assert producer.batch_size is None and producer.capacity == 32


def test_no_warning_when_the_queue_holds_a_batch(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="feedq")
    with feedq.Pipeline():
        ids = feedq.range_input_producer(300, num_epochs=1, shuffle=False)
        batches = feedq.batch(ids, 100, capacity=200)
        assert sum(len(b) for b in batches) == 300
    assert not [r for r in caplog.records if r.name == "feedq"]


def test_bench_verdict_names_the_batch_queue_capacity() -> None:
    b = verdict(1.0, [PRODUCER, _batcher(0.24, 0.74, capacity=32)],
                ConsumerTiming(10, 10, 0.31, 0.0))
    stats = PipelineStatistics(1.0, (PRODUCER, _batcher(0.24, 0.74, capacity=32)), (),
                               ConsumerTiming(10, 10, 0.31, 0.0), b)
    line = verdict_line(BenchResult("csv", 1, seconds=1.0, cpu_seconds=0.5, cpus=2,
                                    statistics=stats))
    assert line.startswith("bottleneck: the capacity of the batch queue 'batch/fifo_queue': "
                           "queue capacity 32 < batch_size 100"), line
    assert "readers" not in line


# -- D5: the shuffle buffer ------------------------------------------------------------


def test_shuffle_buffer_has_its_own_row() -> None:
    n, cap, m, bs = 1000, 600, 200, 50
    with feedq.Pipeline() as pipe:
        ids = feedq.range_input_producer(n, num_epochs=1, shuffle=False)
        batches = feedq.shuffle_batch(ids, bs, capacity=cap, min_after_dequeue=m, seed=1)
        out_q = batches.queue
        assert out_q.capacity == cap - m
        # Nobody takes: the runner fills the output queue and blocks on it.
        wait_until(lambda: out_q.size() == cap - m
                   and pipe.statistics().stages[-1].output_wait_s > 0, 10.0, "a full queue")
        stats = pipe.statistics()
        (sb,) = stats.shuffle_buffers
        queue_size = {q.name: q.size for q in stats.queues}[sb.output]
        got = [int(v) for b in batches for v in b]
        end = pipe.statistics().shuffle_buffers[0]
    assert sorted(got) == list(range(n))
    assert sb.output == out_q.name == "shuffle_batch/shuffled_fifo_queue"
    assert sb.name == "shuffle_batch/random_shuffle_queue"
    assert (sb.min_after_dequeue, sb.batch_size, sb.capacity) == (m, bs, cap)
    assert m <= sb.size < m + 2 * bs and sb.size <= sb.peak
    assert sb.fraction_over_min_after_dequeue == pytest.approx(
        min(1.0, (sb.size + queue_size - m) / (cap - m)))
    assert sb.fraction_over_min_after_dequeue > 0.9  # output queue full
    assert end.size == 0 and end.fraction_over_min_after_dequeue == 0.0  # drained
    text = format_report(stats)
    lines = text.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("shuffle buffer"))
    row = lines[head + 2].split()
    assert row[0] == sb.name and row[1:5] == [str(sb.size), str(sb.peak), str(m + bs), str(cap)]
    assert row[5] == f"{100 * sb.fraction_over_min_after_dequeue:.0f}%"
    assert stats.as_dict()["shuffle_buffers"][0]["min_after_dequeue"] == m


# -- D8: one unit -------------------------------------------------------------------------


def test_stage_table_shows_output_megabytes() -> None:
    stage = StageTiming("decoder", "runner", 1, 1.0, 0.0, 0.0, 1000, 3_000_000)
    stats = PipelineStatistics(2.0, (stage,), (), ConsumerTiming(0, 0, 0.0, 1.0),
                               Bottleneck(None, "x", "consumer"))
    lines = format_report(stats).splitlines()
    assert lines[1].split()[-2:] == ["out", "MB/s"]
    assert lines[3].split()[-1] == "1.50"  # 3e6 bytes / 2 s / 1e6, not MiB


# -- D9: the advice follows the figures ----------------------------------------------------


@pytest.mark.parametrize(("busy", "used", "cpus", "advice"), [
    # The trial: 0.1 of 2 CPUs used while the readers were busy: machine load.
    (1.9, 0.1, 2, "other processes held the CPUs (machine load), not decoding or the GIL; "
                  "re-run on a quieter machine before tuning readers"),
    # Near one CPU with threads busy > 1: the GIL.
    (1.9, 0.95, 2, "took turns on the GIL; more readers will not help, cheaper decoding or "
                   "decoding in worker processes (process_stage) would"),
    (3.5, 1.2, 8, "took turns on the GIL"),
    # Between one CPU and all of them: GIL or load.
    (3.5, 2.2, 4, "busy threads waited for the GIL or for CPUs other processes held (CPUs "
                  "were left over)"),
    # Every CPU in use by the process.
    (3.0, 1.9, 2, "every CPU is busy; cheaper decoding would help, more readers not"),
    (1.0, 1.9, 2, "every CPU is busy; cheaper decoding would help, more readers not"),
    # No contention, CPUs to spare.
    (0.9, 0.9, 2, "more --readers or --threads can help"),
])
def test_cpu_advice_follows_the_figures(busy: float, used: float, cpus: int, advice: str) -> None:
    text = cpu_advice(busy, used, cpus)
    assert text.startswith(f"the reader threads were busy {busy:.1f} thread-s/s, the process used "
                           f"{used:.1f} of {cpus} CPUs: ")
    assert text.endswith(advice) or advice in text, text


def test_cpu_advice_names_the_machine_load_when_other_processes_took_the_cpus() -> None:
    # The image trial: 1.3 of 2 CPUs used while readers were busy 1.9 thread-s/s,
    # and other processes used 0.7: the load, not the GIL.
    text = cpu_advice(1.9, 1.3, 2, others=0.7)
    assert text.startswith("the reader threads were busy 1.9 thread-s/s, the process used 1.3 of 2 "
                           "CPUs, other processes 0.7: other processes held the CPUs")
    # A quiet machine with the same figures: the GIL (or CPUs left over).
    assert "other processes held" not in cpu_advice(1.9, 1.3, 2, others=0.05)
    assert "took turns on the GIL" in cpu_advice(1.9, 0.95, 2, others=0.1)


def test_machine_busy_seconds_counts_this_process() -> None:
    import time

    from feedq.cli._bench import machine_busy_seconds

    m0 = machine_busy_seconds()
    if m0 is None:
        pytest.skip("no /proc/stat")
    t = time.thread_time()
    while time.thread_time() - t < 0.3:
        pass
    m1 = machine_busy_seconds()
    assert m1 is not None and m1 - m0 >= 0.25  # at least the 0.3 s this thread spun


def test_queue_timing_is_unchanged() -> None:
    # Positional construction (as users may do) still works with the new fields defaulted.
    q = QueueTiming("q", 10, 1, 0.5, 0.9, 0.0, 0.0)
    s = StageTiming("s", "runner", 1, 0.0, 0.0, 0.0, 0, 0)
    assert q.capacity == 10 and (s.batch_size, s.capacity) == (None, -1)
    assert Bottleneck("s", "r").cause == "stage"


def test_prometheus_exports_the_shuffle_buffer() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    n, cap, m, bs = 300, 150, 50, 20
    with feedq.Pipeline() as pipe:
        ids = feedq.range_input_producer(n, num_epochs=1, shuffle=False)
        batches = feedq.shuffle_batch(ids, bs, capacity=cap, min_after_dequeue=m, seed=3,
                                      allow_smaller_final_batch=True)
        wait_until(lambda: batches.queue.size() == cap - m, 10.0, "a full output queue")
        registry = CollectorRegistry()
        registry.register(feedq.prometheus_collector(pipe))
        text = generate_latest(registry).decode()
        got = [int(v) for b in batches for v in b]
    assert sorted(got) == list(range(n))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (size,) = families["feedq_shuffle_buffer_size"].samples
    assert size.labels == {"buffer": "shuffle_batch/random_shuffle_queue"}
    assert m <= size.value < m + 2 * bs
    (over,) = families["feedq_shuffle_fraction_over_min_after_dequeue"].samples
    assert 0.9 < over.value <= 1.0  # the output queue alone holds cap - m


# -- the store: a reader stage that waits on remote reads -----------------------------


def _reader(threads: int, busy: float) -> StageTiming:
    return StageTiming("input_producer/read", "runner", threads, busy, 0.5, 0.0, 1000, 8000)


def test_a_reader_waiting_on_the_store_is_named_limited_by_it() -> None:
    from feedq._observe.statistics import StorageTiming, store_verdict

    stages = [PRODUCER, _reader(4, 36.0)]
    b = verdict(10.0, stages, WAITING)
    assert b.stage == "input_producer/read" and b.cause == "stage"
    # 4 threads x 10 s: 24 s waiting on the store is 60 % of their time
    slow = StorageTiming(files_opened=8, requests=120, bytes=50_000_000, retries=0, throttled=0,
                         failures=0, wait_s=24.0)
    s = store_verdict(b, 10.0, stages, slow)
    assert s.stage == b.stage and s.cause == "store"
    assert s.reason.startswith(b.reason) and "waited 60% of their time on the store" in s.reason
    assert "120 requests, 50.0 MB" in s.reason and s.reason.endswith("docs/storage.md)")
    # below half their time, or no remote reads, or the consumer as the limit: unchanged
    assert store_verdict(b, 10.0, stages, StorageTiming(8, 120, 50_000_000, 0, 0, 0, 19.0)) == b
    assert store_verdict(b, 10.0, stages, None) == b
    idle = Bottleneck(None, "no bottleneck: the consumer is the limit", "consumer")
    assert store_verdict(idle, 10.0, stages, slow) == idle
