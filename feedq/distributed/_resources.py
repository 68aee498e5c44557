"""Client handles of resources held by a task: queues, variables, accumulators.

A handle names a resource ``(container, shared_name)`` on a task and turns
each method call into one call on that task's server (one remote call per
method: batches travel whole, as NumPy arrays). Handles are picklable: a
handle sent to another process of the cluster reaches the same resource
through that process's default session.

Where a resource goes: ``task=`` when given; otherwise the enclosing
``feedq.device(...)`` contexts (``/job:ps/task:0``, or a
:func:`replica_device_setter`), as TF1 placed ops with ``tf.device``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from feedq._core.arrays import as_torch_free_array, flatten_values, pack_values, variable_array
from feedq.devices import PlacementRequest, current_device
from feedq.distributed._cluster import ClusterSpec, TaskName
from feedq.distributed._compression import WireStatistics, check_codec, decode, encode
from feedq.distributed._host import QueueMeta
from feedq.distributed._session import Session, default_session
from feedq.errors import InvalidArgumentError, OutOfRangeError

__all__ = [
    "ConditionalAccumulator",
    "FIFOQueue",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "RandomShuffleQueue",
    "RemoteQueue",
    "Variable",
    "replica_device_setter",
    "resolve_task",
]

_names = itertools.count()

#: The resource types a replica_device_setter puts on ps tasks by default.
PS_OPS = ("Variable", "VariableV2", "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue",
          "PriorityQueue", "ConditionalAccumulator")


def resolve_task(task: Any, type_name: str, name: str, session: Session) -> TaskName:
    """The task a new resource goes to: ``task=``, else the device contexts.

    Raises:
        InvalidArgumentError: no task given and no context names a job, or
            the task is not in the cluster.
    """
    if task is not None:
        return session.check_task(task)
    spec = current_device(PlacementRequest(name=name, type=type_name))
    if spec.job is None:
        raise InvalidArgumentError(
            f"{type_name} '{name}': no task to place it on: pass task='/job:ps/task:0' or "
            "create it inside feedq.device('/job:ps/task:0') or a replica_device_setter"
        )
    return session.check_task(TaskName(spec.job, spec.task or 0))


class replica_device_setter:
    """A device function that puts resources round-robin on the ps tasks.

    TF1's ``tf.train.replica_device_setter``: inside
    ``feedq.device(replica_device_setter(ps_tasks=2))`` the variables and
    queues created go to ``/job:ps/task:0``, ``/job:ps/task:1``,
    ``/job:ps/task:0``, ... (the seed's v1..v5 example); other stages go to
    ``worker_device``. A device chosen by an inner context wins over the
    setter's choice for the fields it specifies, as in TF1.

    Args:
        ps_tasks: number of ps tasks; 0 takes it from ``cluster``.
        ps_device: the job the ps tasks belong to.
        worker_device: where non-ps stages go (``None``: unplaced).
        cluster: a cluster spec (to count the ps tasks).
        ps_ops: the resource types placed on ps tasks.
        ps_strategy: a function ``request -> task index`` replacing the
            round robin (TF1's ``ps_strategy``).

    Raises:
        ValueError: no ps tasks.
    """

    def __init__(self, ps_tasks: int = 0, ps_device: str = "/job:ps",
                 worker_device: str | None = None,
                 cluster: ClusterSpec | dict[str, Any] | None = None,
                 ps_ops: tuple[str, ...] | list[str] | None = None,
                 ps_strategy: Any = None) -> None:
        if cluster is not None and not ps_tasks:
            spec = ClusterSpec(cluster)
            job = ps_device.strip("/").split(":", 1)[1].split("/")[0]
            ps_tasks = spec.num_tasks(job)
        if ps_tasks <= 0 and ps_strategy is None:
            raise ValueError("replica_device_setter needs ps_tasks > 0 (or a cluster with ps tasks)")
        from feedq.devices import DeviceSpec

        self._ps = DeviceSpec.parse(ps_device)
        self._worker = DeviceSpec.parse(worker_device) if worker_device else None
        self._ps_tasks = ps_tasks
        self._ps_ops = frozenset(PS_OPS if ps_ops is None else ps_ops)
        self._strategy = ps_strategy
        self._next = 0

    def __call__(self, request: PlacementRequest) -> Any:
        from feedq.devices import DeviceSpec

        current = DeviceSpec.parse(request.device)
        if request.type in self._ps_ops:
            if self._strategy is not None:
                index = int(self._strategy(request))
            else:
                index = self._next % self._ps_tasks
                self._next += 1
            return self._ps.replace(task=index).make_merged_spec(current)
        if self._worker is None:
            return current
        return self._worker.make_merged_spec(current)


def _to_wire(vals: Any) -> Any:
    """Torch tensors become NumPy arrays before they travel."""
    if isinstance(vals, dict):
        return {k: as_torch_free_array(v, "remote queue") for k, v in vals.items()}
    if isinstance(vals, (list, tuple)):
        return [as_torch_free_array(v, "remote queue") for v in vals]
    return as_torch_free_array(vals, "remote queue")


class _Handle:
    """What every resource handle shares: task, key, session."""

    _rkind = ""

    def __init__(self, task: TaskName, key: tuple[str, str], session: Session | None) -> None:
        self._task = task
        self._key = key
        self._session = session

    @property
    def session(self) -> Session:
        return self._session or default_session()

    @property
    def task(self) -> TaskName:
        """The task holding the resource."""
        return self._task

    @property
    def device(self) -> str:
        """The resource's device, e.g. ``/job:ps/task:0``."""
        return str(self._task)

    @property
    def shared_name(self) -> str:
        """The name clients open it by."""
        return self._key[1]

    @property
    def container(self) -> str:
        """The resource container (``""`` = default)."""
        return self._key[0]

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return self.session.call(self._task, self._rkind, self._key, op, *args, **kwargs)


class RemoteQueue(_Handle):
    """A queue held by a task, with the local queue's methods and semantics.

    Build one with :func:`FIFOQueue`, :func:`RandomShuffleQueue`,
    :func:`PaddingFIFOQueue` or :func:`PriorityQueue` of this module. Every
    method behaves as on a local queue (Q1–Q43, T1–T4); blocking ones wait on
    the host, which raises DeadlineExceededError after ``timeout`` and puts
    back anything collected. Extra failure: UnavailableError when the task's
    server is gone.

    ``compression`` ("float16", "bfloat16", "int8") sends float components
    lossily; :meth:`wire_statistics` reports the bytes saved. Exact by default.
    """

    _rkind = "queue"

    def __init__(self, task: TaskName, key: tuple[str, str], meta: QueueMeta,
                 session: Session | None = None, compression: str | None = None) -> None:
        super().__init__(task, key, session)
        self._meta = meta
        self._codec = check_codec(compression)
        self._wire = [0, 0, 0]
        self._single = meta.names is None and len(meta.dtypes) == 1

    def __reduce__(self) -> Any:
        return (RemoteQueue, (self._task, self._key, self._meta, None, self._codec))

    # -- properties -------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name (used in messages)."""
        return self._meta.name

    @property
    def kind(self) -> str:
        """``"FIFOQueue"``, ``"RandomShuffleQueue"``, ...."""
        return self._meta.kind

    @property
    def capacity(self) -> int:
        """The bound on stored elements, or -1 (Q5)."""
        return self._meta.capacity

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """Component dtypes (Q1)."""
        return list(self._meta.dtypes)

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        """Component shapes (Q2)."""
        return list(self._meta.shapes)

    @property
    def names(self) -> list[str] | None:
        """Component names (Q3)."""
        return self._meta.names

    def __repr__(self) -> str:
        return f"<Remote{self.kind} '{self.name}' on {self._task}>"

    # -- operations ---------------------------------------------------------------------

    def _wire_kwargs(self, timeout: float | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": timeout}
        if self._codec is not None:
            kwargs["wire"] = self._codec
        return kwargs

    def enqueue(self, vals: Any, timeout: float | None = None) -> None:
        """Insert one element (Q13); see :meth:`feedq.FIFOQueue.enqueue`."""
        self._call("enqueue", encode(_to_wire(vals), self._codec, self._wire),
                   **self._wire_kwargs(timeout))

    def enqueue_many(self, vals: Any, timeout: float | None = None) -> None:
        """Insert the rows of a batch (Q15, Q16); one remote call per batch."""
        self._call("enqueue_many", encode(_to_wire(vals), self._codec, self._wire),
                   **self._wire_kwargs(timeout))

    def dequeue(self, timeout: float | None = None) -> Any:
        """Remove one element (Q11); nothing is taken on timeout (T2)."""
        return decode(self._call("dequeue", **self._wire_kwargs(timeout)), self._wire)

    def dequeue_many(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """Remove ``n`` elements stacked on axis 0 (Q18, Q19); lossless on timeout (T3).

        ``out=`` buffers are filled from the received batch (the batch itself
        crosses the wire once either way).
        """
        result = decode(self._call("dequeue_many", n, **self._wire_kwargs(timeout)), self._wire)
        return self._fill(result, out) if out is not None else result

    def dequeue_up_to(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """Like :meth:`dequeue_many`, but 1..n elements once closed (Q21, Q28)."""
        result = decode(self._call("dequeue_up_to", n, **self._wire_kwargs(timeout)), self._wire)
        return self._fill(result, out) if out is not None else result

    def dequeue_available(self, n: int, timeout: float | None = None, out: Any = None) -> Any:
        """1..n elements: what can be taken now, waiting only while none can
        (as the local queue's ``dequeue_available``)."""
        result = decode(self._call("dequeue_available", n, **self._wire_kwargs(timeout)),
                        self._wire)
        return self._fill(result, out) if out is not None else result

    def _fill(self, result: Any, out: Any) -> Any:
        count = len(self._meta.dtypes)
        where = f"{self.kind} '{self.name}' out="
        if self._single and self._meta.names is None:
            res_cols, out_cols = [result], [out]
        else:
            res_cols = flatten_values(result, self._meta.names, count, where)
            out_cols = flatten_values(out, self._meta.names, count, where)
        views = []
        for res, buf in zip(res_cols, out_cols):
            k = res.shape[0]
            if not isinstance(buf, np.ndarray) or buf.shape[0] < k or buf.shape[1:] != res.shape[1:]:
                raise InvalidArgumentError(f"{where}: buffer does not fit a batch of shape {list(res.shape)}")
            buf[:k] = res
            views.append(buf[:k])
        return pack_values(views, self._meta.names)

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        """Close the queue (Q22–Q28); idempotent, never blocks."""
        self._call("close", cancel_pending_enqueues)

    def cancel(self, cause: BaseException | None = None) -> None:
        """Close and cancel every pending and later waiting call (T4)."""
        self._call("cancel", _portable_cause(cause))

    def is_closed(self) -> bool:
        """True once closed."""
        return bool(self._call("is_closed"))

    def size(self) -> int:
        """Elements stored now (Q12)."""
        return int(self._call("size"))

    def statistics(self) -> Any:
        """The host queue's :class:`feedq.QueueStatistics`."""
        return self._call("statistics")

    def wire_statistics(self) -> WireStatistics:
        """Bytes of float components sent and received through this handle,
        before and after compression."""
        return WireStatistics(self._wire[0], self._wire[1], self._wire[2])

    def __iter__(self) -> Iterator[Any]:
        """Dequeue elements until the queue is closed and empty."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return


def _portable_cause(cause: BaseException | None) -> BaseException | None:
    if cause is None:
        return None
    import pickle

    try:
        pickle.dumps(cause)
        return cause
    except Exception:  # noqa: BLE001 - unpicklable causes travel as text
        return RuntimeError(f"{type(cause).__name__}: {cause}")


def _open_queue(kind: str, kwargs: dict[str, Any], shared_name: str | None, name: str | None,
                task: Any, container: str, session: Session | None,
                compression: str | None) -> RemoteQueue:
    check_codec(compression)
    s = session or default_session()
    if shared_name is None:
        # Unshared: a unique name, reachable only through this handle (and its pickles).
        shared_name = f"{name or kind}_{uuid.uuid4().hex[:12]}"
    target = resolve_task(task, kind, shared_name, s)
    spec = {"kind": kind, "kwargs": dict(kwargs, name=name or shared_name)}
    meta = s.open(target, "queue", (container, shared_name), spec)
    return RemoteQueue(target, (container, shared_name), meta, session, compression)


def FIFOQueue(capacity: int, dtypes: Any, shapes: Any = None, names: Any = None,
              shared_name: str | None = None, name: str | None = None, *, task: Any = None,
              container: str = "", session: Session | None = None,
              compression: str | None = None) -> RemoteQueue:
    """A FIFOQueue held by a task, opened (or created) by ``shared_name``.

    Arguments as :class:`feedq.FIFOQueue`, plus:

    Args:
        task: the task holding it (``None``: the ``feedq.device`` contexts).
        container: the resource container on that task (``""`` = default).
        session: the session (``None``: the process default).
        compression: optional lossy codec for float components.

    Raises:
        InvalidArgumentError: a mismatched re-open (Q7), an unknown task.
        UnavailableError: the task's server is not running.
    """
    return _open_queue("FIFOQueue", {"capacity": capacity, "dtypes": dtypes, "shapes": shapes,
                                     "names": names}, shared_name, name, task, container,
                       session, compression)


def RandomShuffleQueue(capacity: int, min_after_dequeue: int, dtypes: Any,
                       shapes: Any = None, names: Any = None, seed: int | None = None,
                       shared_name: str | None = None, name: str | None = None, *,
                       task: Any = None, container: str = "", session: Session | None = None,
                       compression: str | None = None) -> RemoteQueue:
    """A RandomShuffleQueue held by a task (Q29–Q33); see :func:`FIFOQueue`."""
    return _open_queue("RandomShuffleQueue", {
        "capacity": capacity, "min_after_dequeue": min_after_dequeue, "dtypes": dtypes,
        "shapes": shapes, "names": names, "seed": seed}, shared_name, name, task, container,
        session, compression)


def PaddingFIFOQueue(capacity: int, dtypes: Any, shapes: Any, names: Any = None,
                     shared_name: str | None = None, name: str | None = None, *,
                     padding_values: Any = None, task: Any = None, container: str = "",
                     session: Session | None = None,
                     compression: str | None = None) -> RemoteQueue:
    """A PaddingFIFOQueue held by a task (Q34–Q38); see :func:`FIFOQueue`."""
    kwargs = {"capacity": capacity, "dtypes": dtypes, "shapes": shapes, "names": names}
    if padding_values is not None:
        kwargs["padding_values"] = padding_values
    return _open_queue("PaddingFIFOQueue", kwargs, shared_name, name, task, container, session,
                       compression)


def PriorityQueue(capacity: int, types: Any, shapes: Any = None, names: Any = None,
                  shared_name: str | None = None, name: str | None = None, *, task: Any = None,
                  container: str = "", session: Session | None = None,
                  compression: str | None = None) -> RemoteQueue:
    """A PriorityQueue held by a task (Q39–Q43); see :func:`FIFOQueue`."""
    return _open_queue("PriorityQueue", {"capacity": capacity, "types": types, "shapes": shapes,
                                         "names": names}, shared_name, name, task, container,
                       session, compression)


class Variable(_Handle):
    """A variable held by a task's container, shared by name across clients.

    The seed's "Sharing State across Sessions": the value lives on the task
    and survives the clients that created or changed it, until
    :func:`reset` clears its container.

    Usage::

        x = Variable(0.0, name="x", task="/job:ps/task:0")  # get or create
        x.assign_add(1.0)                                     # atomic on the task
        x.read()

    Args:
        initial_value: the value if the variable does not exist yet; an
            existing one keeps its value (``None``: must already exist).
        name: the shared name (``None``: a unique one).
        dtype: the dtype (default: inferred from ``initial_value``, Python
            floats as float32 like TF1's ``tf.Variable``, ints as int64).
        task, container, session: as for :func:`FIFOQueue`.

    Raises:
        FailedPreconditionError: no initial value and it does not exist.
        InvalidArgumentError: it exists with another dtype or shape, or under
            the name is another kind of resource.
    """

    _rkind = "variable"

    def __init__(self, initial_value: Any = None, name: str | None = None, dtype: Any = None, *,
                 task: Any = None, container: str = "", session: Session | None = None) -> None:
        s = session or default_session()
        if name is None:
            name = f"Variable_{uuid.uuid4().hex[:12]}"
        target = resolve_task(task, "Variable", name, s)
        init = None if initial_value is None else variable_array(initial_value, dtype)
        meta = s.open(target, "variable", (container, name),
                      {"initial_value": init, "dtype": None if dtype is None else np.dtype(dtype)})
        super().__init__(target, (container, name), session)
        self._initial = init
        self.dtype: np.dtype[Any] = meta["dtype"]
        self.shape: tuple[int, ...] = tuple(meta["shape"])

    def __reduce__(self) -> Any:
        return (_rebuild_variable, (self._task, self._key, self.dtype, self.shape))

    @property
    def name(self) -> str:
        """The shared name."""
        return self._key[1]

    def read(self) -> np.ndarray[Any, Any]:
        """The current value (a copy)."""
        return self._call("read")  # type: ignore[no-any-return]

    value = read

    def assign(self, value: Any) -> np.ndarray[Any, Any]:
        """Set the value; returns it."""
        return self._call("assign", np.asarray(value))  # type: ignore[no-any-return]

    def assign_add(self, delta: Any) -> np.ndarray[Any, Any]:
        """Add ``delta`` atomically on the task; returns the new value."""
        return self._call("assign_add", np.asarray(delta))  # type: ignore[no-any-return]

    def assign_sub(self, delta: Any) -> np.ndarray[Any, Any]:
        """Subtract ``delta`` atomically on the task; returns the new value."""
        return self._call("assign_sub", np.asarray(delta))  # type: ignore[no-any-return]

    def compare_and_set(self, expected: Any, new: Any) -> bool:
        """Set ``new`` if the value equals ``expected``, atomically; True if set."""
        ok, _ = self._call("compare_and_set", np.asarray(expected), np.asarray(new))
        return bool(ok)

    def initialize(self) -> None:
        """Assign the initial value again (TF1's ``x.initializer``)."""
        if self._initial is None:
            raise InvalidArgumentError(f"variable '{self.name}' was opened without an initial value")
        self.assign(self._initial)

    def __repr__(self) -> str:
        return f"<Variable '{self.name}' {self.dtype} {list(self.shape)} on {self._task}>"


def _rebuild_variable(task: TaskName, key: tuple[str, str], dtype: Any, shape: Any) -> Variable:
    v = Variable.__new__(Variable)
    _Handle.__init__(v, task, key, None)
    v._initial = None
    v.dtype = np.dtype(dtype)
    v.shape = tuple(shape)
    return v


class ConditionalAccumulator(_Handle):
    """A ConditionalAccumulator held by a task (spec A1–A4), shared by name.

    Same methods and semantics as :class:`feedq.queues.ConditionalAccumulator`;
    ``take_grad`` waits on the host with ``timeout=`` (T1) and a caller that
    gives up advances nothing.

    Args:
        dtype, shape, reduction_type: as the local accumulator (A1).
        shared_name: the name clients open it by (``None``: unique).
        task, container, session: as for :func:`FIFOQueue`.
    """

    _rkind = "accumulator"

    def __init__(self, dtype: Any, shape: Any = None, shared_name: str | None = None,
                 name: str | None = None, reduction_type: str = "MEAN", *, task: Any = None,
                 container: str = "", session: Session | None = None) -> None:
        s = session or default_session()
        if shared_name is None:
            shared_name = f"{name or 'conditional_accumulator'}_{uuid.uuid4().hex[:12]}"
        # Validate here too, so misuse fails before any remote call (A1, X9).
        from feedq.queues import ConditionalAccumulator as Local

        Local(dtype, shape, reduction_type=reduction_type)
        target = resolve_task(task, "ConditionalAccumulator", shared_name, s)
        s.open(target, "accumulator", (container, shared_name),
               {"dtype": np.dtype(dtype), "shape": None if shape is None else list(shape),
                "reduction_type": reduction_type})
        super().__init__(target, (container, shared_name), session)
        self.dtype = np.dtype(dtype)

    def __reduce__(self) -> Any:
        return (_rebuild_accumulator, (self._task, self._key, self.dtype))

    def apply_grad(self, grad: Any, local_step: int = 0) -> bool:
        """Add a gradient unless stale (A2); False when dropped."""
        return bool(self._call("apply_grad", np.asarray(as_torch_free_array(grad, "grad")),
                               int(local_step)))

    def take_grad(self, num_required: int, timeout: float | None = None) -> np.ndarray[Any, Any]:
        """Wait for ``num_required`` gradients and return their mean or sum (A3)."""
        return self._call("take_grad", int(num_required), timeout=timeout)  # type: ignore[no-any-return]

    def set_global_step(self, new_global_step: int) -> None:
        """Set the global step, also lower (A4)."""
        self._call("set_global_step", int(new_global_step))

    def num_accumulated(self) -> int:
        """Gradients accumulated since the last take (A4)."""
        return int(self._call("num_accumulated"))

    def global_step(self) -> int:
        """The current global step."""
        return int(self._call("global_step"))

    def statistics(self) -> Any:
        """The host accumulator's :class:`feedq.queues.AccumulatorStatistics`."""
        return self._call("statistics")

    def __repr__(self) -> str:
        return f"<ConditionalAccumulator '{self.shared_name}' on {self._task}>"


def _rebuild_accumulator(task: TaskName, key: tuple[str, str], dtype: Any) -> ConditionalAccumulator:
    a = ConditionalAccumulator.__new__(ConditionalAccumulator)
    _Handle.__init__(a, task, key, None)
    a.dtype = np.dtype(dtype)
    return a
