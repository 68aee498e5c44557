"""Opening the next remote files ahead, from the names a producer will hand out.

An input producer tells the storage layer, before it enqueues them, the
names its filename queue will give out, in order (:class:`Hints`). Once a
reader of this process has opened a remote file, the storage layer opens
the first :attr:`StorageOptions.prefetch_files` hinted names that are not
yet open -- the metadata request and the first range request of each, on
the shared pool -- and :func:`take` hands such a file to the reader that
opens that name, whichever reader it is. Nothing is claimed: the readers
still take their names from the queue when they finish a file, so
resumption and readers sharing the queue see exactly what they saw before;
only the bytes of a file's first block may already be there.

Bounds: per :class:`Hints`, at most ``prefetch_files`` files are held open
ahead, each with at most one block (``block_bytes``) requested or
buffered. A hinted name the readers pass over (another process took it, a
reader waits long between taking and opening it) gives its room to the
names after it once ``_STALE`` later names were opened, and is forgotten
after ``_PASSED``; :meth:`Hints.close` (the pipeline's
shutdown, or the producer collected) drops all of its files; a forked
child forgets the parent's (the clients are the parent's).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from feedq.storage._options import options
from feedq.storage._url import is_remote

#: A hinted name is dropped after this many names hinted after it were opened.
_PASSED = 16
#: A file opened ahead gives its room to later names once passed over this often.
_STALE = 2
#: Names looked at, from the oldest unopened, when a file is opened.
_SCAN = 64
#: Names taken from a queue but not yet opened, beyond its capacity (readers between the two).
_SLACK = 8

_lock = threading.Lock()
_owners: weakref.WeakSet[Hints] = weakref.WeakSet()  # guarded by _lock
_active = False  # guarded by _lock; a remote file was opened in this process


class _Ahead:
    """One hinted name and, once started, its file being opened ahead."""

    __slots__ = ("dropped", "future", "name", "passed")

    def __init__(self, name: str) -> None:
        self.name = name
        self.passed = 0
        self.future: Future[Any] | None = None  # -> a RemoteFile with its first block asked for
        self.dropped = threading.Event()  # set once: an open in flight stops (no retries)

    def start(self) -> None:
        from feedq.storage._remote import open_ahead, shared_pool

        self.future = shared_pool().submit(functools.partial(open_ahead, self.name, self.dropped))

    def drop(self) -> None:
        # First the event: an open already running ends at its next attempt
        # instead of retrying (or being slow) for a file nobody will read.
        self.dropped.set()
        fut, self.future = self.future, None
        if fut is None or fut.cancel():
            return
        fut.add_done_callback(_close_result)  # now, or when its open ends


def _close_result(fut: Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().close()


class Hints:
    """The names one producer's queue will give out, in order.

    :meth:`add` before enqueueing them; :meth:`close` when the producer is
    done (idempotent). ``capacity`` is the queue's: when names are added,
    at most that many older names can still be in the queue, so older ones
    are forgotten.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, int(capacity))
        self._runs: deque[list[Any]] = deque()  # [names, next index]; guarded by _lock
        self._pending = 0  # names in self._runs not yet looked at; guarded by _lock
        self._upcoming: deque[_Ahead] = deque()  # guarded by _lock
        self._closed = False  # guarded by _lock
        with _lock:
            _owners.add(self)
        # Collected without close(): its files are dropped (no lock taken: a
        # finalizer may run in a thread holding it; nothing else can reach them).
        weakref.finalize(self, _drop_all, self._upcoming)

    def add(self, names: Sequence[Any] | Any) -> None:
        """The next names the queue will give out, a sequence or a 1-D array
        (the caller keeps ``names`` unchanged)."""
        if len(names) == 0:
            return
        with _lock:
            if self._closed:
                return
            # Only the last `capacity` names hinted before can still be in the
            # queue (or just taken from it): older ones are forgotten.
            excess = len(self._upcoming) + self._pending - self._capacity - _SLACK
            while excess > 0 and self._upcoming:
                self._upcoming.popleft().drop()
                excess -= 1
            while excess > 0 and self._runs:
                run = self._runs[0]
                k = min(len(run[0]) - run[1], excess)
                run[1] += k
                self._pending -= k
                excess -= k
                if run[1] >= len(run[0]):
                    self._runs.popleft()
            self._runs.append([names, 0])
            self._pending += len(names)
            if _active:
                self._fill()

    def close(self) -> None:
        """Drop every file opened ahead and every name (idempotent)."""
        with _lock:
            self._closed = True
            self._runs.clear()
            self._pending = 0
            upcoming = deque(self._upcoming)
            self._upcoming.clear()  # in place: the finalizer holds this deque
        _drop_all(upcoming)

    def held(self) -> int:
        """Files opened (or being opened) ahead now."""
        with _lock:
            return sum(1 for e in self._upcoming if e.future is not None)

    # ---------------------------------------------------------------- internal
    def _look(self) -> None:
        # Under _lock: the next hinted URLs, up to _SCAN of them, made entries.
        while len(self._upcoming) < _SCAN and self._runs:
            run = self._runs[0]
            names, i = run
            while i < len(names) and len(self._upcoming) < _SCAN:
                name = names[i]
                i += 1
                self._pending -= 1
                if isinstance(name, (bytes, str)) and is_remote(name):
                    self._upcoming.append(_Ahead(os.fsdecode(name)))
            run[1] = i
            if i >= len(names):
                self._runs.popleft()

    def _fill(self) -> None:
        # Under _lock: the next entries not passed over opening ahead, at most
        # prefetch_files at a time; files passed over twice or more (not taken
        # by a reader of this process, it seems) make room for them.
        self._look()
        depth = options().prefetch_files
        started = sum(1 for e in self._upcoming if e.future is not None)
        stale = deque(e for e in self._upcoming if e.future is not None and e.passed >= _STALE)
        for entry in self._upcoming:
            if entry.future is not None or entry.passed >= _STALE:
                continue
            if started >= depth:
                if not stale:
                    break
                stale.popleft().drop()
                started -= 1
            entry.start()
            started += 1

    def _take(self, name: str) -> _Ahead | None:
        # Under _lock: the entry of `name`, removed, if this producer hinted it.
        self._look()
        found = next((k for k, e in enumerate(self._upcoming) if e.name == name), None)
        if found is None:
            return None
        entry = self._upcoming[found]
        del self._upcoming[found]
        kept: deque[_Ahead] = deque()
        for k, other in enumerate(self._upcoming):
            if k < found:
                other.passed += 1
                if other.passed > _PASSED:
                    other.drop()
                    continue
            kept.append(other)
        self._upcoming.clear()  # in place: the finalizer holds this deque
        self._upcoming.extend(kept)
        return entry


def _drop_all(upcoming: deque[_Ahead]) -> None:
    for entry in list(upcoming):
        entry.drop()
    upcoming.clear()


def take(name: str) -> Future[Any] | None:
    """The file opened ahead for ``name`` (its future), or None; then opens
    the next hinted names ahead (the first call in a process turns opening
    ahead on)."""
    global _active
    with _lock:
        _active = True
        owners = [o for o in _owners if not o._closed]
        entry = None
        for owner in owners:
            entry = owner._take(name)
            if entry is not None:
                break
        for owner in owners:
            owner._fill()
    return None if entry is None else entry.future


def held() -> int:
    """Files opened (or being opened) ahead in this process, for every producer."""
    with _lock:
        owners = list(_owners)
    return sum(o.held() for o in owners)


def _forget() -> None:
    # In a forked child: the parent's files and clients are not this process's.
    global _active, _lock
    _lock = threading.Lock()
    _active = False
    for owner in list(_owners):
        owner._runs.clear()
        owner._pending = 0
        owner._upcoming.clear()
        owner._closed = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
