"""How a coordinator records an exception and raises it again (C4, C8, C11, X8).

``request_stop`` accepts an exception instance or an ``exc_info`` triple;
:func:`_as_exc_info` normalises both, :func:`_raise` re-raises a recorded one
with its original traceback, and :class:`_StopOnException` is the context
manager behind :meth:`Coordinator.stop_on_exception`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._coordinator import Coordinator

#: An exception as ``request_stop`` accepts it: an instance or an exc_info triple.
_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
_StopException = BaseException | _ExcInfo | tuple[None, None, None] | None
#: A stop callback receives the recorded exception, or None for a clean stop.
_StopCallback = Callable[[BaseException | None], object]


def _as_exc_info(ex: _StopException) -> _ExcInfo | None:
    """Normalise ``request_stop``'s argument to an exc_info triple (C4, X8).

    Raises:
        TypeError: ``ex`` is neither None, an exception instance nor an
            exc_info triple.
    """
    if ex is None:
        return None
    if isinstance(ex, BaseException):
        return (type(ex), ex, ex.__traceback__)
    if isinstance(ex, tuple) and len(ex) == 3:
        _, value, tb = ex
        if value is None:
            # sys.exc_info() outside an except block: nothing to record.
            return None
        if isinstance(value, BaseException) and (tb is None or isinstance(tb, TracebackType)):
            return (type(value), value, tb)
    raise TypeError(f"ex must be None, an exception instance or an exc_info triple, got {ex!r}")


def _raise(exc_info: _ExcInfo) -> None:
    """Re-raise a recorded exception with its original traceback."""
    _, value, tb = exc_info
    raise value.with_traceback(tb)


class _StopOnException:
    """Context manager returned by :meth:`Coordinator.stop_on_exception`."""

    def __init__(self, coord: Coordinator) -> None:
        self._coord = coord

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is None or exc is None:
            return False
        # After join() this re-raises ``exc`` at once (C8), which propagates it.
        self._coord.request_stop((exc_type, exc, tb))
        # X8: the stop is requested, but Ctrl-C and sys.exit() must still end
        # the program; TF1's bare except swallowed them (C11).
        return not isinstance(exc, (KeyboardInterrupt, SystemExit))
