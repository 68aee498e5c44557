"""``QueueBase.from_list``: a queue chosen from a list by an index (TF1).

TF1 built a queue op over a list of queue references and gathered one with
an index tensor evaluated at each ``Session.run``; which queue a call used
could change from run to run. Here the index is an int, or a 0-d integer
NumPy array read at every call, and every call is forwarded to the queue it
selects, so the semantics are exactly that queue's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError, OutOfRangeError
from feedq.queues._cancel import CancelToken
from feedq.queues._queue import QueueBase, QueueStatistics
from feedq.queues._spec import Count, as_count

__all__ = ["SelectedQueue"]


class SelectedQueue:
    """The queue ``queues[index]``, chosen again at each call.

    Built by :meth:`QueueBase.from_list(index, queues) <QueueBase.from_list>`;
    it has the queue API (enqueue, dequeue, close, statistics, ...), and each
    call behaves as that call on the selected queue. ``index`` is an int, or
    a 0-d integer NumPy array read at every call (changing it re-routes
    later calls, as TF1 evaluated its index tensor at every run); an index
    outside ``[0, len(queues))`` is an ``InvalidArgumentError`` (TF1's
    gather). All queues must have the same component count, dtypes and names
    (``ValueError``; TF1 raised TypeError); anything but a non-empty list of
    queues is a ``TypeError``. ``dtypes`` and ``names`` are the queues' own; each
    entry of ``shapes`` is the shape the queues have in common (a ``None``
    dimension where they differ, ``None`` where the ranks differ or a queue
    has no shape), as TF1 did.
    """

    def __init__(self, index: Any, queues: Sequence[Any]) -> None:
        if not isinstance(queues, (list, tuple)) or not queues or not all(
            isinstance(q, (QueueBase, SelectedQueue)) for q in queues
        ):
            raise TypeError(f"A list of queues expected, got {queues!r}")
        first = queues[0]
        for i, q in enumerate(queues[1:], 1):
            if len(q.dtypes) != len(first.dtypes):
                raise ValueError(
                    f"Queues do not have matching component counts: queue 0 has "
                    f"{len(first.dtypes)}, queue {i} has {len(q.dtypes)}"
                )
            if q.dtypes != first.dtypes:
                raise ValueError(
                    f"Queues do not have matching component dtypes: queue 0 has "
                    f"{first.dtypes}, queue {i} has {q.dtypes}"
                )
            if q.names != first.names:
                raise ValueError(
                    f"Queues do not have matching component names: queue 0 has "
                    f"{first.names}, queue {i} has {q.names}"
                )
        self._queues: list[Any] = list(queues)
        if isinstance(index, np.ndarray):
            as_count(index, "index")  # the type now; the value at each call
        else:
            index = as_count(index, "index")
        self._index = index
        self._pick()  # an int index out of range fails here already
        self._shapes = [_common_shape([q.shapes[i] for q in self._queues]) for i in range(len(first.dtypes))]

    def _pick(self) -> Any:
        i = as_count(self._index, "index")
        if not 0 <= i < len(self._queues):
            raise InvalidArgumentError(f"queue index {i} is not in [0, {len(self._queues)})")
        return self._queues[i]

    # -- what the queue is ------------------------------------------------------------

    @property
    def queues(self) -> list[Any]:
        """The queues to choose from."""
        return list(self._queues)

    @property
    def index(self) -> int:
        """The index now."""
        return as_count(self._index, "index")

    @property
    def queue(self) -> Any:
        """The queue the index selects now."""
        return self._pick()

    @property
    def name(self) -> str:
        """The selected queue's name."""
        return str(self._pick().name)

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """The queues' dtypes."""
        return list(self._queues[0].dtypes)

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        """Per component, the shape common to the queues."""
        return list(self._shapes)

    @property
    def names(self) -> list[str] | None:
        """The queues' component names."""
        names = self._queues[0].names
        return None if names is None else list(names)

    def __repr__(self) -> str:
        return f"SelectedQueue(index={self.index}, queues={[q.name for q in self._queues]})"

    # -- calls, forwarded ---------------------------------------------------------------

    def enqueue(self, vals: Any, timeout: float | None = None, *, cancel: CancelToken | None = None) -> None:
        """:meth:`QueueBase.enqueue` on the selected queue."""
        self._pick().enqueue(vals, timeout, cancel=cancel)

    def enqueue_many(self, vals: Any, timeout: float | None = None, *, cancel: CancelToken | None = None) -> None:
        """:meth:`QueueBase.enqueue_many` on the selected queue."""
        self._pick().enqueue_many(vals, timeout, cancel=cancel)

    def dequeue(self, timeout: float | None = None, *, cancel: CancelToken | None = None) -> Any:
        """:meth:`QueueBase.dequeue` on the selected queue."""
        return self._pick().dequeue(timeout, cancel=cancel)

    def dequeue_many(
        self, n: Count, timeout: float | None = None, out: Any = None, *, cancel: CancelToken | None = None
    ) -> Any:
        """:meth:`QueueBase.dequeue_many` on the selected queue."""
        return self._pick().dequeue_many(n, timeout, out, cancel=cancel)

    def dequeue_up_to(
        self, n: Count, timeout: float | None = None, out: Any = None, *, cancel: CancelToken | None = None
    ) -> Any:
        """:meth:`QueueBase.dequeue_up_to` on the selected queue."""
        return self._pick().dequeue_up_to(n, timeout, out, cancel=cancel)

    def dequeue_available(
        self, n: Count, timeout: float | None = None, out: Any = None, *, cancel: CancelToken | None = None
    ) -> Any:
        """:meth:`QueueBase.dequeue_available` on the selected queue."""
        return self._pick().dequeue_available(n, timeout, out, cancel=cancel)

    def enqueue_nowait(self, vals: Any) -> None:
        """:meth:`enqueue` with ``timeout=0``."""
        self.enqueue(vals, timeout=0)

    def dequeue_nowait(self) -> Any:
        """:meth:`dequeue` with ``timeout=0``."""
        return self.dequeue(timeout=0)

    def put_back(self, vals: Any, *, many: bool = True) -> None:
        """:meth:`QueueBase.put_back` on the selected queue."""
        self._pick().put_back(vals, many=many)

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        """:meth:`QueueBase.close` on the selected queue."""
        self._pick().close(cancel_pending_enqueues)

    def cancel(self, cause: BaseException | None = None) -> None:
        """:meth:`QueueBase.cancel` on the selected queue."""
        self._pick().cancel(cause)

    def is_closed(self) -> bool:
        """Whether the selected queue is closed."""
        return bool(self._pick().is_closed())

    def size(self) -> int:
        """The selected queue's size."""
        return int(self._pick().size())

    def statistics(self) -> QueueStatistics:
        """The selected queue's statistics."""
        stats: QueueStatistics = self._pick().statistics()
        return stats

    def __iter__(self) -> Iterator[Any]:
        """Dequeue elements (each from the queue selected then) until the
        selected queue is closed and empty."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return


def _common_shape(shapes: list[tuple[int | None, ...] | None]) -> tuple[int | None, ...] | None:
    first = shapes[0]
    if first is None or any(s is None or len(s) != len(first) for s in shapes):
        return None
    return tuple(
        dims[0] if all(d == dims[0] for d in dims) else None
        for dims in zip(*shapes)
    )
