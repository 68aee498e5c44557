"""Train a small torch CNN on JPEGs from class folders, TFRecords and tar shards.

``feedq.cli.datasets.make_image_dataset`` writes the same ImageNet-like JPEGs
into the three containers; one feedq pipeline per container reads them
(``string_input_producer`` over the files, 2 decode threads), applies the
train augmentation (random resized crop + flip, seeded per image) and makes
shuffled uint8 NHWC batches; a ``DeviceFeeder`` copies them to the device
(a GPU where there is one) as uint8 and normalises them there
(``device_transform=ToDeviceFloat(...)``: float32 NCHW, mean/std), so host
memory and the copy stay 4x smaller than float32. Then the TFRecord
pipeline is stopped mid-epoch, its state saved and resumed: every image of
the epoch comes exactly once, with the same crop as in an uninterrupted run.

Needs the image extra and torch (CPU is enough):
pip install "feedq[image]" torch --index-url https://download.pytorch.org/whl/cpu
then run: python examples/images_torch_training.py  (under a minute on 2 cores)
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import feedq
from feedq.cli.datasets import make_image_dataset
from feedq.devices import DeviceFeeder
from feedq.image import ToDeviceFloat, decode_random_resized_crop, element_seeds, image_folder
from feedq.readers import FixedLenFeature, TarReader, TFRecordReader, WholeFileReader, parse_example

try:
    import torch
except ImportError:
    sys.exit(f"{feedq.MissingExtraError.for_module('torch', 'examples/images_torch_training.py')}\n"
             "A CPU-only torch is enough: "
             "pip install torch --index-url https://download.pytorch.org/whl/cpu")

QUICK = os.environ.get("FEEDQ_EXAMPLE_QUICK") == "1"
IMAGES, CLASSES, SIZE, BATCH = (96, 4, 64, 16) if QUICK else (800, 10, 128, 64)
DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"
# uint8 NHWC in, (x / 255 - mean) / std as float32 NCHW out, on the device.
TO_FLOAT = ToDeviceFloat(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
FEATURES = {"image/encoded": FixedLenFeature([], "string"),
            "image/class/label": FixedLenFeature([], "int64")}


def augment(block: Any, encoded: Any, labels: np.ndarray, epoch: int) -> list[np.ndarray]:
    """Decode + crop + flip a block; seeds from the records' keys, so a record
    gets the same crop whichever thread decodes it, and after a resume."""
    batch = decode_random_resized_crop(encoded, SIZE, seed=element_seeds(block, 7, epoch),
                                       keys=block.keys())  # a bad image is named by file:record
    keys = block.keys()[batch.index]
    return [keys, batch.images, labels[batch.index]]


def tfrecord_source(root: Path) -> tuple[list[str], Callable[..., Any]]:
    def make(pipe: feedq.Pipeline, files: Any, epoch: int) -> Callable[[], list[np.ndarray]]:
        reader = pipe.closing(TFRecordReader())

        def read() -> list[np.ndarray]:
            block = reader.read_block(files, 32)
            ex = parse_example(block, FEATURES)
            return augment(block, ex["image/encoded"], ex["image/class/label"].astype(np.int64), epoch)
        return read
    return sorted(str(p) for p in (root / "tfrecord").iterdir()), make


def folder_source(root: Path) -> tuple[list[str], Callable[..., Any]]:
    folder = image_folder(root / "folders")  # labels from the sorted folder names

    def make(pipe: feedq.Pipeline, files: Any, epoch: int) -> Callable[[], list[np.ndarray]]:
        reader = pipe.closing(WholeFileReader())

        def read() -> list[np.ndarray]:
            block = reader.read_block(files, 1)  # one file, its key is its name
            return augment(block, block, folder.labels_of(block.keys()), epoch)
        return read
    return list(folder.filenames), make


def tar_source(root: Path) -> tuple[list[str], Callable[..., Any]]:
    def make(pipe: feedq.Pipeline, files: Any, epoch: int) -> Callable[[], list[np.ndarray]]:
        reader = pipe.closing(TarReader(fields=("jpg", "cls")))

        def read() -> list[np.ndarray]:
            block = reader.read_block(files, 32)
            labels = np.array([int(c) for c in block["cls"].values()], dtype=np.int64)
            return augment(block["jpg"], block["jpg"], labels, epoch)
        return read
    return sorted(str(p) for p in (root / "tar").iterdir()), make


def shuffled(pipe: feedq.Pipeline, source: tuple[list[str], Callable[..., Any]],
             epoch: int) -> Any:
    """The pipeline's output stage: shuffled batches (keys, uint8 NHWC images, labels)."""
    paths, make = source
    files = feedq.string_input_producer(paths, num_epochs=1, shuffle=True, seed=epoch)
    return feedq.shuffle_batch(make(pipe, files, epoch), BATCH, capacity=8 * BATCH,
                               min_after_dequeue=2 * BATCH, seed=epoch, num_threads=2,
                               enqueue_many=True, dtypes=[object, np.uint8, np.int64],
                               shapes=[[], [SIZE, SIZE, 3], []], allow_smaller_final_batch=True)


def batches(source: tuple[list[str], Callable[..., Any]], epoch: int,
            state: dict[str, Any] | None = None, stop_after: int | None = None,
            saved: list[dict[str, Any]] | None = None) -> Iterator[tuple[np.ndarray, ...]]:
    """One epoch of shuffled, augmented batches (keys, uint8 NHWC images, labels)."""
    with feedq.Pipeline(resumable=True, state=state) as pipe:
        shuffled(pipe, source, epoch)
        for i, batch in enumerate(pipe):
            yield batch
            if stop_after is not None and i + 1 == stop_after:
                assert saved is not None
                saved.append(pipe.state_dict())
                return


def device_batches(source: tuple[list[str], Callable[..., Any]],
                   epoch: int) -> Iterator[list[Any]]:
    """One epoch on the device: keys stay on the host, the images travel as
    uint8 and arrive as normalised float32 NCHW, the labels as int64."""
    with feedq.Pipeline() as pipe:
        stage = shuffled(pipe, source, epoch)
        with DeviceFeeder(stage, device={0: "cpu", 1: DEVICE, 2: DEVICE}, output="torch",
                          device_transform={1: TO_FLOAT}) as feeder:
            yield from feeder
            stats = feeder.statistics()
    # One byte per pixel and channel crossed to the device, not four.
    assert stats.bytes_copied in (0, stats.rows_delivered * (SIZE * SIZE * 3 + 8)), stats


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, CLASSES))


def train(name: str, source: tuple[list[str], Callable[..., Any]], epochs: int) -> None:
    net = model().to(DEVICE)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(epochs):
        seen, loss_sum = 0, 0.0
        for _, x, labels in device_batches(source, epoch):
            # x: [n, 3, SIZE, SIZE] float32, normalised, on DEVICE
            loss = torch.nn.functional.cross_entropy(net(x), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(labels)
            loss_sum += loss.item() * len(labels)
        print(f"  {name:9} epoch {epoch} on {DEVICE}: {seen} images, "
              f"mean loss {loss_sum / seen:.3f}")
        assert seen == IMAGES, (name, seen)


def digest(batch: tuple[np.ndarray, ...]) -> dict[bytes, str]:
    keys, images, _ = batch
    return {bytes(k): hashlib.sha1(img.tobytes()).hexdigest() for k, img in zip(keys, images)}


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_image_dataset(root, IMAGES, classes=CLASSES, shards=4, seed=1)
        sources = {"folders": folder_source(root), "tfrecord": tfrecord_source(root),
                   "tar": tar_source(root)}
        for name, source in sources.items():
            train(name, source, epochs=1 if QUICK else 2)

        # Stop mid-epoch, save, resume: each image once, with the same crop.
        full: dict[bytes, str] = {}
        for b in batches(sources["tfrecord"], 0):
            full.update(digest(b))
        saved: list[dict[str, Any]] = []
        first: dict[bytes, str] = {}
        for b in batches(sources["tfrecord"], 0, stop_after=2, saved=saved):
            first.update(digest(b))
        rest: dict[bytes, str] = {}
        count = 0
        for b in batches(sources["tfrecord"], 0, state=saved[0]):
            rest.update(digest(b))
            count += len(b[0])
        assert count == len(rest) and not set(first) & set(rest), "an image came twice"
        assert {**first, **rest} == full, "a crop differs from the uninterrupted run"
        print(f"resumed after {len(first)} images: {len(rest)} more, each once, same crops")


if __name__ == "__main__":
    main()
