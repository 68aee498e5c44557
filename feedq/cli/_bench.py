"""The measuring loop behind ``feedq bench`` and ``feedq demo``:
files -> string_input_producer -> reader threads (read_block + decode) ->
batch_join / shuffle_batch_join -> a consumer loop that times itself.

The schema comes from :mod:`feedq.cli._schema` (inferred before the pipeline
starts), blocks are decoded by a :class:`feedq.cli._decode.Decoder`. Each
record carries its payload size through the queues as one extra int64
component, so MB/s counts exactly the records delivered to the consumer,
not the blocks that readers happened to read ahead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from feedq import input as finput
from feedq.cli._decode import Decoder
from feedq.cli._imageset import IMAGE_BLOCK, ImageDecoder
from feedq.cli._schema import OnError, Schema, make_reader
from feedq.errors import DeadlineExceededError, OutOfRangeError
from feedq.pipeline import Pipeline, PipelineStatistics

__all__ = ["BenchResult", "cpu_advice", "cpu_ms_per_image", "cpu_seconds", "make_decoder", "run_bench",
           "verdict_line"]


@dataclass
class BenchResult:
    """What ``feedq bench`` / ``feedq demo`` report."""

    format: str
    files: int
    compression: str = "none"
    records: int = 0
    batches: int = 0
    seconds: float = 0.0
    payload_bytes: int = 0
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    #: Time the consumer loop spent inside its take (blocked waiting plus
    #: copying the batch out), over ``seconds``; kept for compatibility.
    consumer_wait_fraction: float = 0.0
    #: Time the consumer was blocked waiting for data (the statistics'
    #: ``consumer.wait_s``), over the pipeline's elapsed time.
    consumer_blocked_fraction: float = 0.0
    batch_queue_fill_mean: float = 0.0
    batch_queue_fill_max: float = 0.0
    filename_queue_fill_mean: float = 0.0
    skipped_errors: int = 0
    stopped_by: str = "end of data"
    #: CPU seconds of the process (all threads) over ``seconds``.
    cpu_seconds: float = 0.0
    #: CPUs this process may use.
    cpus: int = 1
    #: CPU-seconds per second other processes used meanwhile (the machine's
    #: busy time from /proc/stat minus this process's); None where unknown.
    others_cpu: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``Pipeline.statistics()`` when the consumer stopped (None: ``direct``).
    statistics: PipelineStatistics | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the figures, the per-stage ``stages``, ``queues``,
        ``consumer`` and the ``bottleneck`` (stage, reason) with the
        ``verdict`` line."""
        out = {k: v for k, v in asdict(self).items() if k != "statistics"}
        if self.statistics is not None:
            stats = self.statistics.as_dict()
            out.update({k: stats[k] for k in ("stages", "queues", "consumer", "bottleneck")})
        else:
            out.update({"stages": [], "queues": [], "consumer": None,
                        "bottleneck": {"stage": DIRECT_STAGE, "reason": DIRECT_REASON}})
        if self.format == "images":
            out["images"] = self.records
            out["images_per_s"] = self.records_per_s
            out["cpu_ms_per_image"] = cpu_ms_per_image(self)
        out["verdict"] = verdict_line(self)
        return out


def cpu_ms_per_image(result: BenchResult) -> float | None:
    """Process CPU milliseconds (all threads, reaped children) per record delivered."""
    return 1000 * result.cpu_seconds / result.records if result.records else None


#: The verdict of a ``direct`` run: there is no pipeline to time.
DIRECT_STAGE = "read + decode (direct loop)"
DIRECT_REASON = ("one reader in the calling thread, no queues or threads: reading and decoding "
                 "are the whole run")


def verdict_line(result: BenchResult) -> str:
    """Which stage of the bench pipeline limits it, in its own terms, and why.

    The bench pipeline is ``string_input_producer`` (the file names) ->
    reader threads (``read_block`` + decode, enqueuing into the batch
    queue: the *batcher* stage) -> the consumer (the measuring loop, with
    ``--device`` the device feeder, in the demo the model).
    """
    line = _verdict(result)
    if 0 < result.seconds < SHORT_RUN:
        line += (f" (a run of {result.seconds:.2f} s: more records or --epochs give a steadier "
                 "verdict)")
    return line


#: Runs shorter than this (seconds) get a caveat with their verdict.
SHORT_RUN = 0.5


def _verdict(result: BenchResult) -> str:
    stats = result.statistics
    if stats is None:
        return f"bottleneck: {DIRECT_STAGE}: {DIRECT_REASON}"
    b = stats.bottleneck
    kinds = {s.name: s.kind for s in stats.stages}
    threads = {s.name: s.threads for s in stats.stages}
    reason = b.reason.removeprefix("no bottleneck: ")
    if b.stage is None:
        if not stats.consumer.takes and "nothing" in b.reason:
            return f"bottleneck: not known yet: {reason}"
        who = "the consumer (" + ("the model" if result.extra.get("train steps") else
                                  "the device feeder" if "device" in result.extra else
                                  "this measuring loop") + ")"
        why = reason.removeprefix("the consumer is the limit").strip()
        if why.startswith("(") and why.endswith(")"):
            why = why[1:-1]
        if "device" in result.extra:
            # The pipeline's consumer is the device feeder, not the loop.
            why = why.replace("it waited", "the device feeder waited on the pipeline", 1)
        return f"bottleneck: none in the pipeline: {who} is the limit: {why}"
    if b.cause == "capacity":
        return f"bottleneck: the capacity of the batch queue {b.stage!r}: {reason}"
    if kinds.get(b.stage) == "batcher":
        n = threads.get(b.stage, 1)
        hint = _readers_hint(result, stats, b.stage)
        work = "read_block + decode + augment" if result.format == "images" else "read_block + decode"
        return (f"bottleneck: the readers ({work}, {n} thread{'s' if n != 1 else ''} "
                f"feeding {b.stage!r}): {reason}; {hint}")
    if kinds.get(b.stage) == "producer":
        return f"bottleneck: the file names ({b.stage!r}): {b.reason}"
    return f"bottleneck: {b.stage!r}: {b.reason}"


def make_decoder(schema: Schema, on_error: OnError) -> Decoder | ImageDecoder:
    """The block decoder of ``schema``: records to columns, or (format
    ``images``) encoded images to augmented uint8 batches."""
    if schema.fmt == "images":
        return ImageDecoder(schema, on_error)
    return Decoder(schema, on_error)


@dataclass
class _Tally:
    """The consumer's running figures."""

    t0: float
    cpu0: float = field(default_factory=lambda: cpu_seconds())
    machine0: float | None = field(default_factory=lambda: machine_busy_seconds())
    payload: int = 0
    waited: float = 0.0
    fill_sum: float = 0.0
    fill_max: float = 0.0
    fname_sum: float = 0.0
    samples: int = 0


def _unwrap(cols: list[Any]) -> Any:
    return cols if len(cols) > 1 else cols[0]


def run_bench(
    paths: list[str],
    schema: Schema,
    *,
    batch_size: int = 256,
    readers: int = 2,
    threads: int = 1,
    shuffle: bool = False,
    min_after_dequeue: int = 1000,
    epochs: int | None = 1,
    duration: float | None = None,
    max_records: int | None = None,
    on_error: OnError = "raise",
    consume: Callable[[Any], None] | None = None,
    progress: Callable[[BenchResult, list[Any]], None] | None = None,
    progress_every: float = 0.25,
    seed: int = 0,
    device: str | None = None,
    block_records: int | None = None,
    direct: bool = False,
) -> BenchResult:
    """Run the pipeline until the data, ``duration`` or ``max_records`` ends.

    ``consume(batch)`` is called on every batch (the demo trains there);
    ``progress(result, queues)`` every ``progress_every`` seconds, with the
    running figures and the queues' statistics (filenames, batches).
    Readers take ``block_records`` records per ``read_block`` (default
    ``max(batch_size, 4096)``): decoding a block is one call, and the batch
    queue re-slices blocks into batches (``enqueue_many``), so the per-record
    Python work is nil. With ``device``, batches go through a :class:`feedq.devices.DeviceFeeder`
    to that device first (NumPy on the host, torch tensors elsewhere).
    KeyboardInterrupt stops the pipeline cleanly and returns what was
    measured, with ``stopped_by == "interrupted"``.

    Raises:
        FeedqError: a read or decode error (with ``on_error="raise"``).
    """
    if direct:
        return _run_direct(paths, schema, batch_size=batch_size, epochs=epochs, shuffle=shuffle, seed=seed,
                           duration=duration, max_records=max_records, on_error=on_error, consume=consume,
                           block_records=block_records or (1 << 20))
    result = BenchResult(format=schema.fmt, files=len(paths), compression=schema.compression or "none")
    if shuffle and any(None in s for s in schema.shapes):
        schema = schema.padded()  # shuffle_batch cannot pad per batch (as in TF1)
    block = block_records or (IMAGE_BLOCK if schema.fmt == "images" else max(batch_size, 4096))
    reader_objs: list[Any] = []
    decode = make_decoder(schema, on_error)
    dynamic = any(None in s for s in schema.shapes)
    tally = _Tally(time.perf_counter())
    last_progress = tally.t0
    stopped_at: float | None = None
    try:
        with Pipeline() as pipe:
            files = finput.string_input_producer(paths, num_epochs=epochs, shuffle=shuffle, seed=seed,
                                                 capacity=max(32, 2 * len(paths)))
            inputs = []
            for i in range(readers):
                reader = make_reader(schema, on_error, name=f"bench-reader-{i}")
                reader_objs.append(reader)

                def read(reader: Any = reader) -> list[np.ndarray]:
                    cols, lengths = decode(reader.read_block(files, block))
                    return [*cols, lengths]  # the payload rides along as the last component

                inputs.extend([read] * threads)
            common: dict[str, Any] = {"enqueue_many": True, "dtypes": [*schema.dtypes, np.int64],
                                      "shapes": [*schema.shapes, []], "allow_smaller_final_batch": True}
            capacity = max(4 * batch_size, 2 * readers * threads * block)
            if shuffle:
                stage = finput.shuffle_batch_join(inputs, batch_size, capacity=min_after_dequeue + capacity,
                                                  min_after_dequeue=min_after_dequeue, seed=seed, **common)
            else:
                stage = finput.batch_join(inputs, batch_size, capacity=capacity, dynamic_pad=dynamic, **common)
            deadline = None if duration is None else tally.t0 + duration
            take, feeder = _taker(stage, device)
            if feeder is not None:
                result.extra["device"] = device
            try:
                while True:
                    w0 = time.perf_counter()
                    try:
                        batch, nbytes = take(None if deadline is None else max(0.0, deadline - w0))
                    except OutOfRangeError:
                        break
                    except DeadlineExceededError:
                        result.stopped_by = "duration"
                        break
                    now = time.perf_counter()
                    tally.waited += now - w0
                    tally.payload += nbytes
                    first = batch[0] if isinstance(batch, list) else batch
                    result.records += int(first.shape[0])
                    result.batches += 1
                    qs = stage.queue.statistics()
                    fill = qs.size / qs.capacity if qs.capacity > 0 else 0.0
                    tally.fill_sum += fill
                    tally.fill_max = max(tally.fill_max, fill)
                    fs = files.queue.statistics()
                    tally.fname_sum += fs.size / fs.capacity if fs.capacity > 0 else 0.0
                    tally.samples += 1
                    if consume is not None:
                        consume(batch)
                    if max_records is not None and result.records >= max_records:
                        result.stopped_by = "records"
                        break
                    if deadline is not None and now >= deadline:
                        result.stopped_by = "duration"
                        break
                    if progress is not None and now - last_progress >= progress_every:
                        last_progress = now
                        _finish(result, tally, now, reader_objs, decode)
                        progress(result, [fs, qs])
            finally:
                # Stop the clock before teardown; stop the pipeline first so a
                # feeder blocked on the stage wakes, then close the feeder.
                stopped_at = time.perf_counter()
                result.statistics = stats = pipe.statistics()
                if stats.elapsed > 0:
                    result.consumer_blocked_fraction = min(1.0, stats.consumer.wait_s / stats.elapsed)
                pipe.stop()
                if feeder is not None:
                    feeder.close()
    except KeyboardInterrupt:
        result.stopped_by = "interrupted"
    finally:
        for r in reader_objs:
            r.close()
    _finish(result, tally, stopped_at or time.perf_counter(), reader_objs, decode)
    return result


def _taker(stage: Any, device: str | None) -> tuple[Callable[[float | None], tuple[Any, int]], Any]:
    """``take(timeout) -> (batch, payload bytes)`` from the stage, through a
    device feeder when ``device`` is set; and the feeder (or None)."""
    if device is None:
        def take(t: float | None) -> tuple[Any, int]:
            *cols, lengths = stage.dequeue(timeout=t)
            return _unwrap(cols), int(lengths.sum())

        return take, None
    from feedq.devices import DeviceFeeder

    # The feeder reads the stage as a queue: each batch is dequeued straight
    # into its staging slot (Stage.dequeue_many(out=)). The payload lengths
    # ride along as the last component, kept on the host.
    on_host = device in ("cpu", "/cpu:0", "host")
    last = len(stage.dtypes) - 1
    where: Any = device if on_host else {i: (device if i < last else "cpu") for i in range(last + 1)}
    feeder = DeviceFeeder(stage, device=where, output="numpy" if on_host else "torch",
                          name="bench-feeder")

    def take_fed(t: float | None) -> tuple[Any, int]:
        *cols, lengths = feeder.get(timeout=t)
        return _unwrap(cols), int(lengths.sum())

    return take_fed, feeder


def _run_direct(
    paths: list[str],
    schema: Schema,
    *,
    batch_size: int,
    epochs: int | None,
    shuffle: bool,
    seed: int,
    duration: float | None,
    max_records: int | None,
    on_error: OnError,
    consume: Callable[[Any], None] | None,
    block_records: int,
) -> BenchResult:
    """One reader in the calling thread: read a block, decode it in one call,
    cut it into batches (views). No queues, no threads: the same loop as
    ``benchmarks/readers.py`` measures, so the two print the same figures."""
    from feedq.queues import FIFOQueue

    result = BenchResult(format=schema.fmt, files=len(paths), compression=schema.compression or "none")
    result.extra["mode"] = "direct (one reader, no pipeline)"
    q = FIFOQueue(-1, str, shapes=[[]])
    rng = np.random.default_rng(seed)
    for _ in range(epochs if epochs is not None else 1):
        order = rng.permutation(len(paths)) if shuffle else range(len(paths))
        q.enqueue_many([[paths[i] for i in order]])
    q.close()
    reader = make_reader(schema, on_error, name="bench-reader")
    decode = make_decoder(schema, on_error)
    tally = _Tally(time.perf_counter())
    deadline = None if duration is None else tally.t0 + duration
    try:
        with reader:
            while result.stopped_by == "end of data":
                try:
                    blk = reader.read_block(q, block_records)
                except OutOfRangeError:
                    break
                cols, lengths = decode(blk)
                for s in range(0, len(lengths), batch_size):
                    batch = [c[s : s + batch_size] for c in cols]
                    result.records += int(batch[0].shape[0])
                    result.batches += 1
                    tally.payload += int(lengths[s : s + batch_size].sum())
                    if consume is not None:
                        consume(_unwrap(batch))
                    if max_records is not None and result.records >= max_records:
                        result.stopped_by = "records"
                        break
                if deadline is not None and time.perf_counter() >= deadline and result.stopped_by == "end of data":
                    result.stopped_by = "duration"
    except KeyboardInterrupt:
        result.stopped_by = "interrupted"
    _finish(result, tally, time.perf_counter(), [reader], decode)
    return result


def _readers_hint(result: BenchResult, stats: PipelineStatistics, stage: str) -> str:
    """Whether more reader threads can help, from the CPU time the process
    used and the time the readers' threads were busy."""
    used = result.cpu_seconds / result.seconds if result.seconds > 0 else 0.0
    busy_s = sum(s.busy_s for s in stats.stages if s.name == stage)
    busy = busy_s / stats.elapsed if stats.elapsed > 0 else 0.0
    return cpu_advice(busy, used, result.cpus, result.others_cpu)


#: The process got less CPU than this (CPUs) while its threads were busy:
#: other processes held the CPUs (one thread holding the GIL gets ~1).
_STARVED_CPU = 0.6


def cpu_advice(busy: float, used: float, cpus: int, others: float | None = None) -> str:
    """The advice on readers that the figures support.

    Args:
        busy: thread-seconds per second the reader threads were busy (not
            waiting on queues): the CPU they asked for.
        used: CPU-seconds per second the process used (all threads).
        cpus: CPUs the process may use.
        others: CPU-seconds per second other processes used meanwhile
            (None: unknown): when they took what this process's busy
            threads lacked, the machine's load is named, not the GIL.
    """
    figures = (f"the reader threads were busy {busy:.1f} thread-s/s, the process used {used:.1f} "
               f"of {cpus} CPUs")
    if others is not None:
        figures += f", other processes {others:.1f}"
    if busy > used + 0.5:  # the busy threads did not get the CPU they wanted
        if others is not None and used + others >= cpus - 0.5 and others >= 0.5:
            return (f"{figures}: other processes held the CPUs the busy threads lacked "
                    "(machine load), not the GIL; re-run on a quieter machine before tuning "
                    "readers")
        if used < _STARVED_CPU:
            return (f"{figures}: other processes held the CPUs (machine load), not decoding or "
                    "the GIL; re-run on a quieter machine before tuning readers")
        if used >= cpus - 0.5:
            return f"{figures}: every CPU is busy; cheaper decoding would help, more readers not"
        if used <= 1.0 + (1.0 - _STARVED_CPU):
            return (f"{figures}: the process ran about one CPU at a time, so the busy threads "
                    "took turns on the GIL; more readers will not help, cheaper decoding or "
                    "decoding in worker processes (process_stage) would")
        return (f"{figures}: busy threads waited for the GIL or for CPUs other processes held "
                "(CPUs were left over); more readers will not help, cheaper decoding or "
                "a quieter machine would")
    if used < cpus - 0.5:
        return f"{figures}: more --readers or --threads can help"
    return f"{figures}: every CPU is busy; cheaper decoding would help, more readers not"


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children
    (``getrusage``: microseconds; ``os.times`` where there is none)."""
    try:
        import resource
    except ImportError:  # Windows
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def machine_busy_seconds() -> float | None:
    """CPU-seconds every process on the machine has used since boot
    (``/proc/stat``: all CPUs' time but idle and iowait); None off Linux."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        ticks = [int(v) for v in fields[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if fields[:1] != [b"cpu"] or len(ticks) < 5:
        return None
    # user nice system idle iowait irq softirq steal ... (guest time is in user)
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    return busy / hz


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _finish(result: BenchResult, tally: _Tally, t1: float, readers: list[Any],
            decode: Decoder | ImageDecoder) -> None:
    result.cpu_seconds = cpu_seconds() - tally.cpu0
    result.cpus = _cpus()
    result.seconds = max(1e-9, t1 - tally.t0)
    machine1 = machine_busy_seconds()
    if tally.machine0 is not None and machine1 is not None:
        result.others_cpu = max(0.0, (machine1 - tally.machine0) - result.cpu_seconds) / result.seconds
    result.payload_bytes = tally.payload
    result.records_per_s = result.records / result.seconds
    result.mb_per_s = tally.payload / 1e6 / result.seconds
    result.consumer_wait_fraction = tally.waited / result.seconds
    if tally.samples:
        result.batch_queue_fill_mean = tally.fill_sum / tally.samples
        result.batch_queue_fill_max = tally.fill_max
        result.filename_queue_fill_mean = tally.fname_sum / tally.samples
    result.skipped_errors = sum(r.num_errors_skipped() for r in readers) + decode.skipped
