"""The order of a process stage's batches: epochs, and the merge of the
workers' inboxes (``"deterministic"``: round-robin over the workers whose
epoch goes on; ``"first_ready"``: as they arrive). A worker's error or
death waiting behind other workers' batches is found here too.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

from feedq.process._launch import WorkerHandle

__all__ = ["EPOCH_END", "OrderMixin"]

# _next_event's answer at the end of an epoch (compared by identity).
EPOCH_END = ("epoch_end",)


class OrderMixin:
    """The epoch and merge-order methods of :class:`ProcessStage`."""

    # Set by ProcessStage.__init__ (see there).
    _handles: list[WorkerHandle]
    _order: str
    _epochs: int | None
    _epoch: int
    _epoch_done: bool
    _rotation: list[int]
    _turn: int
    _active: set[int]
    _arrivals: deque[int]

    def _more_epochs(self) -> bool:
        return self._epochs is None or self._epoch + 1 < self._epochs

    def _start_next_epoch(self) -> None:
        self._epoch += 1
        self._epoch_done = False
        alive = [h.index for h in self._handles if not h.failed]
        self._rotation = list(alive)
        self._turn = 0
        self._active = set(alive)
        for h in self._handles:
            h.send(("epoch", self._epoch))

    def _next_event(self) -> tuple[Any, ...] | None:
        """The next event in the stage's order, or None to wait for it."""
        if self._order == "deterministic":
            while self._rotation:
                self._turn %= len(self._rotation)
                h = self._handles[self._rotation[self._turn]]
                if not h.inbox:
                    return None
                ev = h.inbox.popleft()
                if ev[0] == "end":
                    h.produced += ev[2]
                    del self._rotation[self._turn]
                    continue
                if ev[0] == "batch":
                    self._turn += 1
                return (h.index, *ev)
            return EPOCH_END
        while self._active:
            if not self._arrivals:
                return None
            h = self._handles[self._arrivals.popleft()]
            ev = h.inbox.popleft()
            if ev[0] == "end":
                h.produced += ev[2]
                self._active.discard(h.index)
                continue
            return (h.index, *ev)
        return EPOCH_END

    def _failure_pending(self) -> bool:
        return any(h.failed or (h.inbox and h.inbox[-1][0] == "dead") for h in self._handles)

    def _pending_failure(self) -> tuple[Any, ...] | None:
        """A worker's error or death waiting behind batches of others."""
        for h in self._handles:
            for ev in h.inbox:
                if ev[0] in ("error", "dead"):
                    h.inbox.remove(ev)
                    with contextlib.suppress(ValueError):
                        self._arrivals.remove(h.index)
                    return (h.index, *ev)
        return None
