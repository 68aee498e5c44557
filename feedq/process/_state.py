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

A :class:`~feedq.process.ProcessStage` owns one :class:`Positions`: the
takes it remembers, how many batches of each epoch came from each worker,
where restored workers start, and the state requests it sent.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, NamedTuple

from feedq._resume.builds import check_state
from feedq.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    UnavailableError,
)
from feedq.process._messages import WorkerChannel
from feedq.process._order import MergeOrder

__all__ = ["STATE_WINDOW", "Positions", "Take"]

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


class Positions:
    """What a process stage's state is made of, on the consumer side.

    Invariants: ``records`` holds the last :data:`STATE_WINDOW` takes in
    ticket order; ``counts[i][epoch]`` is ``(batches of worker i delivered
    before a restore, batches of it taken since)`` for the current epoch and
    the one before (older ones are dropped: the workers keep only those two
    pipelines); ``start_epoch`` and ``resume`` are where the workers (re)start.
    Changed under the stage's take lock only.
    """

    def __init__(self, num_processes: int, order: str, resumable: bool,
                 channel: WorkerChannel, merge: MergeOrder) -> None:
        self.records: deque[Take] = deque(maxlen=STATE_WINDOW)
        self.start_epoch = 0
        self.resume: list[dict[str, Any]] | None = None
        self.counts: list[dict[int, tuple[int, int]]] = [{} for _ in range(num_processes)]
        self._base: dict[int, list[int]] = {}  # restored: batches delivered before, per epoch
        self._requests = 0
        # Once the workers are released (after the last epoch's end was
        # taken): their answers, by (worker, epoch, batches delivered), to
        # every request the window of takes can still make.
        self._final: dict[tuple[int, int, int], tuple[Any, str | None]] | None = None
        self._num = num_processes
        self._order = order
        self._resumable = resumable
        self._channel = channel
        self._merge = merge

    def workers_started(self) -> None:
        """New workers: count their batches from what the state delivered."""
        self.counts = [{epoch: (base[i], 0) for epoch, base in self._base.items()}
                       for i in range(self._num)]

    def record(self, ticket: int, worker: int, epoch: int) -> None:
        """The consumer took batch ``ticket``, of ``worker`` in ``epoch``."""
        self.records.append(Take(ticket, worker, epoch))
        counts = self.counts[worker]
        base, recv = counts.get(epoch, (0, 0))
        counts[epoch] = (base, recv + 1)
        for old in [e for e in counts if e < epoch - 1]:
            del counts[old]

    def state(self, upto: int | None, taken: int, takes: int) -> dict[str, Any]:
        """The state as of ticket ``upto`` (see ProcessStage.state_dict);
        ``taken``: batches handed out, ``takes``: that plus a peeked one."""
        if upto is None:
            upto = taken
        if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= taken:
            raise InvalidArgumentError(
                f"upto must be an int in [0, {taken}] (batches taken), got {upto!r}")
        later = [r for r in self.records if r.ticket >= upto]
        if upto < takes and (not self.records or self.records[0].ticket > upto):
            raise InvalidArgumentError(
                f"upto={upto} is more than {STATE_WINDOW} batches back (taken: {taken})")
        merge = self._merge
        first: int | None
        if later:
            epoch, done, first = later[0].epoch, False, later[0].worker
        else:
            epoch, done, first = merge.epoch, merge.epoch_done, merge.next_worker()
        if epoch < merge.epoch - 1:
            raise InvalidArgumentError(
                f"upto={upto} reaches back to epoch {epoch}; the workers keep only the "
                f"pipelines of epochs {merge.epoch - 1} and {merge.epoch}")
        counts = [c.get(epoch, (0, 0)) for c in self.counts]
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

    def _ask_workers(self, epoch: int, sent: list[int]) -> list[dict[str, Any]]:
        """Each worker's state in ``epoch`` once its first ``sent[i]``
        batches of the epoch are delivered."""
        if self._final is not None:
            answers = []
            for i, n in enumerate(sent):
                got = self._final.get((i, epoch, n))
                if got is None:  # pragma: no cover - keep_final covers the window
                    raise UnavailableError(
                        f"process stage worker {i} was released after the last epoch and left "
                        f"no state for batch {n} of epoch {epoch}")
                answers.append(got)
        else:
            answers = self._request([(i, epoch, n) for i, n in enumerate(sent)])
        handles = self._channel.handles
        states = []
        for (reply, error), h in zip(answers, handles):
            if error is not None:
                hint = "" if self._resumable else (
                    " (make the stage with process_stage(..., resumable=True) so that each "
                    "worker builds a resumable pipeline)")
                raise InvalidArgumentError(
                    f"process stage worker {h.index} (pid {h.pid}) could not save its "
                    f"pipeline's state: {error}{hint}")
            states.append(reply)
        return states

    def _request(self, asks: list[tuple[int, int, int]]) -> list[tuple[Any, str | None]]:
        """Ask worker ``i`` for its state in ``epoch`` once its first ``n``
        batches of the epoch are delivered, for each ``(i, epoch, n)``;
        their ``(reply, error text)``, in that order."""
        handles = self._channel.handles
        requests = []
        for i, epoch, n in asks:
            self._requests += 1
            requests.append((handles[i], self._requests))
            handles[i].send(("state", self._requests, epoch, n))
        deadline = time.monotonic() + STATE_TIMEOUT_SECS
        try:
            while True:
                missing = [h for h, r in requests if r not in h.replies]
                if not missing:
                    break
                for h in missing:
                    if h.exited or not h.conn_open or h.failed:
                        raise UnavailableError(
                            f"process stage worker {h.index} (pid {h.pid}) ended or failed "
                            "before it could report its state")
                if self._channel.closing:
                    raise CancelledError("this process stage was closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeadlineExceededError(
                        f"process stage worker {missing[0].index} (pid {missing[0].pid}) did not "
                        f"report its state within {STATE_TIMEOUT_SECS:g} s")
                self._channel.pump(min(remaining, _SLICE_SECS))
            return [(h.replies[r][2], h.replies[r][3]) for h, r in requests]
        finally:
            for h, r in requests:
                h.replies.pop(r, None)

    def keep_final(self) -> None:
        """The last epoch's end was taken and the workers are to be released:
        ask them now for every state a later ``state(upto=)`` can need (one
        per worker and take in the window; their pipelines are finished, so
        the answers cannot change), and answer from these from now on.

        Raises:
            UnavailableError, DeadlineExceededError, CancelledError: as a
                state request (then keep the workers).
        """
        merge = self._merge
        needed: set[tuple[int, int, int]] = set()
        later: list[dict[int, int]] = [{} for _ in range(self._num)]  # takes from upto on
        for r in reversed(self.records):  # upto = r.ticket: the takes from r on are later
            later[r.worker][r.epoch] = later[r.worker].get(r.epoch, 0) + 1
            if r.epoch < merge.epoch - 1:
                continue
            for i in range(self._num):
                recv = self.counts[i].get(r.epoch, (0, 0))[1]
                needed.add((i, r.epoch, recv - later[i].get(r.epoch, 0)))
        asks = sorted(needed)
        self._final = dict(zip(asks, self._request(asks)))

    def apply(self, state: dict[str, Any]) -> None:
        """Set where the workers start and the merge position from ``state``
        (before the workers start: they are started from it)."""
        epoch, done, first, received, workers = self._parse(state)
        if done:
            epoch += 1
            received = [0] * self._num
            workers = None
        exhausted = self._merge.epochs is not None and epoch >= self._merge.epochs
        self.start_epoch = epoch
        self.resume = workers
        current = epoch - 1 if exhausted else epoch
        self._merge.restore(current, exhausted, 0 if first is None else first)
        self._base = {current: received}
        self.records.clear()
        self._final = None

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
        if self._merge.epochs is not None and epoch >= self._merge.epochs:
            raise InvalidArgumentError(
                f"the state is in epoch {epoch}; this process stage reads {self._merge.epochs} "
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
