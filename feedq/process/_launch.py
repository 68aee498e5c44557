"""Starting and stopping a process stage's workers: start methods (the
fork server preloading feedq), the checks ``build`` must pass to reach a
worker, the consumer's handle on each worker, and the stop escalation (ask,
SIGTERM, SIGKILL) that frees every shared-memory name the worker announced.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from feedq.process._shm import Segment, unlink
from feedq.process._worker import SlotReturns

__all__ = [
    "ORDERS",
    "START_METHODS",
    "WorkerHandle",
    "check_arguments",
    "context",
    "default_start_method",
    "describe_exit",
    "stop_workers",
    "warm_up",
]

ORDERS = ("deterministic", "first_ready")
START_METHODS = ("forkserver", "spawn", "fork")

# How long close() lets workers finish on their own after asking them to
# stop, before SIGTERM, then SIGKILL (each stage of the escalation).
STOP_GRACE_SECS = 1.0
_TERM_GRACE_SECS = 0.5
_WORKER_MODULE = "feedq.process._worker"


def default_start_method() -> str:
    """``"forkserver"`` on Linux, ``"spawn"`` elsewhere (macOS)."""
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def context(method: str) -> Any:
    """The multiprocessing context of ``method`` (the fork server preloads feedq)."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Import feedq once in the fork server, so that each worker forked
        # from it starts with feedq loaded (milliseconds instead of the
        # half second an import takes). Only before the server starts.
        try:
            from multiprocessing import forkserver

            server: Any = forkserver._forkserver
            if server._forkserver_pid is None:
                modules = list(server._preload_modules)
                if _WORKER_MODULE not in modules:
                    ctx.set_forkserver_preload([*modules, _WORKER_MODULE])
        except AttributeError:  # pragma: no cover - another CPython layout
            pass
    return ctx


def warm_up(start_method: str | None = None) -> None:
    """Start the fork server now and wait until it is ready (with feedq
    loaded in it), so that process stages start their workers in
    milliseconds. Does nothing for ``spawn`` and ``fork``. Call it early,
    before the training framework starts its threads.
    """
    method = start_method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, got {method!r}")
    if method != "forkserver":
        return
    ctx = context(method)
    # The server serves its first request once its preloads are imported.
    probe = ctx.Process(target=os.getpid, name="feedq-process-warm-up", daemon=True)
    probe.start()
    probe.join()
    probe.close()


def _check_importable(build: Callable[..., Any], method: str) -> None:
    """A worker started by spawn or forkserver finds ``build`` by importing
    its module; a function of an interactive ``__main__`` (``python -c``,
    a REPL, a notebook) cannot be found that way."""
    fn = build
    while isinstance(fn, functools.partial):
        fn = fn.func
    if getattr(fn, "__module__", None) != "__main__":
        return
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None):
        return  # a script: the worker runs it as __mp_main__ (keep its `if __name__ == "__main__":`)
    raise TypeError(
        f"build {getattr(fn, '__qualname__', fn)!r} is defined in an interactive session "
        f"(python -c, a REPL or a notebook), where a {method!r} worker cannot import it: define it "
        "in a module and import it, or pass start_method='fork'"
    )


def check_arguments(
    build: Callable[[int, int], Any],
    num_processes: int,
    order: str,
    epochs: int | None,
    prefetch: int | None,
    start_method: str | None,
) -> str:
    """Check a process stage's arguments (see ``process_stage``); return the
    start method to use.

    Raises:
        TypeError: ``build`` is not callable or, for spawn/forkserver, not
            picklable.
        ValueError: a bad argument.
    """
    if not callable(build):
        raise TypeError(f"build must be a function build(worker_index, num_workers), got {build!r}")
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be an int >= 1, got {num_processes!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise ValueError(f"epochs must be an int >= 1 or None (endless), got {epochs!r}")
    if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int)
                                 or prefetch < 1):
        raise ValueError(f"prefetch must be an int >= 1 or None (automatic), got {prefetch!r}")
    method = start_method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, got {method!r}")
    if method != "fork":
        _check_importable(build, method)
        try:
            pickle.dumps(build)
        except Exception as exc:
            raise TypeError(
                f"build must be picklable for start_method={method!r}: a function defined at "
                f"the top level of an importable module, not a lambda or a nested function "
                f"({exc})"
            ) from None
    return method


class WorkerHandle:
    """The consumer's side of one worker."""

    def __init__(self, index: int, process: Any, conn: Any, returns: SlotReturns,
                 slots: int) -> None:
        self.index = index
        self.slots = slots  # the ring's size (the worker says, with prefetch=None)
        self.process = process
        self.conn = conn
        self.returns = returns
        self.layout: tuple[Any, Any] = (None, None)
        self.pid: int = process.pid
        self.inbox: deque[tuple[Any, ...]] = deque()
        self.conn_open = True
        self.exited = False
        self.hello = False
        self.done = False
        self.failed = False
        self.announced: list[str] = []
        self.slot_seg: dict[int, Segment] = {}
        self.received = 0
        self.produced = 0
        self.replies: dict[int, tuple[Any, ...]] = {}  # state requests answered
        self.stopped = False  # stop_workers ended it and freed what it announced
        self.storage: dict[str, float] = {}  # its remote reads since it started, as it last said

    def send(self, msg: tuple[Any, ...]) -> None:
        if not self.conn_open or self.exited:
            return
        with contextlib.suppress(OSError, EOFError, ValueError):
            self.conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def describe_exit(code: int | None) -> str:
    """How a worker's process ended, for error messages."""
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (SIGBUS: is /dev/shm full?)" if name == "SIGBUS" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


def stop_workers(handles: list[WorkerHandle], grace: float) -> None:
    """Stop the workers: ask, wait ``grace`` s, SIGTERM, SIGKILL; unlink
    every segment they announced and close the segments nobody uses."""
    for h in handles:
        h.send(("stop",))
    deadline = time.monotonic() + grace
    for h in handles:
        h.process.join(max(0.0, deadline - time.monotonic()))
    for h in handles:
        if h.process.is_alive():
            with contextlib.suppress(OSError):
                h.process.terminate()
    deadline = time.monotonic() + _TERM_GRACE_SECS
    for h in handles:
        h.process.join(max(0.0, deadline - time.monotonic()))
    for h in handles:
        if h.process.is_alive():
            with contextlib.suppress(OSError):
                h.process.kill()
            h.process.join(5.0)
    for h in handles:
        # Segments announced in messages not read yet (prefetched batches).
        while h.conn_open:
            try:
                if not h.conn.poll():
                    break
                msg = pickle.loads(h.conn.recv_bytes())
            except (EOFError, OSError):
                break
            if msg[0] == "seg":
                h.announced.append(msg[1])
        for name in h.announced:
            with contextlib.suppress(OSError):
                unlink(name)
        h.conn_open = False
        h.exited = True
        with contextlib.suppress(OSError):
            h.conn.close()
        with contextlib.suppress(ValueError):
            h.process.close()
        for seg in list(h.slot_seg.values()):
            if seg.users == 0:
                seg.close()
        h.slot_seg.clear()
        h.inbox.clear()
        h.stopped = True
