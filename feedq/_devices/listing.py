"""``list_devices``: the devices stages can be placed on, and why a GPU is missing.

torch is asked through the placer's cached probe (so tests that model GPU
machines on a CPU one see the same GPUs here); CuPy is asked directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from feedq._devices import placement
from feedq._devices.placement import DeviceConfig, _visible, _visible_env, get_device_config

__all__ = ["DeviceInfo", "DeviceListing", "list_devices"]


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One device this process can place stages on.

    Attributes:
        name: TF name, ``/device:GPU:0``.
        torch_device: PyTorch name, ``cuda:1`` (after ``visible_devices``).
        device_type: ``"CPU"`` or ``"GPU"``.
        description: model and memory, e.g. ``"NVIDIA H200, 139.8 GiB"``.
        memory_bytes: total device memory (0 for the CPU).
        libraries: which libraries see it: ``("numpy",)``, ``("torch", "cupy")``...
    """

    name: str
    torch_device: str
    device_type: str
    description: str
    memory_bytes: int
    libraries: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DeviceListing:
    """What :func:`list_devices` found: the devices, and why any GPU is missing.

    Iterates over ``devices``; ``str()`` is a readable table.

    Attributes:
        devices: the CPU first, then each usable GPU as ``/gpu:i`` numbers it.
        missing: one line per reason a GPU is not usable (empty when all is well).
    """

    devices: tuple[DeviceInfo, ...]
    missing: tuple[str, ...]

    def __iter__(self) -> Iterator[DeviceInfo]:
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __str__(self) -> str:
        lines = [f"{d.name:<16} {d.torch_device:<8} {d.description} "
                 f"({', '.join(d.libraries)})" for d in self.devices]
        lines += [f"missing: {reason}" for reason in self.missing]
        return "\n".join(lines)


def _probe_cupy() -> tuple[int, str | None]:
    try:
        import cupy
    except ImportError:
        return 0, 'cupy is not installed (pip install "feedq[cupy]")'
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install fails in many ways
        return 0, f"cupy failed to import: {exc}"
    try:
        return int(cupy.cuda.runtime.getDeviceCount()), None
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError without a driver
        return 0, f"cupy sees no GPU: {exc}"


def list_devices(config: DeviceConfig | None = None) -> DeviceListing:
    """Lists the devices stages can be placed on and why any GPU is missing.

    Asks torch and CuPy (importing them if installed) how many GPUs they see
    after ``CUDA_VISIBLE_DEVICES``, then applies ``config.visible_devices``.

    Args:
        config: defaults to :func:`get_device_config`.
    """
    config = get_device_config() if config is None else config
    devices = [DeviceInfo("/device:CPU:0", "cpu", "CPU", "host memory", 0, ("numpy",))]
    missing = []
    probe = placement._probe()  # looked up at call time: tests replace it
    cupy_count, cupy_reason = _probe_cupy()
    if probe.count == 0:
        missing.append(f"torch: {probe.reason}")
    if cupy_reason is not None:
        missing.append(f"cupy: {cupy_reason}")
    visible = _visible(config)
    mapping = tuple(range(probe.count)) if visible is None else visible
    for index, physical in enumerate(mapping):
        if physical >= probe.count:
            missing.append(f"/device:GPU:{index}: visible_devices entry {physical} is past the "
                           f"{probe.count} GPU(s) torch sees "
                           f"(CUDA_VISIBLE_DEVICES={_visible_env()})")
            continue
        libs = ("torch", "cupy") if physical < cupy_count else ("torch",)
        memory = probe.memory[physical]
        devices.append(DeviceInfo(f"/device:GPU:{index}", f"cuda:{physical}", "GPU",
                                  f"{probe.names[physical]}, {memory / 2**30:.1f} GiB",
                                  memory, libs))
    if visible is not None:
        hidden = sorted(set(range(probe.count)) - set(visible))
        if hidden:
            missing.append(f"cuda:{','.join(map(str, hidden))} hidden by "
                           f"DeviceConfig.visible_devices")
    return DeviceListing(tuple(devices), tuple(missing))
