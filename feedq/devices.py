"""Devices: placement, soft placement, memory limits, and feeding batches to devices.

The public face of ``feedq.devices``; the implementation lives in the private
package ``feedq._devices``, one idea per module:

* names and placement (``spec``, ``placement``, ``listing``): device names in
  TF and PyTorch form, ``feedq.device(...)`` contexts, :class:`DeviceConfig`
  (TF1's ConfigProto: placement log, soft placement, GPU memory fraction,
  visible devices, default operation timeout), :func:`list_devices`;
* tensors (``tensors``, ``variables``): inside ``feedq.device(...)`` the
  tensors, parameters and modules PyTorch creates land on the chosen device;
  :func:`Variable`, TF1's variable as a named ``torch.nn.Parameter``;
* feeding (``feeder``, ``feeder_thread``, ``handoff``, ``source``, ``structure``,
  ``targets``, ``engines``): :class:`DeviceFeeder`, pinned staging,
  asynchronous copies, replicas in ``split`` / ``round_robin`` /
  ``broadcast`` mode, per-component device maps;
* adapters (``adapters``, ``extras``): torch ``IterableDataset``,
  ``tf.data.Dataset``, CuPy; late imports of the optional libraries.

torch, CuPy and TensorFlow are imported on first use only.
"""

from __future__ import annotations

from feedq._devices.adapters import (
    as_tf_dataset,
    as_torch_dataset,
    tf_signature,
    to_cupy,
    to_torch,
)
from feedq._devices.feeder import DeviceFeeder, FeederStatistics, ReplicaMode
from feedq._devices.listing import DeviceInfo, DeviceListing, list_devices
from feedq._devices.placement import (
    DeviceConfig,
    Placement,
    PlacementRequest,
    current_device,
    device,
    get_device_config,
    place,
    set_device_config,
)
from feedq._devices.spec import DeviceSpec
from feedq._devices.variables import Variable
from feedq.errors import MissingExtraError  # defined there (readers raise it too)

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
    "Variable",
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
    if getattr(_obj, "__module__", "").startswith("feedq._devices."):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj
