"""A pipeline in worker processes: feedq.process_stage.

``build(worker_index, num_workers)`` builds one worker's ordinary feedq
pipeline and returns its batch stage; ``feedq.process_stage`` runs it in
worker processes and hands the batches back as NumPy views of shared memory.
Each ``for`` loop over the stage is one epoch, so evaluating between epochs
needs no rebuilding. The same ``build`` feeds a torch DataLoader through
``feedq.as_torch_dataset(build)``.

Run: python examples/process_stage_training.py
"""

from __future__ import annotations

import numpy as np

import feedq
from feedq.process import get_worker_info

ROWS = 10_000


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """The whole dataset (a stand-in for files: each worker opens its own)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 16), dtype=np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int64)
    return x, y


def build(worker_index: int, num_workers: int) -> feedq.Stage:
    """This worker's shard, shuffled per epoch, in batches of 256."""
    info = get_worker_info()
    seed = None if info is None else info.shard_seed()  # differs per worker and epoch
    x, y = dataset()
    mine = slice(worker_index, None, num_workers)
    rows = feedq.slice_input_producer([x[mine], y[mine]], num_epochs=1, seed=seed)
    return feedq.shuffle_batch(rows, batch_size=256, capacity=2048, min_after_dequeue=512,
                               seed=seed, allow_smaller_final_batch=True)


def main() -> None:
    w = np.zeros(16, np.float32)  # a logistic regression, trained with NumPy
    with feedq.Pipeline():
        stage = feedq.process_stage(build, num_processes=2, epochs=3, seed=0)
        for epoch in range(3):
            seen = 0
            for x, y in stage:  # one epoch: views of shared memory, no copy
                p = 1 / (1 + np.exp(-(x @ w)))
                w -= 0.1 * x.T @ (p - y) / len(y)
                seen += len(y)
            x_all, y_all = dataset()
            accuracy = float((((x_all @ w) > 0) == y_all).mean())
            print(f"epoch {epoch}: {seen} rows, accuracy {accuracy:.3f}")
            assert seen == ROWS
        print(stage.statistics())


if __name__ == "__main__":
    main()
