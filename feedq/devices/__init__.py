"""Devices: placement, soft placement, memory limits, and feeding batches to devices.

Three parts, one module each:

* placement (``_spec``, ``_placement``): device names in TF and PyTorch form,
  ``feedq.device(...)`` contexts, :class:`DeviceConfig` (TF1's ConfigProto:
  placement log, soft placement, GPU memory fraction, visible devices, default
  operation timeout), :func:`list_devices`;
* feeding (``_feeder``, ``_engines``): :class:`DeviceFeeder`, pinned staging,
  asynchronous copies, replicas in ``split`` / ``round_robin`` / ``broadcast``
  mode, per-component device maps;
* adapters (``_adapters``): torch ``IterableDataset``, ``tf.data.Dataset``, CuPy.

torch, CuPy and TensorFlow are imported on first use only.
"""

from __future__ import annotations

from ._adapters import as_tf_dataset, as_torch_dataset, tf_signature, to_cupy, to_torch
from ._extras import MissingExtraError
from ._feeder import DeviceFeeder, FeederStatistics, ReplicaMode
from ._placement import (
    DeviceConfig,
    DeviceInfo,
    DeviceListing,
    Placement,
    PlacementRequest,
    current_device,
    device,
    get_device_config,
    list_devices,
    place,
    set_device_config,
)
from ._spec import DeviceSpec

__all__ = [
    "DeviceConfig",
    "DeviceFeeder",
    "DeviceInfo",
    "DeviceListing",
    "DeviceSpec",
    "FeederStatistics",
    "MissingExtraError",
    "Placement",
    "PlacementRequest",
    "ReplicaMode",
    "as_tf_dataset",
    "as_torch_dataset",
    "current_device",
    "device",
    "get_device_config",
    "list_devices",
    "place",
    "set_device_config",
    "tf_signature",
    "to_cupy",
    "to_torch",
]

# The public path, for repr() and docs (style rule 13).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("feedq.devices."):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj
