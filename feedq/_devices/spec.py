"""Device names: one :class:`DeviceSpec` for TensorFlow and PyTorch spellings.

TF1 names a device by up to five fields, ``/job:<j>/replica:<r>/task:<t>/device:<TYPE>:<i>``,
any of which may be left out; PyTorch names it ``cpu`` or ``cuda:<i>``. Both parse
into the same :class:`DeviceSpec`, and nested ``feedq.device(...)`` contexts merge
specs field by field the way TF1's ``DeviceSpec.merge_from`` does.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

__all__ = ["DeviceLike", "DeviceSpec"]

# PyTorch and CuPy say "cuda" where TF says "GPU"; the canonical type is TF's.
_TYPE_ALIASES = {"CPU": "CPU", "GPU": "GPU", "CUDA": "GPU"}

_FIELD_RE = re.compile(r"^(job|replica|task|device|cpu|gpu|cuda):(.*)$", re.IGNORECASE)
_BARE_RE = re.compile(r"^(?P<type>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<index>\d+|\*))?$")

# What a caller may pass where a device is expected (a torch.device also works:
# it is read through ``str()``).
DeviceLike = Any


def _canonical_type(name: str) -> str:
    upper = name.upper()
    return _TYPE_ALIASES.get(upper, upper)


def _parse_index(text: str, whole: str) -> int | None:
    if text == "*":
        return None
    if not text.isdigit():
        raise ValueError(f"invalid device index {text!r} in device name {whole!r}")
    return int(text)


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """A (possibly partial) device name, TF1's ``tf.DeviceSpec``.

    Every field may be ``None`` = unspecified; a partial spec is completed by the
    enclosing ``feedq.device(...)`` contexts and then by the placer.

    Parsing accepts, case-insensitively:

    * TF forms: ``/cpu:0``, ``/gpu:1``, ``/device:GPU:1``, ``/device:CPU:*``,
      ``/job:worker/task:0/gpu:1``, ``/job:ps/task:0``,
      ``/job:worker/replica:0/task:1/device:GPU:0``, and TF2's ``GPU:0``;
    * PyTorch forms: ``cpu``, ``cuda``, ``cuda:1`` (and a ``torch.device``).

    ``cuda`` is read as TF's ``GPU``. The empty string is the empty spec.

    Attributes:
        job: cluster job name, e.g. ``"worker"``.
        replica: replica index within the job.
        task: task index within the job.
        device_type: ``"CPU"``, ``"GPU"`` or another upper-case type name.
        device_index: index among devices of that type.
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    def __post_init__(self) -> None:
        for field in ("replica", "task", "device_index"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"DeviceSpec.{field} must be an int >= 0 or None, got {value!r}")
        if self.device_type is not None:
            object.__setattr__(self, "device_type", _canonical_type(self.device_type))
        if self.job is not None and (not self.job or "/" in self.job or ":" in self.job):
            raise ValueError(f"invalid job name {self.job!r}")

    @classmethod
    def from_string(cls, name: str) -> DeviceSpec:
        """Parses a TF or PyTorch device name.

        Raises:
            ValueError: the name is not a device name (TF1 raised it too).
        """
        if not isinstance(name, str):
            raise TypeError(f"device name must be a str, got {type(name).__name__}")
        text = name.strip()
        if not text:
            return cls()
        if not text.startswith("/"):
            # torch ("cuda:1") or TF2 shorthand ("GPU:0"): exactly one device field.
            match = _BARE_RE.match(text)
            if match is None:
                raise ValueError(f"invalid device name {name!r}")
            index = match.group("index")
            return cls(device_type=match.group("type"),
                       device_index=None if index is None else _parse_index(index, name))
        fields: dict[str, Any] = {}
        for part in text[1:].split("/"):
            match = _FIELD_RE.match(part)
            if match is None:
                raise ValueError(f"invalid device name {name!r}: unknown field {part!r}")
            key, value = match.group(1).lower(), match.group(2)
            if key == "device":
                # "/device:GPU:1" splits as key "device", value "GPU:1".
                dev = _BARE_RE.match(value)
                if dev is None:
                    raise ValueError(f"invalid device name {name!r}: bad device {value!r}")
                key = "device_type"
                value = dev.group("type")
                if dev.group("index") is not None:
                    fields["device_index"] = _parse_index(dev.group("index"), name)
                if "device_type" in fields:
                    raise ValueError(f"invalid device name {name!r}: device given twice")
                fields["device_type"] = value
            elif key in ("cpu", "gpu", "cuda"):
                # Legacy TF1 "/gpu:1" and "/cpu:*".
                if "device_type" in fields:
                    raise ValueError(f"invalid device name {name!r}: device given twice")
                fields["device_type"] = key
                fields["device_index"] = _parse_index(value, name)
            else:
                if key in fields:
                    raise ValueError(f"invalid device name {name!r}: {key} given twice")
                if key == "job":
                    if not value:
                        raise ValueError(f"invalid device name {name!r}: empty job")
                    fields["job"] = value
                else:
                    fields[key] = _parse_index(value, name)
        return cls(**fields)

    @classmethod
    def parse(cls, device: DeviceLike) -> DeviceSpec:
        """Turns a name, a ``torch.device``, a ``DeviceSpec`` or ``None`` into a spec.

        ``None`` is the empty spec.

        Raises:
            ValueError: an unparseable name.
            TypeError: an object that names no device.
        """
        if device is None:
            return cls()
        if isinstance(device, DeviceSpec):
            return device
        if isinstance(device, str):
            return cls.from_string(device)
        if type(device).__name__ == "device" and type(device).__module__.startswith("torch"):
            # torch.device without importing torch.
            return cls.from_string(str(device))
        raise TypeError(
            f"expected a device name, torch.device or DeviceSpec, got {type(device).__name__}")

    def make_merged_spec(self, dev: DeviceSpec) -> DeviceSpec:
        """Returns this spec completed by ``dev``'s specified fields, which win.

        As TF1's ``merge_from``, field by field, with one deliberate difference:
        when ``dev`` names a different ``device_type`` without an index, this
        spec's index is not kept (TF1 turns ``/gpu:1`` + ``/cpu`` into
        ``/device:CPU:1``, a device that does not exist; feedq gives ``/device:CPU``).
        """
        index = dev.device_index if dev.device_index is not None else self.device_index
        if (dev.device_index is None and dev.device_type is not None
                and dev.device_type != self.device_type):
            index = None
        return DeviceSpec(
            job=dev.job if dev.job is not None else self.job,
            replica=dev.replica if dev.replica is not None else self.replica,
            task=dev.task if dev.task is not None else self.task,
            device_type=dev.device_type if dev.device_type is not None else self.device_type,
            device_index=index,
        )

    def replace(self, **changes: Any) -> DeviceSpec:
        """Returns a copy with the given fields replaced (``None`` clears a field)."""
        return dataclasses.replace(self, **changes)

    def to_string(self) -> str:
        """The TF canonical name, e.g. ``/job:worker/task:0/device:GPU:1`` (``""`` if empty)."""
        out = []
        if self.job is not None:
            out.append(f"/job:{self.job}")
        if self.replica is not None:
            out.append(f"/replica:{self.replica}")
        if self.task is not None:
            out.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else str(self.device_index)
            out.append(f"/device:{self.device_type}:{index}")
        return "".join(out)

    @property
    def torch_name(self) -> str | None:
        """The PyTorch spelling (``"cpu"``, ``"cuda:1"``), ``None`` for other types.

        This is the name as written; the placer maps a GPU index through
        ``DeviceConfig.visible_devices`` before it reaches PyTorch.
        """
        if self.device_type == "CPU":
            return "cpu"
        if self.device_type == "GPU":
            return "cuda" if self.device_index is None else f"cuda:{self.device_index}"
        return None

    @property
    def is_empty(self) -> bool:
        """True when no field is specified."""
        return self == DeviceSpec()

    def __str__(self) -> str:
        return self.to_string()
