"""Pipeline statistics: per-stage timing, queue fill, consumer readiness and
the bottleneck verdict (the figures behind ``Pipeline.statistics()``).

Where the figures come from (always on, per block not per record):

* runner threads: ``feedq.runners`` times each op call and the queues add
  the time a call of that thread waited (``feedq._core.accounts``): a wait in an
  enqueue is *output* wait, a wait in a dequeue is *input* wait, the rest of
  the op is *busy* (reading, decoding, batching);
* queues: the engine counts dequeue calls, the size each found (mean fill),
  the peak size (max fill) and the calls that waited and for how long;
* the consumer: the dequeue calls on the pipeline's output stage's queue
  (a process stage counts its own takes);
* shuffle buffers (``shuffle_batch`` and friends): the elements held for
  random draws, beside the stage's output queue (see
  :class:`ShuffleBufferTiming`);
* remote storage (``s3://`` and other URLs): ``feedq.storage``'s counters
  since the pipeline started (:class:`StorageTiming`).

The classes are public as ``feedq.PipelineStatistics`` and friends (their
``__module__`` is ``feedq.pipeline``, which re-exports them).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Bottleneck",
    "ConsumerTiming",
    "PipelineStatistics",
    "QueueTiming",
    "ShuffleBufferTiming",
    "StageTiming",
    "StorageTiming",
    "collect",
    "format_report",
    "verdict",
]

# The verdict: the consumer is the limit when it waited at most this share
# of the elapsed time.
_CONSUMER_WAITS = 0.10
# ... and when at least this share of its takes found the data stored while
# the stage feeding it waited on its full queue (the consumer's wait was its
# first takes, before the pipeline filled).
_READY_TAKES = 0.90


@dataclass(frozen=True)
class StageTiming:
    """Where one stage's threads spent their time (seconds summed over its threads).

    Attributes:
        name: the stage's queue name (what it fills).
        kind: ``"producer"``, ``"batcher"``, ``"runner"`` (a plain
            :class:`~feedq.QueueRunner`) or ``"process"`` (a process stage;
            its workers' time is not visible here, only what it delivered).
        threads: threads (or worker processes) of the stage.
        busy_s: time running its op other than waiting on queues (reading,
            decoding, batching).
        input_wait_s: time blocked taking from an upstream queue.
        output_wait_s: time blocked putting into its own (full) queue.
        records_out: elements put into its queue (batches for a process stage).
        bytes_out: bytes of those elements as they sit in the queue (decoded
            arrays, not the records' payload on disk; exact for fixed-size
            numeric components, estimated from queued elements for the others).
        batch_size: the batch size of a batcher (elements per take), else ``None``.
        capacity: the capacity of the stage's queue (-1: unbounded or not a
            feedq queue).
    """

    name: str
    kind: str
    threads: int
    busy_s: float
    input_wait_s: float
    output_wait_s: float
    records_out: int
    bytes_out: int
    batch_size: int | None = None
    capacity: int = -1

    def share(self, elapsed: float) -> tuple[float, float, float]:
        """``(busy, input wait, output wait)`` as shares of ``elapsed`` x threads."""
        total = elapsed * max(self.threads, 1)
        if total <= 0:
            return 0.0, 0.0, 0.0
        return (min(1.0, self.busy_s / total), min(1.0, self.input_wait_s / total),
                min(1.0, self.output_wait_s / total))


@dataclass(frozen=True)
class QueueTiming:
    """How full one queue ran and how long its callers waited.

    Attributes:
        name: the queue's name.
        capacity: its bound (-1: unbounded).
        size: elements stored now.
        mean_fill: mean share of the capacity that dequeue calls found
            stored (0..1; 0 for an unbounded queue or before any dequeue).
        max_fill: the peak size as a share of the capacity (0..1).
        enqueue_wait_s: time enqueue calls spent blocked (queue full),
            including waits in progress.
        dequeue_wait_s: time dequeue calls spent blocked (queue empty),
            including waits in progress.
    """

    name: str
    capacity: int
    size: int
    mean_fill: float
    max_fill: float
    enqueue_wait_s: float
    dequeue_wait_s: float


@dataclass(frozen=True)
class ShuffleBufferTiming:
    """The shuffle buffer of a shuffling batcher (``shuffle_batch`` and friends).

    ``shuffle_batch(capacity=C, min_after_dequeue=M)`` keeps its elements in
    two places: the buffer the batches are drawn from (it draws a batch each
    time it holds ``M + batch_size``, so it holds at most that plus one
    inserted block) and the stage's output queue of drawn elements
    (``<name>/shuffled_fifo_queue``, capacity ``max(batch_size, C - M)``).

    Attributes:
        name: the buffer's name (``<name>/random_shuffle_queue``).
        output: the name of the queue its draws go to.
        size: elements in the buffer now.
        peak: the most it held.
        min_after_dequeue: ``M``.
        batch_size: elements per draw.
        capacity: ``C``, the capacity the user gave (buffer and output queue).
        fraction_over_min_after_dequeue: TF1's summary of the same name:
            ``max(0, held - M) / (C - M)``, where ``held`` is what the buffer
            and the output queue hold now (0: the consumer drains the shuffle
            queue down to its minimum; 1: full).
    """

    name: str
    output: str
    size: int
    peak: int
    min_after_dequeue: int
    batch_size: int
    capacity: int
    fraction_over_min_after_dequeue: float


@dataclass(frozen=True)
class ConsumerTiming:
    """The consumer's side: takes from the pipeline's output stage.

    Attributes:
        takes: dequeue calls (evaluations) so far.
        waited_takes: those that had to wait for data.
        wait_s: time spent waiting, including a wait in progress.
        readiness: share of takes that did not wait (1.0 before any take):
            the data-readiness figure; near 1 means training never waits on
            data.
    """

    takes: int
    waited_takes: int
    wait_s: float
    readiness: float


@dataclass(frozen=True)
class Bottleneck:
    """The limiting stage and why.

    Attributes:
        stage: the name of the stage that limits throughput (busy while its
            neighbours wait on it), or ``None``: no bottleneck in the
            pipeline, the consumer is the limit.
        reason: one line of evidence.
        cause: ``"consumer"`` (``stage`` is ``None``), ``"stage"`` (the
            stage's work: reading, decoding, batching) or ``"capacity"``
            (the stage's queue is too small for the consumer's takes: the
            consumer waits for the stage, which waits for room) or
            ``"store"`` (the stage's threads spent half their time or more
            waiting for remote reads: ``s3://``, ``gs://``, ... URLs).
    """

    stage: str | None
    reason: str
    cause: str = "stage"


@dataclass(frozen=True)
class StorageTiming:
    """Remote reads (``s3://``, ``gs://``, ... URLs) since the pipeline started.

    The counters are ``feedq.storage.statistics()``'s, which are the
    process's: two pipelines reading remote files at the same time see each
    other's reads. The reads of a process stage's workers are added, as each
    worker last reported them (at most 0.5 s old while it runs).

    Attributes:
        files_opened: remote files opened.
        requests: range and metadata requests sent, retries included.
        bytes: bytes received.
        retries: requests repeated after a transient failure.
        throttled: failures the store called throttling (503 SlowDown).
        failures: reads that failed after their retry budget.
        wait_s: seconds readers waited for the store (opens, and blocks
            not yet arrived), summed over reader threads.
        opened_ahead: opens served by a file opened ahead from a producer's
            hints (docs/storage.md).
        blocking_requests: requests a reader sent only when it needed their
            answer: the round trips on the readers' path.
    """

    files_opened: int
    requests: int
    bytes: int
    retries: int
    throttled: int
    failures: int
    wait_s: float
    opened_ahead: int = 0
    blocking_requests: int = 0

    @classmethod
    def between(cls, start: Mapping[str, float], now: Mapping[str, float]) -> StorageTiming | None:
        """The reads between two ``feedq.storage.statistics()`` snapshots;
        None if there were none."""
        d = {k: now.get(k, 0) - start.get(k, 0) for k in now}
        if not (d.get("files_opened") or d.get("requests")):
            return None
        return cls(
            files_opened=int(d.get("files_opened", 0)), requests=int(d.get("requests", 0)),
            bytes=int(d.get("bytes", 0)), retries=int(d.get("retries", 0)),
            throttled=int(d.get("throttled", 0)), failures=int(d.get("failures", 0)),
            wait_s=float(d.get("wait_s", 0.0)), opened_ahead=int(d.get("opened_ahead", 0)),
            blocking_requests=int(d.get("blocking_requests", 0)),
        )


@dataclass(frozen=True)
class PipelineStatistics:
    """A snapshot of a pipeline (:meth:`feedq.Pipeline.statistics`).

    Attributes:
        elapsed: seconds since the pipeline started.
        stages: per-stage timing, upstream first (producers, readers and
            decoders, batchers; process stages last).
        queues: per-queue fill and waits, in the same order.
        consumer: the consumer's takes and data readiness.
        bottleneck: the verdict.
        shuffle_buffers: the shuffle buffers of shuffling batchers.
        storage: remote reads since the start, or None if there were none.
    """

    elapsed: float
    stages: tuple[StageTiming, ...]
    queues: tuple[QueueTiming, ...]
    consumer: ConsumerTiming
    bottleneck: Bottleneck
    shuffle_buffers: tuple[ShuffleBufferTiming, ...] = ()
    storage: StorageTiming | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts, lists, strings and numbers (JSON-serialisable), for
        TensorBoard / W&B logging."""
        out: dict[str, Any] = _finite(dataclasses.asdict(self))
        return out


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats replaced by 0.0 (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    return value


# -- collecting ---------------------------------------------------------------------------


def _queue_figures(q: Any, now: float) -> dict[str, Any]:
    """Raw figures of a feedq queue (see ``QueueEngine._timing``); waits in
    progress added up to ``now`` (``time.monotonic``)."""
    (size, peak, enqueued, _dequeued, takes, fill_sum, enq_waits, deq_waits, enq_s,
     deq_s) = q._timing()
    for is_enqueue, _ident, since, _n in q._blocked():
        if is_enqueue:
            enq_s += max(0.0, now - since)
        else:
            deq_s += max(0.0, now - since)
            deq_waits += 1
            takes += 1
    return {
        "size": size, "peak": peak, "enqueued": enqueued, "takes": takes,
        "fill_sum": fill_sum, "enq_waits": enq_waits, "deq_waits": deq_waits,
        "enq_s": enq_s, "deq_s": deq_s,
    }


def queue_timing(q: Any, now: float) -> QueueTiming:
    f = _queue_figures(q, now)
    cap = int(q.capacity)
    takes = f["takes"]
    mean = f["fill_sum"] / takes / cap if cap > 0 and takes else 0.0
    return QueueTiming(
        name=str(q.name), capacity=cap, size=int(f["size"]),
        mean_fill=min(1.0, mean), max_fill=min(1.0, f["peak"] / cap) if cap > 0 else 0.0,
        enqueue_wait_s=float(f["enq_s"]), dequeue_wait_s=float(f["deq_s"]),
    )


def _row_bytes(q: Any) -> float:
    """Bytes of one element of ``q``: exact for fixed-size numeric
    components, estimated from up to 32 stored values for the others."""
    with q._mutex:
        cols = list(q._cols)
        samples = {comp.index: q._stored_sample(comp.index, 256) for comp in q._components if not comp.dense}
    total = 0.0
    for comp, col in zip(q._components, cols):
        if comp.dense:
            total += col.itemsize * math.prod(col.shape[1:])
            continue
        seen: list[int] = []
        for v in samples[comp.index]:
            if isinstance(v, np.ndarray):
                seen.append(v.nbytes)
            elif isinstance(v, (bytes, bytearray)):
                seen.append(len(v))
            if len(seen) >= 32:
                break
        if seen:
            total += sum(seen) / len(seen)
    return total


def stage_timing(runner: Any, kind: str, now: float,
                 batch_size: int | None = None) -> StageTiming:
    """A runner's threads' time (``feedq._core.accounts`` accounts) and its output."""
    busy = in_s = out_s = 0.0
    for acc in runner._time_accounts():
        op_s, i, o = acc.snapshot(now)
        in_s += i
        out_s += o
        busy += max(0.0, op_s - i - o)
    q = runner.queue
    records = nbytes = 0
    if hasattr(q, "_timing"):
        records = int(q._timing()[2])
        nbytes = int(records * _row_bytes(q))
    return StageTiming(
        name=runner.name, kind=kind, threads=len(runner.enqueue_ops), busy_s=busy,
        input_wait_s=in_s, output_wait_s=out_s, records_out=records, bytes_out=nbytes,
        batch_size=batch_size, capacity=int(getattr(q, "capacity", -1)),
    )


def shuffle_timing(shuffler: Any, capacity: int) -> ShuffleBufferTiming:
    """A :class:`feedq.input._shuffle.ShuffleBuffer` and the capacity the
    user gave its batcher."""
    buf, out = shuffler.queue, shuffler.output
    size, peak = int(buf.size()), int(buf._timing()[1])
    m = int(shuffler.min_after_dequeue)
    over = max(0, size + int(out.size()) - m)
    return ShuffleBufferTiming(
        name=str(buf.name), output=str(out.name), size=size, peak=peak, min_after_dequeue=m,
        batch_size=int(shuffler.batch_size), capacity=int(capacity),
        fraction_over_min_after_dequeue=min(1.0, over / max(1, capacity - m)),
    )


def process_timing(stage: Any, name: str) -> tuple[StageTiming, ConsumerTiming]:
    """A process stage: what its workers delivered, and its consumer's takes."""
    st = stage.statistics()
    takes = int(st.takes)
    waited = takes - int(st.ready)
    timing = StageTiming(
        name=name, kind="process", threads=int(st.num_processes), busy_s=0.0,
        input_wait_s=0.0, output_wait_s=0.0, records_out=int(sum(st.received)),
        bytes_out=int(st.bytes_received),
    )
    wait_s = float(st.wait_seconds)
    since = getattr(stage, "_waiting_since", None)
    if since is not None:
        wait_s += max(0.0, time.perf_counter() - since)
    consumer = ConsumerTiming(takes=takes, waited_takes=waited, wait_s=wait_s,
                              readiness=1.0 - waited / takes if takes else 1.0)
    return timing, consumer


def consumer_timing(q: Any, now: float) -> ConsumerTiming:
    f = _queue_figures(q, now)
    takes, waited = int(f["takes"]), int(f["deq_waits"])
    return ConsumerTiming(takes=takes, waited_takes=waited, wait_s=float(f["deq_s"]),
                          readiness=1.0 - waited / takes if takes else 1.0)


def collect(
    elapsed: float,
    runners: Sequence[tuple[Any, str]],
    queues: Iterable[Any],
    output_queue: Any,
    process: Sequence[tuple[Any, str]] = (),
    batch_sizes: Mapping[int, int] | None = None,
    shuffles: Sequence[tuple[Any, int]] = (),
    now: float | None = None,
    storage: StorageTiming | None = None,
) -> PipelineStatistics:
    """Assemble a :class:`PipelineStatistics`.

    Args:
        elapsed: seconds since the start.
        runners: ``(runner, kind)``, upstream first.
        queues: the feedq queues to report (deduplicated, in order).
        output_queue: the queue the consumer takes from, or ``None``.
        process: ``(process stage, name)`` pairs; the last one's takes are
            the consumer's when ``output_queue`` is ``None``.
        batch_sizes: a batcher's batch size by ``id(runner)``.
        shuffles: ``(shuffle buffer, the capacity its batcher was given)``.
        now: the time of the snapshot on the pipeline's clock
            (``feedq._observe.clock``; default ``time.monotonic()``): waits
            in progress count up to it.
        storage: remote reads since the start (:meth:`StorageTiming.between`).
    """
    if now is None:
        now = time.monotonic()
    sizes = batch_sizes or {}
    stages = [stage_timing(r, kind, now, sizes.get(id(r))) for r, kind in runners]
    consumer = ConsumerTiming(0, 0, 0.0, 1.0)
    for stage, name in process:
        timing, consumer_p = process_timing(stage, name)
        stages.append(timing)
        if output_queue is None:
            consumer = consumer_p
    qs: list[QueueTiming] = []
    seen: set[int] = set()
    for q in queues:
        if id(q) not in seen and hasattr(q, "_timing"):
            seen.add(id(q))
            qs.append(queue_timing(q, now))
    if output_queue is not None and hasattr(output_queue, "_timing"):
        consumer = consumer_timing(output_queue, now)
    stages_t = tuple(stages)
    return PipelineStatistics(
        elapsed=elapsed, stages=stages_t, queues=tuple(qs), consumer=consumer,
        bottleneck=store_verdict(verdict(elapsed, stages_t, consumer), elapsed, stages_t, storage),
        shuffle_buffers=tuple(shuffle_timing(sh, cap) for sh, cap in shuffles),
        storage=storage,
    )


# -- the verdict ----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100.0 * x:.0f}%"


def verdict(elapsed: float, stages: Sequence[StageTiming], consumer: ConsumerTiming) -> Bottleneck:
    """Name the stage that limits throughput.

    A consumer that spends little of its time waiting for data is the limit
    itself (``stage=None``), and so is one that takes nothing while the
    stage feeding it sits blocked on its full queue. Otherwise the blame
    starts at the stage nearest the consumer and moves upstream while the
    stage holding it spends more time waiting on its input than working:
    the first stage found busy, not starved, is the bottleneck (busy while
    the stage after it, or the consumer, waits on it).
    """
    if not stages:
        return Bottleneck(None, "no stage timed yet", "consumer")
    wait_share = consumer.wait_s / elapsed if elapsed > 0 else 0.0
    last = stages[-1]
    l_busy, l_in, l_out = last.share(elapsed)
    if not consumer.takes:
        if l_out > max(l_busy, l_in):
            return Bottleneck(None, (
                f"no bottleneck: the consumer is the limit (it has taken nothing while "
                f"{last.name!r} waited {_pct(l_out)} of its time on its full queue)"),
                "consumer")
        if not consumer.wait_s and not any(s.busy_s for s in stages):
            return Bottleneck(None, "no bottleneck: nothing has run yet", "consumer")
    elif wait_share <= _CONSUMER_WAITS:
        return Bottleneck(None, (
            f"no bottleneck: the consumer is the limit (it waited {_pct(wait_share)} of "
            f"the time; data was ready for {_pct(consumer.readiness)} of {consumer.takes} "
            "takes)"), "consumer")
    if consumer.readiness >= _READY_TAKES and l_out > max(l_busy, l_in):
        # The stage feeding the consumer sits on a full queue and nearly
        # every take found its batch stored: what the consumer waited was
        # a few takes (the first ones, while the pipeline started), not a
        # stage that cannot keep up.
        return Bottleneck(None, (
            f"no bottleneck: the consumer is the limit (it waited {_pct(wait_share)} of the "
            f"time, in {consumer.waited_takes} of {consumer.takes} takes ({consumer.wait_s:.3f} s); "
            f"data was ready for {_pct(consumer.readiness)} of its takes and {last.name!r} waited "
            f"{_pct(l_out)} of its time for room in its full queue)"), "consumer")
    small = _small_capacity(elapsed, last, consumer, wait_share)
    if small is not None:
        return small
    # The consumer waits: walk upstream from the stage nearest it.
    i = len(stages) - 1
    while i > 0:
        busy, inp, out = stages[i].share(elapsed)
        if inp > busy and inp > out:
            i -= 1
            continue
        break
    s = stages[i]
    busy, inp, out = s.share(elapsed)
    if i < len(stages) - 1:
        nxt = stages[i + 1]
        waiter = f"{nxt.name!r} waits {_pct(nxt.share(elapsed)[1])} of its time on input"
    elif consumer.takes:
        waiter = (f"the consumer waits {_pct(wait_share)} of the time (data ready for "
                  f"{_pct(consumer.readiness)} of its takes)")
    else:
        waiter = f"the consumer waits for its first take ({consumer.wait_s:.2f} s)"
    note = ""
    if s is last and last.batch_size and 0 < last.capacity < last.batch_size:
        note = (f"; its queue's capacity {last.capacity} < batch_size {last.batch_size} also "
                f"makes every take wait: raise capacity to >= 2 x batch_size")
    return Bottleneck(s.name, (
        f"{s.kind} {s.name!r} is busy {_pct(busy)} of its time ({s.threads} "
        f"thread{'s' if s.threads != 1 else ''}; input wait {_pct(inp)}, output wait "
        f"{_pct(out)}) while {waiter}{note}"))


#: A stage whose threads waited on the store this share of their time is limited by it.
_STORE_WAITS = 0.5


def store_verdict(b: Bottleneck, elapsed: float, stages: Sequence[StageTiming],
                  storage: StorageTiming | None) -> Bottleneck:
    """``b``, or the same stage named limited by the store: when the
    bottleneck stage's threads spent at least half their time waiting for
    remote reads (``storage.wait_s``, opens and blocks not yet arrived).

    The storage figures are the process's (docs/statistics.md), so with
    several stages reading remote files at once the share is an upper bound
    for each.
    """
    if storage is None or b.stage is None or elapsed <= 0:
        return b
    stage = next((s for s in stages if s.name == b.stage), None)
    if stage is None or stage.kind == "process":
        return b
    share = storage.wait_s / (elapsed * max(stage.threads, 1))
    if share < _STORE_WAITS:
        return b
    return Bottleneck(b.stage, (
        f"{b.reason}; its threads waited {_pct(min(share, 1.0))} of their time on the store "
        f"({storage.requests:,} requests, {storage.bytes / 1e6:,.1f} MB): limited by the store "
        "(more reader threads, or a larger read-ahead: docs/storage.md)"), "store")


def _small_capacity(elapsed: float, last: StageTiming, consumer: ConsumerTiming,
                    wait_share: float) -> Bottleneck | None:
    """The consumer waits on the stage feeding it while that stage waits
    for room in its own queue: the queue is too small for the consumer's
    takes (capacity < batch size: a take can never find a whole batch
    stored, it collects the batch while the stage refills the queue)."""
    if last.kind == "process" or not consumer.takes or last.capacity <= 0:
        return None
    busy, inp, out = last.share(elapsed)
    bs = last.batch_size
    below = bs is not None and last.capacity < bs
    if not (out >= busy and out > inp and (below or out >= 0.5)):
        return None
    if bs is not None and last.capacity >= 2 * bs:
        return None  # the advice would be to have what it has
    figures = (f"{last.kind} {last.name!r} waits {_pct(out)} of its time for room in its "
               f"queue and is busy {_pct(busy)}, while the consumer waits {_pct(wait_share)} of "
               f"the time (data ready for {_pct(consumer.readiness)} of its takes)")
    if below:
        assert bs is not None
        head = (f"queue capacity {last.capacity} < batch_size {bs}: the consumer's take waits "
                f"for the {last.kind}, which waits for room")
    else:
        head = (f"queue capacity {last.capacity} holds too little ahead of the consumer's "
                f"takes: the consumer's take waits for the {last.kind}, which waits for room")
    advice = (f"raise capacity to >= 2 x batch_size ({2 * bs})" if bs else
              "raise its capacity")
    return Bottleneck(last.name, f"{head} ({figures}); {advice}", "capacity")


# -- the table ------------------------------------------------------------------------------


def format_report(stats: PipelineStatistics) -> str:
    """The per-stage table, the queue table, the consumer line and the verdict.

    ``busy``/``in wait``/``out wait`` are shares of the elapsed time per
    thread; ``rec/s`` and ``out MB/s`` (bytes of the elements the stage put
    into its queue, decoded, in MB = 1e6 bytes) are over the elapsed time.
    """
    el = stats.elapsed
    names = ([s.name for s in stats.stages] + [q.name for q in stats.queues]
             + [b.name for b in stats.shuffle_buffers])
    w = min(48, max([12, *map(len, names)]))
    lines = [f"pipeline statistics after {el:.2f} s"]
    header = (f"{'stage':<{w}} {'kind':<9} {'thr':>3} {'busy':>6} {'in wait':>8} "
              f"{'out wait':>8} {'records':>10} {'rec/s':>10} {'out MB/s':>8}")
    lines.append(header)
    lines.append("-" * len(header))
    for s in stats.stages:
        busy, inp, out = s.share(el)
        rate = s.records_out / el if el > 0 else 0.0
        mb = s.bytes_out / el / 1e6 if el > 0 else 0.0
        lines.append(
            f"{_clip(s.name, w):<{w}} {s.kind:<9} {s.threads:>3} {_pct(busy):>6} {_pct(inp):>8} "
            f"{_pct(out):>8} {s.records_out:>10} {rate:>10.1f} {mb:>8.2f}")
    if stats.queues:
        qheader = (f"{'queue':<{w}} {'size':>11} {'mean fill':>9} {'max fill':>8} "
                   f"{'enq wait s':>10} {'deq wait s':>10}")
        lines.append("")
        lines.append(qheader)
        lines.append("-" * len(qheader))
        for q in stats.queues:
            cap = "inf" if q.capacity < 0 else str(q.capacity)
            size = f"{q.size}/{cap}"
            lines.append(
                f"{_clip(q.name, w):<{w}} {size:>11} {_pct(q.mean_fill):>9} "
                f"{_pct(q.max_fill):>8} {q.enqueue_wait_s:>10.3f} {q.dequeue_wait_s:>10.3f}")
    if stats.shuffle_buffers:
        sheader = (f"{'shuffle buffer':<{w}} {'size':>6} {'peak':>6} {'draws at':>9} "
                   f"{'capacity':>8} {'over min':>8}")
        lines.append("")
        lines.append(sheader)
        lines.append("-" * len(sheader))
        for sb in stats.shuffle_buffers:
            lines.append(
                f"{_clip(sb.name, w):<{w}} {sb.size:>6} {sb.peak:>6} "
                f"{sb.min_after_dequeue + sb.batch_size:>9} {sb.capacity:>8} "
                f"{_pct(sb.fraction_over_min_after_dequeue):>8}")
        lines.append("  (draws at: min_after_dequeue + batch_size; capacity: as given, buffer "
                     "plus output queue; over min: TF1's fraction_over_min_after_dequeue)")
    c = stats.consumer
    lines.append("")
    lines.append(f"consumer: {c.takes} takes, {c.waited_takes} waited ({c.wait_s:.3f} s); "
                 f"data readiness {_pct(c.readiness)}")
    st = stats.storage
    if st is not None:
        share = f" ({st.wait_s / el:.0%} of the elapsed time, summed over readers)" if el > 0 else ""
        lines.append(
            f"remote storage: {st.files_opened} files opened, {st.requests} requests ({st.retries} "
            f"retried, {st.throttled} throttled, {st.failures} failed), {st.bytes / 1e6:.1f} MB; "
            f"readers waited {st.wait_s:.3f} s for the store{share}")
    b = stats.bottleneck
    lines.append(f"bottleneck: {b.stage if b.stage is not None else 'none'} - {b.reason}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
