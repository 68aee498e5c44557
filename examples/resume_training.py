"""Kill a training run, resume it exactly: Pipeline(resumable=True).

A tiny logistic regression (NumPy) trains on CSV files read with
TextLineReader + decode_csv through a seeded shuffle_batch. After every step
the training child writes a checkpoint -- the weights, the step and
``pipe.state_dict()`` -- atomically. This script starts the child, kills it
with SIGKILL in the middle of an epoch (shuffle buffer full, queues filling),
resumes from the last checkpoint inside ``feedq.Pipeline(state=...)``, and
checks that the batches and the final weights are exactly those of an
uninterrupted run.

Run: python examples/resume_training.py
"""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import feedq
from feedq.readers import TextLineReader, decode_csv

QUICK = os.environ.get("FEEDQ_EXAMPLE_QUICK") == "1"
FILES, ROWS_PER_FILE = (4, 300) if QUICK else (8, 2000)
EPOCHS, BATCH = 2, 32


def write_data(folder: Path) -> list[str]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(4)
    paths = []
    for f in range(FILES):
        x = rng.standard_normal((ROWS_PER_FILE, 4))
        y = (x @ w > 0).astype(int)
        ids = np.arange(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE)
        lines = [f"{i},{a:.6f},{b:.6f},{c:.6f},{d:.6f},{t}\n" for i, (a, b, c, d), t in zip(ids, x, y)]
        path = folder / f"part-{f}.csv"
        path.write_text("".join(lines))
        paths.append(str(path))
    return paths


def train(paths: list[str], state: dict[str, Any] | None, weights: np.ndarray | None, step: int,
          checkpoint: Path | None, slow: float = 0.0) -> tuple[np.ndarray, list[str]]:
    """Train from (state, weights, step); the digest of each batch's ids."""
    w = np.zeros(5) if weights is None else weights.copy()
    seen = []
    with feedq.Pipeline(state=state, resumable=True) as pipe:
        files = feedq.string_input_producer(paths, num_epochs=EPOCHS, seed=1)
        reader = pipe.closing(TextLineReader())

        def read() -> list[np.ndarray]:
            rid, a, b, c, d, t = decode_csv(reader.read_block(files, 128),
                                            record_defaults=[[0], [0.0], [0.0], [0.0], [0.0], [0]])
            return [rid, np.stack([a, b, c, d, np.ones_like(a)], axis=1), t]

        feedq.shuffle_batch(read, BATCH, capacity=2000, min_after_dequeue=1000, seed=7,
                            enqueue_many=True, dtypes=[np.int32, np.float32, np.int32],
                            shapes=[[], [5], []], allow_smaller_final_batch=True)
        for rid, x, t in pipe:
            p = 1 / (1 + np.exp(-(x @ w)))
            w -= 0.1 * x.T @ (p - t) / len(t)  # one SGD step
            step += 1
            seen.append(hashlib.sha1(rid.tobytes()).hexdigest())
            if checkpoint is not None:
                tmp = checkpoint.with_suffix(".tmp")
                tmp.write_bytes(pickle.dumps({"step": step, "weights": w, "state": pipe.state_dict(),
                                              "seen": seen}))
                os.replace(tmp, checkpoint)  # atomic: a kill never leaves half a checkpoint
            if slow:
                time.sleep(slow)
    return w, seen


def child(folder: Path) -> None:
    paths = sorted(str(p) for p in folder.glob("part-*.csv"))
    train(paths, None, None, 0, folder / "checkpoint.pkl", slow=0.01)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = write_data(folder)
        steps = -(-EPOCHS * FILES * ROWS_PER_FILE // BATCH)
        kill_at = steps // 3
        proc = subprocess.Popen([sys.executable, __file__, "--child", tmp])
        checkpoint = folder / "checkpoint.pkl"
        deadline = time.monotonic() + 60
        while True:  # the child's progress is a file: poll it
            if checkpoint.exists() and pickle.loads(checkpoint.read_bytes())["step"] >= kill_at:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the training child ended or stalled before it could be killed")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        saved = pickle.loads(checkpoint.read_bytes())
        print(f"training child killed (SIGKILL) after step {saved['step']} of {steps}")

        w, seen = train(paths, saved["state"], saved["weights"], saved["step"], None)
        resumed = saved["seen"] + seen
        w_ref, reference = train(paths, None, None, 0, None)
        same_batches = resumed == reference
        print(f"resumed from step {saved['step']}: {len(resumed)} batches in all, "
              f"{len(reference)} uninterrupted")
        print(f"batch sequence matches an uninterrupted run: {same_batches}")
        print(f"final weights identical: {np.array_equal(w, w_ref)}")
        if not (same_batches and np.array_equal(w, w_ref)):
            raise SystemExit(1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]))
    else:
        main()
