"""Closing scopes and the current pipeline: what an enclosing owner takes.

Closing scopes. Readers and device feeders hold threads and file handles.
When one is created while a closing scope is open in this thread (a
:class:`feedq.Pipeline` opens one for the duration of its ``with`` block), it
registers itself here and the scope's owner closes it after the owner's threads have been joined, so a
pipeline shuts down as one story: ``request_stop`` -> runners cancelled ->
threads joined -> feeders and readers closed.

The current pipeline. ``with pipe:`` and ``pipe.as_default()`` make a
:class:`feedq.Pipeline` current in this thread (:func:`pipeline_context`);
the input functions (``feedq.input``) that build stages inside it ask
:func:`current_pipeline` for it and see only :class:`PipelineContext`: the
runner registration, the closing scope, the stage that becomes the output,
the coordinator and the resumption registry (``feedq._resume.registry``).
``feedq.pipeline.current_pipeline`` is the public name of the same object.

This module sits below every package (it imports nothing from feedq), so
lower layers such as ``feedq.readers``, ``feedq.input`` and ``feedq.devices``
can register without importing the pipeline module that lives above them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # for the annotation only: _resume sits above this module
    from feedq._resume.registry import Registry

__all__ = [
    "Closeable",
    "PipelineContext",
    "closing_scope",
    "current_pipeline",
    "pipeline_context",
    "register_closeable",
]


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


# -- the current pipeline ----------------------------------------------------------


class PipelineContext(Protocol):
    """What the parts built inside a pipeline may use of it (``feedq.Pipeline``
    implements it; ``feedq.input`` and the process stages use it).

    Attributes:
        coord: the pipeline's coordinator (stops and joins its threads).
        resumable: elements carry positions (``Pipeline(resumable=True)``).
        resumption: the registry of the pipeline's resumable parts: the
            state to restore, the one producer and the one batcher.
        output: the stage that iterating the pipeline reads; every stage
            built inside the pipeline sets it.
    """

    coord: Any
    resumable: bool

    @property
    def resumption(self) -> Registry: ...

    @property
    def output(self) -> Any: ...

    @output.setter
    def output(self, stage: Any) -> None: ...

    def add_runner(self, runner: Any) -> None:
        """Own ``runner`` (start, stop, join it)."""

    def closing(self, obj: Any) -> Any:
        """Close ``obj`` when the pipeline exits."""


def _pipelines() -> list[PipelineContext]:
    stack: list[PipelineContext] | None = getattr(_local, "pipelines", None)
    if stack is None:
        stack = _local.pipelines = []
    return stack


def current_pipeline() -> PipelineContext | None:
    """The pipeline made current in this thread (innermost first), or None."""
    stack = _pipelines()
    return stack[-1] if stack else None


@contextlib.contextmanager
def pipeline_context(pipe: PipelineContext) -> Iterator[PipelineContext]:
    """Make ``pipe`` the current pipeline of this thread while the block runs."""
    stack = _pipelines()
    stack.append(pipe)
    try:
        yield pipe
    finally:
        stack.remove(pipe)


def enter_pipeline(pipe: PipelineContext) -> None:
    """Make ``pipe`` current until :func:`leave_pipeline` (``Pipeline.__enter__``)."""
    _pipelines().append(pipe)


def leave_pipeline(pipe: PipelineContext) -> None:
    """Undo :func:`enter_pipeline` (no error if ``pipe`` is not current)."""
    stack = _pipelines()
    if pipe in stack:
        stack.remove(pipe)
