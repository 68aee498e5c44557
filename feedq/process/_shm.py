"""Shared-memory segments: POSIX ``shm_open`` + ``mmap``, named so that a
crash leaves nothing behind for long.

One segment holds one slot of a worker's ring. A segment's name says who it
belongs to: ``feedq_<parent pid>_<stage token>_<worker>_<serial>``. The
worker announces a name to the parent before creating it; the parent unlinks
it as soon as it has mapped it (both sides keep their mappings), so while
both processes live a segment has no name for long. What can be left behind:

* the parent is killed: its workers notice (pipe EOF or a new parent pid)
  and unlink the names they created, then exit;
* the parent and its workers are killed together: :func:`sweep` (run when a
  process stage starts) unlinks every ``feedq_<pid>_...`` segment whose
  ``pid`` is no longer alive (Linux, where ``/dev/shm`` can be listed).

This uses ``_posixshmem`` directly rather than
``multiprocessing.shared_memory.SharedMemory``: before Python 3.13 the latter
registers every segment it *opens* with the resource tracker, which then
unlinks segments it does not own and warns about "leaked" ones at exit.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import sys

from feedq.errors import UnimplementedError

try:  # POSIX (Linux, macOS); not on Windows
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

__all__ = [
    "PREFIX",
    "Segment",
    "new_token",
    "parse_owner",
    "pid_alive",
    "segment_name",
    "sweep",
    "unlink",
]

#: Every segment feedq creates starts with this (no leading slash).
PREFIX = "feedq_"
_SHM_DIR = "/dev/shm"


def _require_posix() -> None:
    if _posixshmem is None:
        raise UnimplementedError(
            "feedq process stages need POSIX shared memory (Linux or macOS); "
            f"{sys.platform} is not supported: use threads (feedq.shuffle_batch...) instead"
        )


def new_token() -> str:
    """A short random token telling the segments of one stage from another's."""
    return secrets.token_hex(2)


def segment_name(parent_pid: int, token: str, worker: int, serial: int) -> str:
    """The name of one segment (at most 30 characters for macOS's limit of 31
    with pids below 10**7, 999 workers and a million segments per worker)."""
    return f"{PREFIX}{parent_pid}_{token}_{worker}_{serial}"


def parse_owner(name: str) -> int | None:
    """The parent pid a feedq segment name carries, or None for other names."""
    if not name.startswith(PREFIX):
        return None
    head = name[len(PREFIX):].split("_", 1)[0]
    return int(head) if head.isdigit() else None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # "pid (comm) S ...": the state follows the last ')'.
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(0) said it exists


def unlink(name: str) -> bool:
    """Remove a segment's name; False if it had none (already unlinked)."""
    _require_posix()
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        return False
    return True


def sweep() -> list[str]:
    """Unlink feedq segments whose owning (parent) process is dead.

    Only where ``/dev/shm`` can be listed (Linux); elsewhere a no-op.
    Returns the names removed.
    """
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return []
    removed = []
    for name in names:
        pid = parse_owner(name)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            if unlink(name):
                removed.append(name)
    return removed


class Segment:
    """One mapped shared-memory segment.

    ``Segment.create`` makes a new one of ``size`` bytes (reserving its pages
    where the OS can, so a full ``/dev/shm`` is an ``OSError`` here rather
    than a SIGBUS later); ``Segment.open`` maps an existing one by name.
    ``mm`` is the mapping; arrays are made over it with ``np.frombuffer``.
    """

    def __init__(self, name: str, mm: mmap.mmap) -> None:
        self.name = name
        self.mm = mm
        self.size = len(mm)
        # Consumer side: batches taken from this segment whose arrays may
        # still be in use, and whether the worker has moved on to another
        # segment for the slot (then we close this one once users is 0).
        self.users = 0
        self.detached = False

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        _require_posix()
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            if hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as exc:
                    if exc.errno not in (95, 22):  # EOPNOTSUPP / EINVAL: fall back
                        raise OSError(
                            exc.errno,
                            f"cannot reserve {size} bytes of shared memory for {name!r} "
                            f"({exc.strerror}); is /dev/shm full or too small?",
                        ) from None
                    os.ftruncate(fd, size)
            else:
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            with contextlib.suppress(OSError):
                _posixshmem.shm_unlink("/" + name)
            raise
        finally:
            os.close(fd)
        return cls(name, mm)

    @classmethod
    def open(cls, name: str) -> Segment:
        _require_posix()
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, mm)

    def close(self) -> bool:
        """Unmap; False (and still mapped) while arrays still use the memory.

        A mapping that arrays still use is unmapped when the last of them
        goes (the arrays keep the ``mmap`` object alive).
        """
        try:
            self.mm.close()
        except BufferError:
            return False
        return True
