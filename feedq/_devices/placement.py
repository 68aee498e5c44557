"""Placement: device contexts, the session-like config, the placer.

TF1 decides where each op runs in two steps: ``tf.device(...)`` blocks (names
or functions, merged innermost first) say what the user asked for, then the
placer maps that onto the devices that exist, falling back to the CPU under
``allow_soft_placement``. feedq does the same for the pipeline stages that
hold data on a device (feeders, staging buffers); queues stay in host memory.

Usage::

    feedq.set_device_config(feedq.DeviceConfig(log_device_placement=True,
                                                allow_soft_placement=True))
    with feedq.device("/gpu:0"):
        feeder = feedq.DeviceFeeder(queue, batch_size=32)   # logged: ... GPU:0 or CPU:0
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from feedq._core import timeouts as _defaults
from feedq._devices.extras import loaded
from feedq._devices.spec import DeviceLike, DeviceSpec
from feedq.errors import InvalidArgumentError

__all__ = [
    "DeviceConfig",
    "Placement",
    "PlacementRequest",
    "current_device",
    "device",
    "get_device_config",
    "place",
    "set_device_config",
]

logger = logging.getLogger("feedq.devices")

_CPU0 = DeviceSpec(device_type="CPU", device_index=0)

# NumPy kinds a CUDA array library (torch, CuPy) can hold: bool, ints, uints,
# floats, complex. Strings, objects, datetimes and structured dtypes stay on host.
_DEVICE_KINDS = frozenset("biufc")


@dataclasses.dataclass(frozen=True)
class PlacementRequest:
    """What the placer places: TF1's op, as a device function sees it.

    Pipeline stages (feeders) are placed as ``kind="stage"``; inside
    ``feedq.device(...)`` the tensors PyTorch creates are placed too, as
    ``"tensor"`` (a factory call such as ``torch.zeros``), ``"module"`` (every
    tensor made while an ``nn.Module`` is constructed: the module is placed
    whole) or ``"parameter"`` (a :func:`feedq.Variable`).

    Attributes:
        name: the stage's or variable's name, e.g. ``"feeder/image"`` (``""``
            for an anonymous tensor or module).
        type: what it is, TF1's ``op.type``: ``"DeviceFeeder"``,
            ``"Variable"``, the torch function (``"zeros"``) or the module
            class (``"Linear"``).
        dtypes: the NumPy dtypes it will hold on its device (may be empty
            when not known yet; empty for torch tensors, which any torch
            device can hold).
        device: the device asked for so far, as a TF name (TF1's ``op.device``):
            the stage's own ``device=`` argument merged with inner contexts.
        kind: ``"stage"``, ``"tensor"``, ``"module"`` or ``"parameter"``.
        dtype: the tensor's dtype (a ``torch.dtype``, or a NumPy dtype for a
            NumPy variable); ``None`` for stages and when not known.
        shape: the tensor's shape; ``None`` for stages, modules and when not known.
    """

    name: str
    type: str
    dtypes: tuple[np.dtype[Any], ...] = ()
    device: str = ""
    kind: str = "stage"
    dtype: Any = None
    shape: tuple[int, ...] | None = None

    def describe(self) -> str:
        """What is placed, for log lines and errors: ``stage 'feeder' (DeviceFeeder)``,
        ``tensor zeros float32[2, 3]``, ``module Linear float32[4, 3]``."""
        if self.kind == "stage":
            return f"stage {self.name!r} ({self.type})"
        what = f"{self.kind} {self.name!r} ({self.type})" if self.name else \
            f"{self.kind} {self.type}"
        if self.dtype is not None:
            what += " " + str(self.dtype).removeprefix("torch.")
            if self.shape is not None:
                what += str(list(self.shape))
        return what


DeviceFunction = Callable[[PlacementRequest], DeviceLike | None]

# ---------------------------------------------------------------------------
# Device contexts: a thread-local stack, like TF1's per-thread device stack.

_CLEAR = object()  # pushed by device(None): stops inheritance from outer contexts
_local = threading.local()


def _stack() -> list[Any]:
    stack: list[Any] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


@contextlib.contextmanager
def device(device_name_or_function: DeviceLike | DeviceFunction | None) -> Iterator[None]:
    """Places the stages and PyTorch tensors created in this block (TF1's ``tf.device``).

    Contexts nest: an inner name's specified fields win, unspecified ones are
    inherited from the outer contexts (``/job:worker`` around ``/gpu:1``
    gives ``/job:worker/device:GPU:1``). A function receives a
    :class:`PlacementRequest` whose ``device`` holds what inner contexts chose
    and returns a device name, a ``DeviceSpec``, or ``None`` (no device); it
    replaces what it was given, as in TF1. ``device(None)`` ignores every
    outer context. The stack is per thread: a new thread starts with none.

    When torch is imported before the block is entered, the tensors PyTorch
    creates in it (factory functions, ``torch.tensor``, module construction,
    ``nn.Parameter`` around them, :func:`feedq.Variable`) land on the device
    chosen for them: see :mod:`feedq._devices.tensors`. CuPy arrays are not
    placed (this is torch only): use ``with cupy.cuda.Device(i)`` for them.

    Args:
        device_name_or_function: a TF or PyTorch device name, a
            ``torch.device``, a :class:`DeviceSpec`, a function, or ``None``.

    Raises:
        ValueError: an unparseable device name (raised on entry).
    """
    if device_name_or_function is None:
        entry: Any = _CLEAR
    elif callable(device_name_or_function) and not isinstance(device_name_or_function,
                                                               DeviceSpec):
        entry = device_name_or_function
    else:
        entry = DeviceSpec.parse(device_name_or_function)
    stack = _stack()
    stack.append(entry)
    # Late import: the tensor placer builds on this module.
    from feedq._devices.tensors import enter_tensor_placement, exit_tensor_placement

    mode = enter_tensor_placement()
    try:
        yield
    finally:
        exit_tensor_placement(mode)
        stack.pop()


def current_device(request: PlacementRequest | None = None) -> DeviceSpec:
    """The device this thread's contexts ask for, before the placer resolves it.

    Args:
        request: the stage to place; its ``device`` is the innermost choice.
            ``None`` places an anonymous stage (device functions get
            ``PlacementRequest("", "")``).

    Returns:
        A possibly partial spec (empty outside any context).
    """
    if request is None:
        request = PlacementRequest("", "")
    spec = DeviceSpec.parse(request.device)
    # Innermost first, as TF1's _apply_device_functions: a name fills in the
    # fields still unspecified, a function sees the result so far.
    for entry in reversed(_stack()):
        if entry is _CLEAR:
            break
        if isinstance(entry, DeviceSpec):
            spec = entry.make_merged_spec(spec)
        else:
            chosen = entry(dataclasses.replace(request, device=spec.to_string()))
            spec = DeviceSpec.parse(chosen)
    return spec


# ---------------------------------------------------------------------------
# The config: TF1's ConfigProto, the parts that mean something here.


def _parse_visible(value: str | Sequence[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",") if p.strip()]
        try:
            parsed = tuple(int(p) for p in items)
        except ValueError:
            raise ValueError(f"visible_devices must list GPU indices, got {value!r}") from None
    else:
        parsed = tuple(value)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in parsed):
            raise ValueError(f"visible_devices must list GPU indices, got {value!r}")
    if any(i < 0 for i in parsed) or len(set(parsed)) != len(parsed):
        raise ValueError(
            f"visible_devices must list distinct GPU indices >= 0, got {value!r}")
    return parsed


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    """Process-wide placement options, in the spirit of TF1's ``ConfigProto``.

    Install one with :func:`set_device_config`; stages read it when placed.

    Attributes:
        log_device_placement: log one line per placed stage, ``name: (type):
            device [torch name]``, at INFO on the ``"feedq.devices"`` logger.
        allow_soft_placement: place a stage whose device is unavailable (no
            CUDA, an index past the visible GPUs, a dtype the device library
            cannot hold, another task's device) on ``/device:CPU:0`` and log
            the reason at WARNING; without it such a placement raises
            ``InvalidArgumentError``.
        gpu_memory_fraction: the most of each used GPU's memory this process
            may take (TF1's ``per_process_gpu_memory_fraction``), applied
            through ``torch.cuda.set_per_process_memory_fraction`` and, when
            CuPy is loaded, CuPy's memory pool limit. ``None``: no limit. feedq
            never reserves GPU memory ahead of use.
        visible_devices: which of the GPUs CUDA can see (after
            ``CUDA_VISIBLE_DEVICES``) this process uses, in order: ``/gpu:i``
            is CUDA's ``visible_devices[i]`` (TF1's ``visible_device_list``).
            A string ``"1,0"`` or a sequence. ``None``: all, in CUDA's order.
        operation_timeout: the default ``timeout`` in seconds of every blocking
            call, installed with ``feedq.set_default_timeout`` (TF1's
            ``operation_timeout_in_ms``); ``math.inf`` waits forever; ``None``
            leaves the process default as it is.
        job: this process's job in a cluster (TF1's local ``/job:localhost``).
        task: this process's task index in its job.
    """

    log_device_placement: bool = False
    allow_soft_placement: bool = False
    gpu_memory_fraction: float | None = None
    visible_devices: tuple[int, ...] | str | None = None
    operation_timeout: float | None = None
    job: str = "localhost"
    task: int = 0

    def __post_init__(self) -> None:
        if self.gpu_memory_fraction is not None:
            fraction = float(self.gpu_memory_fraction)
            if not 0.0 < fraction <= 1.0:
                raise ValueError(
                    f"gpu_memory_fraction must be in (0, 1], got {self.gpu_memory_fraction!r}")
            object.__setattr__(self, "gpu_memory_fraction", fraction)
        object.__setattr__(self, "visible_devices", _parse_visible(self.visible_devices))
        if self.operation_timeout is not None:
            timeout = float(self.operation_timeout)
            if math.isnan(timeout) or timeout < 0:
                raise ValueError(
                    f"operation_timeout must be >= 0 seconds or None, got {timeout}")
        if isinstance(self.task, bool) or not isinstance(self.task, int) or self.task < 0:
            raise ValueError(f"task must be an int >= 0, got {self.task!r}")

    @property
    def local_spec(self) -> DeviceSpec:
        """This process's task, ``/job:<job>/replica:0/task:<task>``."""
        return DeviceSpec(job=self.job, replica=0, task=self.task)


def _visible(config: DeviceConfig) -> tuple[int, ...] | None:
    # __post_init__ turned a "1,0" string into a tuple.
    return cast("tuple[int, ...] | None", config.visible_devices)


_config_lock = threading.Lock()
_config = DeviceConfig()  # guarded by _config_lock (reads are atomic)
# GPU (torch index) -> the memory fraction last applied to it
_fractions_applied: dict[int, float] = {}  # guarded by _config_lock


def set_device_config(config: DeviceConfig) -> DeviceConfig:
    """Installs ``config`` for this process (TF1: the session's ConfigProto).

    ``operation_timeout``, when not ``None``, becomes the default timeout at
    once; the memory fraction is applied to each GPU when a stage is next
    placed on it (a config without one lifts an earlier limit). Stages
    already placed keep their placement.

    Returns:
        The previous config.
    """
    global _config
    if not isinstance(config, DeviceConfig):
        raise TypeError(f"expected a DeviceConfig, got {type(config).__name__}")
    if config.operation_timeout is not None:
        _defaults.set_default_timeout(config.operation_timeout)
    with _config_lock:
        previous, _config = _config, config
    return previous


def get_device_config() -> DeviceConfig:
    """The config installed by :func:`set_device_config` (defaults if none)."""
    return _config


# ---------------------------------------------------------------------------
# What CUDA can see.


@dataclasses.dataclass(frozen=True)
class _GpuProbe:
    """GPUs visible to torch: count, descriptions, and why there are none."""

    count: int
    reason: str | None = None
    names: tuple[str, ...] = ()
    memory: tuple[int, ...] = ()


def _visible_env() -> str:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "unset" if env is None else repr(env)


def _probe_torch() -> _GpuProbe:
    try:
        import torch
    except ImportError:
        return _GpuProbe(0, 'torch is not installed (pip install "feedq[torch]")')
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return _GpuProbe(0, f"torch {torch.__version__} is a CPU-only build")
    if env is not None and env.strip() in ("", "-1"):
        return _GpuProbe(0, f"CUDA_VISIBLE_DEVICES={env!r} hides every GPU")
    if not torch.cuda.is_available():
        return _GpuProbe(0, f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no GPU"
                            f" (driver missing? CUDA_VISIBLE_DEVICES={_visible_env()})")
    count = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    return _GpuProbe(count, None, tuple(p.name for p in props),
                     tuple(int(p.total_memory) for p in props))


@functools.lru_cache(maxsize=1)
def _probe() -> _GpuProbe:
    # Cached: the visible set is fixed once CUDA is initialised. Tests replace
    # this function to model GPU machines on a CPU one.
    return _probe_torch()


# ---------------------------------------------------------------------------
# The placer.


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a stage was placed.

    Attributes:
        request: the stage.
        requested: the device asked for (contexts and functions applied).
        device: the device it got, fully specified
            (``/job:localhost/replica:0/task:0/device:GPU:0``).
        torch_device: the same device as PyTorch names it: ``"cpu"`` or
            ``"cuda:<i>"`` with ``i`` counted after ``CUDA_VISIBLE_DEVICES``
            and ``visible_devices``.
        soft: True when soft placement moved the stage to the CPU.
        reason: why the requested device was unavailable (when ``soft``).
    """

    request: PlacementRequest
    requested: DeviceSpec
    device: DeviceSpec
    torch_device: str
    soft: bool = False
    reason: str | None = None

    @property
    def is_gpu(self) -> bool:
        """True when the stage got a CUDA device."""
        return self.device.device_type == "GPU"

    def log_line(self) -> str:
        """The placement log line (TF1's ``name: (type): device``)."""
        if self.request.kind == "stage":
            line = f"{self.request.name}: ({self.request.type}): {self.device}"
        else:
            line = f"{self.request.describe()}: {self.device}"
        line += f" [{self.torch_device}]"
        if self.soft:
            line += f" (soft placement: {self.requested or '<any>'} unavailable: {self.reason})"
        return line


def _unavailable_reason(spec: DeviceSpec, dtypes: Sequence[np.dtype[Any]],
                        config: DeviceConfig) -> tuple[str | None, int]:
    """Why ``spec`` cannot be had on this process, and the torch GPU index if it can."""
    local = config.local_spec
    for field in ("job", "replica", "task"):
        value = getattr(spec, field)
        if value is not None and value != getattr(local, field):
            return (f"{spec.replace(device_type=None, device_index=None)} is not this process "
                    f"({local}); placing on other tasks is feedq.distributed's job"), -1
    kind = spec.device_type
    if kind == "CPU":
        if spec.device_index not in (None, 0):
            return "this process has one CPU device, /device:CPU:0", -1
        return None, -1
    if kind != "GPU":
        return f"no device of type {kind} (feedq places stages on CPU and GPU)", -1
    bad = [str(dt) for dt in dtypes if np.dtype(dt).kind not in _DEVICE_KINDS]
    if bad:
        return (f"dtype {', '.join(sorted(set(bad)))} cannot be held on a GPU "
                f"(torch and CuPy hold bool, integers, floats and complex)"), -1
    probe = _probe()
    if probe.count == 0:
        return f"no GPU is visible: {probe.reason}", -1
    visible = _visible(config)
    mapping = tuple(range(probe.count)) if visible is None else visible
    index = 0 if spec.device_index is None else spec.device_index
    if index >= len(mapping):
        how = (f"DeviceConfig.visible_devices={','.join(map(str, visible))}"
               if visible is not None else f"CUDA_VISIBLE_DEVICES={_visible_env()}")
        return (f"GPU:{index} does not exist: {len(mapping)} GPU(s) visible "
                f"({how})"), -1
    physical = mapping[index]
    if physical >= probe.count:
        return (f"GPU:{index} is visible_devices entry {physical}, but CUDA sees only "
                f"{probe.count} GPU(s) (CUDA_VISIBLE_DEVICES={_visible_env()})"), -1
    return None, physical


def _apply_memory_fraction(physical: int, config: DeviceConfig) -> None:
    with _config_lock:
        fraction = config.gpu_memory_fraction
        if fraction is None and physical in _fractions_applied:
            fraction = 1.0  # a config without a limit lifts the one set before
        if fraction is None or _fractions_applied.get(physical) == fraction:
            return
        _fractions_applied[physical] = fraction
    applied = []
    torch = loaded("torch")
    if torch is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, physical)
        applied.append("torch")
    cupy = loaded("cupy")
    if cupy is not None:
        with cupy.cuda.Device(physical):
            cupy.get_default_memory_pool().set_limit(fraction=fraction)
        applied.append("cupy")
    logger.info("cuda:%d: memory limited to %.0f%% (%s)", physical, fraction * 100,
                ", ".join(applied) or "no CUDA library loaded")


def place(request: PlacementRequest, config: DeviceConfig | None = None, *,
          requested: DeviceSpec | None = None) -> Placement:
    """Places a stage: applies this thread's device contexts, then resolves.

    A stage with no device type goes to ``/device:GPU:0`` when a GPU is
    visible and its dtypes fit, else to ``/device:CPU:0`` (TF1's default).
    With ``log_device_placement`` the result is logged at INFO; a soft
    fallback is always logged at WARNING, with its reason.

    Args:
        request: the stage.
        config: defaults to :func:`get_device_config`.
        requested: the spec already computed by :func:`current_device` in the
            thread that created the stage (skips the contexts of this thread).

    Returns:
        The placement.

    Raises:
        InvalidArgumentError: the requested device is unavailable and
            ``allow_soft_placement`` is off.
    """
    config = get_device_config() if config is None else config
    spec = current_device(request) if requested is None else requested
    if spec.device_type is None:
        # TF1 prefers the GPU for an op that does not say which device; when
        # there is none, the CPU is no fallback but the answer: no warning.
        gpu = spec.replace(device_type="GPU", device_index=0)
        reason, physical = _unavailable_reason(gpu, request.dtypes, config)
        if reason is None:
            return _placed(request, spec, gpu, physical, config)
        cpu = spec.replace(device_type="CPU", device_index=0)
        reason, _ = _unavailable_reason(cpu, request.dtypes, config)
        if reason is None:
            return _placed(request, spec, cpu, -1, config)
    else:
        reason, physical = _unavailable_reason(spec, request.dtypes, config)
        if reason is None:
            return _placed(request, spec, spec.replace(device_index=spec.device_index or 0),
                           physical, config)
    return _fallback(request, spec, reason or "unavailable", config)


def _fallback(request: PlacementRequest, spec: DeviceSpec, reason: str,
              config: DeviceConfig) -> Placement:
    """The CPU under soft placement (logged at WARNING), else InvalidArgumentError."""
    if not config.allow_soft_placement:
        raise InvalidArgumentError(
            f"Cannot assign a device for {request.describe()}: could not "
            f"satisfy device specification {spec.to_string() or '<any>'!r}: {reason}. "
            f"Set allow_soft_placement=True in feedq.DeviceConfig to fall back to "
            f"/device:CPU:0")
    placement = Placement(request, spec, config.local_spec.make_merged_spec(_CPU0), "cpu",
                          soft=True, reason=reason)
    logger.warning("%s", placement.log_line())
    return placement


def _placed(request: PlacementRequest, requested: DeviceSpec, spec: DeviceSpec, physical: int,
            config: DeviceConfig, torch_device: str | None = None) -> Placement:
    full = config.local_spec.make_merged_spec(spec)
    if physical >= 0:
        _apply_memory_fraction(physical, config)
    if torch_device is None:
        torch_device = "cpu" if physical < 0 else f"cuda:{physical}"
    placement = Placement(request, requested, full, torch_device)
    if config.log_device_placement:
        logger.info("%s", placement.log_line())
    return placement
