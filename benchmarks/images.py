"""Images: decode + augment -> uint8 batches, feedq vs tf.data vs DataLoader + Pillow.

Data: ``feedq.cli.datasets.make_image_dataset``, ImageNet-like JPEGs
(about 500 x 375, about 100 KB, 4:4:4 and 4:2:0, a few grayscale and
progressive), the same images in 8 TFRecord shards, 8 tar shards and class
folders. Workloads: train (random resized crop 224 + flip -> uint8
``[256, 224, 224, 3]`` batches, shuffled) and eval (resize 256 + centre crop
224); decode-only for the ceilings.

Systems, each in its own process (imports and a warm-up on one shard not
timed), interleaved in rounds, medians over the rounds:

* ``ceiling-1t`` / ``ceiling-2t``: full decode (simplejpeg) of the images
  held in memory, 1 or 2 bare threads: what decoding every pixel costs;
* ``pillow-2t``: full decode with Pillow, 2 threads;
* ``feedq-train-1t`` / ``-2t``: ``string_input_producer`` -> one
  ``TFRecordReader`` -> ``parse_example`` + ``decode_random_resized_crop``
  per block of 64 in N threads -> ``shuffle_batch(256)``;
* ``feedq-train-2t-noverify``: the same with ``verify=False`` (decoding stops
  after the crop's last row, as TF's ``decode_and_crop_jpeg`` does);
* ``feedq-process-2w``: the train pipeline (one decode thread) in each of 2
  ``process_stage`` worker processes, each over its shard of the files;
* ``feedq-train-2t-wait``: the same as ``feedq-train-2t``, the consumer sleeping per batch as a
  training step that needs 90 % of the pipeline's rate (from
  ``feedq-train-2t`` of the same round): the fraction of the consumer's
  time spent waiting for batches;
* ``feedq-tar-2t`` / ``feedq-folder-2t``: the train pipeline over the tar
  shards (``TarReader``) / the class folders (``WholeFileReader``);
* ``feedq-eval-2t``: ``decode_resize_center_crop``, 2 threads, ``batch(256)``;
* ``tfdata``: ``TFRecordDataset`` -> shuffle -> map(parse,
  ``sample_distorted_bounding_box`` (area 0.08-1, aspect 3/4-4/3, 10
  attempts), ``decode_and_crop_jpeg``, resize 224, flip; AUTOTUNE) ->
  batch(256) -> prefetch;
* ``dataloader-0w`` / ``-2w``: ``torch.utils.data.DataLoader`` over the class
  folders, each image opened with Pillow, torchvision's RandomResizedCrop
  parameters + crop + resize (BILINEAR) + flip, uint8 collate, batch 256,
  shuffled; 0 or 2 worker processes.

The ``tfdata`` and ``dataloader-*`` pipelines are those of ``feedq bench
--compare`` on images (``feedq.cli._compare_images``).

Figures: images/s (wall, one epoch), the consumer's wait after its first
batch as a share of the time after it, and the time to that first batch
(feedq thread rows), CPU ms per image (user + system of the
process and its waited-for children, i.e. DataLoader workers), peak
resident memory (the process plus its largest child), and the ratio
to ``ceiling-2t`` of the same round. Absolute numbers on a shared machine
are not the point; the ratios in one run are.

Usage::

    python benchmarks/images.py                  # 4000 images, 3 rounds
    python benchmarks/images.py --images 2000 --rounds 3 --data /tmp/feedq-images
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import header, table  # noqa: E402

SYSTEMS = ["ceiling-1t", "ceiling-2t", "pillow-2t", "feedq-train-1t", "feedq-train-2t",
           "feedq-train-2t-noverify", "feedq-train-2t-wait", "feedq-process-2w", "feedq-tar-2t",
           "feedq-folder-2t", "feedq-eval-2t", "tfdata", "dataloader-0w", "dataloader-2w"]
BATCH, SIZE, BLOCK = 256, 224, 64


def peak_rss_mb() -> float:
    """The largest resident set of this process and of its largest waited-for child (MiB)."""
    s = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (s + c) / 1024.0


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


# ------------------------------------------------------------------ systems
def _jpegs(data: Path) -> list[bytes]:
    from feedq.readers import FixedLenFeature, parse_single_example, tf_record_iterator
    out = []
    for p in sorted((data / "tfrecord").iterdir()):
        for rec in tf_record_iterator(str(p)):
            ex = parse_single_example(rec, {"image/encoded": FixedLenFeature([], "string")})
            out.append(bytes(ex["image/encoded"]))
    return out


def run_ceiling(data: Path, threads: int, pillow: bool, warm: bool) -> int:
    import io
    from concurrent.futures import ThreadPoolExecutor

    import simplejpeg
    from PIL import Image

    jpegs = _jpegs(data)
    if warm:
        jpegs = jpegs[: len(jpegs) // 8]

    def work(part: list[bytes]) -> None:
        for b in part:
            if pillow:
                with Image.open(io.BytesIO(b)) as im:
                    np.asarray(im.convert("RGB"))
            else:
                simplejpeg.decode_jpeg(b)

    global _T0, _C0
    _T0, _C0 = time.perf_counter(), cpu_seconds()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(work, [jpegs[i::threads] for i in range(threads)]))
    return len(jpegs)


def _pipeline_run(paths: list[str], make_read, threads: int, shuffle: bool,
                  step_s: float = 0.0) -> tuple[int, float]:
    import feedq

    n = 0
    waited = 0.0
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer(paths, num_epochs=1, shuffle=True, seed=1)
        read = make_read(pipe, files)
        spec = dict(dtypes=[np.uint8, np.int64], shapes=[[SIZE, SIZE, 3], []], enqueue_many=True,
                    num_threads=threads, allow_smaller_final_batch=True)
        if shuffle:
            feedq.shuffle_batch(read, BATCH, capacity=4 * BATCH, min_after_dequeue=2 * BATCH,
                                seed=2, **spec)
        else:
            feedq.batch(read, BATCH, capacity=4 * BATCH, **spec)
        it = iter(pipe)
        global _FIRST
        while True:
            t = time.perf_counter()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            if n == 0:  # the first batch: the pipeline's start, reported apart
                _FIRST = time.perf_counter()
            else:
                waited += time.perf_counter() - t
            assert images.dtype == np.uint8 and images.shape[1:] == (SIZE, SIZE, 3)
            n += len(images)
            if step_s:
                time.sleep(step_s * len(images) / BATCH)
    return n, waited


_FIRST: float | None = None  # when the first batch arrived (the feedq thread rows)


def _augment(block, encoded, labels, kind: str, verify: bool):
    from feedq.image import decode_random_resized_crop, decode_resize_center_crop, element_seeds

    if kind == "eval":
        b = decode_resize_center_crop(encoded, SIZE, 256)
    else:
        b = decode_random_resized_crop(encoded, SIZE, seed=element_seeds(block, 7), verify=verify)
    return [b.images, labels[b.index]]


def _tfrecord_read(pipe, files, kind: str, verify: bool):
    """ImageNet-layout TFRecords: read a block, parse, decode + augment (a
    top-level function, so process_stage workers can be sent it)."""
    from feedq.readers import FixedLenFeature, TFRecordReader, parse_example

    features = {"image/encoded": FixedLenFeature([], "string"),
                "image/class/label": FixedLenFeature([], "int64")}
    reader = pipe.closing(TFRecordReader())

    def read():
        block = reader.read_block(files, BLOCK)
        ex = parse_example(block, features)
        return _augment(block, ex["image/encoded"], ex["image/class/label"].astype(np.int64),
                        kind, verify)
    return read


def run_feedq(data: Path, kind: str, threads: int, warm: bool, step_s: float = 0.0,
              verify: bool = True, processes: int = 0) -> tuple[int, float]:
    from feedq.image import image_folder
    from feedq.readers import TarReader, WholeFileReader

    def augment(block, encoded, labels):
        return _augment(block, encoded, labels, kind, verify)

    if kind in ("train", "eval"):
        paths = sorted(str(p) for p in (data / "tfrecord").iterdir())
        make_read: Any = functools.partial(_tfrecord_read, kind=kind, verify=verify)
    elif kind == "tar":
        paths = sorted(str(p) for p in (data / "tar").iterdir())

        def make_read(pipe, files):
            reader = pipe.closing(TarReader(fields=("jpg", "cls")))

            def read():
                block = reader.read_block(files, BLOCK)
                jpg = block["jpg"]
                labels = np.array([int(c) for c in block["cls"].values()], dtype=np.int64)
                return augment(jpg, jpg, labels)
            return read
    else:
        folder = image_folder(data / "folders")
        paths = list(folder.filenames)

        def make_read(pipe, files):
            reader = pipe.closing(WholeFileReader())

            def read():
                block = reader.read_block(files, 1)
                return augment(block, block, folder.labels_of(block.keys()))
            return read
    if warm:
        paths = paths[: max(processes or 1, len(paths) // 8)]
    global _T0, _C0
    _T0, _C0 = time.perf_counter(), cpu_seconds()
    if processes:
        return _process_run(paths, make_read, processes)
    return _pipeline_run(paths, make_read, threads, shuffle=kind != "eval", step_s=step_s)


def _process_build(paths: list[str], make_read, index: int, count: int):
    import feedq
    from feedq.distributed import shard_files

    pipe = feedq.current_pipeline()
    files = feedq.string_input_producer(shard_files(paths, index, count), num_epochs=1,
                                        shuffle=True, seed=1)
    return feedq.shuffle_batch(make_read(pipe, files), BATCH, capacity=4 * BATCH,
                               min_after_dequeue=2 * BATCH, seed=2, dtypes=[np.uint8, np.int64],
                               shapes=[[SIZE, SIZE, 3], []], enqueue_many=True, num_threads=1,
                               allow_smaller_final_batch=True)


def _process_run(paths: list[str], make_read, processes: int) -> tuple[int, float]:
    """``process_stage(build, processes)``: each worker process runs the train
    pipeline (one decode thread) over its shard of the files."""
    import feedq

    n, waited = 0, 0.0
    build = functools.partial(_process_build, paths, make_read)
    # fork: the workers are this process's own children, so their CPU time
    # is counted (forkserver's would be the server's children)
    with feedq.process_stage(build, processes, epochs=1, start_method="fork") as stage:
        it = iter(stage)
        while True:
            t = time.perf_counter()
            try:
                images, _labels = next(it)
            except StopIteration:
                break
            waited += time.perf_counter() - t
            assert images.dtype == np.uint8 and images.shape[1:] == (SIZE, SIZE, 3)
            n += len(images)
    return n, waited


def run_tfdata(data: Path, warm: bool) -> int:
    """tf.data's pipeline of ``feedq bench --compare`` (``feedq.cli._compare_images``)."""
    import tensorflow as tf

    from feedq.cli._compare_images import tf_image_map

    paths = sorted(str(p) for p in (data / "tfrecord").iterdir())
    if warm:
        paths = paths[:1]
    feats = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
             "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    augment = tf_image_map(tf, SIZE, "train")

    def parse(rec):
        ex = tf.io.parse_single_example(rec, feats)
        img, label, _ = augment(ex["image/encoded"], ex["image/class/label"])
        return img, label

    ds = (tf.data.TFRecordDataset(paths).shuffle(2 * BATCH, seed=1)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(tf.data.AUTOTUNE))
    global _T0, _C0
    _T0, _C0 = time.perf_counter(), cpu_seconds()
    n = 0
    for images, _ in ds:
        n += int(images.shape[0])
    return n


def run_dataloader(data: Path, workers: int, warm: bool) -> int:
    """DataLoader + Pillow over the class folders, as ``feedq bench --compare`` runs it."""
    import torch

    from feedq.cli._compare_images import torch_image_loader
    from feedq.cli._imageset import detect_images, image_schema

    torch.set_num_threads(1)
    found = detect_images([str(data / "folders")])
    assert found is not None and found.folder is not None
    if warm:
        found.files = found.files[: len(found.files) // 8]
        labels = found.folder.labels[: len(found.files)]
        found.folder = type(found.folder)(found.folder.root, found.folder.classes,
                                          tuple(found.files), labels)
    loader = torch_image_loader(image_schema(found, "train", SIZE), workers, BATCH,
                                shuffle_buffer=1)
    global _T0, _C0
    _T0, _C0 = time.perf_counter(), cpu_seconds()
    n = 0
    for images, _, _ in loader:
        n += int(images.shape[0])
    return n


_T0 = _C0 = 0.0


def worker(system: str, data: Path, step_s: float) -> dict[str, float]:
    def once(warm: bool) -> tuple[int, float]:
        if system.startswith("ceiling"):
            return run_ceiling(data, int(system[-2]), False, warm), 0.0
        if system == "pillow-2t":
            return run_ceiling(data, 2, True, warm), 0.0
        if system == "feedq-process-2w":
            return run_feedq(data, "train", 1, warm, processes=2)
        if system.startswith("feedq"):
            kind = system.split("-")[1]
            threads = 1 if system.endswith("1t") else 2
            return run_feedq(data, kind, threads, warm, step_s if system.endswith("wait") else 0.0,
                             verify=not system.endswith("noverify"))
        if system == "tfdata":
            return run_tfdata(data, warm), 0.0
        return run_dataloader(data, int(system[-2]), warm), 0.0

    once(True)
    n, waited = once(False)
    wall = time.perf_counter() - _T0
    cpu = cpu_seconds() - _C0
    if _FIRST is not None:  # the wait after the first batch, over the time after it
        first = _FIRST - _T0
        wait = waited / max(1e-9, wall - first)
    else:
        first, wait = float("nan"), waited / wall
    return {"images": n, "wall": wall, "cpu": cpu, "wait": wait, "first": first,
            "rss": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", help="keep the generated images here and reuse them")
    ap.add_argument("--only", default=",".join(SYSTEMS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--step", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.data), args.step)))
        return
    import tempfile

    from feedq.cli.datasets import make_image_dataset

    data = Path(args.data or tempfile.mkdtemp(prefix="feedq-images-"))
    if not (data / "tfrecord").exists():
        make_image_dataset(data, args.images, classes=100, shards=8, overwrite=True)
    header("images: decode + augment -> uint8 batches of 256")
    systems = [s for s in args.only.split(",") if s]
    results: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    ratios: dict[str, list[float]] = {s: [] for s in systems}
    for r in range(args.rounds):
        this: dict[str, dict[str, float]] = {}
        for s in systems:
            step = 0.0
            if s == "feedq-train-2t-wait" and "feedq-train-2t" in this:
                rate = this["feedq-train-2t"]["images"] / this["feedq-train-2t"]["wall"]
                step = BATCH / (0.9 * rate)
            out = subprocess.run([sys.executable, __file__, "--worker", s, "--data", str(data),
                                  "--step", str(step)], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"# {s} failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            this[s] = json.loads(out.stdout.strip().splitlines()[-1])
            results[s].append(this[s])
            print(f"# round {r + 1} {s}: {this[s]['images'] / this[s]['wall']:.0f} images/s", file=sys.stderr)
        base = this.get("ceiling-2t")
        for s, res in this.items():
            if base is not None:
                ratios[s].append((res["images"] / res["wall"]) / (base["images"] / base["wall"]))
    rows = []
    med: dict[str, float] = {}
    for s in systems:
        if not results[s]:
            continue
        rate = statistics.median(x["images"] / x["wall"] for x in results[s])
        cpu = statistics.median(1000 * x["cpu"] / x["images"] for x in results[s])
        wait = statistics.median(100 * x["wait"] for x in results[s])
        ratio = statistics.median(ratios[s]) if ratios[s] else float("nan")
        med[s] = ratio
        rss = statistics.median(x.get("rss", float("nan")) for x in results[s])
        first = statistics.median(x.get("first", float("nan")) for x in results[s])
        rows.append([s, f"{rate:.0f}", f"{cpu:.2f}", f"{ratio:.2f}", f"{wait:.1f}",
                     "" if first != first else f"{first:.2f}", f"{rss:.0f}"])
    print(f"# {args.images} images, {args.rounds} rounds, data {data}")
    print(table(rows, ["system", "images/s", "CPU ms/image", "vs ceiling-2t", "consumer wait %",
                       "first batch s", "peak RSS MiB"]))

    def target(name: str, value: float, goal: float) -> None:
        print(f"# {name}: {value:.2f} (target >= {goal}) {'ok' if value >= goal else 'MISSED'}")

    if "feedq-train-2t" in med:
        t = med["feedq-train-2t"]
        target("feedq-train-2t vs ceiling-2t", t, 1.1)
        if "tfdata" in med:
            target("feedq-train-2t vs tfdata", t / med["tfdata"], 1.25)
        if "dataloader-2w" in med:
            target("feedq-train-2t vs dataloader-2w", t / med["dataloader-2w"], 2.0)
        if "feedq-train-1t" in med:
            target("feedq-train 2 threads vs 1", t / med["feedq-train-1t"], 1.8)


if __name__ == "__main__":
    main()
