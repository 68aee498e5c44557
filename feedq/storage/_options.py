"""Read-ahead and retry settings, and the process-wide counters of remote reads."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

__all__ = ["StorageOptions", "configure", "options", "reset_statistics", "statistics"]


@dataclasses.dataclass(frozen=True)
class StorageOptions:
    """How remote files are read.

    Attributes:
        block_bytes: bytes per range request (default 8 MiB).
        read_ahead: range requests in flight or buffered per open file
            (default 4). Memory per open remote file is at most
            ``read_ahead * block_bytes`` (32 MiB by default) plus the block
            being consumed.
        retry_budget_s: how long a failing request is retried (with jittered
            exponential backoff) before the read fails, counted from its
            first failure (default 30 s).
        backoff_initial_s: the first backoff's upper bound (default 0.05 s).
        backoff_max_s: the longest backoff (default 2 s).
        request_timeout_s: the S3 client's connect and request timeouts
            (default 20 s); a request that hangs past it is a transient failure.
        connect_budget_s: how long a request is retried while the store
            refuses connections or its name does not resolve, as long as no
            request to that store (scheme and bucket or host) has succeeded
            in this process (default 3 s): a wrong endpoint fails in
            seconds, naming it. Once the store has answered, such failures
            are transient and get the whole ``retry_budget_s``. A store
            whose request has just spent a whole ``retry_budget_s`` also gets
            ``connect_budget_s`` per request until one succeeds again.
        prefetch_files: remote files opened ahead per input producer, from
            the names it is about to hand out (default 4; 0 turns it off):
            their metadata request and first range request are sent before a
            reader asks, so a small file costs no round trip on the reader's
            path. Each holds at most one block (``block_bytes``), so at most
            ``prefetch_files * block_bytes`` (32 MiB by default) per producer;
            no name is taken from the queue early. See docs/storage.md.
    """

    block_bytes: int = 8 << 20
    read_ahead: int = 4
    retry_budget_s: float = 30.0
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    request_timeout_s: float = 20.0
    connect_budget_s: float = 3.0
    prefetch_files: int = 4

    def __post_init__(self) -> None:
        if self.block_bytes < 1 or self.read_ahead < 1:
            raise ValueError(
                f"block_bytes and read_ahead must be >= 1, got {self.block_bytes}, {self.read_ahead}"
            )
        if (self.retry_budget_s < 0 or self.connect_budget_s < 0 or self.backoff_initial_s < 0
                or self.backoff_max_s < 0):
            raise ValueError("retry_budget_s, connect_budget_s and the backoffs must be >= 0")
        if self.prefetch_files < 0:
            raise ValueError(f"prefetch_files must be >= 0, got {self.prefetch_files}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")


_lock = threading.Lock()
_options = StorageOptions()  # guarded by _lock


def options() -> StorageOptions:
    """The settings in force (:func:`configure` changes them)."""
    with _lock:
        return _options


def configure(**changes: Any) -> StorageOptions:
    """Change the settings for files opened from now on; returns the old ones.

    ``configure(read_ahead=8, block_bytes=4 << 20)``; pass the returned
    object's fields back (``configure(**dataclasses.asdict(old))``) to restore.

    Raises:
        TypeError: an unknown setting.
        ValueError: a value out of range.
    """
    global _options
    with _lock:
        old = _options
        _options = dataclasses.replace(old, **changes)
        return old


_COUNTERS = ("files_opened", "requests", "bytes", "retries", "throttled", "wait_s", "failures",
             "opened_ahead", "blocking_requests")
_stats_lock = threading.Lock()
_stats: dict[str, float] = dict.fromkeys(_COUNTERS, 0)  # guarded by _stats_lock


def count(**amounts: float) -> None:
    """Add to the counters (internal)."""
    with _stats_lock:
        for key, value in amounts.items():
            _stats[key] += value


def statistics() -> dict[str, float]:
    """This process's remote reads since it started (or :func:`reset_statistics`).

    Keys: ``files_opened``; ``requests`` (range and metadata requests sent,
    retries included); ``bytes`` (bytes received); ``retries`` (requests
    repeated after a transient failure); ``throttled`` (failures the store
    called throttling, which lower the requests in flight); ``wait_s``
    (seconds readers waited for the store: opens, and blocks not yet
    arrived); and
    ``failures`` (requests that failed after their budget, read-ahead
    fetches and opens ahead included);
    ``opened_ahead`` (opens served by a file opened ahead from a producer's
    hints: its metadata and first block were asked for before the reader
    needed them); and ``blocking_requests`` (requests a reader sent only when
    it needed their answer, then waited for from their start: an open not
    made ahead, a block not requested ahead -- the round trips on the
    readers' path). No URL and no credential is recorded.
    """
    with _stats_lock:
        return dict(_stats)


def reset_statistics() -> None:
    """Zero the counters."""
    with _stats_lock:
        for key in _COUNTERS:
            _stats[key] = 0
