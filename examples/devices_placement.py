"""The seed's "Placing Operations on Devices" cells, on PyTorch tensors.

Inside ``feedq.device(...)`` the tensors, modules and variables PyTorch
creates land on the device the block chooses (a name, a ``DeviceSpec`` or a
function of the op), and ``feedq.DeviceConfig`` brings TF1's placement log,
soft placement, GPU memory fraction and operation timeout. Runs on a CPU-only
machine (the GPU requests fall back, and say why) and on GPU machines alike.
PyTorch's ``meta`` device (shapes without storage) shows placement moving
things even without a GPU.

Needs torch; a CPU-only build is enough. Install it with
pip install torch --index-url https://download.pytorch.org/whl/cpu
then run: python examples/devices_placement.py
(Try CUDA_VISIBLE_DEVICES=1,0 or CUDA_VISIBLE_DEVICES= on a GPU machine to see
the visible devices change; feedq never reserves GPU memory ahead of use.)
"""

from __future__ import annotations

import logging
import sys

import numpy as np

import feedq
from feedq.devices import DeviceConfig, DeviceFeeder, PlacementRequest, set_device_config
from feedq.errors import DeadlineExceededError, InvalidArgumentError

try:
    import torch
except ImportError:
    sys.exit(f"{feedq.MissingExtraError.for_module('torch', 'examples/devices_placement.py')}\n"
             "A CPU-only torch is enough: "
             "pip install torch --index-url https://download.pytorch.org/whl/cpu")


def main() -> None:
    # Placement lines go through logging (logger "feedq.devices"); show them inline.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="  [%(name)s %(levelname)s] %(message)s")

    print("== Devices (what torch / CuPy see, and why a GPU is missing)")
    print(feedq.list_devices())

    print("\n== Simple placement: a, b pinned to /cpu:0; c goes where its inputs are")
    # TF1: with tf.device("/cpu:0"): a, b = tf.Variable(3.0), tf.Variable(4.0)
    with feedq.device("/cpu:0"):
        a, b = feedq.Variable(3.0, name="a"), feedq.Variable(4.0, name="b")
    c = a * b
    print(f"a on {a.device}, b on {b.device}, c = a*b = {c.item()} on {c.device}")

    print("\n== Another device: a model built on PyTorch's meta device, placed whole")
    with feedq.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 10))
    count = sum(p.numel() for p in model.parameters())
    print(f"{count:,} parameters on {sorted({p.device.type for p in model.parameters()})}, "
          f"no memory allocated")

    print("\n== Logging placements (log_device_placement=True)")
    set_device_config(DeviceConfig(log_device_placement=True))
    with feedq.device("/job:localhost/task:0"):
        with feedq.device("/cpu:0"):
            feedq.Variable(3.0, name="a")
            torch.zeros(2, 3)
            torch.nn.Linear(3, 1)
        # Pipeline stages are placed too: GPU:0 when there is one, else CPU:0.
        queue = feedq.FIFOQueue(64, [np.float32, np.int64], shapes=[(4,), ()])
        DeviceFeeder(queue, 8, name="input_feeder").close()

    print("\n== Dynamic placement: a function instead of a device name")

    def variables_on_cpu(op: PlacementRequest) -> str:
        print(f"    variables_on_cpu sees: kind={op.kind} type={op.type} name={op.name!r}")
        if op.type == "Variable":
            return "/cpu:0"
        return op.device or "/cpu:0"

    with feedq.device(variables_on_cpu):
        a = feedq.Variable(3.0, name="a")
        b = torch.tensor(4.0)  # TF1: tf.constant(4.0)
        c = a * b  # an op on existing tensors, not a creation: runs where they live
    print(f"c = {c.item()} on {c.device}")

    print("\n== Ops & kernels: an integer variable on /gpu:0")
    # TF1 had no integer GPU kernel for it; PyTorch holds integers on a GPU, so
    # here only a missing GPU makes the placement fail.
    try:
        with feedq.device("/gpu:0"):
            i = feedq.Variable(3, name="i")
        print(f"i = {i.item()} placed on {i.device} (this machine has a GPU)")
    except InvalidArgumentError as exc:
        print(f"without allow_soft_placement: InvalidArgumentError: {exc}")

    print("\n== Soft placement: fall back to the CPU instead (allow_soft_placement=True)")
    set_device_config(DeviceConfig(log_device_placement=True, allow_soft_placement=True))
    with feedq.device("/gpu:0"):
        i = feedq.Variable(3, name="i")
        # Strings cannot live on any device torch has: host memory even on a GPU box.
        names = feedq.Variable([b"alpha", b"beta"], name="names")
    print(f"i = {i.item()} on {i.device}; names on {names.device} ({type(names).__name__})")

    print("\n== GPU memory: at most 40% of each GPU this process uses")
    set_device_config(DeviceConfig(gpu_memory_fraction=0.4, allow_soft_placement=True,
                                   log_device_placement=True))
    with feedq.device("/gpu:0"):
        x = torch.ones(1024)  # the limit is applied when a GPU is first used
    print(f"x on {x.device}")

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
