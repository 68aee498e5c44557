"""The worker side of a process stage: build a pipeline, write its batches
into shared-memory slots, tell the parent.

A worker runs :func:`worker_main` in its own process. Its main thread builds
the user's pipeline (inside a :class:`feedq.Pipeline`, once per epoch) and
writes each batch into a free slot of its ring; a helper thread
(``feedq-process-control``) reads the parent's messages: slots given back,
epoch requests, stop. The helper also watches for the parent's death (the
control pipe's end of file, or a new parent pid): then the worker unlinks
the segments it created and exits at once.

Messages, worker -> parent (all small; payloads never travel in them):

* ``("hello", pid)``
* ``("slots", n)``: the ring's size, chosen from the first batch (``prefetch=None``);
* ``("seg", name)``: a segment is about to be created under ``name`` (so
  the parent can unlink it should the worker die before using it);
* ``("batch", epoch, slot, name, generation, nbytes, tree, descs)``, with
  ``tree`` and ``descs`` ``None`` when they are the previous batch's;
* ``("end", epoch, count)``: the epoch's last batch was sent;
* ``("done",)``: every epoch was sent; the worker waits for ``stop``;
* ``("error", epoch, pickled exception or None, type name, message, traceback)``.
* ``("storage", counters)``: this worker's remote reads since it started
  (``feedq.storage.statistics()`` less what it had at its start, which a
  forked worker inherits), sent when they changed, at most every
  ``_STORAGE_EVERY_S`` with the batches and before ``end``, ``done`` and
  ``error``; the parent adds them to ``Pipeline.statistics().storage``.

* ``("state", request, reply or None, error text or None)``: the answer to a
  state request (sent by the control thread).

Parent -> worker: ``("epoch", n)``, ``("stop",)``, ``("state", request,
epoch, upto)``: this worker's pipeline state in ``epoch`` as if only its
first ``upto`` batches of that epoch had been delivered (a position of
``feedq._resume.builds``).

Resumption: a worker started with a state (``WorkerConfig.start_epoch`` and
``resume``) begins at that epoch; a ``build`` output with ``state_dict`` /
``load_state_dict`` (a feedq stage) loads the state before its first take,
a plain iterable replays its batches and skips the ones already delivered.
A worker stays alive after its last epoch until the parent stops it, to
answer state requests about batches the consumer has not taken yet: at the
stage's close, or once the consumer took the last epoch's end (the parent
first asks it for every state it may still need).

Slots come back without a message (a socket write per batch would wake the
worker each time, and cost the consumer a system call): the parent writes
the slot's number into a small shared ring (:class:`SlotReturns`) that the
worker reads when it needs a slot. A returned number may carry the *retain*
flag: the consumer still holds the slot's arrays, so the worker creates a
new segment for the slot and leaves the old one to the parent.

Messages are pickled with :func:`pickle.dumps` (``send_bytes``), not
``Connection.send``'s pickler, which costs a dict copy per message.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedq import storage
from feedq._core import priority
from feedq._core.scope import closing_scope
from feedq._core.workerinfo import WorkerInfo, set_worker_info
from feedq._resume.builds import Built, fresh_state, iterate_output
from feedq.pipeline import Pipeline
from feedq.process import _layout
from feedq.process._shm import Segment, segment_name, unlink

__all__ = ["HEADER", "HEADER_FORMAT", "MAGIC", "WorkerConfig", "worker_main"]

#: Slot header: magic, generation, payload bytes, writer pid; the payload
#: starts at HEADER (64-byte aligned, like every leaf in it).
HEADER = 64
HEADER_FORMAT = "<QQQQ"
MAGIC = 0x66656564715F7631  # "feedq_v1"

# How often the control thread checks that the parent still lives when no
# message comes (a dead parent usually shows at once as end of file).
_PARENT_POLL_SECS = 0.2
#: The most often a worker tells the parent its remote reads, with its batches.
_STORAGE_EVERY_S = 0.5
# The smallest segment, and the headroom over the first batch's size (batches
# of variable-length data differ in size).
_MIN_SEGMENT = 64 * 1024
# A worker ahead of the consumer (every slot full) sleeps until about half
# of its slots should be back, judged by how fast the consumer has been
# giving them back, and then makes the batches for all of them in one burst.
# Polling every millisecond instead woke each worker ~1000 times a second,
# and each wake-up takes a core from the training step's threads (a torch
# step using every core waits for the one that was preempted).
_POLL_MIN_SECS = 50e-6
_SLEEP_MAX_SECS = 20e-3  # the longest a consumer can find the ring empty for it
_PERIOD_WEIGHT = 0.25  # of a new sample in the moving estimate of the consumer's period
_PAGE = 4096


class SlotReturns:
    """Slots the parent gives back to one worker: a single-producer
    single-consumer ring of 64-bit words in shared memory.

    Returning a slot costs the parent one memory store -- no system call,
    no wake-up of the worker (which is the training process's time saved).
    Each word carries its ring sequence number, so a single aligned 64-bit
    store publishes it whole (no ordering between words is needed). A
    worker that finds no slot polls, backing off to 1 ms: it waits only when
    it is ahead of the consumer.

    At most ``slots`` numbers are outstanding (each slot is returned once
    before it is used again), so the ring never overflows.
    """

    _SLOT_BITS = 32
    _RETAIN = 1 << _SLOT_BITS
    _SEQ_SHIFT = _SLOT_BITS + 1

    def __init__(self, ctx: Any, slots: int) -> None:
        self.slots = slots
        self.ring = ctx.RawArray("q", slots)  # anonymous shared memory: no name
        self.head = 0  # parent side only
        self.tail = 0  # worker side only

    def put(self, slot: int, retain: bool = False) -> None:
        """Parent: give ``slot`` back (``retain``: with a new segment)."""
        self.head += 1
        self.ring[(self.head - 1) % self.slots] = (
            (self.head << self._SEQ_SHIFT) | (self._RETAIN if retain else 0) | slot)

    def poll(self) -> tuple[int, bool] | None:
        """Worker: the next slot given back and its retain flag, or None."""
        value = int(self.ring[self.tail % self.slots])
        if value >> self._SEQ_SHIFT != self.tail + 1:
            return None
        self.tail += 1
        return value & (self._RETAIN - 1), bool(value & self._RETAIN)


@dataclass
class WorkerConfig:
    """What a worker needs; pickled to it at start (small: no data)."""

    build: Callable[[int, int], Any]
    index: int
    num_workers: int
    epochs: int | None
    seed: int | None
    parent_pid: int
    token: str
    slots: int | None  # None: chosen from the first batch's size
    returns: SlotReturns
    close_fds: list[int] = field(default_factory=list)
    start_epoch: int = 0
    #: Build each epoch's pipeline as ``feedq.Pipeline(resumable=True)``.
    resumable: bool = False
    #: This worker's position in ``start_epoch`` (``feedq._resume.builds``), or None.
    resume: dict[str, Any] | None = None
    #: Niceness steps the whole worker runs below the parent (the parent's
    #: ``feedq.loader_niceness()`` when it started the worker).
    niceness: int = 0


class _Stopped(Exception):
    """The parent asked the worker to stop (internal)."""


#: With ``prefetch=None`` a worker prefetches about this many bytes, in
#: batches: many small ones (a socket round trip per batch costs more than
#: their copy), few big ones.
AUTO_PREFETCH_BYTES = 8 << 20
AUTO_PREFETCH_MAX = 16
#: Slots beyond the prefetch: the batch being written, and the consumer's
#: current batch (kept while its loop variables hold it).
EXTRA_SLOTS = 2
MAX_SLOTS = AUTO_PREFETCH_MAX + EXTRA_SLOTS


def auto_slots(batch_bytes: int) -> int:
    """Ring size for batches of ``batch_bytes``: prefetch 2..16 batches."""
    prefetch = min(AUTO_PREFETCH_MAX, max(2, AUTO_PREFETCH_BYTES // max(1, batch_bytes)))
    return prefetch + EXTRA_SLOTS


def _segment_size(need: int, previous: int = 0) -> int:
    size = max(need + need // 4, _MIN_SEGMENT, 2 * previous if need > previous else 0)
    return (size + _PAGE - 1) // _PAGE * _PAGE


class _Worker:
    def __init__(self, config: WorkerConfig, conn: Any) -> None:
        self.cfg = config
        self.conn = conn
        self.pid = os.getpid()
        self.lock = threading.Lock()
        # Notified by the control thread when a slot comes back, an epoch is
        # requested, or a stop is asked.
        self.changed = threading.Condition(self.lock)
        # Free slots (main thread only); with ``slots=None`` the ring is
        # made when the first batch shows its size.
        self.free: deque[int] = deque(range(config.slots or 0))
        # Slots given back and not yet used (main thread only), with their
        # retain flags; and the consumer's estimated seconds per slot given back.
        self.returned: deque[tuple[int, bool]] = deque()
        self.period: float | None = None
        self.sized = config.slots is not None
        self.epoch_requests: set[int] = set()  # guarded by self.lock
        self.stop = threading.Event()
        self.pipe: Pipeline | None = None  # guarded by self.lock
        self.created: list[str] = []  # segment names created; guarded by self.lock
        self.segments: dict[int, Segment] = {}  # main thread only
        self.serial = 0
        self.generation = 0
        self.last_layout: tuple[Any, Any] | None = None
        # The control thread answers state requests while the main thread
        # sends batches: one sender at a time.
        self.send_lock = threading.Lock()
        # The last two epochs' build outputs, by epoch; guarded by self.lock.
        self.built: dict[int, Built] = {}
        # Remote reads: the counters at the start (a forked worker inherits the
        # parent's), the last sent, and when (main thread only).
        self.storage_base = storage.statistics()
        self.storage_sent: dict[str, float] = {}
        self.storage_sent_at = time.monotonic()

    # -- control thread ---------------------------------------------------------

    def control(self) -> None:
        """The control thread: the parent's messages, and its death."""
        ppid = os.getppid()
        while True:
            try:
                ready = self.conn.poll(_PARENT_POLL_SECS)
                msg = pickle.loads(self.conn.recv_bytes()) if ready else None
            except (EOFError, OSError):
                self.parent_gone()
                return
            if msg is None:
                if os.getppid() != ppid:
                    self.parent_gone()
                    return
                continue
            kind = msg[0]
            with self.lock:
                if kind == "epoch":
                    self.epoch_requests.add(msg[1])
                elif kind == "stop":
                    self.stop.set()
                    if self.pipe is not None:
                        self.pipe.stop()
                self.changed.notify_all()
            if kind == "state":
                self.answer_state(msg[1], msg[2], msg[3])
            # After a stop, keep watching: should the parent die before this
            # worker has finished stopping, nobody else would end it.

    def answer_state(self, request: int, epoch: int, upto: int) -> None:
        """Control thread: this worker's position in ``epoch`` once its first
        ``upto`` batches of that epoch are delivered (``feedq._resume.builds``)."""
        with self.lock:
            built = self.built.get(epoch)
        try:
            if built is not None:
                reply = built.state(upto)
            elif upto != 0:
                raise RuntimeError(f"no pipeline of epoch {epoch} to ask for batch {upto}")
            elif epoch == self.cfg.start_epoch and self.cfg.resume is not None:
                reply = self.cfg.resume  # restored, not built yet
            else:
                reply = fresh_state()
        except Exception as exc:  # noqa: BLE001 - handed to the parent
            text = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(_Stopped):
                self.send(("state", request, None, text))
            return
        with contextlib.suppress(_Stopped):
            self.send(("state", request, reply, None))

    def parent_gone(self) -> None:
        """The parent died: remove our segments' names and leave at once
        (nobody will read what we would write)."""
        with self.lock:
            names = list(self.created)
        for name in names:
            with contextlib.suppress(OSError):
                unlink(name)
        os._exit(0)

    # -- main thread ------------------------------------------------------------

    def send_storage(self, *, force: bool) -> None:
        """Tell the parent this worker's remote reads, when they changed."""
        now = time.monotonic()
        if not force and now - self.storage_sent_at < _STORAGE_EVERY_S:
            return
        self.storage_sent_at = now
        current = storage.statistics()
        delta = {k: v - self.storage_base.get(k, 0) for k, v in current.items()}
        if delta != self.storage_sent and any(delta.values()):
            self.storage_sent = delta
            self.send(("storage", delta))

    def send(self, msg: tuple[Any, ...]) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with self.send_lock:
                self.conn.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
            raise _Stopped() from exc

    def take_slot(self) -> tuple[int, bool]:
        """A free slot, and whether it needs a new segment."""
        if self.free:
            return self.free.popleft(), False
        if self.returned:
            return self.returned.popleft()
        got = self.cfg.returns.poll()
        if got is not None:
            return got
        return self.wait_for_slots()

    def wait_for_slots(self) -> tuple[int, bool]:
        """Every slot is full: sleep until about half of them should be back
        (or, before the consumer's pace is known, back off from 50 us), then
        take every slot that came back; the rest are kept for the next batches."""
        returns = self.cfg.returns
        started = time.monotonic()
        half = max(1, returns.slots // 2)
        period = self.period
        delay = _POLL_MIN_SECS if period is None else min(_SLEEP_MAX_SECS, max(_POLL_MIN_SECS, period * half))
        while True:
            if self.stop.is_set():
                raise _Stopped()
            time.sleep(delay)
            got = returns.poll()
            if got is not None:
                break
            delay = min(2 * delay, _SLEEP_MAX_SECS)
        while (more := returns.poll()) is not None:
            self.returned.append(more)
        now = time.monotonic()
        # The slots came back while we slept: their pace is the consumer's.
        sample = (now - started) / (1 + len(self.returned))
        self.period = sample if period is None else period + _PERIOD_WEIGHT * (sample - period)
        return got

    def wait_epoch(self, epoch: int) -> None:
        with self.lock:
            while epoch not in self.epoch_requests:
                if self.stop.is_set():
                    raise _Stopped()
                self.changed.wait(0.5)

    def put(self, epoch: int, batch: Any) -> None:
        tree, leaves, paths = _layout.flatten(batch)
        plan = _layout.plan(leaves, paths)
        need = HEADER + plan.nbytes
        if not self.sized:
            self.sized = True
            slots = auto_slots(need)
            self.free.extend(range(slots))
            self.send(("slots", slots))
        slot, retired = self.take_slot()
        seg = self.segments.get(slot)
        if seg is None or retired or seg.size < need:
            previous = 0 if seg is None else seg.size
            if seg is not None:
                # Our mapping only: the parent unlinked the name when it
                # mapped the segment, and keeps its own mapping if it must.
                seg.close()
            name = segment_name(self.cfg.parent_pid, self.cfg.token, self.cfg.index, self.serial)
            self.serial += 1
            self.send(("seg", name))
            with self.lock:
                self.created.append(name)
            seg = Segment.create(name, _segment_size(need, previous))
            self.segments[slot] = seg
        payload = np.frombuffer(seg.mm, np.uint8, count=plan.nbytes, offset=HEADER)
        _layout.write(plan, payload)
        del payload
        self.generation += 1
        struct.pack_into(HEADER_FORMAT, seg.mm, 0, MAGIC, self.generation, plan.nbytes, self.pid)
        layout = (tree, plan.descs)
        if layout == self.last_layout:
            self.send(("batch", epoch, slot, seg.name, self.generation, plan.nbytes, None, None))
        else:
            self.last_layout = layout
            self.send(("batch", epoch, slot, seg.name, self.generation, plan.nbytes, tree, plan.descs))
        self.send_storage(force=False)

    def run_epoch(self, epoch: int) -> int:
        cfg = self.cfg
        set_worker_info(WorkerInfo(cfg.index, cfg.num_workers, epoch, cfg.seed, "process"),
                        process_wide=True)
        count = 0
        pipe = Pipeline(resumable=cfg.resumable)
        with self.lock:
            self.pipe = pipe
        try:
            if self.stop.is_set():
                raise _Stopped()
            # Built current but not started: a restored stage loads its state
            # before its runners run; then `with pipe` starts them, and on
            # exit stops, joins and closes what registered during the build.
            try:
                with closing_scope() as owned, pipe.as_default():
                    out = cfg.build(cfg.index, cfg.num_workers)
                for obj in owned:
                    pipe.closing(obj)
                resume = cfg.resume if epoch == cfg.start_epoch else None
                built = Built.prepare(out, resume,
                                      f"process stage worker {cfg.index}, epoch {epoch}")
            except BaseException:
                pipe.stop()
                with contextlib.suppress(Exception):
                    pipe.join()
                raise
            with pipe:
                it = built.iterate(functools.partial(
                    iterate_output, index=cfg.index, num_workers=cfg.num_workers))
                with self.lock:  # state requests about this epoch go to it now
                    self.built[epoch] = built
                    for old in [e for e in self.built if e < epoch - 1]:
                        del self.built[old]
                for batch in it:
                    if self.stop.is_set():
                        raise _Stopped()
                    self.put(epoch, batch)
                    count += 1
                if self.stop.is_set():
                    raise _Stopped()  # a stop ended the pipeline's iteration early
        finally:
            with self.lock:
                self.pipe = None
        return count

    def run(self) -> None:
        self.send(("hello", self.pid))
        epoch = self.cfg.start_epoch
        try:
            while self.cfg.epochs is None or epoch < self.cfg.epochs:
                if epoch > self.cfg.start_epoch:
                    self.wait_epoch(epoch)
                count = self.run_epoch(epoch)
                self.send_storage(force=True)
                self.send(("end", epoch, count))
                epoch += 1
            self.send(("done",))
            # Stay until stopped: the consumer may still ask for the state
            # of batches it has not taken yet (the control thread answers).
            self.stop.wait()
            self.cleanup()
        except _Stopped:
            self.cleanup()
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            if self.stop.is_set():
                self.cleanup()
                return
            self.report(epoch, exc)
        finally:
            for seg in self.segments.values():
                seg.close()

    def report(self, epoch: int, exc: BaseException) -> None:
        text = traceback.format_exc()
        blob: bytes | None
        try:
            blob = pickle.dumps(exc)
            pickle.loads(blob)  # an exception that pickles but cannot be rebuilt
        except Exception:  # noqa: BLE001 - sent as text only
            blob = None
        with contextlib.suppress(_Stopped):
            self.send_storage(force=True)
            self.send(("error", epoch, blob, type(exc).__name__, str(exc), text))

    def cleanup(self) -> None:
        """Stopped by the parent: unlink what we created (the parent does it
        too; whichever comes second finds nothing)."""
        with self.lock:
            names = list(self.created)
        for name in names:
            with contextlib.suppress(OSError):
                unlink(name)


def worker_main(config: WorkerConfig, conn: Any) -> None:
    """Entry point of a worker process."""
    # Ctrl-C in a terminal reaches the whole process group: the parent
    # handles it and stops us; a worker must not die half-way on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for fd in config.close_fds:  # fork: other workers' pipe ends
        with contextlib.suppress(OSError):
            os.close(fd)
    # The whole worker is a loader: its threads, started from this one,
    # inherit the lower priority, so its pipelines do not lower it again.
    priority.lower_this_thread(config.niceness)
    priority.set_loader_niceness(0)
    worker = _Worker(config, conn)
    control = threading.Thread(target=worker.control, name="feedq-process-control", daemon=True)
    control.start()
    worker.run()
