"""Closing scopes: resources that an enclosing owner closes for the user.

Readers and device feeders hold threads and file handles. When one is created
while a closing scope is open in this thread (a :class:`feedq.Pipeline` opens
one for the duration of its ``with`` block), it registers itself here and the
scope's owner closes it after the owner's threads have been joined, so a
pipeline shuts down as one story: ``request_stop`` -> runners cancelled ->
threads joined -> feeders and readers closed.

This module sits below every package (it imports nothing from feedq), so
lower layers such as ``feedq.readers`` and ``feedq.devices`` can register
without importing the pipeline module that lives above them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Closeable", "closing_scope", "register_closeable"]


class Closeable(Protocol):
    def close(self) -> None: ...


_local = threading.local()


def _stack() -> list[list[Closeable]]:
    stack: list[list[Closeable]] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def register_closeable(obj: Any) -> bool:
    """Hand ``obj`` to the innermost open closing scope of this thread.

    Returns True when a scope took it (its owner will call ``obj.close()``),
    False when no scope is open (the caller stays responsible for closing).
    """
    stack = _stack()
    if not stack:
        return False
    stack[-1].append(obj)
    return True


@contextlib.contextmanager
def closing_scope() -> Iterator[list[Closeable]]:
    """Open a scope; yields the list its registered objects are appended to.

    The owner closes the objects itself (in reverse order of registration,
    after joining its threads); leaving the scope only stops registration.
    """
    taken: list[Closeable] = []
    stack = _stack()
    stack.append(taken)
    try:
        yield taken
    finally:
        stack.remove(taken)
