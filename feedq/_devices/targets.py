"""Target placement: where each of a feeder's components goes, per replica.

A feeder has one target (``device=``) or several (``replicas=``); each target
is a device or a per-component device map. Placement happens in two steps:

1. when the feeder is created, in the creating thread, each target (or map
   entry) is read through that thread's ``feedq.device(...)`` contexts and
   placed, so a missing GPU fails at creation (or falls back, under soft
   placement);
2. once the batch structure is known (at once for a queue, at the first
   batch for an iterable), each (replica, component) pair gets its placement,
   and a string component that landed on a GPU is placed again alone: soft
   placement sends it to the host, else ``InvalidArgumentError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feedq._devices.placement import (
    _DEVICE_KINDS,
    DeviceConfig,
    Placement,
    PlacementRequest,
    current_device,
    place,
)
from feedq._devices.spec import DeviceLike, DeviceSpec
from feedq._devices.structure import Structure
from feedq.errors import InvalidArgumentError

__all__ = ["Targets"]

Target = DeviceLike | Mapping[Any, DeviceLike]


class Targets:
    """The placed targets of one feeder.

    Attributes:
        requested: per replica, map key (``None`` for a plain device) -> the
            spec the creating thread's contexts asked for.
        per_target: per replica, map key -> its placement (step 1).
        placements: per replica, per component -> its placement (step 2;
            empty until the structure is known).
        gpus: the CUDA indices any target was placed on, sorted.
    """

    def __init__(self, name: str, targets: Sequence[Target], replicated: bool,
                 config: DeviceConfig) -> None:
        """Reads this thread's device contexts for every target (contexts are
        thread-local: this must run in the thread that creates the feeder)."""
        self._name = name
        self._replicated = replicated
        self._config = config
        self.requested: list[dict[Any, DeviceSpec]] = []
        for r, target in enumerate(targets):
            entries = target.items() if isinstance(target, Mapping) else [(None, target)]
            specs = {}
            for key, dev in entries:
                request = PlacementRequest(self.name_of(r, key), "DeviceFeeder",
                                           device=DeviceSpec.parse(dev).to_string())
                specs[key] = current_device(request)
            self.requested.append(specs)
        self.per_target: list[dict[Any, Placement]] = []
        self.placements: list[list[Placement]] = []
        self.gpus: list[int] = []

    def name_of(self, replica: int, key: Any) -> str:
        """The stage name of one target, for the placement log and errors."""
        name = f"{self._name}/replica_{replica}" if self._replicated else self._name
        return name if key is None else f"{name}/{key}"

    def place(self, structure: Structure | None, dtypes: list[np.dtype[Any]]) -> list[int]:
        """Step 1: places each replica's device (or each entry of its map).

        Args:
            structure: the batch structure when known (a queue), else ``None``.
            dtypes: the components' dtypes (empty when the structure is not known).

        Returns:
            The CUDA indices used (also kept in :attr:`gpus`).

        Raises:
            InvalidArgumentError: a device is unavailable without soft placement.
        """
        self.per_target = []
        for r, specs in enumerate(self.requested):
            row = {}
            for key, spec in specs.items():
                held = [dt for k, dt in zip(structure.keys, dtypes)
                        if key is None or k == key] if structure is not None else []
                # Strings never go to a GPU: they are placed alone in place_components.
                fits = tuple(dt for dt in held if dt.kind in _DEVICE_KINDS) or tuple(held[:1])
                request = PlacementRequest(self.name_of(r, key), "DeviceFeeder", fits)
                row[key] = place(request, self._config, requested=spec)
            self.per_target.append(row)
        self.gpus = sorted({int(p.torch_device.split(":")[1])
                            for row in self.per_target for p in row.values() if p.is_gpu})
        return self.gpus

    def place_components(self, structure: Structure,
                         dtypes: list[np.dtype[Any]]) -> list[list[Placement]]:
        """Step 2: places every (replica, component) once the structure is known.

        Returns:
            Per replica, per component, its placement (also kept in
            :attr:`placements`).

        Raises:
            InvalidArgumentError: a device map's keys are not the components,
                or a string component's device cannot hold it (no soft placement).
        """
        placements = []
        for r, specs in enumerate(self.requested):
            if None not in specs:
                unknown = set(specs) - set(structure.keys)
                missing = set(structure.keys) - set(specs)
                if structure.kind == "bare" or unknown or missing:
                    raise InvalidArgumentError(
                        f"{self._name}: the device map of replica {r} has keys "
                        f"{sorted(map(str, specs))} but the batch components are "
                        f"{[str(k) for k in structure.keys]}")
            row = []
            for key, dtype in zip(structure.keys, dtypes):
                spec_key = None if None in specs else key
                placement = self.per_target[r][spec_key]
                if placement.is_gpu and dtype.kind not in _DEVICE_KINDS:
                    # Only this component cannot live there: place it alone.
                    request = PlacementRequest(self.name_of(r, key), "DeviceFeeder", (dtype,))
                    placement = place(request, self._config, requested=specs[spec_key])
                row.append(placement)
            placements.append(row)
        self.placements = placements
        return placements
