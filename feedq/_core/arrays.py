"""Array helpers shared by the queues and the layers above them.

A lower module than :mod:`feedq.queues`: it imports nothing from feedq, so
``input``, ``distributed`` and the queues can all use it without reaching
into each other's private modules.

* :func:`as_dtype` normalises a dtype given in any of the usual forms;
  strings become ``STRING`` (``np.dtype(object)`` arrays of ``bytes``).
* :func:`as_torch_free_array` turns a CPU torch tensor into a NumPy view.
* :func:`flatten_values` / :func:`pack_values` convert between a user
  element (bare value, list, dict) and a list of component values (Q3, Q4).
* :func:`variable_array` is a variable's initial value as an array, Python
  data typed as TF1 and PyTorch type it (``3.0`` is float32).
* :func:`epoch_order` is a shuffling producer's order of one epoch: a
  function of (seed, epoch) only, so plain and resumable producers replay it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "STRING", "as_dtype", "as_torch_free_array", "epoch_order", "flatten_values", "pack_values",
    "variable_array",
]

#: The dtype of string components: object arrays holding ``bytes``.
STRING = np.dtype(object)

_STRING_ALIASES = {"string", "str", "bytes", "object"}
NUMERIC_KINDS = frozenset("biufc")


def as_dtype(dtype: Any) -> np.dtype[Any]:
    """Normalise a dtype given as NumPy dtype, name, Python type or torch dtype.

    Raises:
        TypeError: the dtype is not a supported component dtype.
    """
    if dtype in (str, bytes, object) or (isinstance(dtype, str) and dtype in _STRING_ALIASES):
        return STRING
    text = str(dtype)
    if text.startswith("torch."):  # torch dtypes without importing torch
        text = text[len("torch.") :]
        if text in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            raise TypeError(f"dtype torch.{text} has no NumPy equivalent; convert to float32 first")
        dtype = text
    try:
        result = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unsupported queue dtype {dtype!r}") from exc
    if result.kind in "OSU":
        return STRING
    if result.kind not in NUMERIC_KINDS:
        raise TypeError(f"unsupported queue dtype {result} (numeric, bool or string only)")
    return result  # type: ignore[no-any-return]


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def as_torch_free_array(value: Any, where: str) -> Any:
    """Return a NumPy view of a CPU torch tensor (no copy); other values as is.

    Raises:
        TypeError: the tensor lives on an accelerator.
    """
    if _is_torch_tensor(value):
        if value.device.type != "cpu":
            raise TypeError(
                f"{where}: a torch tensor on {value.device} cannot be enqueued; "
                "queues hold host memory (use .cpu())"
            )
        return value.detach().numpy()
    return value


def flatten_values(
    vals: Any, names: list[str] | None, count: int, where: str
) -> list[Any]:
    """Q3/Q4/Q9: turn a user element (bare value, list, dict) into a list of
    component values. Any count mismatch is a ``ValueError`` (Q9: feedq does
    not drop extra components as TF does)."""
    t = type(vals)
    if (t is list or t is tuple) and names is None:  # the common case, before the ABC checks
        if len(vals) != count:
            raise ValueError(f"{where} expects {count} components, got {len(vals)}")
        return list(vals)
    if names is not None:
        if not isinstance(vals, Mapping):
            raise ValueError(f"{where} has named components {names}: must enqueue a dictionary")
        if set(vals) != set(names):
            raise ValueError(
                f"{where}: Keys in dictionary to enqueue {sorted(vals)} do not match "
                f"the names of the queue {sorted(names)}"
            )
        return [vals[n] for n in names]
    if isinstance(vals, Mapping):
        # ValueError, not TypeError: TF1 reports every structure mismatch so (Q3).
        raise ValueError(f"{where} has no component names: enqueue a list, not a dictionary")  # noqa: TRY004
    if isinstance(vals, (list, tuple)):
        if len(vals) != count:
            raise ValueError(f"{where} expects {count} components, got {len(vals)}")
        return list(vals)
    if count != 1:
        raise ValueError(f"{where} expects {count} components, got 1")
    return [vals]


def pack_values(cols: list[Any], names: list[str] | None) -> Any:
    """Q4: dict for named queues, a bare value for one component, else a list."""
    if names is not None:
        return dict(zip(names, cols))
    if len(cols) == 1:
        return cols[0]
    return cols


def variable_array(initial: Any, dtype: Any = None) -> np.ndarray[Any, Any]:
    """``initial`` as an array for a variable: with ``dtype`` given, of that
    dtype; NumPy arrays and scalars keep theirs; Python data as TF1's
    ``tf.Variable`` and PyTorch type it: floats float32 (not NumPy's
    float64), complex complex64, ints int64 (PyTorch's rule; TF1 made them
    int32), bools bool."""
    array = np.asarray(initial, dtype=dtype)
    if dtype is None and not isinstance(initial, (np.ndarray, np.generic)):
        if array.dtype == np.float64:
            return array.astype(np.float32)
        if array.dtype == np.complex128:
            return array.astype(np.complex64)
    return array


def epoch_order(n: int, seed: int | None, epoch: int) -> np.ndarray[Any, Any]:
    """The indices of epoch ``epoch`` of ``n`` elements, shuffled: the same
    (seed, epoch) gives the same order in any process; ``seed=None`` draws
    a fresh one."""
    return np.random.default_rng(None if seed is None else [seed, epoch]).permutation(n)
