"""Shared resources: one get-or-create manager for everything opened by name.

TF1 kept queues and accumulators in a session's resource manager: opening a
``shared_name`` that exists returns that resource after checking the request
matches it (Q7), otherwise creates it. :class:`ResourceManager` is that
container. The local queues and accumulators each use one (so
:func:`reset_shared_queues` forgets queues only); a cluster task's container
(``feedq.distributed``) can hold all its kinds in one, keyed by
``(container, shared_name)``.

A re-opened local handle *is* the first object: :class:`SharedByName`, the
metaclass of the queue and accumulator classes, runs the constructor to
validate and normalise the arguments, then asks the manager for the object
registered under the ``shared_name``; the new instance becomes the resource
only when there is none yet (its storage is allocated only then).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from feedq.errors import InvalidArgumentError

__all__ = ["ResourceManager", "SharedByName", "reset_shared_queues"]

_T = TypeVar("_T")


class ResourceManager:
    """A thread-safe map ``name -> (kind, resource)`` with atomic get-or-create.

    ``kind`` is a short word (``"queue"``, ``"accumulator"``, ...): opening a
    name that holds another kind is an ``InvalidArgumentError``. Finer checks
    (capacity, dtypes, ...) are the caller's ``check``.
    """

    def __init__(self, what: str = "resource") -> None:
        self._what = what
        # Re-entrant: a factory may open another resource of the same manager.
        self._lock = threading.RLock()
        self._items: dict[Hashable, tuple[str, Any]] = {}  # guarded by self._lock

    def get_or_create(
        self,
        kind: str,
        name: Hashable,
        factory: Callable[[], _T],
        check: Callable[[Any], None] | None = None,
        *,
        label: str | None = None,
    ) -> _T:
        """Return the resource registered as ``name``, or register ``factory()``.

        Atomic per manager: two threads opening one name get one resource.

        Args:
            kind: the kind requested.
            name: the key (a shared_name, or e.g. ``(container, shared_name)``).
            factory: builds the resource when ``name`` is free; an exception
                from it registers nothing.
            check: called with the existing resource on a re-open; raises
                (``InvalidArgumentError``) when the request does not match it.
            label: how messages name the resource (default ``str(name)``).

        Raises:
            InvalidArgumentError: ``name`` holds a resource of another kind.
        """
        with self._lock:
            entry = self._items.get(name)
            if entry is None:
                resource = factory()
                self._items[name] = (kind, resource)
                return resource
            have, existing = entry
            if have != kind:
                shown = str(name) if label is None else label
                raise InvalidArgumentError(
                    f"Shared {self._what} '{shown}' is a {have} but a {kind} was requested"
                )
            if check is not None:
                check(existing)
            return existing  # type: ignore[no-any-return]

    def get(self, name: Hashable) -> Any:
        """The resource registered as ``name``, or ``None``."""
        with self._lock:
            entry = self._items.get(name)
        return None if entry is None else entry[1]

    def kind_of(self, name: Hashable) -> str | None:
        """The kind registered as ``name``, or ``None``."""
        with self._lock:
            entry = self._items.get(name)
        return None if entry is None else entry[0]

    def pop(self, name: Hashable) -> Any:
        """Forget ``name``; returns its resource or ``None``. Open handles keep it."""
        with self._lock:
            entry = self._items.pop(name, None)
        return None if entry is None else entry[1]

    def pop_where(self, predicate: Callable[[Hashable], bool]) -> list[Any]:
        """Forget every name for which ``predicate(name)`` holds; returns their resources."""
        with self._lock:
            names = [n for n in self._items if predicate(n)]
            return [self._items.pop(n)[1] for n in names]

    def clear(self) -> list[Any]:
        """Forget everything; returns the resources."""
        return self.pop_where(lambda _name: True)

    def names(self) -> list[Hashable]:
        """The names registered now."""
        with self._lock:
            return list(self._items)

    def __contains__(self, name: Hashable) -> bool:
        with self._lock:
            return name in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


#: Local queues by shared_name; resources live for the process, as in a TF1
#: session container, until reset_shared_queues().
SHARED_QUEUES = ResourceManager("queue")
#: Local ConditionalAccumulators by shared_name.
SHARED_ACCUMULATORS = ResourceManager("accumulator")


def reset_shared_queues(shared_name: str | None = None) -> None:
    """Forget one shared queue (or all): later opens create new queues.

    Handles already open keep working on the old queue.
    """
    if shared_name is None:
        SHARED_QUEUES.clear()
    else:
        SHARED_QUEUES.pop(shared_name)


class SharedByName(type):
    """Metaclass of resources that a ``shared_name`` makes one per process.

    ``Cls(...)`` runs ``__init__``, which validates the arguments and
    records the request without allocating anything, then returns
    ``instance._open()``: the instance itself, or the resource already
    registered under its shared_name (after checking the request matches).
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        handle = super().__call__(*args, **kwargs)
        return handle._open()
