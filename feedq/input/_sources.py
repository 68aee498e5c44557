"""Sources: what a batcher evaluates, and the checks on what it is given.

A batcher's ``tensors`` argument (a stage, a callable, or a list or dict of
stages, callables and constant arrays) becomes one :class:`Source` per input
list; a runner thread calls ``source.evaluate()`` to get one element, or a
block of rows, as a list of components. ``keep_input`` (B12) is applied here
too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from feedq._core.arrays import as_dtype, as_torch_free_array
from feedq.input._sparse import is_sparse, is_sparse_spec, sparse_dtype
from feedq.input._stage import Stage
from feedq.queues import STRING

__all__: list[str] = []


def as_array(value: Any, what: str) -> np.ndarray[Any, Any]:
    value = as_torch_free_array(value, what)
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, bytes)) for v in value):
            arr = np.empty(len(value), dtype=object)
            arr[:] = [v.encode() if isinstance(v, str) else v for v in value]
            return arr
        arr = np.asarray(value)
    if arr.dtype.kind in "SU":
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1)]
        return out
    return arr



class _Source:
    """One input of a batcher: evaluated by a runner thread, it yields either
    one element or a batch of rows (``many``), as a list of components."""

    def __init__(self, tensors: Any, enqueue_many: bool, dtypes: Any, shapes: Any, block: int) -> None:
        self.enqueue_many = enqueue_many
        self.block = block
        self.upstream: list[Stage] = []
        self.names: list[str] | None = None
        self.single = False
        self.dtypes: list[np.dtype[Any]] = []
        self.shapes: list[tuple[int | None, ...] | None] | None = None
        # Per component: True for a sparse one (see _sparse); its rank is the
        # length of its shape, whose dims may be None.
        self.sparse: list[bool] = []
        self.evaluate: Callable[[], tuple[list[Any], bool]]
        if isinstance(tensors, Stage):
            self._init_stage(tensors, enqueue_many)
        elif callable(tensors):
            self._init_callable(tensors, dtypes)
        elif isinstance(tensors, Mapping):
            self.names = sorted(tensors)
            self._init_leaves([tensors[k] for k in self.names], dtypes)
        elif isinstance(tensors, (list, tuple)):
            if not tensors:
                raise ValueError("batch: tensors must not be empty")
            self.single = len(tensors) == 1  # B2: a one-element list gives a bare tensor
            self._init_leaves(list(tensors), dtypes)
        else:
            raise TypeError(
                "batch: tensors must be a Stage, a callable, or a list/dict of stages, callables and arrays; "
                f"got {type(tensors).__name__}"
            )
        if shapes is not None:
            self.shapes = list(_normalize_shapes(shapes, len(self.dtypes)))
        if self.shapes is None:
            raise ValueError(
                "batch: shapes are unknown (a callable input): pass shapes=[...] (B3)"
            )
        if not self.sparse:
            self.sparse = [False] * len(self.dtypes)
        for i, (sp, shape) in enumerate(zip(self.sparse, self.shapes)):
            if sp and not shape:
                raise ValueError(
                    f"batch: sparse component {i} needs a shape of rank >= 1 (e.g. [None])"
                )

    def _init_stage(self, stage: Stage, many: bool) -> None:
        self.upstream = [stage]
        self.names = stage.names
        # B2: one component gives a bare tensor, as a one-element list does in TF.
        self.single = stage._single or (stage.names is None and len(stage.dtypes) == 1)
        self.dtypes = stage.dtypes
        self.sparse = stage._sparse_flags()
        if stage.batch_size is None:
            self.shapes = [None if s is None else tuple(s) for s in stage.shapes]
            if many:
                # Each element is itself a batch: rows are one level down.
                self.shapes = [None if s is None or not s else tuple(s[1:]) for s in self.shapes]
                self.evaluate = lambda: (stage._raw(None), True)
            else:
                k = self.block

                def block_of_stage() -> tuple[list[Any], bool]:
                    return stage._stream(k), True

                self.evaluate = block_of_stage
        else:
            if many:
                self.shapes = [None if s is None else tuple(s) for s in stage.shapes]
                self.evaluate = lambda: (stage._raw(None), True)
            else:
                self.shapes = [None if s is None else tuple(s) for s in stage.output_shapes]
                self.evaluate = lambda: (stage._raw(None), False)

    def _init_callable(self, fn: Callable[[], Any], dtypes: Any) -> None:
        if dtypes is None:
            raise ValueError(
                "batch: pass dtypes= (and shapes=) when tensors is a callable; feedq does not "
                "run it to find out"
            )
        if isinstance(dtypes, Mapping):
            self.names = sorted(dtypes)
            declared = [dtypes[k] for k in self.names]
        elif isinstance(dtypes, (list, tuple)):
            declared = list(dtypes)
            self.single = len(declared) == 1  # B2: a one-element list gives a bare tensor
        else:
            declared = [dtypes]
            self.single = True
        self.dtypes = [_component_dtype(d) for d in declared]
        self.sparse = [is_sparse_spec(d) for d in declared]
        self.shapes = None
        names, single, many = self.names, self.single, self.enqueue_many

        def evaluate() -> tuple[list[Any], bool]:
            value = fn()
            if names is not None:
                if not isinstance(value, Mapping) or sorted(value) != names:
                    raise ValueError(f"batch: the callable must return a dict with keys {names}, got {value!r:.80}")
                return [value[k] for k in names], many
            if single:
                if isinstance(value, (list, tuple)) and len(value) == 1:
                    return list(value), many
                return [value], many
            if not isinstance(value, (list, tuple)):
                # ValueError as the other shape mismatches of a callable's result.
                raise ValueError(  # noqa: TRY004
                    f"batch: the callable must return a list of {len(self.dtypes)} components"
                )
            return list(value), many

        self.evaluate = evaluate

    def _init_leaves(self, leaves: list[Any], dtypes: Any) -> None:
        getters: list[Callable[[], Any]] = []
        found: list[Any] = []
        shapes: list[tuple[int | None, ...] | None] = []
        sparse: list[bool] = []
        for i, leaf in enumerate(leaves):
            shape: tuple[int | None, ...] | None
            if isinstance(leaf, Stage):
                if len(leaf.dtypes) != 1:
                    raise ValueError("batch: a stage inside a list must have exactly one component")
                self.upstream.append(leaf)
                getters.append(functools.partial(_first_component, leaf))
                found.append(leaf.dtypes[0])
                sparse.append(leaf._sparse_flags()[0])
                shape = leaf.output_shapes[0]
            elif callable(leaf):
                if not (isinstance(dtypes, (list, tuple)) and len(dtypes) == len(leaves)):
                    raise ValueError("batch: pass dtypes= (one per entry) when an entry of tensors is a callable")
                getters.append(leaf)
                found.append(_component_dtype(dtypes[i]))
                sparse.append(is_sparse_spec(dtypes[i]))
                shape = None
            elif is_sparse(leaf):
                getters.append(functools.partial(_constant, leaf))
                values = np.asarray(leaf.values)
                found.append(STRING if values.dtype.kind in "OSU" else values.dtype)
                sparse.append(True)
                shape = (None,) * len(np.asarray(leaf.dense_shape))
            else:
                arr = as_array(leaf, "batch")
                getters.append(functools.partial(_constant, arr))
                found.append(STRING if arr.dtype == object else arr.dtype)
                sparse.append(False)
                shape = tuple(arr.shape)
            if shape is not None and self.enqueue_many:
                shape = shape[1:] if shape else None  # rows are one level down
            shapes.append(shape)
        self.dtypes = [as_dtype(d) for d in found]
        self.sparse = sparse
        self.shapes = None if any(s is None for s in shapes) else shapes
        many = self.enqueue_many

        def evaluate_leaves() -> tuple[list[Any], bool]:
            return [g() for g in getters], many

        self.evaluate = evaluate_leaves


def _component_dtype(declared: Any) -> np.dtype[Any]:
    """A ``dtypes=`` entry as a dtype; a sparse one (VarLenFeature) gives its values' dtype."""
    return sparse_dtype(declared) if is_sparse_spec(declared) else as_dtype(declared)


def _block_size(batch_size: int) -> int:
    """Most elements a batcher thread moves from an element stage at once."""
    return max(int(batch_size), 4096)


def _first_component(stage: Stage) -> Any:
    return stage._raw(None)[0]


def _constant(value: Any) -> Any:
    return value


def _normalize_shapes(shapes: Any, count: int) -> list[tuple[int | None, ...]]:
    if isinstance(shapes, Mapping):
        shapes = [shapes[k] for k in sorted(shapes)]
    shapes = list(shapes)
    if shapes and all(d is None or isinstance(d, (int, np.integer)) for d in shapes):
        shapes = [shapes]  # a flat list is one shape (Q2)
    if len(shapes) != count:
        raise ValueError(f"batch: shapes must have one shape per component: {len(shapes)} != {count}")
    return [tuple(None if d is None else int(d) for d in s) for s in shapes]


def _check_spec(sources: list[_Source]) -> None:
    """B9: every list of a *_join call must agree in dtypes, shapes and keys."""
    first = sources[0]
    for s in sources[1:]:
        if s.names != first.names:
            raise ValueError(f"batch_join: all inputs need the same keys: {first.names} vs {s.names}")
        if len(s.dtypes) != len(first.dtypes):
            raise ValueError("batch_join: all inputs need the same number of components")
        for a, b in zip(first.dtypes, s.dtypes):
            if a != b:
                an = "string" if a is STRING else str(a)
                bn = "string" if b is STRING else str(b)
                raise TypeError(f"Expected types to be consistent: {an} vs. {bn}.")
        if first.shapes != s.shapes:
            raise ValueError(f"batch_join: shapes differ between inputs: {first.shapes} vs {s.shapes}")
        if first.sparse != s.sparse:
            raise ValueError(
                f"batch_join: sparse components differ between inputs: {first.sparse} vs {s.sparse}"
            )


def check_keep_input(keep_input: Any, enqueue_many: bool) -> None:
    """B12: reject a constant ``keep_input`` that can never be valid, when the
    batcher is built rather than at its first evaluation.

    A constant must be a scalar bool, or, with ``enqueue_many=True``, a bool
    vector (one decision per row). A callable can only be checked on its
    results (by :func:`_apply_keep`).

    Raises:
        ValueError: a non-scalar with ``enqueue_many=False``, or anything but
            a scalar or a bool vector with ``enqueue_many=True``.
    """
    if keep_input is None or callable(keep_input):
        return
    keep = np.asarray(keep_input)
    if not enqueue_many:
        if keep.ndim != 0:
            raise ValueError(
                "maybe_batch: keep_input must be a scalar bool when enqueue_many=False, "
                f"got shape {list(keep.shape)}"
            )
        return
    if keep.ndim != 0 and (keep.dtype != np.bool_ or keep.ndim != 1):
        raise ValueError(
            "maybe_batch: keep_input must be a bool vector when enqueue_many=True, "
            f"got dtype {keep.dtype} and shape {list(keep.shape)}"
        )


def _apply_keep(
    keep_input: Any, values: list[Any], many: bool, per_element: bool
) -> tuple[list[Any], bool] | None:
    """B12: keep_input is a bool, or a callable of the evaluated components
    returning a bool (one element) or a bool vector (a batch, with
    ``enqueue_many=True``).

    ``per_element``: the user asked for ``enqueue_many=False`` but the rows
    arrive in a block (a stage read batch-first): a callable is still asked
    about one element at a time, as B12 promises.
    """
    if per_element and many and callable(keep_input):
        rows = len(values[0])
        decisions = []
        for i in range(rows):
            keep_one = keep_input([v[i] for v in values])
            if not isinstance(keep_one, (bool, np.bool_)) and np.ndim(keep_one) != 0:
                raise ValueError("maybe_batch: keep_input must be a scalar bool when enqueue_many=False")
            decisions.append(bool(keep_one))
        mask = np.array(decisions, dtype=bool)
        return [np.asarray(v)[mask] for v in values], many
    keep = keep_input(values) if callable(keep_input) else keep_input
    if not many:
        if not isinstance(keep, (bool, np.bool_)) and np.ndim(keep) != 0:
            raise ValueError("maybe_batch: keep_input must be a scalar bool when enqueue_many=False")
        return (values, many) if bool(keep) else None
    mask = np.asarray(keep)
    if mask.ndim == 0:
        return (values, many) if bool(mask) else None
    if mask.dtype != np.bool_ or mask.ndim != 1:
        raise ValueError("maybe_batch: keep_input must be a bool vector when enqueue_many=True")
    return [np.asarray(v)[mask] for v in values], many
