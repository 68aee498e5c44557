"""Element specs: dtypes, shapes and names of queue components, and the
conversion of user values into validated columns.

A queue element is a tuple of *components*. Each component has a dtype and a
shape that is fully known (``(3, 2)``), partially known (``(None, 2)``,
PaddingFIFOQueue only) or unknown (``None``: the queue was built without
``shapes``). Values are converted without lossy casting (spec Q8): exact
dtypes and NumPy ``safe`` casts are accepted, anything else is a
``TypeError``. Python ints go into any integer dtype that holds them and any
float dtype; Python floats into float dtypes only.

Strings are stored as ``STRING`` (``np.dtype(object)``) arrays whose items are
``bytes``; ``str`` values are encoded as UTF-8.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedq._core.arrays import (
    NUMERIC_KINDS,
    STRING,
    as_dtype,
    as_torch_free_array,
    flatten_values,
    pack_values,
)
from feedq.errors import InvalidArgumentError

__all__ = [
    "STRING",
    "Component",
    "Count",
    "ElementCodec",
    "as_count",
    "as_dtype",
    "as_torch_free_array",
    "check_reopen_spec",
    "flatten_values",
    "normalize_dtypes",
    "normalize_names",
    "normalize_shapes",
    "pack_values",
]

def _shape_str(shape: Sequence[int | None]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


@dataclass(frozen=True)
class Component:
    """One component of a queue element.

    Attributes:
        index: position in the element.
        dtype: NumPy dtype (``STRING`` for strings).
        shape: the shape, ``None`` dims allowed; ``None`` for unknown.
    """

    index: int
    dtype: np.dtype[Any]
    shape: tuple[int | None, ...] | None

    def __post_init__(self) -> None:
        dense = self.shape is not None and all(d is not None for d in self.shape)
        object.__setattr__(self, "dense", dense)
        # Fast-path facts, computed once: the per-element path checks these
        # before falling back to the general conversion.
        numeric = dense and self.dtype is not STRING
        object.__setattr__(self, "_numeric", numeric)
        object.__setattr__(self, "_scalar", numeric and self.shape == ())
        kind = self.dtype.kind
        if kind in "iu":
            info = np.iinfo(self.dtype)
            object.__setattr__(self, "_bounds", (int(info.min), int(info.max)))
        else:
            object.__setattr__(self, "_bounds", None)

    #: True when the shape is fully known: stored in a columnar buffer.
    dense: bool = field(init=False, repr=False, compare=False)

    # -- conversion --------------------------------------------------------

    def _to_array(self, value: Any, where: str) -> np.ndarray[Any, Any]:
        value = as_torch_free_array(value, where)
        dtype = self.dtype
        if dtype is STRING:
            return _to_string_array(value, where)
        if isinstance(value, (np.ndarray, np.generic)):
            arr = np.asarray(value)
            if arr.dtype == dtype:
                return arr
            if arr.dtype.kind in NUMERIC_KINDS and np.can_cast(arr.dtype, dtype, "safe"):
                return arr.astype(dtype)
            if arr.dtype.kind in "iu" and dtype.kind in "iu":
                # Narrowing integers is lossless when every value fits.
                return _checked_int_cast(arr, dtype, where)
            raise TypeError(
                f"{where} has dtype {dtype}; cannot convert a value of dtype {arr.dtype} "
                f"without loss (convert it explicitly, e.g. .astype(np.{dtype}))"
            )
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # ragged nested lists
            raise InvalidArgumentError(f"{where}: cannot convert {_short(value)} to an array: {exc}") from exc
        if arr.size == 0 and arr.dtype.kind in "fO":
            return arr.astype(dtype)  # an empty list has no dtype to respect
        kind = arr.dtype.kind
        if kind == dtype.kind or (kind == "b" and dtype.kind == "b"):
            if kind in "iu":
                return _checked_int_cast(arr, dtype, where)
            return arr.astype(dtype, copy=False)
        if kind in "iu" and dtype.kind in "iu":
            return _checked_int_cast(arr, dtype, where)
        if kind in "iu" and dtype.kind in "fc":
            return arr.astype(dtype)
        if kind == "f" and dtype.kind in "fc":
            return arr.astype(dtype)
        raise TypeError(
            f"{where} has dtype {dtype}; cannot convert {_describe(value)} without loss"
        )

    def convert_one(self, value: Any, where: str) -> Any:
        """Convert one element's value of this component.

        Returns an array of the element's shape (or, on the fast path, a
        Python scalar that the dense column stores without loss). Ragged
        values are copied, since they are stored by reference.
        """
        if self._numeric:  # type: ignore[attr-defined]
            t = type(value)
            if t is np.ndarray:
                if value.dtype == self.dtype and value.shape == self.shape:
                    return value
            elif self._scalar:  # type: ignore[attr-defined]
                if t is self.dtype.type:
                    return value  # a NumPy scalar of exactly this dtype
                bounds = self._bounds  # type: ignore[attr-defined]
                if t is int and bounds is not None and bounds[0] <= value <= bounds[1]:
                    return value
                if t is float and self.dtype.kind == "f":
                    return value
        arr = self._to_array(value, where)
        shape = self.shape
        if shape is not None and not _shape_matches(arr.shape, shape):
            raise InvalidArgumentError(
                f"Shape mismatch in tuple component {self.index}. "
                f"Expected {_shape_str(shape)}, got {_shape_str(arr.shape)}"
            )
        if not self.dense:
            # Stored by reference: copy so later changes by the caller do not
            # reach the queue.
            return np.array(arr, copy=True)
        if arr.ndim == 0 and self.dtype is STRING:
            return arr[()]  # the bytes object itself: a 0-d array would be stored as is
        return arr

    def convert_many(self, value: Any, where: str) -> np.ndarray[Any, Any]:
        """Convert a batch (leading dimension = element count).

        Returns a dense array ``(k,) + shape`` for dense components, or an
        object array of ``k`` per-element arrays for ragged ones.
        """
        if (
            self._numeric  # type: ignore[attr-defined]
            and type(value) is np.ndarray
            and value.dtype == self.dtype
            and value.shape[1:] == self.shape
            and value.ndim
        ):
            return value
        arr = self._checked_batch(value, where)
        if self.dense:
            return arr
        # Ragged rows are stored by reference, one array each: copy the batch
        # once (later changes by the caller do not reach the queue) and hand
        # its rows over as views -- no copy and no Python step per row. (The
        # None makes np.array build a 1-D object array of the rows.)
        rows = list(np.array(arr, copy=True))
        rows.append(None)
        out: np.ndarray[Any, Any] = np.array(rows, dtype=object)[:-1]
        return out

    def convert_block(self, value: Any, where: str) -> np.ndarray[Any, Any]:
        """Convert a batch of a component without a fixed shape into one
        new C-contiguous array ``(k,) + row shape`` (checked as
        :meth:`convert_many` checks it): the queue's own copy, whose rows
        are the elements (all of the batch's row shape, Q38)."""
        return np.array(self._checked_batch(value, where), copy=True, order="C")

    def _checked_batch(self, value: Any, where: str) -> np.ndarray[Any, Any]:
        """A batch as an array of this dtype, with a leading batch dimension
        and rows of this shape (Q10)."""
        arr = self._to_array(value, where)
        if arr.ndim == 0:
            raise InvalidArgumentError(
                f"{where}: enqueue_many requires a leading batch dimension, got a scalar"
            )
        shape = self.shape
        if shape is not None and not _shape_matches(arr.shape[1:], shape):
            raise InvalidArgumentError(
                f"Shape mismatch in tuple component {self.index}. "
                f"Expected {_shape_str((arr.shape[0], *shape))}, got {_shape_str(arr.shape)}"
            )
        return arr



class ElementCodec:
    """Converts between user values and a queue's columns. A queue has one
    (``QueueBase._codec``): it knows the components, not the storage.

    Args:
        kind: the queue kind, for messages ("FIFOQueue").
        name: the queue's name, for messages.
        components: the element's components.
        names: component names (Q3), or ``None``.
        wheres: how messages name each component.
        pad: stacks the rows of a component without a fixed shape
            (PaddingFIFOQueue, Q37); ``None`` where every shape is fixed.
    """

    __slots__ = ("components", "desc", "kind", "name", "names", "pad", "single", "wheres")

    def __init__(
        self,
        kind: str,
        name: str,
        components: list[Component],
        names: list[str] | None,
        wheres: list[str],
        pad: Callable[[Component, list[np.ndarray[Any, Any]]], np.ndarray[Any, Any]] | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.components = components
        self.names = names
        self.wheres = wheres
        self.single = names is None and len(components) == 1
        self.desc = f"{kind} '{name}'"
        self.pad = pad

    def convert_row(self, vals: Any) -> list[Any]:
        """One element as converted component values (Q3, Q8–Q10)."""
        comps = self.components
        if self.single and not isinstance(vals, (list, tuple, dict)):
            return [comps[0].convert_one(vals, self.wheres[0])]
        values = flatten_values(vals, self.names, len(comps), self.desc)
        wheres = self.wheres
        return [comp.convert_one(value, wheres[comp.index]) for comp, value in zip(comps, values)]

    def convert_batch(self, vals: Any, rows: bool = False) -> list[np.ndarray[Any, Any]]:
        """A batch as columns; with ``rows``, a ragged component may also be
        given as a sequence of per-element values (see ``QueueBase.put_back``)."""
        comps = self.components
        if self.single and not isinstance(vals, (list, tuple, dict)):
            values = [vals]
        else:
            values = flatten_values(vals, self.names, len(comps), self.desc)
        wheres = self.wheres
        cols = []
        for comp, value in zip(comps, values):
            if (
                type(value) is np.ndarray
                and comp._numeric  # type: ignore[attr-defined]
                and value.dtype is comp.dtype
                and value.ndim
                and value.shape[1:] == comp.shape
            ):
                cols.append(value)  # already a column (Component.convert_many, inline)
                continue
            if comp.dense:
                col = comp.convert_many(value, wheres[comp.index])
            else:
                col = self.ragged_column(comp, value, wheres[comp.index], rows)
            cols.append(col)
        n = cols[0].shape[0]
        for i, col in enumerate(cols):
            if col.shape[0] != n:
                raise InvalidArgumentError(
                    f"{self.desc}: All input tensors must have the same size in "
                    f"the 0th dimension. Component 0 has {n}, component {i} has {col.shape[0]}"
                )
        return cols

    def ragged_column(self, comp: Component, value: Any, where: str, rows: bool) -> np.ndarray[Any, Any]:
        """The stored column of a component without a fixed shape (see
        :meth:`convert_batch`): here a 1-D object array holding each
        element's own array."""
        if rows and (
            isinstance(value, (list, tuple))
            or (isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1)
        ):
            col = np.empty(len(value), dtype=object)
            for i, v in enumerate(value):
                col[i] = comp.convert_one(v, where)
            return col
        return comp.convert_many(value, where)

    def first_row(self, chunk: list[np.ndarray[Any, Any]]) -> list[Any]:
        """The element that row 0 of taken columns holds, as ``dequeue``
        returns its components."""
        return [c[0] for c in chunk]

    def row_to_cols(self, row: list[Any]) -> list[np.ndarray[Any, Any]]:
        """One element's converted component values as one-row columns."""
        cols = []
        for comp, value in zip(self.components, row):
            if comp.dense and not (comp.dtype is STRING and comp.shape == ()):
                col = np.asarray(value, dtype=comp.dtype)[np.newaxis]
            else:
                col = np.empty(1, dtype=object)
                col[0] = value
            cols.append(col)
        return cols

    def check_out(self, out: Any, n: int) -> list[np.ndarray[Any, Any]]:
        """The ``out=`` buffers of a batch dequeue of ``n``, validated."""
        where = f"{self.desc} out="
        bufs = flatten_values(out, self.names, len(self.components), where)
        result = []
        for comp, buf in zip(self.components, bufs):
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

    def assemble(
        self, chunks: list[list[np.ndarray[Any, Any]]], count: int, outs: list[np.ndarray[Any, Any]] | None,
    ) -> Any:
        """The batch a dequeue returns for the taken ``chunks`` (columns each)."""
        if outs is not None:
            return pack_values([buf[:count] for buf in outs], self.names)
        cols = []
        for i, comp in enumerate(self.components):
            parts = [chunk[i] for chunk in chunks]
            if comp.dense:
                if len(parts) == 1:
                    col = parts[0]
                elif parts:
                    col = np.concatenate(parts)
                else:
                    assert comp.shape is not None
                    col = np.empty((0, *comp.shape), dtype=comp.dtype)
            elif self.pad is not None:
                col = self.pad(comp, parts)
            else:  # pragma: no cover - guarded in QueueBase._take_path
                raise InvalidArgumentError(f"{self.desc}: component {comp.index} has no fixed shape")
            cols.append(col)
        return pack_values(cols, self.names)


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = 6
_SHORT.maxlevel = 3
_SHORT.maxother = _SHORT.maxstring = 60


def _short(value: Any) -> str:
    """A repr of ``value`` of at most a few hundred characters (a message
    about a block of 20,000 rows must not print them all)."""
    text = _SHORT.repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} {value!r}"[:120]
    return f"{type(value).__name__} {value!r}"[:120]


def _checked_int_cast(arr: np.ndarray[Any, Any], dtype: np.dtype[Any], where: str) -> np.ndarray[Any, Any]:
    if arr.dtype == dtype:
        return arr
    if arr.size:
        info = np.iinfo(dtype)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise TypeError(f"{where} has dtype {dtype}; value {hi if hi > info.max else lo} is out of range")
    return arr.astype(dtype)


def _to_string_array(value: Any, where: str) -> np.ndarray[Any, Any]:
    if isinstance(value, np.ndarray) and value.dtype == STRING:
        flat = value.reshape(-1)
        if all(type(x) is bytes for x in flat):
            return value
        arr = value
    elif isinstance(value, (bytes, str, np.bytes_, np.str_)):
        scalar: np.ndarray[Any, Any] = np.empty((), dtype=object)
        scalar[()] = _as_bytes(value, where)
        return scalar
    else:
        try:
            arr = np.asarray(value, dtype=object)
        except ValueError as exc:
            raise InvalidArgumentError(f"{where}: cannot convert {_short(value)} to an array: {exc}") from exc
    out: np.ndarray[Any, Any] = np.empty(arr.shape, dtype=object)
    flat_out = out.reshape(-1)
    for i, item in enumerate(arr.reshape(-1)):
        flat_out[i] = _as_bytes(item, where)
    return out


def _as_bytes(item: Any, where: str) -> bytes:
    if type(item) is bytes:
        return item
    if isinstance(item, (bytes, np.bytes_)):
        return bytes(item)
    if isinstance(item, (str, np.str_)):
        return str(item).encode("utf-8")
    raise TypeError(f"{where} is a string component; cannot convert {_describe(item)}")


def _shape_matches(actual: tuple[int, ...], declared: tuple[int | None, ...]) -> bool:
    if len(actual) != len(declared):
        return False
    return all(d is None or d == a for a, d in zip(actual, declared))


# -- construction-time normalisation ------------------------------------------


#: An element count or index: an int, a NumPy integer or a 0-d integer array.
Count = int | np.integer[Any] | np.ndarray[Any, Any]


def as_count(n: Any, what: str = "n") -> int:
    """An element count or index: an int, NumPy integer or 0-d integer array
    (not a bool or a float)."""
    if type(n) is int:
        return n
    if isinstance(n, np.ndarray) and n.ndim == 0 and n.dtype.kind in "iu":
        return int(n)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {n!r}")
    return int(n)


def normalize_dtypes(dtypes: Any) -> list[np.dtype[Any]]:
    """Q1: one dtype or a list of dtypes, stored as a list."""
    if isinstance(dtypes, (list, tuple)):
        if not dtypes:
            raise ValueError("a queue needs at least one component dtype")
        return [as_dtype(d) for d in dtypes]
    return [as_dtype(dtypes)]


def _is_dim(x: Any) -> bool:
    return x is None or (isinstance(x, (int, np.integer)) and not isinstance(x, bool))


def normalize_shapes(
    shapes: Any, count: int, *, partial: bool
) -> list[tuple[int | None, ...] | None]:
    """Q2/Q34: normalise ``shapes`` into one shape per component.

    A flat list of ints/None is ONE shape (so ``[]`` is one scalar component).
    Without ``partial`` every shape must be fully defined; with it (the
    PaddingFIFOQueue case) a list of shapes of known rank is required.
    """
    if partial and (
        not isinstance(shapes, (list, tuple))
        or not shapes
        or any(_is_dim(s) for s in shapes)
    ):
        raise ValueError("When providing partial shapes, a list of shapes must be provided.")
    if shapes is None:
        return [None] * count
    if not isinstance(shapes, (list, tuple)):
        raise TypeError(f"shapes must be a list of shapes, got {type(shapes).__name__}")
    if all(_is_dim(s) for s in shapes):
        shapes = [shapes]
    result: list[tuple[int | None, ...] | None] = []
    for s in shapes:
        if s is None:
            raise ValueError("All shapes must be fully defined: got an unknown shape (None)")
        if not isinstance(s, (list, tuple)) or not all(_is_dim(d) for d in s):
            raise TypeError(f"a shape must be a list of ints (or None), got {s!r}")
        dims = tuple(None if d is None else int(d) for d in s)
        if any(d is not None and d < 0 for d in dims):
            raise ValueError(f"negative dimension in shape {list(s)}")
        if not partial and any(d is None for d in dims):
            raise ValueError(f"All shapes must be fully defined: {_shape_str(dims)}")
        result.append(dims)
    if len(result) != count:
        raise ValueError(f"shapes must have the same length as dtypes: {len(result)} != {count}")
    return result


def normalize_names(names: Any, count: int) -> list[str] | None:
    """Q3: component names, one per dtype."""
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if len(names) != count:
        raise ValueError(f"names must have the same length as dtypes: {len(names)} != {count}")
    if not all(isinstance(n, str) for n in names):
        raise TypeError("names must be strings")
    if len(set(names)) != len(names):
        raise ValueError(f"names must be unique: {names}")
    return [str(n) for n in names]


#: What a re-open compares (Q7): kind, capacity, components, names, kind arguments.
QueueSpecTuple = tuple[str, int, list[Component], "list[str] | None", dict[str, Any]]


def check_reopen_spec(prefix: str, have: QueueSpecTuple, requested: QueueSpecTuple) -> None:
    """Q7: raise ``InvalidArgumentError`` (``prefix`` starts the message)
    unless a re-open requests the queue it finds.

    A ``seed`` of ``None`` in the request matches any seed: TF checks the
    seeds only when the re-open gives some (its seed pair (0, 0)).
    """
    kind, capacity, components, names, args = have
    r_kind, r_capacity, r_components, r_names, r_args = requested
    if r_kind != kind:
        raise InvalidArgumentError(f"{prefix} is a {kind} but a {r_kind} was requested")
    r_capacity = r_capacity if r_capacity >= 0 else -1
    if r_capacity != capacity:
        raise InvalidArgumentError(
            f"{prefix} has capacity {capacity} but requested capacity was {r_capacity}"
        )
    mine = [c.dtype for c in components]
    theirs = [c.dtype for c in r_components]
    if mine != theirs:
        raise InvalidArgumentError(
            f"{prefix} has component types {_dtypes_str(mine)} "
            f"but requested component types were {_dtypes_str(theirs)}"
        )
    if [c.shape for c in components] != [c.shape for c in r_components]:
        raise InvalidArgumentError(
            f"{prefix} has component shapes {[c.shape for c in components]} "
            f"but requested component shapes were {[c.shape for c in r_components]}"
        )
    if r_names != names:
        raise InvalidArgumentError(f"{prefix} has names {names} but requested names were {r_names}")
    for key, value in r_args.items():
        if key == "seed" and value is None:
            continue
        if args.get(key) != value:
            raise InvalidArgumentError(
                f"{prefix} has {key} {args.get(key)} but requested {key} was {value}"
            )


def _dtypes_str(dtypes: list[np.dtype[Any]]) -> str:
    return "[" + ", ".join("string" if d is STRING else str(d) for d in dtypes) + "]"
