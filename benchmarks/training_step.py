"""What a loader does to the training step: a PyTorch CPU MLP fed from
TFRecord files by each way of loading, all in the same run.

Data: ``feedq make-data --format tfrecord --layout realistic`` files
(variable-length Examples {ids, label, tag, x}); the step reads ``x`` (32
floats) and ``label`` (0..999), batches of 256, and trains an
MLP 32 -> H -> H -> 1000 (H = 128, 256 or 1024) with SGD, torch using its
default number of threads (every core) unless ``--torch-threads`` says otherwise.

Feeders:
  memory      pre-decoded tensors in memory: the bound
  dataloader  torch DataLoader(num_workers=2) over feedq.as_torch_dataset(build):
              one feedq pipeline per DataLoader worker
  threads     the same feedq pipeline in this process (runner threads)
  process1    feedq.process_stage(build, 1): the whole loader in one subprocess
  process2    feedq.process_stage(build, 2)
  *-nice      the same with the loader's threads (or worker processes) --nice
              niceness steps below the training thread (feedq.Pipeline(
              loader_niceness=...), feedq.set_loader_niceness); the rows without
              -nice run the loader at the training thread's priority
each with and without a pure-Python per-record transform (~20 us a record,
standing in for augmentation); ``build`` is one function for all of them.

Reported per row: steps/s, slowdown (step time / the memory bound's),
readiness (share of steps whose batch was already waiting: the queue or the
stage says so; for the DataLoader and memory, a batch fetched in < 0.5 ms),
the share of the time spent waiting for batches, and CPU seconds per 1000
steps of this process and of the loader's worker processes.

    python benchmarks/training_step.py                  # everything, ~2 minutes
    python benchmarks/training_step.py --seconds 2 --models h128 --feeders memory threads threads-nice
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks._util import header, table
except ImportError:  # run as a script from benchmarks/
    from _util import header, table  # type: ignore[no-redef]

import feedq
from feedq.distributed import shard_files
from feedq.process import get_worker_info
from feedq.readers import FixedLenFeature, TFRecordReader, parse_example

BATCH = 256
FEATURES = {"x": FixedLenFeature([32], np.float32), "label": FixedLenFeature([], np.int64)}
FEEDERS = ("memory", "dataloader", "threads", "threads-nice", "process1", "process2", "process2-nice")
HIDDEN = {"h128": 128, "h256": 256, "h1024": 1024}
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- the pipeline (one build function for threads, processes and DataLoader) ------------


def augment(values: list[float], rounds: int) -> list[float]:
    """Pure-Python work on one record (a stand-in for augmentation)."""
    for _ in range(rounds):
        values = [v * 0.999 + 0.001 for v in values]
    return values


def transform_block(x: np.ndarray, rounds: int) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(len(x)):
        out[i] = augment(x[i].tolist(), rounds)
    return out


def calibrate(target_us: float) -> int:
    """Rounds of :func:`augment` for about ``target_us`` a record in
    :func:`transform_block`: refined a few times on the fastest of several
    timings (the least disturbed by other load)."""
    rounds = 10
    for _ in range(4):
        measured = timed_record(rounds)
        rounds = max(1, round(rounds * target_us / measured))
    return rounds


def build(files: list[str], rounds: int, worker_index: int, num_workers: int) -> Any:
    """This worker's pipeline: its files, endlessly; 2 readers parsing
    blocks of Examples; the optional per-record transform; shuffle_batch_join."""
    info = get_worker_info()
    seed = None if info is None else info.shard_seed()
    mine = shard_files(files, worker_index, num_workers)
    filenames = feedq.string_input_producer(mine, num_epochs=None, shuffle=True, seed=seed)

    def make_read() -> Callable[[], list[np.ndarray]]:
        reader = TFRecordReader()

        def read() -> list[np.ndarray]:
            parsed = parse_example(reader.read_block(filenames, 1024), FEATURES)
            x = parsed["x"]
            if rounds:
                x = transform_block(x, rounds)
            return [x, parsed["label"]]

        return read

    return feedq.shuffle_batch_join(
        [make_read(), make_read()], BATCH, capacity=4096 + 4 * 1024, min_after_dequeue=4096,
        seed=seed, enqueue_many=True, dtypes=[np.float32, np.int64], shapes=[[32], []])


# -- measuring ----------------------------------------------------------------------------


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) of processes ``pids`` so far (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS
        except (OSError, IndexError, ValueError):
            pass
    return total


class Model:
    def __init__(self, hidden: int) -> None:
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, 1000))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)

    def step(self, x: Any, y: Any) -> None:
        self.opt.zero_grad()
        loss = self.torch.nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()


def run_loop(model: Model, take: Callable[[], tuple[Any, Any, bool | None]], warmup: float,
             seconds: float, pids: Callable[[], list[int]]) -> dict[str, float]:
    """Train on batches from ``take`` (x, y, ready-or-None) for ``seconds``
    after ``warmup``; steps/s, readiness, wait share, CPU seconds."""
    t_end = time.perf_counter() + warmup
    while time.perf_counter() < t_end:
        x, y, _ = take()
        model.step(x, y)
    workers = pids()
    cpu0, kids0 = time.process_time(), cpu_of(workers)
    steps = ready = 0
    waited = 0.0
    t0 = time.perf_counter()
    while True:
        w0 = time.perf_counter()
        x, y, was_ready = take()
        w1 = time.perf_counter()
        waited += w1 - w0
        if was_ready is None:
            was_ready = w1 - w0 < 0.5e-3
        ready += bool(was_ready)
        model.step(x, y)
        steps += 1
        if time.perf_counter() - t0 >= seconds:
            break
    elapsed = time.perf_counter() - t0
    cpu, kids = time.process_time() - cpu0, cpu_of(workers) - kids0
    return {"steps_s": steps / elapsed, "ready": ready / steps, "wait": waited / elapsed,
            "cpu_main": cpu / steps * 1000, "cpu_kids": kids / steps * 1000}


def feed(kind: str, model: Model, files: list[str], rounds: int, memory: tuple[Any, Any],
         warmup: float, seconds: float, nice: int) -> dict[str, float]:
    niceness = nice if kind.endswith("-nice") else 0
    kind = kind.removesuffix("-nice")
    previous = feedq.set_loader_niceness(niceness)
    try:
        return _feed(kind, model, files, rounds, memory, warmup, seconds)
    finally:
        feedq.set_loader_niceness(previous)


def _feed(kind: str, model: Model, files: list[str], rounds: int, memory: tuple[Any, Any],
          warmup: float, seconds: float) -> dict[str, float]:
    import torch

    part = functools.partial(build, files, rounds)
    if kind == "memory":
        x_all, y_all = memory
        n = len(y_all) // BATCH
        state = {"i": 0}

        def take_memory() -> tuple[Any, Any, bool | None]:
            i = state["i"] % n
            state["i"] += 1
            return x_all[i * BATCH:(i + 1) * BATCH], y_all[i * BATCH:(i + 1) * BATCH], True

        return run_loop(model, take_memory, warmup, seconds, list)
    if kind == "threads":
        with feedq.Pipeline() as pipe:
            stage = part(0, 1)
            q = stage.queue

            def take_threads() -> tuple[Any, Any, bool | None]:
                ready = q.size() >= BATCH
                x, y = stage.dequeue()
                return torch.from_numpy(x), torch.from_numpy(y), ready

            try:
                return run_loop(model, take_threads, warmup, seconds, list)
            finally:
                pipe.stop()
    if kind.startswith("process"):
        with feedq.process_stage(part, int(kind[-1]), epochs=1) as pstage:
            it = iter(pstage)

            def take_process() -> tuple[Any, Any, bool | None]:
                before = pstage.statistics().ready
                x, y = next(it)
                return torch.from_numpy(x), torch.from_numpy(y), pstage.statistics().ready > before

            return run_loop(model, take_process, warmup, seconds, lambda: pstage.pids)
    if kind == "dataloader":
        loader = torch.utils.data.DataLoader(feedq.as_torch_dataset(part), batch_size=None,
                                             num_workers=2)
        dl_it = iter(loader)

        def take_loader() -> tuple[Any, Any, bool | None]:
            x, y = next(dl_it)
            return x, y, None

        try:
            return run_loop(model, take_loader, warmup, seconds,
                            lambda: [w.pid for w in getattr(dl_it, "_workers", [])])
        finally:
            del dl_it
    raise ValueError(kind)


def load_memory(files: list[str]) -> tuple[Any, Any]:
    """Every record's x and label, decoded once, shuffled, as tensors."""
    import torch

    xs, ys = [], []
    for path in files:
        reader = TFRecordReader()
        q = feedq.FIFOQueue(-1, [feedq.STRING], shapes=[[]])
        q.enqueue(path)
        q.close()
        while True:
            try:
                parsed = parse_example(reader.read_block(q, 1 << 16), FEATURES)
            except feedq.errors.OutOfRangeError:
                break
            xs.append(parsed["x"])
            ys.append(parsed["label"])
        reader.close()
    x, y = np.concatenate(xs), np.concatenate(ys)
    order = np.random.default_rng(0).permutation(len(y))
    return torch.from_numpy(x[order]), torch.from_numpy(y[order])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder of TFRecord files (default: written to a temp folder)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per row")
    parser.add_argument("--warmup", type=float, default=1.5, help="untimed training before each row")
    parser.add_argument("--transform-us", type=float, default=20.0)
    parser.add_argument("--models", nargs="+", default=list(HIDDEN), choices=list(HIDDEN))
    parser.add_argument("--feeders", nargs="+", default=list(FEEDERS), choices=list(FEEDERS))
    parser.add_argument("--transform", choices=["both", "off", "on"], default="both")
    parser.add_argument("--repeats", type=int, default=2,
                        help="rounds over the feeders (interleaved); medians are reported")
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness steps of the loader in the *-nice rows")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads for the step (default 0: torch's own default, "
                             "every core, as users run it)")
    args = parser.parse_args(argv)

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    core = "python (this build has no native core)"
    if (Path(feedq.__file__).parent / "_native").is_dir():
        from feedq import _native

        core = _native.CORE
    header("training step fed by each loader (indicative: a shared, loaded machine)")
    print(f"# feedq core: {core}; torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          f"batch {BATCH}; start method {feedq.process.default_start_method()}")
    rounds = calibrate(args.transform_us)
    per_record = timed_record(rounds)
    print(f"# transform: {rounds} rounds of pure Python, {per_record:.1f} us a record (measured now)")
    with tempfile.TemporaryDirectory(prefix="feedq-train-") as tmp:
        folder = args.data or tmp
        files = sorted(str(p) for p in Path(folder).glob("*.tfrecord"))
        if not files:
            from feedq.cli.datasets import make_dataset

            files = make_dataset(folder, "tfrecord", args.records, files=4, layout="realistic")
        print(f"# data: {len(files)} files, {sum(os.path.getsize(f) for f in files) >> 20} MiB, "
              f"realistic layout")
        feedq.process.warm_up()
        memory = load_memory(files)
        rows = []
        keys = ["steps_s", "ready", "wait", "cpu_main", "cpu_kids"]
        for name in args.models:
            transforms = {"both": [0, rounds], "off": [0], "on": [rounds]}[args.transform]
            runs = [(r, kind) for r in transforms for kind in args.feeders if not (kind == "memory" and r)]
            got: dict[tuple[int, str], list[dict[str, float]]] = {run: [] for run in runs}
            for _ in range(args.repeats):  # interleaved, so that drifting load hits every row
                for r, kind in runs:
                    res = feed(kind, Model(HIDDEN[name]), files, r, memory, args.warmup, args.seconds,
                               args.nice)
                    got[(r, kind)].append(res)
                    print(f"# {name} transform={bool(r)} {kind}: {res['steps_s']:.0f} steps/s", flush=True)
            med = {run: {k: statistics.median(x[k] for x in got[run]) for k in keys} for run in runs}
            bound = med[(0, "memory")]["steps_s"] if (0, "memory") in med else None
            for (r, kind), res in med.items():
                slowdown = "" if bound is None else f"{bound / res['steps_s']:.2f}x"
                rows.append([name, "yes" if r else "no", kind, f"{res['steps_s']:.0f}",
                             f"{res['steps_s'] * BATCH / 1000:.0f}k", slowdown,
                             f"{res['ready']:.0%}", f"{res['wait']:.0%}",
                             f"{res['cpu_main']:.2f}", f"{res['cpu_kids']:.2f}"])
        print(table(rows, ["model", "transform", "feeder", "steps/s", "rows/s", "slowdown",
                           "ready", "waiting", "cpu s/1k steps (main)",
                           "cpu s/1k steps (workers)"]))
    try:
        import tfrecord  # noqa: F401
    except ImportError:
        print("# DataLoader with the `tfrecord` package: not installed, not measured")


def timed_record(rounds: int) -> float:
    row = np.random.default_rng(0).random((256, 32)).astype(np.float32)
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        transform_block(row, rounds)
        best = min(best, time.perf_counter() - t0)
    return best / 256 * 1e6


if __name__ == "__main__":
    main()
