"""Reading one remote object: range requests in flight ahead of the reader.

:class:`RemoteFile` is the raw byte source a reader's byte stream reads
from (framing, decompression and the native core above it are unchanged).
It splits the object into blocks of :attr:`StorageOptions.block_bytes` and
keeps up to :attr:`StorageOptions.read_ahead` of them requested ahead of the
reading position, on a shared pool of daemon threads (pyarrow's reads
release the GIL). Memory per open file is at most ``read_ahead + 1`` blocks:
those ahead and the one being read.

Each block is fetched whole or not at all: a transient failure (503
SlowDown, a reset or truncated body, a timeout) repeats the request for the
bytes still missing, with jittered backoff within the retry budget, so a
block's bytes are exactly the object's -- nothing lost, nothing twice. A
throttled request halves the blocks this file keeps in flight; each
success adds one back. When the budget is spent the read fails with a
``DataLossError`` naming the URL and byte offset; bytes before it are
still returned first.
"""

from __future__ import annotations

import functools
import io
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError as _FutureCancelled
from concurrent.futures import Future, wait
from typing import Any, TypeVar

from feedq.errors import CancelledError, DataLossError, FeedqError, InvalidArgumentError
from feedq.storage import _prefetch
from feedq.storage._filesystems import Location, resolve, retrying
from feedq.storage._options import count, options

R = TypeVar("R")

_POOL_THREADS = 32
_IDLE_S = 0.2


class _Pool:
    """Daemon threads running fetches (daemon: interpreter exit never waits
    on a store); a thread idle for ``_IDLE_S`` ends, so none outlives its work long."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0  # guarded by self._lock
        self._idle = 0  # guarded by self._lock
        self._made = 0  # guarded by self._lock; names the threads

    def submit(self, fn: Callable[[], R]) -> Future[R]:
        fut: Future[R] = Future()
        with self._lock:
            self._work.put((fut, fn))
            if self._idle == 0 and self._threads < self._n:
                self._threads += 1
                self._made += 1
                threading.Thread(target=self._run, name=f"feedq-storage-{self._made}",
                                 daemon=True).start()
        return fut

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                fut, fn = self._work.get(timeout=_IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._work.empty():
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
                fut.set_exception(exc)


_pool_lock = threading.Lock()
_pool: _Pool | None = None
_pool_pid = -1


def shared_pool() -> _Pool:
    """This process's pool of fetching threads."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child starts its own
            _pool, _pool_pid = _Pool(_POOL_THREADS), os.getpid()
        return _pool


class RemoteFile:
    """The raw bytes of one remote object, read ahead in range requests.

    ``read(n)`` returns ``n`` bytes unless the object ends first (or a read
    failed after some bytes: they come first, the next call raises);
    ``seek(pos)`` moves the reading position (the blocks ahead are dropped
    when it leaves them). Not for concurrent use by several threads.
    """

    def __init__(self, location: Location, handle: Any, size: int) -> None:
        opts = options()
        self.name = location.url
        self.size = size
        self._handle = handle  # a pyarrow RandomAccessFile: read_at is thread-safe
        self._block = opts.block_bytes
        self._depth = opts.read_ahead
        self._allowed = opts.read_ahead  # lowered when throttled; guarded by self._lock
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pos = 0
        self._cur = b""
        self._cur_start = 0
        self._ahead: deque[tuple[int, int, Future[bytes]]] = deque()  # (start, length, bytes)
        self._next = 0  # where the next block to request starts
        self._error: FeedqError | None = None

    # --------------------------------------------------------------- fetching
    def _fetch(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)``, whole (retried within the budget)."""
        parts: list[bytes] = []
        got = 0

        def once() -> bytes:
            if self._closed.is_set():
                raise _Closed
            want = length - got
            data: bytes = self._handle.read_at(want, start + got)
            count(bytes=len(data))
            if len(data) < want:
                if data:
                    # Keep the bytes that came; ask again for the rest.
                    parts.append(data)
                    advance(len(data))
                raise OSError(f"partial body: {len(data)} of {want} bytes")
            return data

        def advance(k: int) -> None:
            nonlocal got
            got += k

        while True:
            try:
                last = retrying(once, self.name, "read", offset=lambda: start + got,
                                on_throttle=self._throttled, closed=self._closed)
                break
            except _Closed:
                raise CancelledError(f"{self.name}: closed") from None
            except DataLossError:
                if self._closed.is_set():
                    raise CancelledError(f"{self.name}: closed") from None
                raise
        parts.append(last)
        with self._lock:
            self._allowed = min(self._depth, self._allowed + 1)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _throttled(self) -> None:
        with self._lock:
            self._allowed = max(1, self._allowed // 2)

    def _fill(self, most: int | None = None) -> None:
        with self._lock:
            allowed = self._allowed if most is None else min(most, self._allowed)
        pool = None
        while len(self._ahead) < allowed and self._next < self.size:
            start, length = self._next, min(self._block, self.size - self._next)
            pool = pool or shared_pool()
            fut = pool.submit(functools.partial(self._fetch, start, length))
            self._ahead.append((start, length, fut))
            self._next = start + length

    def _drop_ahead(self) -> None:
        for _, _, fut in self._ahead:
            fut.cancel()
        self._ahead.clear()

    # ----------------------------------------------------------------- reading
    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left with ``n < 0``) from the position."""
        if self._closed.is_set():
            raise ValueError(f"{self.name}: read from a closed file")
        if self._error is not None:
            raise self._error
        if n < 0:
            n = self.size - self._pos
        out: list[bytes] = []
        while n > 0 and self._pos < self.size:
            rel = self._pos - self._cur_start
            if 0 <= rel < len(self._cur):
                k = min(n, len(self._cur) - rel)
                out.append(self._cur if (rel == 0 and k == len(self._cur))
                           else self._cur[rel : rel + k])
                self._pos += k
                n -= k
                continue
            if self._ahead and self._ahead[0][0] < self._pos < sum(self._ahead[0][:2]):
                pass  # a seek into the first block ahead (a file resumed mid-block)
            elif not self._ahead or self._ahead[0][0] != self._pos:
                self._drop_ahead()  # a seek away from the blocks ahead
                self._next = self._pos
            if not self._ahead:
                count(blocking_requests=1)  # this block is asked for only now
            self._fill()
            start, _, fut = self._ahead.popleft()
            self._cur = b""
            if not fut.done():
                t0 = time.monotonic()
                wait([fut])
                count(wait_s=time.monotonic() - t0)
            try:
                data = fut.result()
            except FeedqError as exc:
                self._error = exc
                self._drop_ahead()
                if out:
                    break
                raise
            except _FutureCancelled:
                raise ValueError(f"{self.name}: read from a closed file") from None
            self._cur, self._cur_start = data, start
            self._fill()
        return out[0] if len(out) == 1 else b"".join(out)

    def seek(self, pos: int, whence: int = 0) -> int:
        """Move the reading position (``whence`` as ``io``)."""
        if whence == 1:
            pos += self._pos
        elif whence == 2:
            pos += self.size
        if pos < 0:
            raise InvalidArgumentError(f"{self.name}: negative seek position {pos}")
        self._pos = min(pos, self.size)
        return self._pos

    def tell(self) -> int:
        """The reading position."""
        return self._pos

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed.is_set()

    def close(self) -> None:
        """Drop the blocks ahead and close the object (idempotent; fetches in
        flight end on their own, their bytes dropped)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._drop_ahead()
        self._cur = b""
        try:
            self._handle.close()
        except OSError:
            pass


class _Closed(Exception):
    """Internal: a fetch found its file closed."""


def open_remote(name: bytes | str) -> RemoteFile:
    """Open a remote object for reading (one metadata request, retried), or
    take it from the files an input producer's hints had opened ahead
    (``feedq.storage._prefetch``): then its metadata and first block were
    asked for before this call.

    Raises:
        NotFoundError: no such object, naming the URL.
        PermissionDeniedError: the store refused, naming the URL.
        UnavailableError: the store could not be reached within the retry budget.
    """
    ahead = _prefetch.take(os.fsdecode(name))
    if ahead is not None:
        if not ahead.done():
            t0 = time.monotonic()
            wait([ahead])
            count(wait_s=time.monotonic() - t0)
        try:
            opened: RemoteFile = ahead.result()
        except (FeedqError, _FutureCancelled):
            pass  # opened again here: its failure, if it lasts, is raised by this call
        else:
            count(opened_ahead=1)
            return opened
    count(blocking_requests=1)
    t0 = time.monotonic()
    try:
        return _open(name)
    finally:
        count(wait_s=time.monotonic() - t0)  # the reader waited for the open too


def _open(name: bytes | str, dropped: threading.Event | None = None) -> RemoteFile:
    loc = resolve(name)

    def once() -> Any:
        if dropped is not None and dropped.is_set():
            raise _Closed
        return loc.fs.open_input_file(loc.path)

    handle = retrying(once, loc.url, "open", wake=dropped)
    count(files_opened=1)
    return RemoteFile(loc, handle, int(handle.size()))


def open_ahead(name: str, dropped: threading.Event) -> RemoteFile:
    """Open ``name`` and ask for its first block (run on the pool, for
    ``feedq.storage._prefetch``), unless ``dropped`` is set first: then no
    request is sent, a retrying open stops at once (the pool's thread is
    not kept for a file nobody will read) and a file opened meanwhile is
    closed before its block is asked for.

    Raises:
        CancelledError: ``dropped`` was set before the file was opened.
    """
    gone = CancelledError(f"{name}: dropped before it was opened ahead")
    if dropped.is_set():
        raise gone
    try:
        file = _open(name, dropped)
    except _Closed:  # dropped while its open was retried
        raise gone from None
    if dropped.is_set():
        file.close()
        raise gone
    file._fill(1)
    return file


class RandomAccess(io.RawIOBase):
    """A seekable file object over a remote object, each read one retried
    range request (for formats that seek, such as Parquet's footer and
    column chunks); no read-ahead."""

    def __init__(self, name: bytes | str) -> None:
        super().__init__()
        self._file = open_remote(name)
        self._file._drop_ahead()  # a block opened ahead at 0: the footer comes first
        self.name = self._file.name
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        """The object's size in bytes."""
        return self._file.size

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 1:
            pos += self._pos
        elif whence == 2:
            pos += self._file.size
        self._pos = max(0, pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int | None = -1) -> bytes:
        size = self._file.size
        if n is None or n < 0:
            n = size - self._pos
        n = max(0, min(n, size - self._pos))
        if n == 0:
            return b""
        data = self._file._fetch(self._pos, n)
        self._pos += len(data)
        return data

    def readinto(self, buf: Any) -> int:
        data = self.read(len(buf))
        memoryview(buf).cast("B")[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()
