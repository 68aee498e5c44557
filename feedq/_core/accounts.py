"""Per-thread time accounts: where a pipeline thread spends its time.

A runner thread (``feedq.runners``) opens an :class:`Account` for itself, and
a pipeline's stall monitor opens one for the thread that starts the pipeline
(the user's: its blocked calls are reported too, ``feedq._observe.stall``);
the queue engine (``feedq.queues``) adds to the account of the calling
thread each time a call had to wait, and how long: a wait in an enqueue is
*output* wait (the queue was full), a wait in a dequeue is *input* wait (the
queue was empty). The runner times each op call; what the op did not spend
waiting is *busy* time (reading, decoding, copying).

This sits below every package (it imports nothing from feedq), like
``feedq._core.scope``, so the queues can report to it without importing the
runners or the pipeline above them. Accounting is per block, not per
record: one pair of ``time.monotonic()`` reads per op call and per wait,
nothing on the paths that do not wait.

Fields are written only by their thread and read by others without a lock:
a reader sees a value a moment old, never a torn one (floats and ints are
replaced whole under the GIL).
"""

from __future__ import annotations

import threading

__all__ = [
    "Account", "close_account", "current_account", "open_account", "set_enabled", "timing_enabled",
]


class _Local(threading.local):
    # A class default, so that a thread without an account reads None
    # without a failed attribute lookup (an AttributeError raised and caught
    # costs ~0.8 us, on every queue wait of a thread that is not a runner).
    account: Account | None = None


_local = _Local()
# Runner threads started while this is False keep no account (their stage
# shows zero times): only for measuring what the accounting costs
# (benchmarks/stats_overhead.py). The queues' own counters stay on.
_enabled = True


def set_enabled(on: bool) -> bool:
    """Turn per-thread accounting of runner threads started from now on
    on or off; returns the previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(on)
    return previous


def timing_enabled() -> bool:
    """Whether runner threads started now keep an account."""
    return _enabled


class Account:
    """Where one thread's time went (seconds, from ``time.monotonic``).

    Attributes:
        ident: the thread's ``threading.get_ident()``.
        name: the thread's name.
        op_s: time inside finished op calls.
        op_since: ``time.monotonic()`` at the start of the op running now, or
            ``None`` between ops.
        input_s, output_s: finished waits in dequeues / enqueues.
        wait_since: start of the wait in progress, or ``None``.
        wait_output: whether the wait in progress is an enqueue's.
        wait_queue: the queue of the wait in progress, or ``None`` (the
            stall monitor names it for a thread that is not a runner's).
    """

    __slots__ = (
        "ident", "input_s", "name", "op_s", "op_since", "output_s", "wait_output",
        "wait_queue", "wait_since",
    )

    def __init__(self, ident: int, name: str) -> None:
        self.ident = ident
        self.name = name
        self.op_s = 0.0
        self.op_since: float | None = None
        self.input_s = 0.0
        self.output_s = 0.0
        self.wait_since: float | None = None
        self.wait_output = False
        self.wait_queue: object | None = None

    def begin_wait(self, output: bool, since: float, queue: object | None = None) -> None:
        """A queue call of this thread starts waiting at ``since``
        (``time.monotonic()``); ``output``: it is an enqueue; ``queue``: the
        queue it waits on."""
        self.wait_output = output
        self.wait_queue = queue
        self.wait_since = since

    def end_wait(self, waited: float) -> None:
        """The wait in progress is over after ``waited`` seconds."""
        if self.wait_output:
            self.output_s += waited
        else:
            self.input_s += waited
        self.wait_since = None
        self.wait_queue = None

    def snapshot(self, now: float) -> tuple[float, float, float]:
        """``(op seconds, input wait, output wait)``, counting the op and the
        wait in progress up to ``now``."""
        op_s, since = self.op_s, self.op_since
        input_s, output_s = self.input_s, self.output_s
        wait_since, wait_output = self.wait_since, self.wait_output
        if since is not None and now > since:
            op_s += now - since
        if wait_since is not None and now > wait_since:
            if wait_output:
                output_s += now - wait_since
            else:
                input_s += now - wait_since
        return op_s, input_s, output_s


def open_account() -> Account:
    """Give the calling thread an account (replacing any it had)."""
    t = threading.current_thread()
    acc = Account(threading.get_ident(), t.name)
    _local.account = acc
    return acc


def close_account() -> None:
    """The calling thread stops accounting."""
    _local.account = None


def current_account() -> Account | None:
    """The calling thread's account, or ``None``."""
    return _local.account
