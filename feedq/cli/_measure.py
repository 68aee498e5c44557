"""What ``feedq bench --compare`` measures, shared by its two halves
(``feedq.cli._compare`` for feedq and tf.data, ``feedq.cli._compare_torch``
for DataLoader): when a run stops, what one run measured, a system to
compare, and the timing loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from feedq.cli._bench import cpu_seconds

__all__ = ["Limits", "Measure", "System", "timed"]


@dataclass(frozen=True)
class Limits:
    """When a run stops: the end of ``epochs``, ``duration`` s or ``max_records``
    (at the end of the batch that reaches it), as for feedq's own run."""

    batch_size: int
    epochs: int = 1
    duration: float | None = None
    max_records: int | None = None
    readers: int = 2
    #: Records a shuffle buffer holds (0: no shuffling; file order is
    #: shuffled too). feedq's shuffle_batch keeps ``--min-after-dequeue``.
    shuffle_buffer: int = 0
    seed: int = 0


@dataclass
class Measure:
    """One run: records delivered, their payload bytes, wall and CPU seconds."""

    records: int
    payload_bytes: int
    seconds: float
    cpu_s: float


@dataclass
class System:
    """A loader to compare: ``run(limits) -> Measure`` or why it cannot run."""

    name: str
    what: str
    run: Callable[[Limits], Measure] | None
    unavailable: str = ""
    measures: list[Measure] = field(default_factory=list)


def timed(batches: Callable[[], Iterator[tuple[int, int]]], limits: Limits) -> Measure:
    """Drain ``batches()`` (``(records, payload bytes)`` per batch) once per
    epoch under ``limits``, timing wall and CPU seconds. The generator is
    closed before the clock stops, so DataLoader workers are reaped (and
    their CPU time counted)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    deadline = None if limits.duration is None else t0 + limits.duration
    records = payload = 0
    done = False
    for _ in range(limits.epochs):
        it = batches()
        try:
            for n, nbytes in it:
                records += n
                payload += nbytes
                if limits.max_records is not None and records >= limits.max_records:
                    done = True
                elif deadline is not None and time.perf_counter() >= deadline:
                    done = True
                if done:
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if done:
            break
    t1 = time.perf_counter()
    return Measure(records, payload, t1 - t0, cpu_seconds() - c0)
