"""Train a small torch model on two replicas fed by feedq (in-graph data parallelism).

A producer thread fills a FIFOQueue with examples of a noisy linear function;
a DeviceFeeder dequeues batches of 128, splits each across the two replicas
(``mode="split"``) and delivers the halves on their devices: two GPUs when
there are two, one GPU twice when there is one, the CPU twice otherwise. Each
replica computes gradients on its half; the gradients are averaged (by hand:
an all-reduce of two) and both replicas take the same step.

Needs torch; a CPU-only build is enough. Install it with
pip install torch --index-url https://download.pytorch.org/whl/cpu
then run: python examples/torch_two_replicas.py  (a few seconds on a CPU)
"""

from __future__ import annotations

import copy
import os
import sys
import threading

import numpy as np

import feedq
from feedq.devices import DeviceFeeder

try:
    import torch
except ImportError:
    sys.exit(f"{feedq.MissingExtraError.for_module('torch', 'examples/torch_two_replicas.py')}\n"
             "A CPU-only torch is enough: "
             "pip install torch --index-url https://download.pytorch.org/whl/cpu")

FEATURES, BATCH = 16, 128
# The test suite runs every example with FEEDQ_EXAMPLE_QUICK=1: fewer steps.
STEPS = 60 if os.environ.get("FEEDQ_EXAMPLE_QUICK") else 150


def produce(queue: feedq.FIFOQueue, stop: threading.Event, seed: int = 0) -> None:
    """Enqueues blocks of 512 examples until stopped, then closes the queue."""
    rng = np.random.default_rng(seed)
    true_w = np.linspace(-1, 1, FEATURES, dtype=np.float32)
    try:
        while not stop.is_set():
            x = rng.standard_normal((512, FEATURES), dtype=np.float32)
            y = (x @ true_w + 0.5 + 0.01 * rng.standard_normal(512)).astype(np.float32)
            try:
                queue.enqueue_many([x, y[:, None]], timeout=0.1)
            except feedq.errors.DeadlineExceededError:
                continue  # full: look at the stop flag again, nothing was enqueued
    except feedq.errors.CancelledError:
        pass  # the queue was closed under us: the consumer is done
    finally:
        queue.close()


def replica_devices() -> list[str]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count >= 2:
        return ["cuda:0", "cuda:1"]
    return ["cuda:0", "cuda:0"] if count == 1 else ["cpu", "cpu"]


def main() -> None:
    torch.manual_seed(0)
    devices = replica_devices()
    queue = feedq.FIFOQueue(4096, [np.float32, np.float32], shapes=[(FEATURES,), (1,)])
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(queue, stop), name="example-producer")
    producer.start()

    template = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                                   torch.nn.Linear(32, 1))
    # Two parameter sets with the same start, even when both sit on one device.
    replicas = [copy.deepcopy(template).to(d) for d in devices]
    optimizers = [torch.optim.SGD(r.parameters(), lr=0.05) for r in replicas]
    loss_fn = torch.nn.MSELoss()

    feeder = DeviceFeeder(queue, BATCH, replicas=devices, mode="split", output="torch",
                          prefetch=2, name="train_feeder")
    print("replicas on", ", ".join(p[0].torch_device for p in feeder.placements))
    first = last = 0.0
    try:
        with feeder:
            for step, shards in enumerate(feeder):
                losses = []
                for replica, opt, (x, y) in zip(replicas, optimizers, shards):
                    opt.zero_grad(set_to_none=False)
                    loss = loss_fn(replica(x), y)
                    loss.backward()
                    losses.append(loss.item())
                # All-reduce of two: average the gradients, the same step everywhere.
                for p0, p1 in zip(replicas[0].parameters(), replicas[1].parameters()):
                    mean = (p0.grad + p1.grad.to(p0.device)) / 2
                    p0.grad.copy_(mean)
                    p1.grad.copy_(mean.to(p1.device))
                for opt in optimizers:
                    opt.step()
                mean_loss = sum(losses) / len(losses)
                first = first or mean_loss
                last = mean_loss
                if step % 30 == 0:
                    print(f"step {step:4d}  loss {mean_loss:.4f}  "
                          f"(shards of {shards[0][0].shape[0]} + {shards[1][0].shape[0]})")
                if step + 1 == STEPS:
                    break
    finally:
        stop.set()
        producer.join(5)
    for a, b in zip(replicas[0].parameters(), replicas[1].parameters()):
        if not torch.allclose(a.detach().cpu(), b.detach().cpu()):
            raise RuntimeError("replicas diverged: the gradients were not averaged")
    print(f"loss {first:.4f} -> {last:.4f} after {STEPS} steps; replicas in sync")
    if producer.is_alive():
        raise RuntimeError("producer thread did not stop")


if __name__ == "__main__":
    main()
