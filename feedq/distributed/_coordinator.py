"""ClusterCoordinator: one stop signal and one first error for every process.

A :class:`feedq.Coordinator` whose stop is shared through a record held by
one task: ``request_stop(ex)`` in any process is written there, and a watcher
thread in every other process, blocked in one call on the record that
returns when a stop it has not applied yet is recorded, requests the same
stop locally at once. Local stop callbacks then run as usual, so queue
runners in every process cancel their queues (QR7), and ``join`` re-raises
the first error anywhere, with ``.task`` naming the process it came from
(C3, C6). ``close`` ends the watcher's call through its CancelToken.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from feedq.coordinator import Coordinator
from feedq.distributed._cluster import TaskName
from feedq.distributed._resources import resolve_task
from feedq.distributed._session import Session, default_session
from feedq.errors import FeedqError, UnavailableError
from feedq.queues import CancelToken

__all__ = ["ClusterCoordinator"]

_LOG = logging.getLogger(__name__)

#: How long a watcher waits before asking again after the record's host
#: could not be reached (nothing tells it when the host is back).
_RETRY = 1.0
#: How long close() waits for the watcher thread to end.
_CLOSE_JOIN = 5.0


def _default_origin() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


class ClusterCoordinator(Coordinator):
    """A Coordinator shared by every process of a cluster (C1–C11 across processes).

    Usage, in every process::

        coord = ClusterCoordinator("training", task="/job:ps/task:0",
                                   origin="/job:worker/task:1")
        threads = feedq.start_queue_runners(coord=coord)
        ...
        coord.request_stop(err)   # any process: all processes stop within ~1 s
        coord.join(threads)       # re-raises the first error; err.task names its origin

    Args:
        name: the record's shared name (processes with the same name share it).
        task: the task holding the record (``None``: the device contexts).
        origin: how this process is named in errors it reports (its task,
            e.g. ``"/job:worker/task:1"``; default: pid and host).
        clean_stop_exception_types: as :class:`feedq.Coordinator` (C1).
        session: the session (``None``: the process default).
    """

    def __init__(self, name: str = "coordinator", *, task: Any = None, origin: Any = None,
                 clean_stop_exception_types: Sequence[type[BaseException]] | None = None,
                 session: Session | None = None) -> None:
        super().__init__(clean_stop_exception_types)
        self._session_arg = session
        s = session or default_session()
        self._task: TaskName = resolve_task(task, "Coordinator", name, s)
        self._key = ("", name)
        self.origin = str(origin) if origin is not None else _default_origin()
        s.open(self._task, "coordinator", self._key, {})
        self._name = name
        self._watch_lock = threading.Lock()
        self._user_closed = False  # guarded by self._watch_lock: close() ran
        self._closed = CancelToken()  # ends the current watcher and its call
        self._watcher = self._start_watcher(self._closed)

    def _start_watcher(self, closed: CancelToken) -> threading.Thread:
        t = threading.Thread(target=self._watch_remote, args=(closed,), daemon=True,
                             name=f"feedq-cluster-coord-{self._name}-watcher")
        t.start()
        return t

    @property
    def session(self) -> Session:
        return self._session_arg or default_session()

    def request_stop(self, ex: Any = None) -> None:
        """Request a stop in every process of the cluster (C3, C4).

        The first stop anywhere wins; its exception (unless clean) is what
        ``join`` raises in every process, with ``.task`` set to its origin.
        """
        exc = _exception_of(ex)
        if exc is not None and isinstance(exc, self.clean_stop_exception_types):
            exc = None
        if exc is not None and getattr(exc, "task", None) is None:
            _tag(exc, self.origin)
        if not self.should_stop():
            try:
                self.session.call(self._task, "coordinator", self._key, "request_stop",
                                  _portable(exc), self.origin)
            except FeedqError:
                # The record's host is gone: the local stop still happens.
                _LOG.warning("could not share the stop of %s", self._key[1], exc_info=True)
        super().request_stop(ex)

    def clear_stop(self) -> None:
        """Clear the stop here and in the shared record (C2)."""
        try:
            self.session.call(self._task, "coordinator", self._key, "clear")
        except FeedqError:
            _LOG.warning("could not clear the shared stop of %s", self._key[1], exc_info=True)
        super().clear_stop()
        # Watch again (join ends the watcher): later stops elsewhere must
        # still reach this process.
        with self._watch_lock:
            if not self._user_closed and (self._closed.fired or not self._watcher.is_alive()):
                self._closed.fire()
                self._closed = CancelToken()
                self._watcher = self._start_watcher(self._closed)

    def _watch_remote(self, closed: CancelToken) -> None:
        # Follows the record's generation (bumped by every clear): each
        # shared stop is applied here once, and the watcher outlives it, so a
        # stop after a clear_stop reaches this process too.
        ended = threading.Event()
        closed.on_fire(ended.set)
        applied: int | None = None
        while not closed.fired:
            try:
                # Returns once the record holds a stop this watcher has not
                # applied (another generation than `applied`).
                stopped, err, origin, generation = self.session.call(
                    self._task, "coordinator", self._key, "wait_stop", timeout=math.inf,
                    after=applied, cancel=closed)
            except UnavailableError as exc:
                if closed.fired:
                    return
                # Without the record the cluster cannot coordinate: stop here.
                if not self.should_stop():
                    try:
                        super().request_stop(exc)
                    except BaseException:  # noqa: BLE001 - joined already (C8)
                        _LOG.debug("stop after join ignored", exc_info=True)
                if ended.wait(_RETRY):
                    return
                continue
            except Exception:  # noqa: BLE001 - closed (its token), or the session at shutdown
                if closed.fired or ended.wait(_RETRY):
                    return
                continue
            if not stopped or generation == applied:
                continue
            applied = generation
            if err is not None:
                _tag(err, origin or "another process")
            if not self.should_stop():
                try:
                    super().request_stop(err)
                except BaseException:  # noqa: BLE001 - joined already (C8): nobody to tell
                    _LOG.debug("stop after join ignored", exc_info=True)

    def close(self) -> None:
        """Stop watching the shared record (the watcher is a daemon thread)."""
        with self._watch_lock:
            self._user_closed = True
            self._closed.fire()
            watcher = self._watcher
        watcher.join(timeout=_CLOSE_JOIN)

    def join(self, threads: Any = None, stop_grace_period_secs: float = 120,
             ignore_live_threads: bool = False) -> None:
        """As :meth:`feedq.Coordinator.join` (C6); also ends the watcher."""
        try:
            super().join(threads, stop_grace_period_secs, ignore_live_threads)
        finally:
            if self.should_stop():
                self._closed.fire()


def _exception_of(ex: Any) -> BaseException | None:
    """The exception in ``request_stop``'s argument (C4, X8): an instance, or
    the value of an exc_info triple (``None`` outside an except block).

    Raises:
        TypeError: ``ex`` is neither None, an exception instance nor an
            exc_info triple (as :meth:`feedq.Coordinator.request_stop`).
    """
    if ex is None or isinstance(ex, BaseException):
        return ex
    if isinstance(ex, tuple) and len(ex) == 3:
        value, tb = ex[1], ex[2]
        if value is None:
            return None
        if isinstance(value, BaseException) and (tb is None or isinstance(tb, TracebackType)):
            return value
    raise TypeError(f"ex must be None, an exception instance or an exc_info triple, got {ex!r}")


def _tag(exc: BaseException, origin: str) -> None:
    """Name the process an error came from, on the exception and in its text."""
    try:
        exc.task = origin  # type: ignore[attr-defined]
        if not any(origin in n for n in getattr(exc, "__notes__", [])):
            exc.add_note(f"(reported to the cluster coordinator by {origin})")
    except (AttributeError, TypeError):
        pass


def _portable(exc: BaseException | None) -> BaseException | None:
    if exc is None:
        return None
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        err = FeedqError(f"{type(exc).__name__}: {exc}")
        _tag(err, getattr(exc, "task", "another process"))
        return err
