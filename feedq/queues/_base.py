"""QueueBase: the locking, waiting and close machinery shared by every queue.

How a call proceeds. Every enqueue or dequeue becomes an *attempt* appended
to one of two lines (producers, consumers). Under the queue's one lock,
``_flush`` serves the head of each line as far as the storage allows, on
behalf of whichever thread holds the lock, and repeats until nothing moves.
A caller whose attempt is not finished waits on its line's condition until
it is, or until its deadline; an expired attempt is taken out of line and
undone (a partial ``dequeue_many`` puts its elements back at the front, in
order). This gives TF1's semantics directly:

* strict arrival order per line (Q14): only the head attempt progresses;
* ``enqueue_many`` is contiguous but not atomic (Q15/Q16): it inserts as
  space frees;
* ``dequeue_many`` collects incrementally (Q18), so ``n > capacity`` works
  (Q19), and what it holds is not counted by ``size()`` (Q12).

Storage is the only thing queue kinds change: ``_put``, ``_take``,
``_putback``, ``_available`` and ``_grow`` run with the lock held and see
columns (one NumPy buffer per component: ``(alloc,) + shape`` for dense
components, an object array of per-element arrays for ragged ones).

Close is a state machine (OPEN → CLOSING → CLOSED). ``close()`` never blocks:
it rejects new enqueues at once and lets enqueues that were already pending
finish (TF1 made close() itself wait for them, Q23); once none is pending the
queue is CLOSED and dequeues that cannot be satisfied fail with
``OutOfRangeError``. ``cancel(cause)`` closes and fails every pending and
future call that would have to wait with ``CancelledError`` (chained from
``cause``).
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._defaults import resolve_timeout
from ..errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
)
from ._spec import (
    STRING,
    Component,
    as_torch_free_array,
    flatten_values,
    normalize_dtypes,
    normalize_names,
    normalize_shapes,
    pack_values,
)

__all__ = ["QueueBase", "QueueState", "QueueStatistics", "reset_shared_queues"]

_INITIAL_ALLOC = 64


class QueueState(enum.Enum):
    """Life cycle of a queue."""

    OPEN = "open"
    #: close() was called; enqueues that were pending then may still finish.
    CLOSING = "closing"
    CLOSED = "closed"


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
        dequeued: elements handed out since creation.
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


class _Enqueue:
    """A pending enqueue: rows ``[done, n)`` of ``cols`` are still to insert."""

    __slots__ = ("cols", "n", "done", "finished", "error")

    def __init__(self, cols: list[np.ndarray[Any, Any]], n: int) -> None:
        self.cols = cols
        self.n = n
        self.done = 0
        self.finished = False
        self.error: BaseException | None = None


class _Dequeue:
    """A pending dequeue of ``n`` elements (``up_to``: fewer once closed).

    Collected elements are either kept as chunks (lists of columns) or,
    with ``outs``, written straight into the caller's buffers.
    """

    __slots__ = ("n", "up_to", "some", "op", "outs", "chunks", "count", "finished", "error")

    def __init__(
        self, n: int, up_to: bool, op: str, outs: list[np.ndarray[Any, Any]] | None, some: bool = False
    ) -> None:
        self.n = n
        self.up_to = up_to
        # dequeue_available: finish as soon as at least one element is held.
        self.some = some
        self.op = op
        self.outs = outs
        self.chunks: list[list[np.ndarray[Any, Any]]] = []
        self.count = 0
        self.finished = False
        self.error: BaseException | None = None


# shared_name -> the queue's shared state (its __dict__). Resources live for the
# process, as in a TF1 session container, until reset_shared_queues().
_shared_registry: dict[str, dict[str, Any]] = {}
_shared_lock = threading.Lock()


def reset_shared_queues(shared_name: str | None = None) -> None:
    """Forget one shared queue (or all): later opens create new queues.

    Handles already open keep working on the old queue.
    """
    with _shared_lock:
        if shared_name is None:
            _shared_registry.clear()
        else:
            _shared_registry.pop(shared_name, None)


class QueueBase:
    """Base class of the four queue kinds; see the module docstring.

    Subclasses implement the storage hooks. All public methods are thread
    safe. ``timeout`` is worded the same everywhere: seconds to wait; ``None``
    uses the process default (:func:`feedq.set_default_timeout`, itself
    ``None`` = forever), ``0`` does not wait, ``math.inf`` waits forever.
    """

    _kind: ClassVar[str] = "Queue"
    _default_name: ClassVar[str] = "queue"
    #: PriorityQueue: a dequeue_many takes all n at once or nothing (Q42).
    _all_or_nothing: ClassVar[bool] = False
    #: Components with partial shapes are allowed (PaddingFIFOQueue).
    _partial_shapes: ClassVar[bool] = False
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
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int, got {capacity!r}")
        components = self._make_components(dtypes, shapes)
        name_list = normalize_names(names, len(components))
        capacity = int(capacity)
        self._validate_storage_args(capacity, components, storage_args)
        if shared_name is not None:
            with _shared_lock:
                existing = _shared_registry.get(shared_name)
                if existing is not None:
                    # Borg: this handle shares the state of the first one (Q7).
                    self.__dict__ = existing
                    self._check_reopen(shared_name, capacity, components, name_list, storage_args)
                    return
                self._setup(capacity, components, name_list, shared_name, name, storage_args)
                _shared_registry[shared_name] = self.__dict__
        else:
            self._setup(capacity, components, name_list, None, name, storage_args)

    def _setup(
        self,
        capacity: int,
        components: list[Component],
        names: list[str] | None,
        shared_name: str | None,
        name: str | None,
        storage_args: dict[str, Any],
    ) -> None:
        if name is None:
            counter = QueueBase._name_counters.setdefault(self._default_name, itertools.count())
            n = next(counter)
            name = self._default_name if n == 0 else f"{self._default_name}_{n}"
        self._name = name
        self._kind_name = self._kind
        self._shared_name = shared_name
        self._capacity = capacity if capacity >= 0 else -1
        self._components = components
        self._names = names
        self._storage_args = dict(storage_args)
        self._mutex = threading.Lock()
        # Notified (notify_all) when a consumer attempt finishes or the state changes.
        self._consumer_done = threading.Condition(self._mutex)
        # Notified (notify_all) when a producer attempt finishes or the state changes.
        self._producer_done = threading.Condition(self._mutex)
        self._producers: deque[_Enqueue] = deque()  # guarded by self._mutex
        self._consumers: deque[_Dequeue] = deque()  # guarded by self._mutex
        self._state = QueueState.OPEN  # guarded by self._mutex
        self._cancel_cause: BaseException | None = None  # guarded by self._mutex
        self._cancelled = False  # guarded by self._mutex
        self._size = 0  # guarded by self._mutex
        self._peak = 0  # guarded by self._mutex
        self._enqueued = 0  # guarded by self._mutex
        self._dequeued = 0  # guarded by self._mutex
        self._alloc = 0  # guarded by self._mutex
        self._cols: list[np.ndarray[Any, Any]] = []  # guarded by self._mutex
        # Facts for the fast paths, fixed at construction.
        self._single = names is None and len(components) == 1
        self._all_shaped = all(c.shape is not None for c in components)
        self._all_dense = all(c.dense for c in components)
        self._desc = f"{self._kind} '{name}'"
        self._wheres = [self._where(c.index) for c in components]
        # How _read_row copies a component out of its column: 0 numeric
        # scalar (indexing copies), 1 numeric row (view: copy), 2 object
        # scalar or ragged (take the reference, clear the slot), 3 object row.
        self._obj_cols = [c.dtype is STRING or not c.dense for c in components]
        self._single_numeric = len(components) == 1 and components[0].dense and components[0].dtype is not STRING
        self._row_kinds = [
            (0 if c.shape == () else 1) if c.dense and c.dtype is not STRING
            else (3 if c.dense and c.shape != () else 2)
            for c in components
        ]
        self._init_storage()
        self._grow(self._initial_alloc())

    def _make_components(self, dtypes: Any, shapes: Any) -> list[Component]:
        dtype_list = normalize_dtypes(dtypes)
        shape_list = normalize_shapes(shapes, len(dtype_list), partial=self._partial_shapes)
        return [Component(i, d, s) for i, (d, s) in enumerate(zip(dtype_list, shape_list))]

    def _validate_storage_args(
        self, capacity: int, components: list[Component], args: dict[str, Any]
    ) -> None:
        if args:
            raise TypeError(f"unexpected arguments {sorted(args)}")

    def _check_reopen(
        self,
        shared_name: str,
        capacity: int,
        components: list[Component],
        names: list[str] | None,
        storage_args: dict[str, Any],
    ) -> None:
        prefix = f"Shared queue '{shared_name}'"
        requested_kind = type(self)._kind
        # self.__dict__ is the existing queue's; its class is recorded there.
        if self._kind_of_state != requested_kind:
            raise InvalidArgumentError(
                f"{prefix} is a {self._kind_of_state} but a {requested_kind} was requested"
            )
        cap = capacity if capacity >= 0 else -1
        if cap != self._capacity:
            raise InvalidArgumentError(
                f"{prefix} has capacity {self._capacity} but requested capacity was {cap}"
            )
        mine = [c.dtype for c in self._components]
        theirs = [c.dtype for c in components]
        if mine != theirs:
            raise InvalidArgumentError(
                f"{prefix} has component types {_dtypes_str(mine)} "
                f"but requested component types were {_dtypes_str(theirs)}"
            )
        if [c.shape for c in self._components] != [c.shape for c in components]:
            raise InvalidArgumentError(
                f"{prefix} has component shapes {[c.shape for c in self._components]} "
                f"but requested component shapes were {[c.shape for c in components]}"
            )
        if names != self._names:
            raise InvalidArgumentError(f"{prefix} has names {self._names} but requested names were {names}")
        for key, value in storage_args.items():
            if key == "seed":
                continue  # the seed only matters at creation
            if self._storage_args.get(key) != value:
                raise InvalidArgumentError(
                    f"{prefix} has {key} {self._storage_args.get(key)} but requested {key} was {value}"
                )

    @property
    def _kind_of_state(self) -> str:
        return str(self.__dict__.get("_kind_name", self._kind))

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
            f"size={self._size}, state={self._state.value})"
        )

    # -- enqueue ----------------------------------------------------------------

    def _where(self, i: int) -> str:
        label = self._names[i] if self._names is not None else str(i)
        return f"{self._kind} '{self._name}' component {label}"

    def enqueue(self, vals: Any, timeout: float | None = None) -> None:
        """Insert one element, waiting while the queue is full (Q13).

        Args:
            vals: the element: a bare value (one component), a list/tuple of
                component values, or a dict for a named queue (Q3).
            timeout: seconds to wait for room (see the class docstring).

        Raises:
            ValueError: wrong number of components or keys (Q9).
            TypeError: a value that does not convert without loss (Q8).
            InvalidArgumentError: a shape mismatch (Q10).
            CancelledError: the queue is closed (Q22) or the call was
                cancelled (Q24).
            DeadlineExceededError: timed out; nothing was inserted (T2).
        """
        if timeout is not None:
            _check_timeout(timeout)
        comps = self._components
        if self._single and not isinstance(vals, (list, tuple, dict)):
            row = [comps[0].convert_one(vals, self._wheres[0])]
        else:
            values = flatten_values(vals, self._names, len(comps), self._desc)
            wheres = self._wheres
            row = [comp.convert_one(value, wheres[comp.index]) for comp, value in zip(comps, values)]
        with self._mutex:
            # Fast path: nobody ahead in line and room now.
            if (
                self._state is QueueState.OPEN
                and not self._producers
                and (self._capacity < 0 or self._size < self._capacity)
            ):
                if self._size >= self._alloc:
                    self._ensure_alloc(self._size + 1)
                self._put_one(row)
                self._size += 1
                self._enqueued += 1
                if self._size > self._peak:
                    self._peak = self._size
                if self._consumers:
                    self._flush()
                return
        self._run_enqueue(_Enqueue(self._row_to_cols(row), 1), timeout, "enqueue")

    def _row_to_cols(self, row: list[Any]) -> list[np.ndarray[Any, Any]]:
        cols = []
        for comp, value in zip(self._components, row):
            if comp.dense:
                if comp.dtype is STRING and comp.shape == ():
                    col = np.empty(1, dtype=object)
                    col[0] = value
                else:
                    col = np.asarray(value, dtype=comp.dtype)[np.newaxis]
            else:
                col = np.empty(1, dtype=object)
                col[0] = value
            cols.append(col)
        return cols

    def enqueue_many(self, vals: Any, timeout: float | None = None) -> None:
        """Insert the rows of a batch as elements, in order.

        Each component has a leading batch dimension; row ``i`` of every
        component forms element ``i``. The rows are inserted contiguously
        (no other producer's elements in between, Q16) but not atomically:
        when they do not fit they go in as room frees, and inserted rows can
        be dequeued before the call returns (Q15). A batch of 0 rows returns
        at once, even on a closed queue (Q17).

        Raises:
            as :meth:`enqueue`; ``InvalidArgumentError`` also when a component
            is a scalar or the leading sizes differ (Q10). On timeout or
            cancellation the exception's ``num_enqueued`` attribute says how
            many leading rows were inserted before it.
        """
        if timeout is not None:
            _check_timeout(timeout)
        comps = self._components
        if self._single and not isinstance(vals, (list, tuple, dict)):
            values = [vals]
        else:
            values = flatten_values(vals, self._names, len(comps), self._desc)
        wheres = self._wheres
        cols = [comp.convert_many(value, wheres[comp.index]) for comp, value in zip(comps, values)]
        n = cols[0].shape[0]
        for i, col in enumerate(cols):
            if col.shape[0] != n:
                raise InvalidArgumentError(
                    f"{self._kind} '{self._name}': All input tensors must have the same size in "
                    f"the 0th dimension. Component 0 has {n}, component {i} has {col.shape[0]}"
                )
        if n == 0:
            return
        with self._mutex:
            # Fast path: nobody ahead in line and room for the whole batch.
            if self._state is QueueState.OPEN and not self._producers and self._free() >= n:
                if self._size + n > self._alloc:
                    self._ensure_alloc(self._size + n)
                self._put(cols, 0, n)
                self._size += n
                self._enqueued += n
                if self._size > self._peak:
                    self._peak = self._size
                if self._consumers:
                    self._flush()
                return
        self._run_enqueue(_Enqueue(cols, n), timeout, "enqueue_many")

    def _run_enqueue(self, att: _Enqueue, timeout: float | None, op: str) -> None:
        wait = resolve_timeout(timeout)
        with self._mutex:
            if self._state is not QueueState.OPEN:
                raise self._closed_enqueue_error()
            self._producers.append(att)
            self._flush()
            if not att.finished:
                deadline = None if wait is None else time.monotonic() + wait
                while not att.finished:
                    if deadline is None:
                        self._producer_done.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._expire_enqueue(att, op, wait)
                        break
                    self._producer_done.wait(remaining)
        if att.error is not None:
            raise att.error

    def _closed_enqueue_error(self) -> CancelledError:
        if self._cancelled:
            err = CancelledError(f"{self._kind} '{self._name}' was cancelled.")
            err.__cause__ = self._cancel_cause
            return err
        return CancelledError(f"{self._kind} '{self._name}' is closed.")

    def _expire_enqueue(self, att: _Enqueue, op: str, wait: float | None) -> None:
        self._producers.remove(att)
        att.finished = True
        detail = f"; {att.done} of {att.n} elements were enqueued before it" if att.done else ""
        err = DeadlineExceededError(
            f"Timed out waiting for notification: {self._kind} '{self._name}' {op} "
            f"after {wait:g} s (queue full, size {self._size}){detail}"
        )
        err.num_enqueued = att.done  # type: ignore[attr-defined]
        att.error = err
        self._flush()

    # -- dequeue ----------------------------------------------------------------

    def dequeue(self, timeout: float | None = None) -> Any:
        """Remove and return one element, waiting while the queue is empty.

        Returns:
            A bare value for one component, a list for several, a dict for a
            named queue (Q4). Scalars come back as NumPy scalars, strings as
            ``bytes``.

        Raises:
            OutOfRangeError: the queue is closed and empty (Q26).
            CancelledError: the call was cancelled (:meth:`cancel`).
            DeadlineExceededError: timed out; nothing was removed (T2).
        """
        if timeout is not None:
            _check_timeout(timeout)
        with self._mutex:
            # Fast path: nobody ahead in line and an element available now.
            if not self._consumers and self._available() > 0:
                row = self._take_one()
                self._size -= 1
                self._dequeued += 1
                if self._producers:
                    self._flush()
                return row[0] if self._single else pack_values(row, self._names)
        att = _Dequeue(1, False, "dequeue", None)
        self._run_dequeue(att, timeout)
        cols = att.chunks[0]
        return pack_values([c[0] for c in cols], self._names)

    def dequeue_many(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """Remove ``n`` elements and return them stacked on a new axis 0 (Q18).

        Elements are collected as they arrive; ``n`` may exceed the capacity
        (Q19, not for PriorityQueue, Q42). ``n == 0`` returns empty arrays at
        once (Q20).

        Args:
            n: number of elements.
            timeout: seconds to wait (see the class docstring). On timeout the
                elements collected so far go back to the front of the queue
                in order: a timeout never loses an element (unlike TF1, T3).
            out: optional preallocated buffers, structured like the result
                (bare array / list / dict), each with at least ``n`` rows of
                the component's shape and dtype; results are views
                ``out[i][:n]``. Lets a caller dequeue straight into pinned
                memory. Dense (fully shaped) components only.

        Raises:
            InvalidArgumentError: ``n < 0``; components without shapes (Q6).
            OutOfRangeError: the queue closed with fewer than ``n`` elements;
                they stay queued (Q27).
            CancelledError, DeadlineExceededError: as :meth:`dequeue`.
        """
        return self._dequeue_batch(n, timeout, out, up_to=False, op="dequeue_many")

    def dequeue_up_to(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """Like :meth:`dequeue_many`, but once the queue is closed returns the
        1..n elements that remain (Q21, Q28); ``OutOfRangeError`` when none.
        The result's leading dimension is the number returned."""
        return self._dequeue_batch(n, timeout, out, up_to=True, op="dequeue_up_to")

    def dequeue_available(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """Up to ``n`` elements: as many as can be taken now, waiting only
        while none can (a feedq addition, for streaming stages that want big
        blocks when data is plentiful without waiting to fill them).

        Returns:
            1..n elements stacked on axis 0, like :meth:`dequeue_up_to`.

        Raises:
            OutOfRangeError: the queue is closed and empty.
            CancelledError, DeadlineExceededError: as :meth:`dequeue`.
        """
        return self._dequeue_batch(n, timeout, out, up_to=True, op="dequeue_available", some=True)

    def dequeue_nowait(self) -> Any:
        """:meth:`dequeue` with ``timeout=0``."""
        return self.dequeue(timeout=0)

    def enqueue_nowait(self, vals: Any) -> None:
        """:meth:`enqueue` with ``timeout=0``."""
        self.enqueue(vals, timeout=0)

    def _dequeue_batch(
        self, n: int, timeout: float | None, out: Any, up_to: bool, op: str, some: bool = False
    ) -> Any:
        if type(n) is not int:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise TypeError(f"n must be an int, got {n!r}")
            n = int(n)
        if n < 0:
            raise InvalidArgumentError(
                f"{self._kind} '{self._name}' {op}: requested {n} < 0 elements"
            )
        if timeout is not None:
            _check_timeout(timeout)
        if not self._all_shaped:
            raise InvalidArgumentError(
                f"{self._kind} '{self._name}': DequeueMany and DequeueUpTo require the "
                "components to have specified shapes."
            )
        outs = self._check_out(out, n) if out is not None else None
        if n == 0:
            return self._assemble([], 0, outs)
        if not up_to:
            self._check_batch_feasible(n)
        with self._mutex:
            # Fast path: nobody ahead in line and n elements (or, for
            # dequeue_available, at least one) available now.
            avail = self._available() if not self._consumers else 0
            if avail >= n or (some and avail > 0):
                k = min(n, avail)
                chunk = self._take(k, outs, 0)
                self._size -= k
                self._dequeued += k
                if self._producers:
                    self._flush()
                if outs is None and self._all_dense:
                    return chunk[0] if self._single else pack_values(chunk, self._names)
                return self._assemble([chunk], k, outs)
        att = _Dequeue(n, up_to, op, outs, some=some)
        self._run_dequeue(att, timeout)
        return self._assemble(att.chunks, att.count, outs)

    def _check_batch_feasible(self, n: int) -> None:
        """Hook: reject a batch that can never complete (PriorityQueue)."""

    def _check_out(self, out: Any, n: int) -> list[np.ndarray[Any, Any]]:
        where = f"{self._kind} '{self._name}' out="
        bufs = flatten_values(out, self._names, len(self._components), where)
        result = []
        for comp, buf in zip(self._components, bufs):
            buf = as_torch_free_array(buf, where)
            if not isinstance(buf, np.ndarray):
                raise TypeError(f"{where}: component {comp.index} must be an ndarray, got {type(buf).__name__}")
            if not comp.dense:
                raise InvalidArgumentError(f"{where}: component {comp.index} has no fixed shape; out= needs dense components")
            assert comp.shape is not None
            if buf.dtype != comp.dtype or buf.ndim != len(comp.shape) + 1 or buf.shape[1:] != comp.shape or buf.shape[0] < n:
                raise InvalidArgumentError(
                    f"{where}: component {comp.index} needs a buffer of dtype {comp.dtype} and shape "
                    f"[>={n}]+{list(comp.shape)}, got dtype {buf.dtype} shape {list(buf.shape)}"
                )
            if not buf.flags.writeable:
                raise InvalidArgumentError(f"{where}: component {comp.index} buffer is read-only")
            result.append(buf)
        return result

    def _run_dequeue(self, att: _Dequeue, timeout: float | None) -> None:
        wait = resolve_timeout(timeout)
        with self._mutex:
            self._consumers.append(att)
            self._flush()
            if not att.finished:
                deadline = None if wait is None else time.monotonic() + wait
                while not att.finished:
                    if deadline is None:
                        self._consumer_done.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._expire_dequeue(att, wait)
                        break
                    self._consumer_done.wait(remaining)
        if att.error is not None:
            raise att.error

    def _expire_dequeue(self, att: _Dequeue, wait: float | None) -> None:
        self._consumers.remove(att)
        held = att.count
        self._give_back(att)
        att.finished = True
        detail = f"; the {held} collected were put back" if held else ""
        att.error = DeadlineExceededError(
            f"Timed out waiting for notification: {self._kind} '{self._name}' {att.op} "
            f"after {wait:g} s (requested {att.n}, current size {self._size}){detail}"
        )
        self._flush()

    def _give_back(self, att: _Dequeue) -> None:
        """Put a failed attempt's elements back at the front, in order (Q27, T3)."""
        if att.count == 0:
            return
        if att.outs is not None:
            chunks = [[buf[: att.count].copy() for buf in att.outs]]
        else:
            chunks = att.chunks
        for chunk in reversed(chunks):
            k = chunk[0].shape[0]
            self._ensure_alloc(self._size + k)
            self._putback(chunk)
            self._size += k
            self._dequeued -= k
        att.chunks = []
        att.count = 0

    def _assemble(self, chunks: list[list[np.ndarray[Any, Any]]], count: int, outs: list[np.ndarray[Any, Any]] | None) -> Any:
        if outs is not None:
            return pack_values([buf[:count] for buf in outs], self._names)
        cols = []
        for i, comp in enumerate(self._components):
            parts = [chunk[i] for chunk in chunks]
            if comp.dense:
                if len(parts) == 1:
                    col = parts[0]
                elif parts:
                    col = np.concatenate(parts)
                else:
                    assert comp.shape is not None
                    col = np.empty((0, *comp.shape), dtype=comp.dtype)
            else:
                col = self._pad(comp, parts)
            cols.append(col)
        return pack_values(cols, self._names)

    def _pad(self, comp: Component, parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        raise InvalidArgumentError(  # pragma: no cover - guarded in _dequeue_batch
            f"{self._kind} '{self._name}': component {comp.index} has no fixed shape"
        )

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
        with self._mutex:
            if self._state is QueueState.OPEN:
                self._state = QueueState.CLOSING
            if cancel_pending_enqueues:
                self._cancel_producers("Enqueue operation was cancelled")
            self._flush()
            self._producer_done.notify_all()
            self._consumer_done.notify_all()

    def cancel(self, cause: BaseException | None = None) -> None:
        """Close the queue and cancel every call that waits on it.

        Pending enqueues and dequeues, and later calls that would have to
        wait, raise ``CancelledError`` with ``__cause__ = cause`` (T4: the
        shutdown of a pipeline wakes every blocked caller). Elements already
        stored can still be dequeued by calls that need not wait. Partial
        ``dequeue_many`` collections go back to the queue. Idempotent; the
        first cause is kept. On a queue already closed with no call pending,
        ``cancel()`` without a cause does nothing (end of data stays
        ``OutOfRangeError``).
        """
        with self._mutex:
            if self._state is QueueState.CLOSED and cause is None and not self._cancelled:
                # Already closed and nothing pending: a clean cancel changes
                # nothing, and end of data stays OutOfRange.
                return
            if not self._cancelled:
                self._cancelled = True
                self._cancel_cause = cause
            if self._state is QueueState.OPEN:
                self._state = QueueState.CLOSING
            self._cancel_producers("Enqueue operation was cancelled")
            self._flush()
            self._producer_done.notify_all()
            self._consumer_done.notify_all()

    def _cancel_producers(self, message: str) -> None:
        while self._producers:
            att = self._producers.popleft()
            err = CancelledError(f"{self._kind} '{self._name}': {message}")
            if self._cancelled:
                err.__cause__ = self._cancel_cause
            err.num_enqueued = att.done  # type: ignore[attr-defined]
            att.error = err
            att.finished = True

    def is_closed(self) -> bool:
        """True once :meth:`close` or :meth:`cancel` was called."""
        return self._state is not QueueState.OPEN

    def size(self) -> int:
        """Elements stored now (Q12). A snapshot: it may change at once."""
        return self._size

    def statistics(self) -> QueueStatistics:
        """A consistent snapshot of size, state and waiters."""
        with self._mutex:
            return QueueStatistics(
                name=self._name,
                size=self._size,
                capacity=self._capacity,
                closed=self._state is not QueueState.OPEN,
                state=self._state,
                cancelled=self._cancelled,
                waiting_producers=len(self._producers),
                waiting_consumers=len(self._consumers),
                peak_size=self._peak,
                enqueued=self._enqueued,
                dequeued=self._dequeued,
            )

    def __iter__(self) -> Iterator[Any]:
        """Dequeue elements until the queue is closed and empty."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return

    # -- the engine (lock held) -------------------------------------------------

    def _free(self) -> int:
        if self._capacity < 0:
            return 1 << 62
        return self._capacity - self._size

    def _ended(self) -> bool:
        """No element can arrive any more: closed and no enqueue pending."""
        return self._state is QueueState.CLOSED

    def _flush(self) -> None:
        """Serve the heads of both lines until nothing moves (lock held)."""
        producers, consumers = self._producers, self._consumers
        progress = True
        while progress:
            progress = False
            if self._state is QueueState.CLOSING and not producers:
                self._state = QueueState.CLOSED
                progress = True
            # Producers, oldest first (Q14).
            while producers:
                att = producers[0]
                k = min(self._free(), att.n - att.done)
                if k <= 0:
                    break
                self._ensure_alloc(self._size + k)
                self._put(att.cols, att.done, k)
                att.done += k
                self._size += k
                self._enqueued += k
                if self._size > self._peak:
                    self._peak = self._size
                progress = True
                if att.done < att.n:
                    break
                producers.popleft()
                att.finished = True
                att.cols = []
                self._producer_done.notify_all()
            # Consumers, oldest first (Q14).
            while consumers:
                datt = consumers[0]
                need = datt.n - datt.count
                avail = self._available()
                if avail >= need:
                    self._collect(datt, need)
                elif datt.some and avail > 0:
                    self._collect(datt, avail)
                elif self._ended():
                    if datt.up_to and datt.count + avail > 0:
                        if avail:
                            self._collect(datt, avail)
                    else:
                        consumers.popleft()
                        self._fail_dequeue(datt)
                        progress = True
                        self._consumer_done.notify_all()
                        continue
                else:
                    if avail > 0 and not self._all_or_nothing:
                        self._collect(datt, avail)
                        progress = True
                    break
                consumers.popleft()
                datt.finished = True
                progress = True
                self._consumer_done.notify_all()
            if producers and self._free() > 0:
                progress = True

    def _collect(self, att: _Dequeue, k: int) -> None:
        if att.outs is not None:
            self._take(k, att.outs, att.count)
        else:
            att.chunks.append(self._take(k, None, 0))
        att.count += k
        self._size -= k
        self._dequeued += k

    def _fail_dequeue(self, att: _Dequeue) -> None:
        self._give_back(att)
        att.finished = True
        if self._cancelled:
            err: BaseException = CancelledError(
                f"{self._kind} '{self._name}': Dequeue operation was cancelled"
            )
            err.__cause__ = self._cancel_cause
        else:
            err = OutOfRangeError(
                f"{self._kind} '{self._name}' is closed and has insufficient elements "
                f"(requested {att.n}, current size {self._size})"
            )
        att.error = err

    def _ensure_alloc(self, needed: int) -> None:
        if needed <= self._alloc:
            return
        target = max(needed, 2 * self._alloc)
        if self._capacity >= 0:
            # Never beyond capacity unless a put-back needs it.
            target = max(needed, min(target, self._capacity))
        self._grow(target)

    def _initial_alloc(self) -> int:
        if self._capacity >= 0:
            return min(self._capacity, _INITIAL_ALLOC)
        return _INITIAL_ALLOC

    def _new_column(self, comp: Component, alloc: int) -> np.ndarray[Any, Any]:
        if comp.dense:
            assert comp.shape is not None
            return np.empty((alloc, *comp.shape), dtype=comp.dtype)
        return np.empty(alloc, dtype=object)

    # -- storage hooks (lock held) ------------------------------------------------

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

    def _put_one(self, row: list[Any]) -> None:
        """Store one element given as converted component values."""
        self._put(self._row_to_cols(row), 0, 1)

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

    def _take_one(self) -> list[Any]:
        """Remove one element and return its component values."""
        chunk = self._take(1, None, 0)
        return [c[0] for c in chunk]

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        """Remove ``k`` elements; write them to ``outs[i][offset:offset+k]``
        or return them as new columns."""
        raise NotImplementedError

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        """Return previously taken elements to the front (room is guaranteed)."""
        raise NotImplementedError


def _check_timeout(timeout: float) -> None:
    if not timeout >= 0:  # also rejects NaN
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")


def _dtypes_str(dtypes: list[np.dtype[Any]]) -> str:
    return "[" + ", ".join("string" if d is STRING else str(d) for d in dtypes) + "]"
