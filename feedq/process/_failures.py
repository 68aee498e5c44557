"""A process stage's worker failures as the consumer's exceptions: the
worker's own exception (rebuilt from its pickle when possible) chained from
a :class:`WorkerTraceback` holding the worker's traceback, or an
``UnavailableError`` for a worker that died.
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

from feedq.errors import AbortedError, UnavailableError

__all__ = ["WorkerTraceback", "worker_exception"]


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text.

    The consumer gets the worker's exception itself (its type and message,
    rebuilt from a pickle when possible), chained ``from`` this: Python prints
    the worker's traceback above the consumer's.

    Attributes:
        worker_index: the worker that raised.
        pid: its process id.
        traceback: the formatted traceback.
    """

    def __init__(self, worker_index: int, pid: int, text: str) -> None:
        super().__init__(text)
        self.worker_index = worker_index
        self.pid = pid
        self.traceback = text

    def __str__(self) -> str:
        return (f"in feedq process stage worker {self.worker_index} (pid {self.pid}):\n"
                f"{self.traceback.rstrip()}")



def worker_exception(ev: tuple[Any, ...], pid: int) -> BaseException:
    """The exception to raise for a worker's ``"error"`` or ``"dead"``
    event ``ev`` (``(worker_index, kind, ...)``); ``pid``: the worker's."""
    index, kind = ev[0], ev[1]
    exc: BaseException
    if kind == "error":
        _, _, epoch, blob, type_name, message, text = ev
        remote = WorkerTraceback(index, pid, text)
        rebuilt: BaseException | None = None
        if blob is not None:
            with contextlib.suppress(Exception):
                rebuilt = pickle.loads(blob)
        exc = rebuilt if isinstance(rebuilt, BaseException) else AbortedError(
            f"process stage worker {index} (pid {pid}) failed in epoch {epoch}: "
            f"{type_name}: {message}")
        exc.__cause__ = remote
    else:
        _, _, code, how = ev
        exc = UnavailableError(
            f"process stage worker {index} (pid {pid}) {how}; the stage is stopped")
    return exc
