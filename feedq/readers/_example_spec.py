"""Feature configurations for the Example parsers (P1-P4) and what they return.

The user-facing classes mirror TensorFlow's: :class:`FixedLenFeature`,
:class:`VarLenFeature`, :class:`FixedLenSequenceFeature`,
:class:`SparseFeature` and :class:`RaggedFeature` (with its partition
classes), and the results :class:`SparseTensorValue` and
:class:`RaggedTensorValue` (TF1's ``tf.SparseTensorValue`` and
``tf.compat.v1.ragged.RaggedTensorValue``).

Internally a request compiles to a :class:`_Plan`: the raw *columns* to read
(one :class:`_Spec` per feature key and reading: fixed, var or seq) and, per
output, how to build it from them. SparseFeature and RaggedFeature read
their value, index and partition keys as var columns, shared with a
VarLenFeature of the same key.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Self

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers._example_wire import _BYTES, _FLOAT, _INT64, _KIND_DTYPE, _KIND_NAME

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "RaggedFeature",
    "RaggedTensorValue",
    "SparseFeature",
    "SparseTensorValue",
    "VarLenFeature",
]


class FixedLenFeature(NamedTuple):
    """A feature with a fixed number of values (P2): output ``[B] + shape``.

    Attributes:
        shape: the output shape per record: a list of ints (``[]`` = scalar)
            or one int (``2`` = ``[2]``). None is a ValueError when parsing
            ("Missing shape for feature ...").
        dtype: float32, int64 or string.
        default_value: used when the feature is missing; None = required.
    """

    shape: Any
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A variable-length feature (P3), returned as a :class:`SparseTensorValue`.

    Attributes:
        dtype: float32, int64 or string.
    """

    dtype: Any


class _FixedLenSequenceFields(NamedTuple):
    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class FixedLenSequenceFeature(_FixedLenSequenceFields):
    """Variable count of fixed-shape groups (P4): output ``[B, max_len] + shape``.

    In a SequenceExample's feature lists it is one group per time step.

    Attributes:
        shape: the shape of one group (a list of positive ints, or one int).
        dtype: float32, int64 or string.
        allow_missing: must be True in parse_example; in the sequence
            parsers False makes a missing feature list an error.
        default_value: the padding value, one value (default 0 or ``b""``).
            Any other size constructs, as in TF, and parsing refuses it with
            TF's ``InvalidArgumentError`` ("Input to reshape is a tensor with
            0 values, but the requested shape has 1" for ``[]``; TF's own
            ``testSerializedContainingVarLenDense`` expects that error).

    Raises:
        ValueError: at construction, a dimension that is 0 or negative (a
            group must hold values; TF fails only when parsing, or crashes).
    """

    __slots__ = ()

    def __new__(
        cls, shape: Any, dtype: Any, allow_missing: bool = False, default_value: Any = None
    ) -> Self:
        dims = _dims(shape)
        if dims is not None and any(d is not None and d <= 0 for d in dims):
            raise ValueError(
                f"FixedLenSequenceFeature shape {shape!r}: every dimension must be positive"
            )
        return super().__new__(cls, shape, dtype, allow_missing, default_value)


class SparseFeature(NamedTuple):
    """A sparse tensor stored as index and value features (TF's ``SparseFeature``).

    The record's ``value_key`` feature holds the values; each ``index_key``
    feature holds, for every value, its coordinate in one dimension. Output:
    a :class:`SparseTensorValue` with indices ``[N, 1 + rank]`` (record,
    coordinates...), dense shape ``[B] + size``; ``parse_single_example``
    drops the record column and dimension.

    Attributes:
        index_key: one key, or a list of keys (one per dimension); int64.
        value_key: the values' key.
        dtype: the values' dtype: float32, int64 or string.
        size: the dense shape: an int for one index key, a list of the same
            length as ``index_key`` otherwise. Every index must be in
            ``[0, size)``: feedq checks it (TF documents it, does not check).
        already_sorted: True keeps each record's values in stored order;
            False (default) sorts them by index, row-major and stable.
    """

    index_key: Any
    value_key: str
    dtype: Any
    size: Any
    already_sorted: bool = False


class _RaggedFields(NamedTuple):
    dtype: Any
    value_key: str | None = None
    partitions: Sequence[Any] = ()
    row_splits_dtype: Any = np.int32
    validate: bool = False


class RaggedFeature(_RaggedFields):
    """A ragged tensor from a values feature and partition features (TF's ``RaggedFeature``).

    ``partitions`` (outermost first) cut the record's values into nested
    rows, each partition read from another feature of the same record:
    ``RowSplits(key)``, ``RowLengths(key)``, ``RowStarts(key)``,
    ``RowLimits(key)`` or ``UniformRowLength(length)``. ``ValueRowIds(key)``
    is not supported (a ValueError): its row count, the last id + 1, is not
    bounded by the record's size, so one corrupt id could ask for any amount
    of memory. Output: a
    :class:`RaggedTensorValue` ``[B, (rows)...]``, uniform innermost
    partitions folded into the values' shape, as TF does. In
    ``parse_single_example`` the batch level goes: no ragged level left means
    a plain array (TF: a Tensor).

    Unlike TF, which checks partitions only with ``validate=True`` (and not
    all of them then), feedq always checks that partitions fit the values:
    a mismatch is an ``InvalidArgumentError`` naming the key and record.

    Attributes:
        dtype: float32, int64 or string.
        value_key: the values' key (default: the output's name).
        partitions: partition objects, outermost first.
        row_splits_dtype: int32 (default) or int64.
        validate: accepted for TF compatibility; feedq always validates.
    """

    __slots__ = ()

    class RowSplits(NamedTuple):
        """Row boundaries ``[0, ..., nvals]`` from the int64 feature ``key``."""

        key: str

    class RowLengths(NamedTuple):
        """Row lengths from the int64 feature ``key``."""

        key: str

    class RowStarts(NamedTuple):
        """Row start offsets (``row_splits[:-1]``) from the int64 feature ``key``."""

        key: str

    class RowLimits(NamedTuple):
        """Row end offsets (``row_splits[1:]``) from the int64 feature ``key``."""

        key: str

    class ValueRowIds(NamedTuple):
        """The row of every value (TF's; not supported by feedq's parsers)."""

        key: str

    class UniformRowLength(NamedTuple):
        """Rows of ``length`` values each (``length`` >= 1)."""

        length: int


class SparseTensorValue(NamedTuple):
    """A sparse result (TF1's ``tf.SparseTensorValue``).

    Attributes:
        indices: int64 ``[N, rank]`` coordinates.
        values: ``[N]`` values in row-major order.
        dense_shape: int64 ``[rank]``.
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


class RaggedTensorValue(NamedTuple):
    """A ragged result (TF1's ``tf.compat.v1.ragged.RaggedTensorValue``).

    Row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``; ``values`` is
    an array (possibly with uniform inner dimensions) or another
    RaggedTensorValue.

    Attributes:
        values: the rows' contents.
        row_splits: int32 or int64 ``[nrows + 1]``, ``row_splits[0] == 0``.
    """

    values: Any
    row_splits: np.ndarray

    @property
    def flat_values(self) -> np.ndarray:
        """The innermost values array."""
        v = self.values
        while isinstance(v, RaggedTensorValue):
            v = v.values
        out: np.ndarray = v
        return out

    @property
    def nested_row_splits(self) -> tuple[np.ndarray, ...]:
        """The row splits of every ragged level, outermost first."""
        out = [self.row_splits]
        v = self.values
        while isinstance(v, RaggedTensorValue):
            out.append(v.row_splits)
            v = v.values
        return tuple(out)

    def to_list(self) -> list[Any]:
        """Nested Python lists (as TF's ``RaggedTensor.to_list()``)."""
        inner = self.values.to_list() if isinstance(self.values, RaggedTensorValue) else self.values.tolist()
        s = self.row_splits.tolist()
        return [inner[a:b] for a, b in itertools.pairwise(s)]


def _kind_of(dtype: Any) -> int:
    dt = getattr(dtype, "as_numpy_dtype", dtype)  # accept tf.float32 & co.
    if dt in ("string", str, bytes, object, np.bytes_, np.str_):
        return _BYTES
    try:
        nd = np.dtype(dt)
    except TypeError:
        raise TypeError(f"Unsupported feature dtype {dtype!r}") from None
    if nd.kind in "OSU":
        return _BYTES
    if nd == np.float32:
        return _FLOAT
    if nd == np.int64:
        return _INT64
    raise TypeError(f"Unsupported feature dtype {nd}: use float32, int64 or string")


def _dims(shape: Any) -> list[int | None] | None:
    """A shape as a list of ints / None; an int ``n`` is ``[n]`` (as TF's as_shape)."""
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        return [int(shape)]
    dims = getattr(shape, "dims", shape)  # a tf.TensorShape
    if dims is None:
        return None
    out: list[int | None] = []
    for d in dims:
        d = getattr(d, "value", d)  # a TF1 Dimension
        out.append(None if d is None else int(d))
    return out


def _as_values(v: Any, kind: int) -> np.ndarray:
    if kind == _BYTES:
        arr = np.asarray(v, dtype=object)
        flat = [x.encode() if isinstance(x, str) else bytes(x) for x in arr.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape)
    return np.asarray(v, dtype=_KIND_DTYPE[kind])


class _Spec:
    """One raw column: feature ``key`` read as fixed (P2), var (P3) or seq (P4)."""

    __slots__ = ("cls", "default", "kb", "key", "kind", "n", "shape")

    def __init__(self, key: str, feat: Any) -> None:
        self.key = key
        self.kb = key.encode()
        if isinstance(feat, VarLenFeature):
            self.cls = "var"
            self.kind = _kind_of(feat.dtype)
            self.shape: tuple[int, ...] = ()
            self.n = 1
            self.default: Any = None
            return
        if not isinstance(feat, (FixedLenFeature, FixedLenSequenceFeature)):
            raise TypeError(f"Unsupported feature type for {key!r}: {type(feat).__name__}")
        self.kind = _kind_of(feat.dtype)
        dims = _dims(feat.shape)
        if dims is None:
            raise ValueError(f"Missing shape for feature {key}. Received feature={feat!r}.")
        if isinstance(feat, FixedLenSequenceFeature):
            self.cls = "seq"
            if any(d is None for d in dims):
                raise ValueError(f"Shape of feature {key} must be fully defined: {dims}")
            self.shape = tuple(d for d in dims if d is not None)
            self.n = int(np.prod(self.shape)) if self.shape else 1
            pad = feat.default_value
            if pad is None:
                pad = b"" if self.kind == _BYTES else 0
            d = _as_values(pad, self.kind).reshape(-1)
            if d.size != 1:
                # TF's ParseExample reshapes the default to one value (P4).
                raise InvalidArgumentError(
                    f"Input to reshape is a tensor with {d.size} values, but the requested "
                    "shape has 1"
                )
            self.default = d[0]
            return
        self.cls = "fixed"
        if any(d is None for d in dims):
            raise ValueError(
                f"First dimension of shape for feature {key} unknown. Consider using "
                f"FixedLenSequenceFeature. Received feature={feat!r}."
            )
        self.shape = tuple(d for d in dims if d is not None)
        self.n = int(np.prod(self.shape)) if self.shape else 1
        if feat.default_value is None:
            self.default = None
        else:
            d = _as_values(feat.default_value, self.kind)
            if d.size != self.n:
                raise InvalidArgumentError(
                    f"Input to reshape is a tensor with {d.size} values, but the requested "
                    f"shape has {self.n}"
                )
            self.default = d.reshape(self.shape)

    def shape_text(self) -> str:
        return "[" + ",".join(str(d) for d in self.shape) + "]"


class _SparseOut(NamedTuple):
    """Build a SparseFeature from var columns."""

    value: int  # column index
    indices: tuple[int, ...]  # column index per dimension
    size: tuple[int, ...]
    already_sorted: bool


class _RaggedOut(NamedTuple):
    """Build a RaggedFeature from var columns: partitions as (kind, column or length)."""

    value: int
    partitions: tuple[tuple[str, int], ...]  # ("splits"|"lengths"|...|"uniform", col or length)
    splits_dtype: np.dtype[Any]


_Output = int | _SparseOut | _RaggedOut

_PARTITION_NAME = {
    RaggedFeature.RowSplits: "splits",
    RaggedFeature.RowLengths: "lengths",
    RaggedFeature.RowStarts: "starts",
    RaggedFeature.RowLimits: "limits",
}


class _Plan:
    """Columns to read and outputs to build for one features mapping.

    Args:
        features: output name -> feature configuration.
        allowed: the configuration classes this parser takes.
        what: how to name the mapping in errors ("feature", "context feature").
    """

    __slots__ = ("outputs", "specs")

    def __init__(self, features: Mapping[str, Any], allowed: tuple[type, ...], what: str = "feature") -> None:
        self.specs: list[_Spec] = []
        self.outputs: list[tuple[str, _Output]] = []
        known = (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature, SparseFeature, RaggedFeature)
        for name, feat in features.items():
            if not isinstance(feat, known):
                raise TypeError(f"Unsupported feature type for {name!r}: {type(feat).__name__}")
            if not isinstance(feat, allowed):  # a known class in the wrong place: TF's ValueError
                raise ValueError(  # noqa: TRY004
                    f"Unsupported {type(feat).__name__} {feat!r} for {what} {name!r}"
                )
            if isinstance(feat, SparseFeature):
                self.outputs.append((name, self._sparse(feat)))
            elif isinstance(feat, RaggedFeature):
                self.outputs.append((name, self._ragged(name, feat)))
            else:
                self.outputs.append((name, self._column(name, feat)))

    def _column(self, key: str, feat: Any) -> int:
        spec = _Spec(key, feat)
        for i, s in enumerate(self.specs):
            if s.key != key:
                continue
            if s.kind != spec.kind:
                a, b = _KIND_NAME[s.kind], _KIND_NAME[spec.kind]
                raise ValueError(f"Conflicting type {a} vs {b} for feature {key}.")
            if s.cls == spec.cls == "var":
                return i
        self.specs.append(spec)
        return len(self.specs) - 1

    def _sparse(self, feat: SparseFeature) -> _SparseOut:
        keys = [feat.index_key] if isinstance(feat.index_key, str) else list(feat.index_key)
        if isinstance(feat.index_key, str):
            if not isinstance(feat.size, (int, np.integer)):
                raise TypeError(f"SparseFeature size must be an int for one index_key, got {feat.size!r}")
            sizes = [int(feat.size)]
        else:
            if isinstance(feat.size, (int, np.integer)) or len(feat.size) != len(keys):
                raise TypeError(
                    f"SparseFeature size must be a list of {len(keys)} ints (one per index_key), "
                    f"got {feat.size!r}"
                )
            sizes = [int(s) for s in feat.size]
        if not keys or any(s < 0 for s in sizes):
            raise ValueError(f"SparseFeature needs index keys and sizes >= 0: {feat!r}")
        value = self._column(feat.value_key, VarLenFeature(feat.dtype))
        idx = tuple(self._column(k, VarLenFeature(np.int64)) for k in keys)
        return _SparseOut(value, idx, tuple(sizes), bool(feat.already_sorted))

    def _ragged(self, name: str, feat: RaggedFeature) -> _RaggedOut:
        sd = getattr(feat.row_splits_dtype, "as_numpy_dtype", feat.row_splits_dtype)
        splits_dtype = np.dtype(sd)
        if splits_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"RaggedFeature row_splits_dtype must be int32 or int64, got {feat.row_splits_dtype!r}")
        value = self._column(feat.value_key if feat.value_key is not None else name, VarLenFeature(feat.dtype))
        parts: list[tuple[str, int]] = []
        for p in feat.partitions:
            if isinstance(p, RaggedFeature.UniformRowLength):
                if int(p.length) < 1:
                    raise ValueError(f"RaggedFeature {name!r}: UniformRowLength must be >= 1, got {p.length}")
                parts.append(("uniform", int(p.length)))
            elif isinstance(p, RaggedFeature.ValueRowIds):
                raise ValueError(  # noqa: TRY004 - a known partition, not supported
                    f"RaggedFeature {name!r}: ValueRowIds partitions are not supported; "
                    "use RowSplits, RowLengths, RowStarts or RowLimits"
                )
            elif type(p) in _PARTITION_NAME:
                parts.append((_PARTITION_NAME[type(p)], self._column(p.key, VarLenFeature(np.int64))))
            else:
                raise TypeError(f"RaggedFeature {name!r}: unsupported partition {p!r}")
        return _RaggedOut(value, tuple(parts), splits_dtype)
