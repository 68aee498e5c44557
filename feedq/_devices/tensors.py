"""Placing the tensors PyTorch creates inside ``feedq.device(...)`` blocks.

TF1 placed every op created in a ``tf.device`` block. In eager PyTorch the
things worth placing are the tensors a block creates, so while a
``feedq.device(...)`` block is open in a thread (and torch was imported
before it was entered) a ``torch.overrides.TorchFunctionMode`` watches that
thread's factory calls (``torch.zeros``, ``ones``, ``empty``, ``full``,
``rand``, ``randn``, ``randint``, ``randperm``, ``arange``, ``linspace``,
``logspace``, ``eye``, ``tensor``, ``as_tensor``, ``asarray``, the window
functions...) and fills in their ``device=`` with the device the contexts
choose, exactly as ``with torch.device(...)`` does, but per creation:

* a factory call is placed as ``kind="tensor"`` (``type`` is the function
  name, ``dtype`` and ``shape`` are those of the tensor it will make);
* while an ``nn.Module`` is being constructed, every tensor its ``__init__``
  makes (its parameters and buffers, its submodules') follows one decision
  taken for the outermost module under construction, ``kind="module"``,
  ``type`` its class name: the module is placed whole;
* ``nn.Parameter(t)`` wraps ``t`` where ``t`` was placed;
  :func:`feedq.Variable` is placed as ``kind="parameter"``.

A device function receives that :class:`PlacementRequest`. A call that
names its ``device=`` (or passes ``out=`` or ``pin_memory=True``) is left
alone, as are ``*_like`` functions and ``torch.from_numpy`` (they follow their
input). A context that chooses no device type (``/job:ps/task:0``, or
``feedq.device(None)``) leaves tensors where PyTorch puts them. Other threads
are not affected: PyTorch's mode stack and feedq's contexts are both per
thread. CuPy arrays are not placed (torch only).

The placer is the one feeders use: ``"cuda:1"`` is CUDA's device after
``DeviceConfig.visible_devices``; an unavailable device (no CUDA, an index
past the visible GPUs, another task's device, a dtype it cannot hold) falls
back to the CPU under ``allow_soft_placement`` with the reason logged, else
raises ``InvalidArgumentError``; ``log_device_placement`` logs one line per
placed tensor. PyTorch's ``meta`` device is accepted too (shapes without
storage: handy to build a large model before materialising it).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import weakref
from types import FrameType
from typing import Any

import numpy as np

from feedq._devices.extras import loaded
from feedq._devices.placement import (
    _DEVICE_KINDS,
    DeviceConfig,
    Placement,
    PlacementRequest,
    _fallback,
    _placed,
    _stack,
    _unavailable_reason,
    current_device,
    get_device_config,
    logger,
    place,
)

__all__ = ["enter_tensor_placement", "exit_tensor_placement", "place_tensor"]

# The torch functions that create a tensor from nothing but their arguments
# (those taking a ``device=``), by name; the ones missing from a torch version
# are skipped.
_FACTORY_NAMES = (
    "arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty",
    "empty_permuted", "empty_strided", "eye", "full", "hamming_window", "hann_window",
    "kaiser_window", "linspace", "logspace", "ones", "rand", "randint", "randn", "randperm",
    "scalar_tensor", "tensor", "tril_indices", "triu_indices", "zeros",
)


def place_tensor(request: PlacementRequest, config: DeviceConfig | None = None, *,
                 host_only: str | None = None) -> Placement | None:
    """Places one tensor, module or variable through this thread's contexts.

    Args:
        request: what is created (``kind`` ``"tensor"``, ``"module"`` or
            ``"parameter"``).
        config: defaults to the installed :class:`DeviceConfig`.
        host_only: when set, the value can only live in host memory (a NumPy
            variable); any other device is unavailable for this reason.

    Returns:
        The placement, or ``None`` when the contexts choose no device type
        and no other task (PyTorch's default device applies).

    Raises:
        InvalidArgumentError: the device is unavailable and soft placement is off.
    """
    config = get_device_config() if config is None else config
    spec = current_device(request)
    if spec.device_type is None:
        # No device type: PyTorch's default device, unless the spec names
        # another task ("/job:ps/task:0"), which this process cannot place on.
        reason, _ = _unavailable_reason(spec.replace(device_type="CPU", device_index=None), (), config)
        if reason is None:
            return None
        return _fallback(request, spec, reason, config)
    if host_only is not None and spec.device_type != "CPU":
        return _fallback(request, spec, host_only, config)
    if spec.device_type != "META":
        return place(request, config, requested=spec)
    # PyTorch's meta device: any dtype torch has, no storage, in this process.
    reason, _ = _unavailable_reason(spec.replace(device_type="CPU", device_index=None), (),
                                    config)
    bad = sorted({str(dt) for dt in request.dtypes if np.dtype(dt).kind not in _DEVICE_KINDS})
    if reason is None and bad:
        reason = (f"dtype {', '.join(bad)} cannot be held on the meta device (torch holds "
                  f"bool, integers, floats and complex)")
    if reason is not None:
        return _fallback(request, spec, reason, config)
    return _placed(request, spec, spec.replace(device_index=0), -1, config, torch_device="meta")


# ---------------------------------------------------------------------------
# The mode: one per thread, pushed by the outermost feedq.device() block.

_local = threading.local()


def enter_tensor_placement() -> Any:
    """Starts placing this thread's torch tensors; returns what to pass to
    :func:`exit_tensor_placement` (``None`` when torch is not imported or an
    outer block already placed them)."""
    if loaded("torch") is None or getattr(_local, "mode", None) is not None:
        return None
    mode = _mode_class()()
    mode.__enter__()
    _local.mode = mode
    return mode


def exit_tensor_placement(mode: Any) -> None:
    """Stops what :func:`enter_tensor_placement` started (no-op for ``None``)."""
    if mode is None:
        return
    _local.mode = None
    mode.__exit__(None, None, None)


def _preview(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The dtype and shape ``func`` will produce, from a dry run on the meta
    device (no storage is allocated); ``(dtype=, None)`` when it cannot run there."""
    try:
        made = func(*args, **dict(kwargs, device="meta"))
        return made.dtype, tuple(made.shape)
    except Exception:  # noqa: BLE001 - the real call reports the error, if any
        return kwargs.get("dtype"), None


def _module_under_construction(module_type: type) -> Any:
    """The outermost ``nn.Module`` whose ``__init__`` is running in this thread."""
    outer = None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__init__" and code.co_argcount and code.co_varnames[0] == "self":
            obj = frame.f_locals.get("self")
            if isinstance(obj, module_type):
                outer = obj
        frame = frame.f_back
    return outer


@functools.lru_cache(maxsize=1)
def _mode_class() -> type:
    import torch
    from torch.overrides import TorchFunctionMode

    factories = frozenset(getattr(torch, n) for n in _FACTORY_NAMES if hasattr(torch, n))
    module_type = torch.nn.Module

    class TensorPlacementMode(TorchFunctionMode):
        """Fills in ``device=`` of this thread's factory calls (see the module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            # (module, context stack, decision) of the module last placed: its
            # construction makes all its tensors in a row.
            self._module: tuple[Any, tuple[Any, ...], Placement | None] | None = None
            # (context stack, config) -> torch device (None: PyTorch's default), for
            # stacks of names only: there the decision depends on nothing else.
            self._decided: dict[tuple[Any, ...], str | None] = {}

        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = {} if kwargs is None else dict(kwargs)
            if (func not in factories or kwargs.get("device") is not None
                    or kwargs.get("out") is not None or kwargs.get("pin_memory")):
                return func(*args, **kwargs)
            config = get_device_config()
            # The stack's entries themselves (not their ids): equal names compare
            # equal, and holding them keeps an id from being reused.
            stack = tuple(_stack())
            fast = not config.log_device_placement and not any(map(callable, stack))
            key = (stack, config)
            if fast and key in self._decided:
                device = self._decided[key]
            else:
                placement = self._place(func, args, kwargs, stack)
                device = None if placement is None else placement.torch_device
                if fast and (placement is None or not placement.soft):
                    self._decided[key] = device  # a fallback is logged each time
            if device is not None:
                kwargs["device"] = device
            return func(*args, **kwargs)

        def _place(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                   stack: tuple[Any, ...]) -> Placement | None:
            dtype, shape = _preview(func, args, kwargs)
            owner = _module_under_construction(module_type)
            if owner is None:
                return place_tensor(PlacementRequest("", func.__name__, kind="tensor",
                                                     dtype=dtype, shape=shape))
            cached = self._module
            if cached is not None and cached[0]() is owner and cached[1] == stack:
                decision = cached[2]
            else:
                config = get_device_config()
                # One decision per module; the per-tensor lines are logged below.
                quiet = dataclasses.replace(config, log_device_placement=False)
                decision = place_tensor(PlacementRequest("", type(owner).__name__,
                                                         kind="module", dtype=dtype), quiet)
                self._module = (weakref.ref(owner), stack, decision)
            if decision is not None and get_device_config().log_device_placement:
                request = PlacementRequest("", f"{type(owner).__name__}/{func.__name__}",
                                           kind="module", dtype=dtype, shape=shape)
                logger.info("%s", dataclasses.replace(decision, request=request).log_line())
            return decision

    return TensorPlacementMode
