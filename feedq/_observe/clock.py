"""The clock the pipeline's observers read (STYLE 17: time is injected).

The stall monitor and the statistics read the time and wait out their
periods through a :class:`Clock`: by default :data:`MONOTONIC`
(``time.monotonic`` and ``Event.wait``). A test passes its own clock (to
``Pipeline(_clock=...)`` or ``Monitor(clock=...)``) and advances it instead
of sleeping.

The queues and the runners time their waits with ``time.monotonic`` (the
``since`` of a blocked call, the per-thread accounts): a test clock should
read ``time.monotonic()`` plus the time it has been advanced by, so that
``clock.now() - since`` is never less than the real wait.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["MONOTONIC", "Clock", "MonotonicClock"]


class Clock(Protocol):
    """What an observer needs of time."""

    def now(self) -> float:
        """Seconds on a clock that never goes back (``time.monotonic``)."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds of this clock
        have passed; whether the event is set (``Event.wait``'s result)."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``Event.wait``."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


#: The default clock of every observer.
MONOTONIC: Clock = MonotonicClock()
