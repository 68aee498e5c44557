"""The order of a process stage's batches: the :class:`MergeOrder` a
:class:`~feedq.process.ProcessStage` owns keeps the epoch and merges the
workers' inboxes (``"deterministic"``: round-robin over the workers whose
epoch goes on; ``"first_ready"``: as they arrive). A worker's error or
death waiting behind other workers' batches is found here too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from feedq.process._messages import WorkerChannel

__all__ = ["EPOCH_END", "MergeOrder"]

# next_event's answer at the end of an epoch (compared by identity).
EPOCH_END = ("epoch_end",)


class MergeOrder:
    """Epochs and the merge of the workers' batches.

    Invariants: ``epoch`` is the epoch being read and ``epoch_done`` says
    that every worker's end of it was taken; in the deterministic order,
    ``rotation`` lists the workers whose epoch goes on, in worker order,
    and ``rotation[turn % len(rotation)]`` is the worker whose batch comes
    next; in the first-ready order, ``active`` holds the workers whose
    epoch goes on. Changed by the consumer's thread only.
    """

    def __init__(self, order: str, num_processes: int, epochs: int | None,
                 channel: WorkerChannel) -> None:
        self.deterministic = order == "deterministic"
        self.epochs = epochs
        self.epoch = 0
        self.epoch_done = False
        self.rotation: list[int] = list(range(num_processes))
        self.turn = 0
        self.active: set[int] = set(range(num_processes))
        self._num = num_processes
        self._channel = channel

    def restore(self, epoch: int, done: bool, turn: int) -> None:
        """Start at ``epoch`` (``done``: its end was already taken), with
        worker ``turn`` first (load_state_dict)."""
        self.epoch = epoch
        self.epoch_done = done
        self.rotation = list(range(self._num))
        self.turn = turn
        self.active = set(range(self._num))

    def more_epochs(self) -> bool:
        return self.epochs is None or self.epoch + 1 < self.epochs

    def start_next_epoch(self) -> None:
        """Move to the next epoch and ask the workers for it."""
        self.epoch += 1
        self.epoch_done = False
        alive = [h.index for h in self._channel.handles if not h.failed]
        self.rotation = list(alive)
        self.turn = 0
        self.active = set(alive)
        self._channel.send_all(("epoch", self.epoch))

    def next_worker(self) -> int | None:
        """The worker whose batch comes next (deterministic order), or None."""
        if not self.deterministic or not self.rotation:
            return None
        return self.rotation[self.turn % len(self.rotation)]

    def next_event(self) -> tuple[Any, ...] | None:
        """The next event in the stage's order, or None to wait for it."""
        handles = self._channel.handles
        if self.deterministic:
            while self.rotation:
                self.turn %= len(self.rotation)
                h = handles[self.rotation[self.turn]]
                if not h.inbox:
                    return None
                ev = h.inbox.popleft()
                if ev[0] == "end":
                    h.produced += ev[2]
                    del self.rotation[self.turn]
                    continue
                if ev[0] == "batch":
                    self.turn += 1
                return (h.index, *ev)
            return EPOCH_END
        arrivals = self._channel.arrivals
        while self.active:
            if not arrivals:
                return None
            h = handles[arrivals.popleft()]
            ev = h.inbox.popleft()
            if ev[0] == "end":
                h.produced += ev[2]
                self.active.discard(h.index)
                continue
            return (h.index, *ev)
        return EPOCH_END

    def waited_for(self) -> list[int]:
        """The workers a waiting take waits for (stall reports)."""
        nxt = self.next_worker()
        if nxt is not None:
            return [nxt]
        return sorted(self.active) or list(range(len(self._channel.handles)))

    def failure_pending(self) -> bool:
        return any(h.failed or (h.inbox and h.inbox[-1][0] == "dead")
                   for h in self._channel.handles)

    def pending_failure(self) -> tuple[Any, ...] | None:
        """A worker's error or death waiting behind batches of others."""
        for h in self._channel.handles:
            for ev in h.inbox:
                if ev[0] in ("error", "dead"):
                    h.inbox.remove(ev)
                    with contextlib.suppress(ValueError):
                        self._channel.arrivals.remove(h.index)
                    return (h.index, *ev)
        return None
