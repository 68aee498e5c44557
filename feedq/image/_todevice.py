"""ToDeviceFloat: uint8 NHWC batches to normalised float, where the batch already is.

A callable ``f(batch) -> batch`` for a device feeder's ``device_transform=``
(see ``docs/images.md``): the host keeps uint8 images and the copy to the
device moves uint8 bytes, a quarter of float32's; the conversion runs on the
device, after the copy. It works on torch tensors (any device) and NumPy
arrays. torch is never imported here: a torch tensor's own module is used.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from feedq.errors import InvalidArgumentError

__all__ = ["ToDeviceFloat"]

_DTYPES = ("float32", "float16")


def _dtype_name(dtype: Any) -> str:
    """``"float32"`` or ``"float16"`` from a torch dtype, a NumPy dtype or a name."""
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
    elif type(dtype).__module__ == "torch":  # torch.float16 without importing torch
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    name = {"float": "float32", "half": "float16"}.get(name, name)
    if name not in _DTYPES:
        raise InvalidArgumentError(f"ToDeviceFloat: dtype must be float32 or float16, got {dtype!r}")
    return name


class ToDeviceFloat:
    """``(x / 255 - mean) / std`` per channel, NHWC uint8 in, NCHW (or NHWC) float out.

    torchvision's ``ToTensor()`` + ``Normalize(mean, std)`` for a batch,
    meant for :class:`~feedq.devices.DeviceFeeder`'s ``device_transform=``
    (it then runs on each replica's device, after the uint8 copy)::

        to_float = feedq.image.ToDeviceFloat(mean=(0.485, 0.456, 0.406),
                                             std=(0.229, 0.224, 0.225))
        feeder = feedq.DeviceFeeder(stage, device="cuda:0",
                                    device_transform={"image": to_float})

    The arithmetic is float32 whatever ``dtype``, in this order:
    ``y = x.permute(0, 3, 1, 2).float(); y = (y / 255 - mean) / std``, then
    cast to ``dtype``: the result equals that torch expression exactly (and,
    for float16, that expression's ``.half()``). The output is contiguous in
    its layout.

    Args:
        mean, std: per channel, on the ``[0, 1]`` scale (ImageNet's
            ``(0.485, 0.456, 0.406)`` and ``(0.229, 0.224, 0.225)``).
        dtype: ``float32`` or ``float16``: a torch dtype, a NumPy dtype or
            its name.
        layout: ``"NCHW"`` (torch's convolutions) or ``"NHWC"``.

    Raises:
        InvalidArgumentError: a bad argument here; when called, a batch that
            is not ``[n, h, w, c]`` uint8 with ``len(mean)`` channels.
        TypeError: when called on something neither a torch tensor nor a
            NumPy array.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], *,
                 dtype: Any = "float32", layout: Literal["NCHW", "NHWC"] = "NCHW") -> None:
        if layout not in ("NCHW", "NHWC"):
            raise InvalidArgumentError(f"ToDeviceFloat: layout must be 'NCHW' or 'NHWC', "
                                       f"got {layout!r}")
        m = np.asarray(mean, dtype=np.float32)
        s = np.asarray(std, dtype=np.float32)
        if m.ndim != 1 or m.size == 0 or s.shape != m.shape:
            raise InvalidArgumentError(f"ToDeviceFloat: mean and std need one value per channel, "
                                       f"got {list(m.shape)} and {list(s.shape)}")
        if not np.all(s != 0):
            raise InvalidArgumentError(f"ToDeviceFloat: std must not be 0, got {s.tolist()}")
        self.mean = tuple(float(v) for v in mean)  # as given; computed in float32
        self.std = tuple(float(v) for v in std)
        self.dtype = _dtype_name(dtype)
        self.layout = layout
        self._mean = m
        self._std = s
        # (device, layout) -> (mean, std) tensors; built once per device.
        self._constants: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable (a process stage, a DataLoader worker): without the lock
        # and the per-device constants, which are rebuilt on first use.
        state = dict(self.__dict__)
        del state["_lock"], state["_constants"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._constants = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"ToDeviceFloat(mean={self.mean}, std={self.std}, dtype={self.dtype!r}, "
                f"layout={self.layout!r})")

    def _check(self, shape: Sequence[int], dtype: str) -> None:
        if len(shape) != 4 or dtype != "uint8" or shape[3] != len(self.mean):
            raise InvalidArgumentError(
                f"ToDeviceFloat takes uint8 images [n, h, w, {len(self.mean)}], got "
                f"{dtype} {list(shape)}")

    def __call__(self, images: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(images, torch.Tensor):
            return self._torch(torch, images)
        if isinstance(images, np.ndarray):
            return self._numpy(images)
        raise TypeError(f"ToDeviceFloat takes a torch tensor or a NumPy array, "
                        f"got {type(images).__name__}")

    def _torch(self, torch: Any, x: Any) -> Any:
        self._check(tuple(x.shape), str(x.dtype).removeprefix("torch."))
        n, h, w, c = x.shape
        key = str(x.device)
        with self._lock:
            constants = self._constants.get(key)
            if constants is None:
                view = (1, c, 1, 1) if self.layout == "NCHW" else (1, 1, 1, c)
                constants = tuple(torch.from_numpy(v.reshape(view)).to(x.device)
                                  for v in (self._mean, self._std))
                self._constants[key] = constants
        mean, std = constants
        if self.layout == "NCHW":
            y = torch.empty((n, c, h, w), dtype=torch.float32, device=x.device)
            y.copy_(x.permute(0, 3, 1, 2))  # the layout change and the cast in one pass
        else:
            y = x.to(torch.float32, memory_format=torch.contiguous_format)
        y.div_(255).sub_(mean).div_(std)
        return y if self.dtype == "float32" else y.to(torch.float16)

    def _numpy(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        self._check(x.shape, x.dtype.name)
        c = x.shape[3]
        view = (1, c, 1, 1) if self.layout == "NCHW" else (1, 1, 1, c)
        src = x.transpose(0, 3, 1, 2) if self.layout == "NCHW" else x
        y = np.empty(src.shape, dtype=np.float32)
        np.copyto(y, src, casting="unsafe")
        y /= np.float32(255)
        y -= self._mean.reshape(view)
        y /= self._std.reshape(view)
        return y if self.dtype == "float32" else y.astype(np.float16)
