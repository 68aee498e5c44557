"""Saving and restoring a process stage's position (``state_dict`` /
``load_state_dict``): the consumer side.

A process stage's state says what the *consumer* has received: the epoch,
the merge position (how many batches of the epoch came from each worker, and
whose turn it is in the deterministic order) and each worker's pipeline
state as of the batches of that worker the consumer took. Batches written to
the shared-memory ring but not taken, and batches taken but beyond ``upto``
(prefetched by a :class:`feedq.DeviceFeeder`), count as not delivered: a
stage restored from the state delivers them again.

Each worker answers for its own pipeline over its control pipe (its control
thread asks the stage its ``build`` returned for ``state_dict(upto=n)``, in
the worker's own numbering of its batches), so nothing is paused while a
state is taken. A worker whose ``build`` returns a plain iterable, without
``state_dict``, is restored by replay: it builds again and skips the batches
already delivered.

:class:`StateMixin` holds the methods; :class:`feedq.process.ProcessStage`
owns the fields it works on (set up in its ``__init__``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, NamedTuple

from feedq._resume.builds import check_state
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    UnavailableError,
)

__all__ = ["STATE_WINDOW", "StateMixin", "Take"]

#: The format tag of a process stage's state.
FORMAT = "feedq.process_stage/1"
#: Keys of a process stage's state.
K_FORMAT = "format"
K_PROCESSES = "num_processes"
K_ORDER = "order"
K_EPOCH = "epoch"
K_EPOCH_DONE = "epoch_done"
K_NEXT = "next_worker"
K_RECEIVED = "received"
K_WORKERS = "workers"

#: How many recent takes a stage remembers: ``state_dict(upto=)`` may reach
#: back this many batches (a feeder's prefetch is far fewer).
STATE_WINDOW = 256
#: How long a state request waits for the workers' answers.
STATE_TIMEOUT_SECS = 30.0
_SLICE_SECS = 0.05


class Take(NamedTuple):
    """One batch taken by the consumer: its ticket (0, 1, ...), worker and epoch."""

    ticket: int
    worker: int
    epoch: int


class StateMixin:
    """``state_dict`` / ``load_state_dict`` of :class:`ProcessStage`."""

    # Set by ProcessStage.__init__ (see there).
    _take_lock: threading.Lock
    _num: int
    _order: str
    _epochs: int | None
    _epoch: int
    _epoch_done: bool
    _rotation: list[int]
    _turn: int
    _active: set[int]
    _takes: int
    _peeked: Any
    _handles: list[Any]
    _closing: bool
    _records: deque[Take]
    _requests: int
    _start_epoch: int
    _resume: list[dict[str, Any]] | None
    _resumable: bool
    _base_counts: dict[int, list[int]]

    def _check_usable(self) -> None:
        raise NotImplementedError

    def _pump(self, timeout: float) -> None:
        raise NotImplementedError

    def _restart_workers(self) -> None:
        raise NotImplementedError

    @property
    def taken(self) -> int:
        """Batches handed to the consumer so far (tickets 0, 1, ...; a batch
        :meth:`peek` holds is not counted until it is taken)."""
        return self._takes - (self._peeked is not None)

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        """The stage's position, as plain data (picklable, ``torch.save``-able).

        The state describes what the consumer received: restored into a new
        stage built the same way (same ``build``, ``num_processes``,
        ``epochs`` and ``seed``), the new stage delivers exactly the batches
        this one would have delivered next -- in the same order with
        ``order="deterministic"`` and worker pipelines whose own order is
        fixed (seeded shuffles), and in any case every batch not yet
        delivered, once.

        Each worker is asked for its pipeline's state as of the batches the
        consumer took from it; batches waiting in shared memory are not
        delivered. A worker whose ``build`` returned a plain iterable (no
        ``state_dict``) is saved as a count of batches: the restored worker
        replays its iterable from the start and skips them.

        Args:
            upto: the state as if only the first ``upto`` batches taken had
                been delivered (``None``: all taken so far). Batches taken
                after them are delivered again after a restore (a
                :class:`feedq.DeviceFeeder` passes the batches its consumer
                got). At most :data:`STATE_WINDOW` batches back.

        Raises:
            InvalidArgumentError: ``upto`` is out of range.
            UnavailableError: a worker died or failed before it answered.
            DeadlineExceededError: a worker did not answer within 30 s.
            CancelledError: the stage was closed or failed.
        """
        # A feeder's thread may be inside a take, waiting for a batch: wait
        # for it, within bounds.
        if not self._take_lock.acquire(timeout=STATE_TIMEOUT_SECS):
            raise DeadlineExceededError(
                f"state_dict waited {STATE_TIMEOUT_SECS:g} s for another thread's take from "
                "the process stage")
        try:
            return self._state_locked(upto)
        finally:
            self._take_lock.release()

    def _state_locked(self, upto: int | None) -> dict[str, Any]:
        self._check_usable()
        taken = self.taken
        if upto is None:
            upto = taken
        if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= taken:
            raise InvalidArgumentError(
                f"upto must be an int in [0, {taken}] (batches taken), got {upto!r}")
        later = [r for r in self._records if r.ticket >= upto]
        if upto < self._takes and (not self._records or self._records[0].ticket > upto):
            raise InvalidArgumentError(
                f"upto={upto} is more than {STATE_WINDOW} batches back (taken: {taken})")
        first: int | None
        if later:
            epoch, done, first = later[0].epoch, False, later[0].worker
        else:
            epoch, done, first = self._epoch, self._epoch_done, self._next_turn()
        if epoch < self._epoch - 1:
            raise InvalidArgumentError(
                f"upto={upto} reaches back to epoch {epoch}; the workers keep only the "
                f"pipelines of epochs {self._epoch - 1} and {self._epoch}")
        counts = [h.counts.get(epoch, (0, 0)) for h in self._handles]
        sent = [recv - sum(1 for r in later if r.worker == i and r.epoch == epoch)
                for i, (_, recv) in enumerate(counts)]
        received = [base + n for (base, _), n in zip(counts, sent)]
        workers = None if done else self._ask_workers(epoch, sent)
        return {
            K_FORMAT: FORMAT,
            K_PROCESSES: self._num,
            K_ORDER: self._order,
            K_EPOCH: epoch,
            K_EPOCH_DONE: done,
            K_NEXT: first if self._order == "deterministic" and not done else None,
            K_RECEIVED: received,
            K_WORKERS: workers,
        }

    def _next_turn(self) -> int | None:
        """The worker whose batch comes next (deterministic order)."""
        if self._order != "deterministic" or not self._rotation:
            return None
        return self._rotation[self._turn % len(self._rotation)]

    def _ask_workers(self, epoch: int, sent: list[int]) -> list[dict[str, Any]]:
        """Each worker's state in ``epoch`` once its first ``sent[i]``
        batches of the epoch are delivered."""
        self._requests += 1
        request = self._requests
        for h, n in zip(self._handles, sent):
            h.send(("state", request, epoch, n))
        deadline = time.monotonic() + STATE_TIMEOUT_SECS
        try:
            while True:
                missing = [h for h in self._handles if request not in h.replies]
                if not missing:
                    break
                for h in missing:
                    if h.exited or not h.conn_open or h.failed:
                        raise UnavailableError(
                            f"process stage worker {h.index} (pid {h.pid}) ended or failed "
                            "before it could report its state")
                if self._closing:
                    raise CancelledError("this process stage was closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeadlineExceededError(
                        f"process stage worker {missing[0].index} (pid {missing[0].pid}) did not "
                        f"report its state within {STATE_TIMEOUT_SECS:g} s")
                self._pump(min(remaining, _SLICE_SECS))
            states = []
            for h in self._handles:
                _, _, reply, error = h.replies[request]
                if error is not None:
                    hint = "" if self._resumable else (
                        " (make the stage with process_stage(..., resumable=True) so that each "
                        "worker builds a resumable pipeline)")
                    raise InvalidArgumentError(
                        f"process stage worker {h.index} (pid {h.pid}) could not save its "
                        f"pipeline's state: {error}{hint}")
                states.append(reply)
            return states
        finally:
            for h in self._handles:
                h.replies.pop(request, None)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of a stage built
        the same way), before the first batch is taken.

        The workers started when the stage was made are stopped and started
        again with their states (a restore costs one worker start; a batch
        :meth:`peek` holds is dropped with them): each
        calls ``load_state_dict`` on the stage its ``build`` returns before
        taking from it, or replays a plain iterable and skips the batches
        the state counts as delivered. The merge position (whose turn it is)
        is restored here.

        Raises:
            InvalidArgumentError: not a process stage state, or one of a
                different shape (another ``num_processes``, an epoch beyond
                ``epochs``); nothing is changed.
            FailedPreconditionError: batches were already taken.
            CancelledError: the stage was closed or failed.
        """
        with self._take_lock:
            self._check_usable()
            if self.taken:
                raise FailedPreconditionError(
                    "load_state_dict must come before the process stage's first batch is taken")
            # A batch peek() holds (an adapter reading the structure) is
            # dropped with the workers: the restored stage delivers its own.
            self._apply_state(state)
            self._restart_workers()
            self._takes = 0
            self._records.clear()

    def _apply_state(self, state: dict[str, Any]) -> None:
        """Set where the workers start and the merge position from ``state``
        (before the workers start: ``_start_workers`` uses it)."""
        epoch, done, first, received, workers = self._parse(state)
        if done:
            epoch += 1
            received = [0] * self._num
            workers = None
        exhausted = self._epochs is not None and epoch >= self._epochs
        self._start_epoch = epoch
        self._resume = workers
        self._epoch = epoch - 1 if exhausted else epoch
        self._epoch_done = exhausted
        self._rotation = list(range(self._num))
        self._turn = 0 if first is None else first
        self._active = set(range(self._num))
        self._base_counts = {self._epoch: received}

    def _parse(self, state: Any) -> tuple[int, bool, int | None, list[int],
                                          list[dict[str, Any]] | None]:
        """Check a state against this stage; its parts."""
        if not isinstance(state, dict) or state.get(K_FORMAT) != FORMAT:
            got = state.get(K_FORMAT) if isinstance(state, dict) else type(state).__name__
            raise InvalidArgumentError(
                f"not a process stage state (format {got!r}, expected {FORMAT!r})")
        n = state.get(K_PROCESSES)
        if n != self._num:
            raise InvalidArgumentError(
                f"the state was saved by a process stage of {n} workers; this one has "
                f"{self._num}: restore into a stage with the same num_processes")
        epoch, done, first = state.get(K_EPOCH), state.get(K_EPOCH_DONE), state.get(K_NEXT)
        received, workers = state.get(K_RECEIVED), state.get(K_WORKERS)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"bad epoch in the process stage state: {epoch!r}")
        if self._epochs is not None and epoch >= self._epochs:
            raise InvalidArgumentError(
                f"the state is in epoch {epoch}; this process stage reads {self._epochs} "
                f"epoch(s): restore into a stage with the same epochs")
        if first is not None and (isinstance(first, bool) or not isinstance(first, int)
                                  or not 0 <= first < self._num):
            raise InvalidArgumentError(f"bad next_worker in the process stage state: {first!r}")
        if (not isinstance(received, list) or len(received) != self._num
                or not all(isinstance(c, int) and c >= 0 for c in received)):
            raise InvalidArgumentError(f"bad received counts in the process stage state: "
                                       f"{received!r}")
        if not done:
            if not isinstance(workers, list) or len(workers) != self._num:
                held = len(workers) if isinstance(workers, list) else 0
                raise InvalidArgumentError(
                    f"the process stage state holds {held} worker states for {self._num} workers")
            for i, w in enumerate(workers):
                if not check_state(w):
                    raise InvalidArgumentError(f"bad state of worker {i} in the process stage "
                                               f"state: {w!r}")
        return epoch, bool(done), first, list(received), workers

    def _record(self, worker: int, epoch: int) -> None:
        """A batch of ``worker`` in ``epoch`` was taken (before _takes counts it)."""
        self._records.append(Take(self._takes, worker, epoch))
        h = self._handles[worker]
        base, recv = h.counts.get(epoch, (0, 0))
        h.counts[epoch] = (base, recv + 1)
        for old in [e for e in h.counts if e < epoch - 1]:
            del h.counts[old]


def new_records() -> deque[Take]:
    return deque(maxlen=STATE_WINDOW)
