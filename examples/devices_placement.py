"""The seed's placement cells, in feedq: pinning, the placement log, dynamic
placement, soft placement of an integer variable, GPU memory fraction, timeouts.

TF1 placed graph ops; feedq places the pipeline stages that hold data on a
device (feeders, staging buffers) and, here, a few "variables" made as torch
tensors on the device the placer picked. Runs on a CPU-only machine (the GPU
requests fall back, and say why) and on GPU machines alike.

Run: python examples/devices_placement.py
(Try CUDA_VISIBLE_DEVICES=1,0 or CUDA_VISIBLE_DEVICES= to see the visible
devices change; feedq never reserves GPU memory ahead of use.)
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

import feedq
from feedq.devices import (
    DeviceConfig,
    DeviceFeeder,
    PlacementRequest,
    device,
    list_devices,
    place,
    set_device_config,
)
from feedq.errors import DeadlineExceededError, InvalidArgumentError


def variable(name: str, value: float) -> tuple[Any, str]:
    """A TF1-style variable: placed like an op, then made on its device."""
    import torch

    dtype = np.asarray(value).dtype
    placement = place(PlacementRequest(name, "Variable", (dtype,)))
    return torch.tensor(value, device=placement.torch_device), placement.torch_device


def main() -> None:
    # Placement lines go through logging (logger "feedq.devices"); show them inline.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="  [%(name)s %(levelname)s] %(message)s")

    print("== Devices (what torch / CuPy see, and why a GPU is missing)")
    print(list_devices())

    print("\n== Simple placement: a, b pinned to /cpu:0; c goes where the placer likes")
    with device("/cpu:0"):
        a, dev_a = variable("a", 3.0)
        b, dev_b = variable("b", 4.0)
    c = a * b  # not pinned: computed where its inputs live
    print(f"a on {dev_a}, b on {dev_b}, c = a*b = {float(c)} on {c.device}")

    print("\n== Logging placements (log_device_placement=True)")
    set_device_config(DeviceConfig(log_device_placement=True))
    with device("/job:localhost/task:0"):
        with device("/cpu:0"):
            variable("a", 3.0)
        queue = feedq.FIFOQueue(64, [np.float32, np.int64], shapes=[(4,), ()])
        feeder = DeviceFeeder(queue, 8, name="input_feeder")  # logged: GPU:0, or CPU:0
        feeder.close()

    print("\n== Dynamic placement: a function instead of a device name")

    def variables_on_cpu(op: PlacementRequest) -> str:
        return "/cpu:0" if op.type == "Variable" else (op.device or "/cpu:0")

    with device(variables_on_cpu):
        variable("a", 3.0)  # a Variable: /cpu:0
        place(PlacementRequest("mul", "Mul", (np.dtype(np.float32),)))  # not a Variable

    print("\n== Soft placement: an integer variable asked for on /gpu:0")
    set_device_config(DeviceConfig(log_device_placement=True))
    try:
        with device("/gpu:0"):
            i, _ = variable("i", 3)
        print(f"i = {int(i)} placed on a GPU (this machine has one)")
    except InvalidArgumentError as exc:
        print(f"without allow_soft_placement: InvalidArgumentError: {exc}")
    set_device_config(DeviceConfig(log_device_placement=True, allow_soft_placement=True))
    with device("/gpu:0"):
        i, where = variable("i", 3)  # falls back to the CPU when no GPU can hold it
        # Strings cannot live on any GPU: soft placement moves them even on a GPU box.
        place(PlacementRequest("names", "Variable", (feedq.STRING,)))
    print(f"with allow_soft_placement: i = {int(i)} on {where}")

    print("\n== GPU memory: at most 40% of each GPU this process uses")
    set_device_config(DeviceConfig(gpu_memory_fraction=0.4, allow_soft_placement=True,
                                   log_device_placement=True))
    with device("/gpu:0"):
        _, where = variable("x", 1.0)  # the limit is applied when a GPU is first used
    print(f"x on {where}")

    print("\n== operation_timeout: every blocking call's default timeout")
    set_device_config(DeviceConfig(operation_timeout=0.1))
    empty = feedq.FIFOQueue(4, np.float32)
    try:
        empty.dequeue()
    except DeadlineExceededError as exc:
        print(f"dequeue on an empty queue: DeadlineExceededError: {exc}")
    set_device_config(DeviceConfig(operation_timeout=float("inf")))


if __name__ == "__main__":
    main()
