"""LooperThread: a function run repeatedly, at a fixed rate, until a stop (L1–L4)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._coordinator import Coordinator

__all__ = ["LooperThread"]


class LooperThread(threading.Thread):
    """A thread that runs code repeatedly, optionally on a timer (L1–L4).

    Either pass ``target`` (called as ``target(*args, **kwargs)``) or
    subclass and override :meth:`run_loop`, and optionally
    :meth:`start_loop` / :meth:`stop_loop`. The thread is a daemon and
    registers itself with ``coord`` when constructed (L1), so
    ``coord.join()`` waits for it.

    With ``timer_interval_secs=None`` or ``0``, ``run_loop`` is called back
    to back until the coordinator stops (checked before every call). Otherwise it is called at once and then at
    ``start + k * timer_interval_secs`` on the monotonic clock: a fixed rate
    without drift, however long each call takes (L2). If a call overruns one
    or more boundaries, those are skipped and the next call happens at the
    next boundary still ahead (TF1 ran the missed calls back to back). The
    wait between calls ends as soon as a stop is requested.

    An exception from a hook is reported to the coordinator and ends the
    thread, without calling :meth:`stop_loop` (L3).

    Args:
        coord: the coordinator.
        timer_interval_secs: seconds between calls, or ``None`` (or ``0``,
            as in TF1) for back to back.
        target: the function to call; ``None`` for a subclass.
        args: positional arguments for ``target``.
        kwargs: keyword arguments for ``target``.
        name: the thread's name; default ``feedq-looper-<target name>`` (or
            the subclass's name).

    Raises:
        ValueError: ``coord`` is not a Coordinator; ``args`` or ``kwargs``
            without ``target`` (L1); ``timer_interval_secs`` negative, NaN
            or infinite.
    """

    def __init__(
        self,
        coord: Coordinator,
        timer_interval_secs: float | None,
        target: Callable[..., object] | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        if not isinstance(coord, Coordinator):
            # L1: TF1 raises ValueError, not TypeError, for this.
            raise ValueError(f"'coord' argument must be a Coordinator: {coord!r}")  # noqa: TRY004
        if target is None and (args or kwargs):
            raise ValueError("'args' and 'kwargs' argument require that you also pass 'target'")
        if timer_interval_secs is not None:
            timer_interval_secs = float(timer_interval_secs)
            if not (timer_interval_secs >= 0 and math.isfinite(timer_interval_secs)):
                raise ValueError(
                    f"timer_interval_secs must be a finite number >= 0 or None, "
                    f"got {timer_interval_secs}"
                )
        if name is None:
            label = getattr(target, "__name__", None) if target is not None else None
            name = f"feedq-looper-{label or type(self).__name__}"
        super().__init__(name=name, daemon=True)
        self._coord = coord
        self._timer_interval_secs = timer_interval_secs
        self._loop_target = target
        self._loop_args: tuple[Any, ...] = tuple(args or ())
        self._loop_kwargs: dict[str, Any] = dict(kwargs or {})
        coord.register_thread(self)

    @staticmethod
    def loop(
        coord: Coordinator,
        timer_interval_secs: float | None,
        target: Callable[..., object],
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> LooperThread:
        """Create a LooperThread calling ``target`` and start it (L4).

        Returns:
            The started thread.
        """
        looper = LooperThread(coord, timer_interval_secs, target=target, args=args, kwargs=kwargs)
        looper.start()
        return looper

    def run(self) -> None:
        """Run the hooks until the coordinator stops (L2, L3)."""
        with self._coord.stop_on_exception():
            self.start_loop()
            interval = self._timer_interval_secs
            if not interval:  # None or 0: back to back (L2)
                while not self._coord.should_stop():
                    self.run_loop()
            else:
                start = time.monotonic()
                k = 0  # index of the boundary of the next call
                while not self._coord.wait_for_stop(
                    max(0.0, start + k * interval - time.monotonic())
                ):
                    self.run_loop()
                    # Multiply instead of adding intervals: no accumulated
                    # float error, hence no drift (L2).
                    elapsed = time.monotonic() - start
                    k = max(k + 1, math.floor(elapsed / interval) + 1)
            self.stop_loop()

    def start_loop(self) -> None:
        """Called once, in the thread, before the first :meth:`run_loop`."""

    def run_loop(self) -> None:
        """Called at each tick; by default calls ``target(*args, **kwargs)``."""
        if self._loop_target is not None:
            self._loop_target(*self._loop_args, **self._loop_kwargs)

    def stop_loop(self) -> None:
        """Called once, in the thread, after the last :meth:`run_loop` (not after an error)."""
