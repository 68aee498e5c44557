"""``feedq.Variable``: TF1's ``tf.Variable`` as a named, placed tensor.

The seed's variable cells (``with tf.device("/cpu:0"): a = tf.Variable(3.0)``)
become one line each: ``a = feedq.Variable(3.0, name="a")`` inside
``feedq.device(...)``. With torch installed the result is a
``torch.nn.Parameter`` (so ``a * b``, optimizers and ``nn.Module``
registration all work) that also carries ``name`` and ``trainable``; without
torch, or for a value torch cannot hold (strings), it is a NumPy array in
host memory with the same two attributes.
"""

from __future__ import annotations

import copy
import functools
import importlib
import itertools
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from feedq._core.arrays import variable_array
from feedq._devices.placement import _DEVICE_KINDS, PlacementRequest
from feedq._devices.tensors import place_tensor

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["NumpyVariable", "Variable"]

_names_lock = threading.Lock()
_names = itertools.count()  # guarded by _names_lock


def _default_name() -> str:
    # TF1's uniquified op names: Variable, Variable_1, Variable_2, ...
    with _names_lock:
        n = next(_names)
    return "Variable" if n == 0 else f"Variable_{n}"


def _torch() -> ModuleType | None:
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def Variable(initial: Any, *, name: str | None = None, trainable: bool = True) -> Any:
    """A variable holding a copy of ``initial``, placed by the enclosing contexts.

    Placed like a TF1 variable: through this thread's ``feedq.device(...)``
    contexts as a :class:`PlacementRequest` with ``kind="parameter"``,
    ``type="Variable"``, ``name``, ``dtype`` and ``shape``, so a device
    function can test ``op.type == "Variable"`` as the seed's
    ``variables_on_cpu`` does. Soft placement and the placement log apply
    (see :class:`DeviceConfig`). No device type in the contexts: PyTorch's
    default device (a tensor ``initial`` stays where it is).

    The dtype of Python data follows TF1 and PyTorch, with or without torch:
    ``Variable(3.0)`` is float32 (not NumPy's float64), ``Variable(3)`` int64
    (PyTorch's rule; TF1 made it int32). NumPy arrays and torch tensors keep
    their dtype.

    Args:
        initial: the initial value: a Python scalar or list, a NumPy array, or
            a torch tensor (copied, never shared).
        name: the variable's name (default ``"Variable"``, ``"Variable_1"``, ...).
        trainable: whether gradients flow to it (``requires_grad``; integer
            and bool variables never require gradients, as PyTorch rules).

    Returns:
        With torch and a numeric value: a ``torch.nn.Parameter`` subclass with
        ``.name`` and ``.trainable``. Otherwise a :class:`NumpyVariable` in
        host memory.

    Raises:
        InvalidArgumentError: the device asked for is unavailable (no CUDA,
            or a value only host memory can hold) and soft placement is off.
    """
    name = _default_name() if name is None else name
    torch = _torch()
    if torch is not None and isinstance(initial, torch.Tensor):
        value = initial.detach().clone()
    else:
        array = variable_array(initial)
        if torch is None or array.dtype.kind not in _DEVICE_KINDS:
            return _numpy_variable(np.array(array), name, trainable, torch is None)
        # torch's own inference for Python data (3.0 is float32); NumPy keeps its dtype.
        value = (torch.as_tensor(np.array(initial), device="cpu")
                 if isinstance(initial, (np.ndarray, np.generic))
                 else torch.tensor(initial, device="cpu"))
        default = getattr(torch, "get_default_device", None)  # torch >= 2.3
        if default is not None and default().type != "cpu":
            value = value.to(default())  # inside `with torch.device(...)`
    request = PlacementRequest(name, "Variable", kind="parameter", dtype=value.dtype,
                               shape=tuple(value.shape))
    placement = place_tensor(request)
    if placement is not None:
        value = value.to(placement.torch_device)
    grads = trainable and (value.dtype.is_floating_point or value.dtype.is_complex)
    return _torch_variable_class()(value, grads, name, trainable)


def _numpy_variable(value: np.ndarray[Any, Any], name: str, trainable: bool,
                    no_torch: bool) -> NumpyVariable:
    why = ('torch is not installed (pip install "feedq[torch]")' if no_torch
           else f"torch cannot hold dtype {value.dtype}")
    request = PlacementRequest(name, "Variable", (value.dtype,), kind="parameter",
                               dtype=value.dtype, shape=value.shape)
    place_tensor(request, host_only=f"{why}: the variable is a NumPy array in host memory")
    return NumpyVariable(value, name, trainable)


class NumpyVariable(NDArrayOperatorsMixin):
    """A named NumPy array: :func:`Variable` without torch, or for strings.

    Arithmetic and NumPy functions see the array (``a * b`` is an ndarray).

    Attributes:
        value: the array (host memory).
        name: the variable's name.
        trainable: as given (NumPy computes no gradients).
    """

    device = "cpu"

    def __init__(self, value: np.ndarray[Any, Any], name: str, trainable: bool = True) -> None:
        self.value = value
        self.name = name
        self.trainable = trainable

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = self.value.dtype
        return dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def numpy(self) -> np.ndarray[Any, Any]:
        """The array itself (no copy)."""
        return self.value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        if dtype is None and not copy:
            return self.value
        return np.array(self.value, dtype=dtype, copy=True)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        unwrapped = [x.value if isinstance(x, NumpyVariable) else x for x in inputs]
        return getattr(ufunc, method)(*unwrapped, **kwargs)

    def __repr__(self) -> str:
        return f"Variable {self.name!r} containing:\n{self.value!r}"


def _rebuild_torch_variable(data: Any, requires_grad: bool, name: str,
                            trainable: bool) -> Any:
    # Unpickling: module-level, so pickle can find it.
    return _torch_variable_class()(data, requires_grad, name, trainable)


@functools.lru_cache(maxsize=1)
def _torch_variable_class() -> type:
    import torch

    class TorchVariable(torch.nn.Parameter):
        """A ``torch.nn.Parameter`` with a ``name`` and ``trainable`` (see :func:`Variable`)."""

        _feedq_name: str
        _feedq_trainable: bool

        def __new__(cls, data: Any = None, requires_grad: bool = True,
                    name: str = "Variable", trainable: bool = True) -> Self:
            self = super().__new__(cls, data, requires_grad)
            self._feedq_name = name
            self._feedq_trainable = trainable
            return self

        @property
        def name(self) -> str:
            """The variable's name."""
            return self._feedq_name

        @property
        def trainable(self) -> bool:
            """Whether the variable was made trainable."""
            return self._feedq_trainable

        def __repr__(self) -> str:  # type: ignore[override]
            body = repr(self.data)  # a plain tensor's repr, without the subclass wrapping
            return f"Variable {self.name!r} containing:\n{body}"

        def __deepcopy__(self, memo: dict[int, Any]) -> TorchVariable:
            if id(self) not in memo:
                memo[id(self)] = type(self)(
                    copy.deepcopy(self.data, memo), self.requires_grad, self.name,
                    self.trainable)
            return memo[id(self)]  # type: ignore[no-any-return]

        def __reduce_ex__(self, protocol: Any) -> Any:
            return (_rebuild_torch_variable,
                    (self.data, self.requires_grad, self.name, self.trainable))

    TorchVariable.__module__ = "feedq.devices"
    TorchVariable.__qualname__ = "TorchVariable"
    return TorchVariable
