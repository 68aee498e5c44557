"""QueueBase: the public queue API (construction, calls, close, statistics).

A queue has an engine (:class:`QueueEngine`, :mod:`feedq.queues._engine`:
the lock, the lines of waiting calls, the close state, the counters) and a
codec (``ElementCodec``: conversion in and out); the kinds supply storage
hooks. Every enqueue call goes through one put path and every dequeue call
through one take path: the call's arguments converted and checked, a try
under the lock (nobody ahead in line and the call can finish now) that calls
one storage hook, and otherwise an attempt handed to the engine, which
queues it and waits. Close never blocks: ``close()`` rejects new enqueues at once and lets
enqueues that were already pending finish (TF1 made close() itself wait for
them, Q23); once none is pending, dequeues that cannot be satisfied fail with
``OutOfRangeError``. ``cancel(cause)`` closes and fails every pending and
future call that would have to wait with ``CancelledError`` (chained from
``cause``). A :class:`CancelToken` cancels single calls.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from feedq._core.arrays import pack_values
from feedq._core.timeouts import resolve_timeout
from feedq.errors import InvalidArgumentError, OutOfRangeError
from feedq.queues._cancel import CancelToken
from feedq.queues._engine import (
    BlockedCall,
    QueueEngine,
    QueueState,
    TimingRecord,
    _Dequeue,
    _Enqueue,
    set_num_enqueued,
)
from feedq.queues._registry import SHARED_QUEUES, SharedByName
from feedq.queues._spec import (
    STRING,
    Component,
    Count,
    ElementCodec,
    as_count,
    check_reopen_spec,
    normalize_dtypes,
    normalize_names,
    normalize_shapes,
)

if TYPE_CHECKING:
    from feedq.queues._select import SelectedQueue

__all__ = ["QueueBase", "QueueStatistics"]

# Module constants: an Enum member lookup costs ~0.1 us on the hot paths.
_OPEN = QueueState.OPEN
_CLOSED = QueueState.CLOSED

_INITIAL_ALLOC = 64

# The take path's modes, and the call each one is (for messages).
_ONE, _MANY, _UP_TO, _AVAILABLE = 0, 1, 2, 3
_TAKE_OPS = ("dequeue", "dequeue_many", "dequeue_up_to", "dequeue_available")
# The take path's "nothing taken yet" (an element's value may be any object).
_NOTHING: Any = object()


@dataclass(frozen=True)
class QueueStatistics:
    """A consistent snapshot of a queue, taken under its lock.

    Attributes:
        name: the queue's name.
        size: elements stored now (held by pending dequeues not counted, Q12).
        capacity: the bound, or -1 when unbounded.
        closed: ``is_closed()``.
        state: OPEN, CLOSING or CLOSED.
        cancelled: whether ``cancel()`` was called.
        waiting_producers: enqueue calls blocked now.
        waiting_consumers: dequeue calls blocked now.
        peak_size: the largest ``size`` seen.
        enqueued: elements inserted since creation.
        dequeued: elements handed out since creation (minus those put back).
    """

    name: str
    size: int
    capacity: int
    closed: bool
    state: QueueState
    cancelled: bool
    waiting_producers: int
    waiting_consumers: int
    peak_size: int
    enqueued: int
    dequeued: int


@dataclass(frozen=True)
class _Request:
    """What a constructor call asked for, validated (Q7 compares these)."""

    capacity: int
    components: list[Component]
    names: list[str] | None
    shared_name: str | None
    name: str | None
    storage_args: dict[str, Any]


class QueueBase(metaclass=SharedByName):
    """Base class of the four queue kinds (see :mod:`feedq.queues`).

    A queue has an engine (``_engine``, a :class:`QueueEngine`: the lock,
    the lines of waiting calls, the close state and the counters) and a
    codec (``_codec``, an :class:`ElementCodec`: values in and out);
    subclasses implement the storage hooks (CPython ``queue.Queue``'s rule:
    kinds differ only in their hooks). All public methods are thread
    safe. ``timeout`` is worded the same everywhere: seconds to wait; ``None``
    uses the process default (:func:`feedq.set_default_timeout`, itself
    ``None`` = forever), ``0`` does not wait, ``math.inf`` waits forever.
    ``cancel`` is a :class:`CancelToken`: firing it ends that one call, which
    undoes its partial work and raises the token's cause (else
    ``CancelledError``); a token already fired makes the call raise at once.

    Constructing a queue with a ``shared_name`` already open in this process
    returns that same queue object, after checking the request matches (Q7).
    """

    _kind: ClassVar[str] = "Queue"
    _default_name: ClassVar[str] = "queue"
    #: PriorityQueue: a dequeue_many takes all n at once or nothing (Q42).
    _all_or_nothing: ClassVar[bool] = False
    #: Every stored element may be taken now (``_available() == size``).
    _all_available: ClassVar[bool] = True
    #: Ring kinds: an enqueue_many / dequeue_many moving at least this many
    #: bytes of dense numeric data copies it with the lock released
    #: (reserve → copy → commit, see :mod:`feedq.queues._engine`); None: never.
    _unlocked_copy_bytes: ClassVar[int | None] = None
    #: Components with partial shapes are allowed (PaddingFIFOQueue).
    _partial_shapes: ClassVar[bool] = False
    #: Converts between user values and the stored columns (PaddingFIFOQueue: its own).
    _codec_class: ClassVar[type[ElementCodec]] = ElementCodec
    _name_counters: ClassVar[dict[str, itertools.count[int]]] = {}

    def __init__(
        self,
        capacity: int,
        dtypes: Any,
        shapes: Any = None,
        names: Any = None,
        shared_name: str | None = None,
        name: str | None = None,
        **storage_args: Any,
    ) -> None:
        # Validates; a queue without a shared_name is built at once, a shared
        # one when the metaclass calls _open() (feedq.queues._registry).
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int, got {capacity!r}")
        components = self._make_components(dtypes, shapes)
        name_list = normalize_names(names, len(components))
        capacity = int(capacity)
        self._validate_storage_args(capacity, components, storage_args)
        request = _Request(capacity, components, name_list, shared_name, name, storage_args)
        if shared_name is None:
            self._create(request)
        else:
            self._request = request

    def _open(self) -> QueueBase:
        req: _Request | None = self.__dict__.pop("_request", None)
        if req is None:
            return self
        shared_name = req.shared_name
        assert shared_name is not None
        kind = type(self)._kind

        def check(existing: QueueBase) -> None:
            existing._check_reopen(
                shared_name, req.capacity, req.components, req.names, req.storage_args, kind
            )

        return SHARED_QUEUES.get_or_create("queue", shared_name, lambda: self._create(req), check)

    def _create(self, req: _Request) -> QueueBase:
        name = req.name
        if name is None:
            counter = QueueBase._name_counters.setdefault(self._default_name, itertools.count())
            n = next(counter)
            name = self._default_name if n == 0 else f"{self._default_name}_{n}"
        self._name = name
        self._shared_name = req.shared_name
        capacity = req.capacity
        self._capacity = capacity if capacity >= 0 else -1
        self._components = components = req.components
        self._names = names = req.names
        self._storage_args = dict(req.storage_args)
        self._engine = engine = QueueEngine(self)
        # Direct references for the fast paths (the same objects, never rebound).
        self._mutex = engine.mutex
        self._producers = engine.producers
        self._consumers = engine.consumers
        self._alloc = 0  # guarded by self._mutex
        self._cols: list[np.ndarray[Any, Any]] = []  # guarded by self._mutex
        # Facts for the fast paths, fixed at construction.
        self._single = names is None and len(components) == 1
        # An element is one value (not a list of them) for the one-element
        # hooks, _put_one and _take_one.
        self._one_comp = len(components) == 1
        # Class facts copied to the instance: an instance attribute is
        # cheaper to read than a class attribute through the instance.
        self._all_stored_available = self._all_available
        # A dequeue_many of more than this many may never complete (the
        # all-or-nothing kinds': capacity); checked by _check_batch_feasible.
        self._batch_limit = capacity if self._all_or_nothing and capacity >= 0 else 1 << 62
        self._size_limit = capacity if capacity >= 0 else 1 << 62
        self._all_shaped = all(c.shape is not None for c in components)
        self._all_dense = all(c.dense for c in components)
        self._wheres = wheres = [self._where(c.index) for c in components]
        self._codec = self._codec_class(
            self._kind, name, components, names, wheres,
            None if self._all_shaped_dense(components) else self._pad,
        )
        # A dequeue that waited returns row 0 of its one taken column as it
        # is (ElementCodec.first_row and pack_values, inline); not for kinds
        # whose codec builds the element itself (PaddingFIFOQueue).
        self._plain_first_row = self._single and type(self._codec).first_row is ElementCodec.first_row
        # How _read_row copies a component out of its column: 0 numeric
        # scalar (indexing copies), 1 numeric row (view: copy), 2 object
        # scalar or ragged (take the reference, clear the slot), 3 object row.
        self._obj_cols = [c.dtype is STRING or not c.dense for c in components]
        self._single_numeric = len(components) == 1 and components[0].dense and components[0].dtype is not STRING
        # The hot paths take an ndarray of exactly this dtype (numeric only)
        # and (row) shape as it is, without conversion.
        comp0 = components[0]
        self._dtype0 = comp0.dtype if self._single_numeric and names is None else None
        self._shape0 = comp0.shape
        self._row_kinds = [
            (0 if c.shape == () else 1) if c.dense and c.dtype is not STRING
            else (3 if c.dense and c.shape != () else 2)
            for c in components
        ]
        # Batches of at least this many rows copy outside the lock.
        self._unlocked_rows = 1 << 62
        # Whether the storage keeps references a take leaves to _forget.
        self._has_refs = False
        row_bytes = 0
        for c in components:
            if c.dense and c.dtype is not STRING and c.shape is not None:
                row_bytes += c.dtype.itemsize * math.prod(d or 0 for d in c.shape)
        if self._unlocked_copy_bytes is not None and row_bytes > 0:
            self._unlocked_rows = max(1, -(-self._unlocked_copy_bytes // row_bytes))
        self._init_storage()
        self._grow(self._initial_alloc())
        return self

    def _where(self, i: int) -> str:
        """How messages name component ``i``."""
        label = self._names[i] if self._names is not None else str(i)
        return f"{self._kind} '{self._name}' component {label}"

    @staticmethod
    def _all_shaped_dense(components: list[Component]) -> bool:
        return all(c.dense for c in components)

    def _pad(self, comp: Component, parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """Stack the rows of a component without a fixed shape (PaddingFIFOQueue)."""
        raise InvalidArgumentError(
            f"{self._kind} '{self._name}': component {comp.index} has no fixed shape"
        )

    def _make_components(self, dtypes: Any, shapes: Any) -> list[Component]:
        dtype_list = normalize_dtypes(dtypes)
        shape_list = normalize_shapes(shapes, len(dtype_list), partial=self._partial_shapes)
        return [Component(i, d, s) for i, (d, s) in enumerate(zip(dtype_list, shape_list))]

    def _validate_storage_args(
        self, capacity: int, components: list[Component], args: dict[str, Any]
    ) -> None:
        if args:
            raise TypeError(f"unexpected arguments {sorted(args)}")

    def check_reopen(self, requested: QueueBase, shared_name: str | None = None) -> None:
        """Raise ``InvalidArgumentError`` unless ``requested`` (a queue built
        from a re-open's arguments) asks for this queue: same kind, capacity,
        dtypes, shapes, names and kind arguments (Q7). For registries of
        named queues other than the process's (a cluster task's container).
        """
        label = shared_name or self._shared_name or self._name
        self._check_reopen(
            label, requested._capacity, requested._components, requested._names,
            requested._storage_args, requested._kind,
        )

    def _check_reopen(
        self,
        shared_name: str,
        capacity: int,
        components: list[Component],
        names: list[str] | None,
        storage_args: dict[str, Any],
        kind: str | None = None,
    ) -> None:
        """Q7: raise InvalidArgumentError unless a re-open asks for this queue."""
        check_reopen_spec(
            f"Shared queue '{shared_name}'",
            (self._kind, self._capacity, self._components, self._names, self._storage_args),
            (kind or self._kind, capacity, components, names, storage_args),
        )

    # -- public properties ----------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name (used in error messages)."""
        return self._name

    @property
    def shared_name(self) -> str | None:
        """The name under which the queue is shared, if any (Q7)."""
        return self._shared_name

    @property
    def capacity(self) -> int:
        """The bound on stored elements, or -1 when unbounded (Q5)."""
        return self._capacity

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """One dtype per component (Q1); strings are ``STRING``."""
        return [c.dtype for c in self._components]

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        """One shape per component; ``None`` when unknown."""
        return [c.shape for c in self._components]

    @property
    def names(self) -> list[str] | None:
        """Component names (Q3), or ``None``."""
        return None if self._names is None else list(self._names)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self._name!r}, capacity={self._capacity}, "
            f"dtypes={[str(d) if d is not STRING else 'string' for d in self.dtypes]}, "
            f"size={self._engine.size}, state={self._engine.state.value})"
        )

    @staticmethod
    def from_list(index: Count, queues: Sequence[Any]) -> SelectedQueue:
        """A queue chosen from ``queues`` by ``index`` at each call (TF1's
        ``QueueBase.from_list``): see :class:`SelectedQueue` for the rules.

        Raises:
            TypeError: not a non-empty list of queues, or a non-integer index.
            ValueError: the queues differ in component count, dtypes or names.
            InvalidArgumentError: the index is out of range.
        """
        from feedq.queues._select import SelectedQueue

        return SelectedQueue(index, queues)

    # -- enqueue ----------------------------------------------------------------

    def enqueue(self, vals: Any, timeout: float | None = None, *, cancel: CancelToken | None = None) -> None:
        """Insert one element, waiting while the queue is full (Q13).

        Args:
            vals: the element: a bare value (one component), a list/tuple of
                component values, or a dict for a named queue (Q3).
            timeout: seconds to wait for room (see the class docstring).
            cancel: a token that cancels this call (see the class docstring).

        Raises:
            ValueError: wrong number of components or keys (Q9).
            TypeError: a value that does not convert without loss (Q8).
            InvalidArgumentError: a shape mismatch (Q10).
            CancelledError: the queue is closed (Q22) or the call was
                cancelled (Q24).
            DeadlineExceededError: timed out; nothing was inserted (T2).
        """
        if timeout is not None:
            check_timeout(timeout)
        if cancel is not None and cancel.fired:
            raise _enqueue_cancelled(cancel)
        # The element as _put_one takes it: its value for one component, else
        # the list of its component values.
        if type(vals) is np.ndarray and vals.dtype is self._dtype0 and vals.shape == self._shape0:
            value: Any = vals  # already what the column holds (Component.convert_one, inline)
        elif self._single and not isinstance(vals, (list, tuple, dict)):
            value = self._components[0].convert_one(vals, self._wheres[0])
        else:
            value = self._codec.convert_row(vals)
            if self._one_comp:
                value = value[0]
        self._put_path(value, 1, timeout, cancel, True)

    def enqueue_many(self, vals: Any, timeout: float | None = None, *, cancel: CancelToken | None = None) -> None:
        """Insert the rows of a batch as elements, in order.

        Each component has a leading batch dimension; row ``i`` of every
        component forms element ``i``. The rows are inserted contiguously
        (no other producer's elements in between, Q16) but not atomically:
        when they do not fit they go in as room frees, and inserted rows can
        be dequeued before the call returns (Q15). A batch of 0 rows returns
        at once, even on a closed queue (Q17).

        Raises:
            as :meth:`enqueue`; ``InvalidArgumentError`` also when a component
            is a scalar or the leading sizes differ (Q10). Whatever ends the
            call early (closed queue, timeout, cancellation, a fired token,
            Ctrl-C), the exception's ``num_enqueued`` attribute says how many
            leading rows were inserted before it; the rest never will be.
        """
        if timeout is not None:
            check_timeout(timeout)
        if cancel is not None and cancel.fired:
            raise _enqueue_cancelled(cancel)
        if (
            type(vals) is np.ndarray
            and vals.dtype is self._dtype0
            and vals.ndim
            and vals.shape[1:] == self._shape0
        ):
            cols = [vals]  # already a column (Component.convert_many, inline)
        else:
            cols = self._codec.convert_batch(vals)
        n = len(cols[0])  # a column has a leading batch dimension (ndim >= 1)
        if n == 0:
            return
        self._put_path(cols, n, timeout, cancel, False)

    def enqueue_nowait(self, vals: Any) -> None:
        """:meth:`enqueue` with ``timeout=0``."""
        self.enqueue(vals, timeout=0)

    def _put_path(
        self, vals: Any, n: int, timeout: float | None, cancel: CancelToken | None, one: bool,
    ) -> None:
        """The one put path: ``n > 0`` converted rows (``one``: one element as
        :meth:`_put_one` takes it, else columns), timeout and token checked.

        Try now: nobody ahead in line (nor a batch being copied in) and room
        for all ``n``; then the storage hook stores them under the lock (or,
        for a large dense batch, reserves their slots and copies them with
        the lock released). This try reads and updates the engine's state
        directly and allocates nothing. Otherwise the call becomes an
        attempt that waits in line (:meth:`QueueEngine.run_enqueue`). An
        exception (Ctrl-C) arriving after the rows went in reports them in
        ``num_enqueued``.
        """
        engine = self._engine
        inserted = 0
        try:
            with self._mutex:
                size = engine.size
                if (
                    engine.state is _OPEN
                    and not self._producers
                    and not engine.in_busy
                    and size + n <= self._size_limit
                    and (size + engine.out_busy + n <= self._alloc or self._room_for(n) == n)
                ):
                    if one or n < self._unlocked_rows:
                        if one:
                            self._put_one(vals)
                        else:
                            self._put(vals, 0, n)
                        # Straight-line from here (no call): the rows are in.
                        engine.size = size = size + n
                        engine.enqueued += n
                        inserted = n
                        if size > engine.peak:  # noqa: PLR1730 - cheaper than max() on the hot path
                            engine.peak = size
                        if self._consumers:
                            engine.flush()
                        return
                    res = self._reserve(vals, n)
                else:
                    res = None
        except BaseException as exc:
            set_num_enqueued(exc, inserted)
            if inserted:  # the rows are in: let the consumers waiting for them see them
                with self._mutex:
                    engine.flush()
            raise
        if res is not None:
            engine.run_reserved(res)  # copy with the lock released, then commit
            return
        if one:
            vals = self._codec.row_to_cols([vals] if self._one_comp else vals)
        engine.run_enqueue(_Enqueue(vals, n, cancel), timeout, "enqueue" if one else "enqueue_many")

    def put_back(self, vals: Any, *, many: bool = True) -> None:
        """Give dequeued elements back, at the front and in order, as if they
        had never been dequeued.

        For a caller that took elements it cannot use (its consumer went
        away). The next dequeue returns them first (RandomShuffleQueue: they
        rejoin the pool; PriorityQueue: they come before equal priorities).
        Never blocks: it bypasses the capacity (the queue may hold more than
        ``capacity`` until they are dequeued) and works on a closed or
        cancelled queue. ``statistics().dequeued`` goes down by their number.

        Args:
            vals: with ``many``, a batch as :meth:`dequeue_many` returns it; a
                component without a fixed shape may also be a list of
                per-element values, which keeps each element's own shape (a
                padded batch would be stored padded). Without ``many``, one
                element as :meth:`dequeue` returns it.
            many: whether ``vals`` is a batch.

        Raises:
            ValueError, TypeError, InvalidArgumentError: as :meth:`enqueue_many`.
        """
        cols = self._codec.convert_batch(vals, rows=True) if many else self._codec.row_to_cols(self._codec.convert_row(vals))
        if cols[0].shape[0] == 0:
            return
        engine = self._engine
        with self._mutex:
            engine.restore([cols])
            engine.flush()

    # -- dequeue ----------------------------------------------------------------

    def dequeue(self, timeout: float | None = None, *, cancel: CancelToken | None = None) -> Any:
        """Remove and return one element, waiting while the queue is empty.

        Returns:
            A bare value for one component, a list for several, a dict for a
            named queue (Q4). Scalars come back as NumPy scalars, strings as
            ``bytes``.

        Raises:
            OutOfRangeError: the queue is closed and empty (Q26).
            CancelledError: the call was cancelled (:meth:`cancel`, a token).
            DeadlineExceededError: timed out; nothing was removed (T2).
        """
        if timeout is not None:
            check_timeout(timeout)
        if cancel is not None and cancel.fired:
            raise cancel.error()
        return self._take_path(1, timeout, cancel, None, _ONE, True)

    def dequeue_nowait(self) -> Any:
        """:meth:`dequeue` with ``timeout=0``."""
        return self.dequeue(timeout=0)

    def dequeue_many(
        self, n: Count, timeout: float | None = None, out: Any = None, *,
        cancel: CancelToken | None = None, padded: bool = True,
    ) -> Any:
        """Remove ``n`` elements and return them stacked on a new axis 0 (Q18).

        Elements are collected as they arrive; ``n`` may exceed the capacity
        (Q19, not for PriorityQueue, Q42). ``n == 0`` returns empty arrays at
        once (Q20).

        Args:
            n: number of elements (an int or a 0-d integer array).
            timeout: seconds to wait (see the class docstring). On timeout,
                cancellation or Ctrl-C the elements collected so far go back
                to the front of the queue in order: nothing is lost (unlike
                TF1, T3).
            out: optional preallocated buffers, structured like the result
                (bare array / list / dict), each with at least ``n`` rows of
                the component's shape and dtype; results are views
                ``out[i][:n]``. Lets a caller dequeue straight into pinned
                memory. Dense (fully shaped) components only.
            cancel: a token that cancels this call.
            padded: ``False`` returns each component without a fixed shape
                (PaddingFIFOQueue) as a 1-D object array holding each
                element's own array, instead of one padded array: the form
                :meth:`put_back` restores exactly and :meth:`stack` pads.
                Fixed-shape components are unaffected.

        Raises:
            InvalidArgumentError: ``n < 0``; components without shapes (Q6).
            OutOfRangeError: the queue closed with fewer than ``n`` elements;
                they stay queued (Q27).
            CancelledError, DeadlineExceededError: as :meth:`dequeue`.
        """
        return self._take_path(n, timeout, cancel, out, _MANY, padded)

    def dequeue_up_to(
        self, n: Count, timeout: float | None = None, out: Any = None, *,
        cancel: CancelToken | None = None, padded: bool = True,
    ) -> Any:
        """Like :meth:`dequeue_many`, but once the queue is closed returns the
        1..n elements that remain (Q21, Q28; a PriorityQueue returns them
        sorted, Q43); ``OutOfRangeError`` when none. The result's leading
        dimension is the number returned."""
        return self._take_path(n, timeout, cancel, out, _UP_TO, padded)

    def dequeue_available(
        self, n: Count, timeout: float | None = None, out: Any = None, *,
        cancel: CancelToken | None = None, padded: bool = True,
    ) -> Any:
        """Up to ``n`` elements: as many as can be taken now, waiting only
        while none can (a feedq addition, for streaming stages that want big
        blocks when data is plentiful without waiting to fill them).

        Returns:
            1..n elements stacked on axis 0, like :meth:`dequeue_up_to`.

        Raises:
            OutOfRangeError: the queue is closed and empty.
            CancelledError, DeadlineExceededError: as :meth:`dequeue`.
        """
        return self._take_path(n, timeout, cancel, out, _AVAILABLE, padded)

    def _take_path(
        self, n: Any, timeout: float | None, cancel: CancelToken | None, out: Any, mode: int,
        padded: bool = True,
    ) -> Any:
        """The one take path: ``n`` elements; ``mode`` is the call: ``_ONE``
        (:meth:`dequeue`: one element, ``n == 1``, arguments checked),
        ``_MANY``, ``_UP_TO`` (fewer once closed) or ``_AVAILABLE`` (at least
        one, at most ``n``), whose arguments are checked here.

        Try now: nobody ahead in line and enough available; then the storage
        hook takes the rows under the lock (or, for a large dense batch,
        claims them and copies them with the lock released). This try reads
        and updates the engine's state directly and allocates nothing but
        the result. Otherwise the call becomes an attempt that waits in line
        (:meth:`QueueEngine.run_dequeue`).

        The handover is atomic with respect to asynchronous exceptions
        (Ctrl-C, ``PyThreadState_SetAsyncExc``, issue 24): from the moment the
        rows leave the storage until this function returns them, an
        exception puts them back at the front in order, as if never
        dequeued. The points where one can arrive are the calls after the
        take (the flush, the lock's release, building the result); the
        return itself and the caller's assignment of the result are not.
        """
        engine = self._engine
        chunk: Any = _NOTHING  # the rows taken now (one element: as _take_one returns it)
        att: _Dequeue | None = None
        outs: list[np.ndarray[Any, Any]] | None = None
        k = n
        try:
            if mode == _ONE:
                with self._mutex:
                    size = engine.size
                    if not self._consumers and (size if self._all_stored_available else self._available()):
                        engine.takes += 1
                        engine.fill_sum += size
                        chunk = self._take_one()
                        # Straight-line from the hook's return (no call).
                        engine.size = size - 1
                        engine.dequeued += 1
                        if self._has_refs:
                            self._forget(1)
                        if self._producers:
                            engine.flush()
                    elif not self._consumers and engine.state is not _CLOSED:
                        # Nothing to take, nobody ahead, not closed: wait in
                        # line without letting the lock go (no second
                        # acquisition, no flush that could not serve it).
                        att = _Dequeue(1, False, "dequeue", None, False, cancel)
                        engine.wait_dequeue(att, resolve_timeout(timeout), False)
                if att is not None:
                    if att.error is not None:
                        raise att.error
                    if self._plain_first_row:
                        return att.chunks[0][0][0]
                    return pack_values(self._codec.first_row(att.chunks[0]), self._names)
                if chunk is not _NOTHING:
                    if self._single:
                        return chunk
                    return pack_values([chunk] if self._one_comp else chunk, self._names)
            else:
                # dequeue_many / dequeue_up_to / dequeue_available: validate.
                if type(n) is not int:
                    k = n = as_count(n)
                if n < 0:
                    raise InvalidArgumentError(
                        f"{self._kind} '{self._name}' {_TAKE_OPS[mode]}: requested {n} < 0 elements"
                    )
                if timeout is not None:
                    check_timeout(timeout)
                if not self._all_shaped:
                    raise InvalidArgumentError(
                        f"{self._kind} '{self._name}': DequeueMany and DequeueUpTo require the "
                        "components to have specified shapes."
                    )
                if cancel is not None and cancel.fired:
                    raise cancel.error()
                if out is not None:
                    outs = self._codec.check_out(out, n)
                if n == 0:
                    return self._batch([], 0, outs, padded)
                if mode == _MANY and n > self._batch_limit:
                    self._check_batch_feasible(n)
                claim = None
                with self._mutex:
                    size = engine.size
                    avail = size if self._all_stored_available else self._available()
                    if not self._consumers and (avail >= n or (mode == _AVAILABLE and avail > 0)):
                        engine.takes += 1
                        engine.fill_sum += size
                        if avail < n:
                            k = avail
                        if k < self._unlocked_rows:
                            chunk = self._take(k, outs, 0)
                            # Straight-line from the hook's return (no call):
                            # the rows are out, and this call's.
                            engine.size = size - k
                            engine.dequeued += k
                            if self._has_refs:
                                self._forget(k)
                            if self._producers:
                                engine.flush()
                        else:
                            claim = self._claim(k, outs, 0)
                            if self._producers:
                                engine.flush()
                if claim is not None:
                    chunk = engine.run_claimed(claim)  # copy with the lock released, then free the slots
                if chunk is not _NOTHING:
                    if outs is None and self._all_dense:
                        return chunk[0] if self._single else pack_values(chunk, self._names)
                    return self._batch([chunk], k, outs, padded)
                if outs is None and mode == _MANY and self._all_dense and not self._blocks_next():
                    # A dequeue_many that must wait collects its n rows straight
                    # into the arrays it returns, however many pieces they come
                    # in (else each piece is copied out, then concatenated).
                    # Not when the rows will likely come as blocks (FIFOQueue):
                    # one whole block is then handed out without a copy.
                    outs = [np.empty((n, *(c.shape or ())), c.dtype) for c in self._components]
            att = _Dequeue(n, mode >= _UP_TO, _TAKE_OPS[mode], outs, mode == _AVAILABLE, cancel)
            engine.run_dequeue(att, timeout)
            if mode == _ONE:
                if self._plain_first_row:
                    return att.chunks[0][0][0]
                return pack_values(self._codec.first_row(att.chunks[0]), self._names)
            return self._batch(att.chunks, att.count, outs, padded)
        except BaseException:
            # The rows never reached the caller: back to the front, in order.
            if chunk is not _NOTHING:
                if mode == _ONE:
                    chunk = self._codec.row_to_cols([chunk] if self._one_comp else chunk)
                elif outs is not None:
                    chunk = [buf[:k].copy() for buf in outs]
                with self._mutex:
                    engine.restore([chunk])
                    engine.flush()
            elif att is not None and att.count:
                with self._mutex:
                    engine.give_back(att)
                    engine.flush()
            raise

    def _batch(
        self, chunks: list[list[np.ndarray[Any, Any]]], count: int,
        outs: list[np.ndarray[Any, Any]] | None, padded: bool,
    ) -> Any:
        if padded or self._all_dense:
            return self._codec.assemble(chunks, count, outs)
        # Columns as stored: a component without a fixed shape is an object
        # array holding each element's own array.
        cols = []
        for i, comp in enumerate(self._components):
            parts = [chunk[i] for chunk in chunks]
            if not parts:
                assert comp.shape is not None
                parts = [np.empty((0, *comp.shape), comp.dtype) if comp.dense else np.empty(0, object)]
            cols.append(parts[0] if len(parts) == 1 else np.concatenate(parts))
        return pack_values(cols, self._names)

    def stack(self, vals: Any) -> Any:
        """The batch that :meth:`dequeue_many` returns for these elements.

        ``vals`` is a batch as :meth:`put_back` takes it (e.g. a
        ``padded=False`` result); components without a fixed shape are padded
        as a batch dequeue pads them (PaddingFIFOQueue, Q37). The queue is not
        touched.

        Raises:
            ValueError, TypeError, InvalidArgumentError: as :meth:`enqueue_many`.
        """
        cols = self._codec.convert_batch(vals, rows=True)
        return self._codec.assemble([cols], int(cols[0].shape[0]), None)

    def _check_batch_feasible(self, n: int) -> None:
        """Hook: reject a batch that can never complete (PriorityQueue);
        called for ``n`` above ``_batch_limit`` only."""

    # -- close / cancel -----------------------------------------------------------

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        """Close the queue. Never blocks; idempotent (unlike TF1, Q25).

        New enqueues fail with ``CancelledError`` (Q22). Dequeues drain the
        remaining elements, then fail with ``OutOfRangeError`` (Q26–Q28).
        Without ``cancel_pending_enqueues`` the enqueues already pending may
        still complete (TF1 made close() wait for them, Q23; feedq returns at
        once and the queue counts as closed only for new calls). With it,
        they fail with ``CancelledError`` at once; rows they had inserted
        stay (Q24).
        """
        self._engine.close(cancel_pending_enqueues)

    def cancel(self, cause: BaseException | None = None) -> None:
        """Close the queue and cancel every call that waits on it.

        Pending enqueues and dequeues, and later calls that would have to
        wait, raise ``CancelledError`` with ``__cause__ = cause`` (T4: the
        shutdown of a pipeline wakes every blocked caller). Elements already
        stored can still be dequeued by calls that need not wait. Partial
        ``dequeue_many`` collections go back to the queue. Idempotent; the
        first cause is kept. On a queue already closed with no call pending,
        ``cancel()`` without a cause does nothing (end of data stays
        ``OutOfRangeError``). To cancel one call, pass it a
        :class:`CancelToken` instead.
        """
        self._engine.cancel(cause)

    def is_closed(self) -> bool:
        """True once :meth:`close` or :meth:`cancel` was called."""
        return self._engine.state is not _OPEN

    def size(self) -> int:
        """Elements stored now (Q12). A snapshot: it may change at once."""
        return self._engine.size

    def statistics(self) -> QueueStatistics:
        """A consistent snapshot of size, state and waiters."""
        engine = self._engine
        with self._mutex:
            return QueueStatistics(
                name=self._name,
                size=engine.size,
                capacity=self._capacity,
                closed=engine.state is not _OPEN,
                state=engine.state,
                cancelled=engine.cancelled,
                waiting_producers=len(self._producers),
                waiting_consumers=len(self._consumers),
                peak_size=engine.peak,
                enqueued=engine.enqueued,
                dequeued=engine.dequeued,
            )

    def __iter__(self) -> Iterator[Any]:
        """Dequeue elements until the queue is closed and empty."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return

    # -- timing (read by feedq._observe) -------------------------------------------

    def _timing(self) -> TimingRecord:
        """The engine's timing figures (:meth:`QueueEngine.timing`)."""
        return self._engine.timing()

    def _blocked(self) -> list[BlockedCall]:
        """The calls waiting now (:meth:`QueueEngine.blocked`)."""
        return self._engine.blocked()

    # -- storage (lock held) ---------------------------------------------------------

    def _ensure_alloc(self, needed: int) -> None:
        if needed <= self._alloc:
            return
        target = max(needed, 2 * self._alloc)
        if self._capacity >= 0:
            # Never beyond capacity unless a put-back needs it.
            target = max(needed, min(target, self._capacity))
        self._grow(target)

    def _room_for(self, k: int) -> int:
        """How many of ``k`` rows (``k`` within the capacity) can be stored
        now, growing the storage if needed (lock held). Ring kinds return
        fewer while claimed slots are still being copied out."""
        self._ensure_alloc(self._engine.size + k)
        return k

    def _initial_alloc(self) -> int:
        if self._capacity >= 0:
            return min(self._capacity, _INITIAL_ALLOC)
        return _INITIAL_ALLOC

    def _new_column(self, comp: Component, alloc: int) -> np.ndarray[Any, Any]:
        if comp.dense:
            assert comp.shape is not None
            return np.empty((alloc, *comp.shape), dtype=comp.dtype)
        return np.empty(alloc, dtype=object)

    def _stored_sample(self, i: int, n: int) -> list[Any]:
        """The values in up to ``n`` slots of component ``i``'s column, as
        elements (``None`` for an empty slot): for size estimates (lock held)."""
        return list(self._cols[i][:n])

    def _read_row(self, pos: int) -> list[Any]:
        """Copy row ``pos`` out of every column, clearing object references."""
        row = []
        for buf, kind in zip(self._cols, self._row_kinds):
            v = buf[pos]
            if kind == 1:
                v = v.copy()
            elif kind == 2:
                buf[pos] = None
            elif kind == 3:
                v = v.copy()
                buf[pos] = None
            row.append(v)
        return row

    # -- storage hooks (lock held; the queue kinds implement them) ------------------

    def _init_storage(self) -> None:
        """Set up kind-specific bookkeeping before the first ``_grow``."""

    def _grow(self, alloc: int) -> None:
        """Reallocate columns to ``alloc`` rows, keeping stored elements."""
        raise NotImplementedError

    def _available(self) -> int:
        """Elements a dequeue may take now."""
        raise NotImplementedError

    def _put(self, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        """Store rows ``[start, start + k)`` of ``cols`` (room is guaranteed)."""
        raise NotImplementedError

    def _blocks_next(self) -> bool:
        """Whether rows arriving now will likely be stored as blocks that a
        dequeue can take without a copy (FIFOQueue); a guess, read without
        the lock (it only chooses how a waiting dequeue_many collects)."""
        return False

    def _put_one(self, value: Any) -> None:
        """Store one element: its converted value for a queue of one
        component, else the list of its converted component values."""
        self._put(self._codec.row_to_cols([value] if self._one_comp else value), 0, 1)

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        """Remove ``k`` elements; write them to ``outs[i][offset:offset+k]``
        or return them as new columns."""
        raise NotImplementedError

    def _forget(self, k: int) -> None:
        """Drop the object references the storage still holds to the ``k``
        elements just taken (kinds whose ``_take`` leaves them: ``_has_refs``)."""

    def _take_one(self) -> Any:
        """Remove one element and return it as :meth:`_put_one` takes it."""
        chunk = self._take(1, None, 0)
        if self._one_comp:
            return chunk[0][0]
        return [c[0] for c in chunk]

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        """Return previously taken elements to the front (room is guaranteed)."""
        raise NotImplementedError

    # Ring kinds only (used when ``_unlocked_copy_bytes`` is set, see
    # :mod:`feedq.queues._engine`).

    def _reserve(self, cols: list[np.ndarray[Any, Any]], n: int) -> Any:
        """Reserve room for rows ``[0, n)`` of ``cols`` after the stored rows
        (the caller checked that they may go in now and fit); store what is
        not copied outside the lock."""
        raise NotImplementedError

    def _copy_in(self, res: Any) -> None:
        """Copy a reservation's dense rows into its slots (lock not held)."""
        raise NotImplementedError

    def _reserved(self, res: Any) -> bool:
        """Whether ``res`` is still reserved (neither committed nor released)."""
        raise NotImplementedError

    def _claim_done(self, claim: Any) -> bool:
        """Whether :meth:`_finish_claim` ran for ``claim``."""
        raise NotImplementedError

    def _commit_put(self, res: Any, copied: bool) -> None:
        """Publish a reservation's rows, or release it if not ``copied``."""
        raise NotImplementedError

    def _claim(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> Any:
        """Take the ``k`` oldest rows out of the count, keeping their slots
        busy until :meth:`_finish_claim`; take what is not copied outside."""
        raise NotImplementedError

    def _copy_out(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        """Copy a claim's rows out (lock not held); one column per component."""
        raise NotImplementedError

    def _finish_claim(self, claim: Any, copied: bool) -> None:
        """Free a claim's slots, or put its rows back in front if not ``copied``."""
        raise NotImplementedError


def _enqueue_cancelled(token: CancelToken) -> BaseException:
    err = token.error()
    set_num_enqueued(err, 0)
    return err


def check_timeout(timeout: float) -> None:
    if not timeout >= 0:  # also rejects NaN
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
