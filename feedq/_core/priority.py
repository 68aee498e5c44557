"""The OS priority of loader threads: how a loader stays out of the model's way.

A training step that uses every core (torch's default) runs parallel regions
whose threads wait for each other; a loader thread that the OS schedules on
one of those cores in the middle of a region stalls the whole region, not
just the core. Running loader threads at a lower priority (a higher Unix
*niceness*) asks the scheduler to give the cores to the model first and to
the loader when they are idle.

It is off by default (0). Measured on a 2-core machine with torch using both
cores, it made the step slower, not faster (docs/performance.md): a
low-priority reader that holds the GIL or a queue's lock is descheduled
while the training thread waits for it. It is for machines where other work
competes with the loader, and for measuring.

Linux gives every thread its own niceness (``setpriority(PRIO_PROCESS,
tid)``); feedq raises the niceness of each runner thread it starts by
:func:`loader_niceness` steps above the thread that started it. Raising is
always allowed; lowering it back needs privileges, which is why it is done per
thread (threads end) and never to the process. Elsewhere (macOS, Windows)
per-thread niceness does not exist, and nothing is changed.

The default comes from the environment variable ``FEEDQ_LOADER_NICENESS``
(read at first use; also by worker processes, which inherit it), else
:data:`DEFAULT_NICENESS`; :func:`set_loader_niceness` changes it for the
process and ``feedq.Pipeline(loader_niceness=...)`` for one pipeline.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

__all__ = [
    "DEFAULT_NICENESS",
    "ENV_VAR",
    "check_niceness",
    "loader_niceness",
    "lower_this_thread",
    "set_loader_niceness",
]

_LOG = logging.getLogger("feedq")

#: Environment variable naming the default niceness step of loader threads.
ENV_VAR = "FEEDQ_LOADER_NICENESS"
#: The default when ``FEEDQ_LOADER_NICENESS`` is unset: off (docs/performance.md
#: has the measurements behind it).
DEFAULT_NICENESS = 0
_MAX = 19  # Unix niceness ranges over -20..19

_lock = threading.Lock()
_niceness: int | None = None  # guarded by _lock; None until first read


def check_niceness(n: object, what: str) -> int:
    """``n`` if it is an int from 0 to 19; TypeError or ValueError naming ``what`` otherwise."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{what} must be an int from 0 to {_MAX}, got {n!r}")
    if not 0 <= n <= _MAX:
        raise ValueError(f"{what} must be from 0 to {_MAX}, got {n}")
    return n


def _from_env() -> int:
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_NICENESS
    try:
        return check_niceness(int(raw), ENV_VAR)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{ENV_VAR}={raw!r}: must be an integer from 0 to {_MAX}") from exc


def loader_niceness() -> int:
    """How many niceness steps loader threads run below the thread that
    starts them (0: the same priority)."""
    global _niceness
    with _lock:
        if _niceness is None:
            _niceness = _from_env()
        return _niceness


def set_loader_niceness(n: int) -> int:
    """Set the process-wide niceness step of loader threads started from now
    on (``0``..``19``; 0 leaves them at their starter's priority).

    Returns:
        The previous value.

    Raises:
        TypeError, ValueError: ``n`` is not an int from 0 to 19.
    """
    global _niceness
    n = check_niceness(n, "loader niceness")
    previous = loader_niceness()
    with _lock:
        _niceness = n
    return previous


def lower_this_thread(n: int) -> bool:
    """Raise the calling thread's niceness by ``n`` steps (capped at 19).

    Returns:
        True if the thread's priority was changed; False where per-thread
        niceness does not exist, when ``n`` is 0, or when the OS refused
        (logged at debug level: a loader at normal priority still works).
    """
    if n <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        target = min(_MAX, current + n)
        if target == current:
            return False
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError as exc:  # pragma: no cover - refused by a sandbox or seccomp policy
        _LOG.debug("could not lower the priority of thread %d: %s", tid, exc)
        return False
    return True
