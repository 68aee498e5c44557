"""Process-wide defaults (the analogue of TF1's ``ConfigProto.operation_timeout_in_ms``).

Every blocking call in feedq takes ``timeout=`` in seconds:

* ``None`` (the default) uses the process-wide default set here, which is
  itself ``None`` = wait forever unless changed;
* ``0`` does not wait at all (fails with ``DeadlineExceededError`` if the call
  cannot complete at once) — unlike TF1, where 0 meant "no timeout";
* ``math.inf`` waits forever whatever the default is;
* a negative value is a ``ValueError``.
"""

from __future__ import annotations

import math
import threading

__all__ = ["get_default_timeout", "set_default_timeout", "resolve_timeout"]

_lock = threading.Lock()
_default_timeout: float | None = None  # guarded by _lock (reads are atomic)


def set_default_timeout(seconds: float | None) -> float | None:
    """Set the default timeout of every blocking call in this process.

    Args:
        seconds: the default in seconds; ``None`` or ``math.inf`` means wait
            forever.

    Returns:
        The previous default.

    Raises:
        ValueError: ``seconds`` is negative or NaN.
    """
    global _default_timeout
    if seconds is not None:
        seconds = float(seconds)
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"default timeout must be >= 0 seconds or None, got {seconds}")
        if math.isinf(seconds):
            seconds = None
    with _lock:
        previous, _default_timeout = _default_timeout, seconds
    return previous


def get_default_timeout() -> float | None:
    """The process-wide default timeout in seconds (``None`` = forever)."""
    return _default_timeout


def resolve_timeout(timeout: float | None) -> float | None:
    """Turn a ``timeout=`` argument into seconds to wait, or ``None`` = forever.

    Raises:
        ValueError: ``timeout`` is negative or NaN.
    """
    if timeout is None:
        return _default_timeout
    timeout = float(timeout)
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
    if math.isinf(timeout):
        return None
    return timeout
