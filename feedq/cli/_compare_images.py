"""``feedq bench --compare`` on an image dataset: the same images, the same
augmentation and batch size, through the loaders a user would otherwise pick.

* ``tf.data`` (TFRecords, class folders, image files; tf.data reads no tar):
  ``TFRecordDataset(num_parallel_reads=--readers)`` (or the files through
  ``tf.io.read_file``) -> ``shuffle`` -> ``map(AUTOTUNE)`` of parse ->
  ``extract_jpeg_shape`` -> ``sample_distorted_bounding_box`` (area
  0.08-1, aspect 3/4-4/3, 10 attempts, the whole image as fallback) ->
  ``decode_and_crop_jpeg`` -> ``resize`` (bilinear, antialiased) ->
  ``random_flip_left_right`` -> uint8 -> ``batch`` -> ``prefetch(AUTOTUNE)``;
  eval: ``decode_jpeg`` -> resize the shorter side -> centre crop.
* ``DataLoader`` + Pillow with 0 and 2 workers: class folders and image files
  as a map-style dataset (``shuffle=True``), TFRecords (framing and
  protobuf ``Example`` parse in Python) and tar shards (``tarfile``) as an
  ``IterableDataset`` (files split over the workers, a shuffle buffer); each
  image opened with Pillow, torchvision's ``RandomResizedCrop`` parameters
  (``feedq.image.random_resized_crop_params``), crop + resize (BILINEAR, as
  torchvision on PIL images) + flip, or ``Resize`` + ``CenterCrop``; a
  collate that stacks uint8 ``[n, size, size, 3]``.

``benchmarks/images.py`` runs these same functions. The payload of every
loader is the encoded bytes of the images it delivered, so equal payloads
mean the same images.
"""

from __future__ import annotations

import io
import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from feedq.cli._measure import Limits, System, timed
from feedq.cli._schema import Schema

__all__ = ["PillowTransform", "image_competitors", "image_notes", "tf_image_dataset",
           "tf_image_map", "torch_image_loader"]


def image_notes(schema: Schema, batch_size: int, readers: int, shuffle_buffer: int = 0) -> dict[str, str]:
    """One line per competitor, for the output."""
    images = schema.images
    size = int(schema.info["size"])
    train = schema.info["augment"] == "train"
    shuffle = f".shuffle({shuffle_buffer})" if shuffle_buffer else ""
    if images.container == "tfrecord":
        src = f"TFRecordDataset(num_parallel_reads={readers}){shuffle}"
    else:
        n = len(images.files)
        src = f"Dataset.from_tensor_slices(files){f'.shuffle({n})' if shuffle_buffer else ''}.map(read_file)"
    chain = (f"sample_distorted_bounding_box + decode_and_crop_jpeg + resize({size}, antialias) + "
             "random_flip_left_right" if train else
             f"decode_jpeg + resize(shorter side {_resize(size)}) + central crop {size}")
    notes = {"tf.data": f"{src}.map({chain}, AUTOTUNE).batch({batch_size}).prefetch(AUTOTUNE)"}
    if images.container == "tar":
        del notes["tf.data"]
    pil = (f"RandomResizedCrop({size}) params + crop/resize BILINEAR + flip" if train
           else f"Resize({_resize(size)}) + CenterCrop({size})")
    kind = {"folders": "map-style dataset over the files",
            "files": "map-style dataset over the files",
            "tfrecord": "IterableDataset parsing TFRecord Examples in Python",
            "tar": "IterableDataset reading the shards with tarfile"}[images.container]
    order = ((", shuffle=True" if images.container in ("folders", "files")
              else f", shuffled file order and a shuffle buffer of {shuffle_buffer:,} images")
             if shuffle_buffer else "")
    notes["DataLoader"] = (f"{kind}{order}, each image Pillow: {pil}; DataLoader(batch_size="
                           f"{batch_size}, collate_fn: stack uint8)")
    return notes


def _resize(size: int) -> int:
    from feedq.cli._imageset import eval_resize

    return eval_resize(size)


def image_competitors(schema: Schema, *, batch_size: int, readers: int,
                      workers: tuple[int, ...] = (0, 2), shuffle_buffer: int = 0) -> list[System]:
    """tf.data and one DataLoader per worker count on an image schema, or rows saying why not."""
    notes = image_notes(schema, batch_size, readers, shuffle_buffer)
    return [_tf_system(schema, notes.get("tf.data", "")),
            *(_torch_system(schema, w, notes["DataLoader"]) for w in workers)]


# -- tf.data -------------------------------------------------------------------------------------


def _tf_system(schema: Schema, what: str) -> System:
    from feedq.cli._compare import import_tensorflow

    name = "tf.data"
    images = schema.images
    if images.container == "tar":
        return System(name, what, None, "not supported: tf.data reads no tar shards")
    if images.compression == "ZSTD":
        return System(name, what, None, "not supported: tf.data reads no zstd")
    tf = import_tensorflow()
    if tf is None:
        return System(name, what, None, "not installed (pip install tensorflow)")
    cache: dict[Any, Any] = {}

    def batches(lim: Limits) -> Iterator[tuple[int, int]]:
        key = (lim.batch_size, lim.readers, lim.shuffle_buffer, lim.seed)
        if key not in cache:
            cache.clear()
            cache[key] = tf_image_dataset(tf, schema, lim.batch_size, lim.readers,
                                          lim.shuffle_buffer, lim.seed)
        for imgs, _labels, nbytes in cache[key].as_numpy_iterator():
            yield len(imgs), int(nbytes.sum())

    return System(name, what, lambda lim: timed(lambda: batches(lim), lim))


def tf_image_map(tf: Any, size: int, augment: str = "train") -> Callable[[Any, Any], tuple[Any, Any, Any]]:
    """``(encoded, label) -> (uint8 [size, size, 3], label, encoded bytes)``:
    TF's train augmentation (``decode_and_crop_jpeg``) or eval transform."""
    resize_to = _resize(size)

    def train(enc: Any, label: Any) -> tuple[Any, Any, Any]:
        shape = tf.io.extract_jpeg_shape(enc)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([0, 0, 4]), min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
        img = tf.io.decode_and_crop_jpeg(enc, window, channels=3)
        img = tf.image.resize(img, [size, size], antialias=True)
        img = tf.image.random_flip_left_right(img)
        return tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), label, tf.strings.length(enc)

    def evaluate(enc: Any, label: Any) -> tuple[Any, Any, Any]:
        img = tf.io.decode_jpeg(enc, channels=3)
        hw = tf.cast(tf.shape(img)[:2], tf.float32)
        scale = resize_to / tf.reduce_min(hw)
        img = tf.image.resize(img, tf.cast(hw * scale, tf.int32), antialias=True)
        img = tf.image.resize_with_crop_or_pad(img, size, size)
        return tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), label, tf.strings.length(enc)

    return train if augment == "train" else evaluate


def tf_image_dataset(tf: Any, schema: Schema, batch_size: int, readers: int, shuffle_buffer: int,
                     seed: int = 0) -> Any:
    """The tf.data pipeline over an image schema's files (not tar shards)."""
    images = schema.images
    auto = tf.data.AUTOTUNE
    files = list(images.files)
    if images.container == "tfrecord":
        names = tf.data.Dataset.from_tensor_slices(files)
        if shuffle_buffer:
            names = names.shuffle(len(files), seed=seed)
        ds = tf.data.TFRecordDataset(names, compression_type=images.compression or "",
                                     num_parallel_reads=readers)
        feats = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
        if images.label_field:
            feats[images.label_field] = tf.io.FixedLenFeature([], tf.int64)

        def parse(rec: Any) -> tuple[Any, Any]:
            ex = tf.io.parse_single_example(rec, feats)
            label = ex[images.label_field] if images.label_field else tf.constant(0, tf.int64)
            return ex["image/encoded"], label

        if shuffle_buffer:
            ds = ds.shuffle(shuffle_buffer, seed=seed)
        ds = ds.map(parse, num_parallel_calls=auto)
    else:
        labels = (images.folder.labels if images.folder is not None
                  else np.zeros(len(files), np.int64))
        ds = tf.data.Dataset.from_tensor_slices((files, labels))
        if shuffle_buffer:
            ds = ds.shuffle(len(files), seed=seed)
        ds = ds.map(lambda f, lab: (tf.io.read_file(f), lab), num_parallel_calls=auto)
    fn = tf_image_map(tf, int(schema.info["size"]), schema.info["augment"])
    return ds.map(fn, num_parallel_calls=auto).batch(batch_size).prefetch(auto)


# -- DataLoader + Pillow ----------------------------------------------------------------------------


class PillowTransform:
    """Encoded image -> uint8 ``[size, size, 3]`` with Pillow, as a torchvision
    user writes it: ``RandomResizedCrop`` + ``RandomHorizontalFlip`` (train) or
    ``Resize`` + ``CenterCrop`` (eval)."""

    def __init__(self, size: int, augment: str = "train") -> None:
        self.size = size
        self.augment = augment

    def __call__(self, data: bytes, rng: np.random.Generator) -> np.ndarray:
        from PIL import Image

        from feedq.image import random_resized_crop_params

        s = self.size
        with Image.open(io.BytesIO(data)) as opened:
            im = opened.convert("RGB")
        if self.augment == "train":
            top, left, h, w = random_resized_crop_params(im.height, im.width, rng)
            im = im.resize((s, s), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
            if rng.random() < 0.5:
                im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        else:
            r = _resize(s)
            w, h = im.size
            nw, nh = (r, int(r * h / w)) if w <= h else (int(r * w / h), r)
            im = im.resize((nw, nh), Image.Resampling.BILINEAR)
            left, top = int(round((nw - s) / 2.0)), int(round((nh - s) / 2.0))
            im = im.crop((left, top, left + s, top + s))
        return np.asarray(im)


class ImageCollate:
    """``collate_fn``: ``(image, label, bytes)`` samples -> (uint8 images, labels, encoded bytes)."""

    def __call__(self, samples: list[tuple[np.ndarray, int, int]]) -> tuple[Any, Any, int]:
        import torch

        images = torch.from_numpy(np.stack([s[0] for s in samples]))
        labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)
        return images, labels, sum(s[2] for s in samples)


class FileImages:
    """Map-style: image ``i`` of a file list, read and transformed (class folders, image files)."""

    def __init__(self, files: list[str], labels: list[int], transform: PillowTransform, seed: int) -> None:
        self.files, self.labels, self.transform, self.seed = files, labels, transform, seed

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int, int]:
        with open(self.files[i], "rb") as f:
            data = f.read()
        rng = np.random.default_rng([self.seed, i])
        return self.transform(data, rng), self.labels[i], len(data)


class ShardImages:
    """Iterable: the encoded images of TFRecord or tar shards, read in Python,
    split over the workers, through a shuffle buffer, then transformed."""

    def __init__(self, files: list[str], container: str, image_field: str, label_field: str | None,
                 compression: str | None, transform: PillowTransform, shuffle_buffer: int,
                 seed: int) -> None:
        self.files, self.container = files, container
        self.image_field, self.label_field, self.compression = image_field, label_field, compression
        self.transform, self.shuffle_buffer, self.seed = transform, shuffle_buffer, seed

    def __iter__(self) -> Iterator[tuple[np.ndarray, int, int]]:
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        wid = 0 if info is None else info.id
        files = list(self.files)
        if self.shuffle_buffer:
            random.Random(self.seed).shuffle(files)  # the same order in every worker
        mine = files if info is None else files[wid :: info.num_workers]
        rng = random.Random(f"{self.seed}/{wid}")
        nrng = np.random.default_rng([self.seed, wid])
        for data, label in self._shuffled(self._encoded(mine), rng):
            yield self.transform(data, nrng), label, len(data)

    def _shuffled(self, items: Iterator[tuple[bytes, int]],
                  rng: random.Random) -> Iterator[tuple[bytes, int]]:
        from feedq.cli._compare_torch import shuffle_buffered

        return shuffle_buffered(items, self.shuffle_buffer, rng)

    def _encoded(self, files: list[str]) -> Iterator[tuple[bytes, int]]:
        if self.container == "tar":
            for path in files:
                yield from _tar_samples(path, self.image_field, self.label_field)
            return
        from feedq.cli._compare_torch import _py_records
        from feedq.readers import example_class

        fake = Schema("tfrecord", self.compression, [], [], [])
        cls = example_class()
        for path in files:
            for rec in _py_records(path, fake):
                msg = cls()
                msg.ParseFromString(rec)
                feats = msg.features.feature
                data = feats[self.image_field].bytes_list.value[0]
                label = int(feats[self.label_field].int64_list.value[0]) if self.label_field else 0
                yield data, label


def _tar_samples(path: str, image_field: str, label_field: str | None) -> Iterator[tuple[bytes, int]]:
    """A tar shard's ``(image, label)`` samples, streamed (members grouped by key)."""
    from feedq.cli._imageset import tar_samples

    for fields in tar_samples(path):
        if image_field in fields:
            label = int(fields[label_field].strip() or b"0") if label_field and label_field in fields else 0
            yield fields[image_field], label


_CLASSES: dict[str, type] = {}
_EPOCHS = itertools.count()


def _dataset_class(name: str) -> type:
    """``FileImages`` / ``ShardImages`` as torch datasets (made on first use:
    torch is an optional extra); also this module's ``Torch<name>``
    attributes, so that spawned workers can unpickle them."""
    if name not in _CLASSES:
        import torch.utils.data

        base = {"FileImages": (FileImages, torch.utils.data.Dataset),
                "ShardImages": (ShardImages, torch.utils.data.IterableDataset)}[name]
        _CLASSES[name] = type("Torch" + name, base, {"__module__": __name__})
    return _CLASSES[name]


def __getattr__(name: str) -> Any:
    if name in ("TorchFileImages", "TorchShardImages"):
        return _dataset_class(name.removeprefix("Torch"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_image_loader(schema: Schema, workers: int, batch_size: int, shuffle_buffer: int,
                       seed: int = 0) -> Any:
    """The DataLoader + Pillow pipeline over an image schema's files."""
    import torch.utils.data

    images = schema.images
    transform = PillowTransform(int(schema.info["size"]), schema.info["augment"])
    common: dict[str, Any] = {"batch_size": batch_size, "num_workers": workers,
                              "collate_fn": ImageCollate()}
    if images.container in ("folders", "files"):
        labels = (images.folder.labels.tolist() if images.folder is not None
                  else [0] * len(images.files))
        ds = _dataset_class("FileImages")(list(images.files), labels, transform, seed)
        gen = torch.Generator()
        gen.manual_seed(seed)
        return torch.utils.data.DataLoader(ds, shuffle=bool(shuffle_buffer), generator=gen, **common)
    ds = _dataset_class("ShardImages")(list(images.files), images.container, images.image_field,
                                       images.label_field, images.compression, transform,
                                       shuffle_buffer, seed)
    return torch.utils.data.DataLoader(ds, **common)


def _torch_system(schema: Schema, workers: int, what: str) -> System:
    name = f"DataLoader, {workers} worker{'s' if workers != 1 else ''}"
    try:
        import torch.utils.data  # noqa: F401
    except ImportError:
        return System(name, what, None, "not installed (pip install torch)")
    if schema.images.compression == "ZSTD":
        return System(name, what, None, "not supported: tarfile and this reader read no zstd")

    def batches(lim: Limits) -> Iterator[tuple[int, int]]:
        # A new seed each epoch (each call).
        seed = random.Random(f"{lim.seed}/{next(_EPOCHS)}").randrange(2**32)
        it = iter(torch_image_loader(schema, workers, lim.batch_size, lim.shuffle_buffer, seed))
        try:
            for imgs, _labels, nbytes in it:
                yield len(imgs), int(nbytes)
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:  # reap the workers now, so their CPU time is counted
                shutdown()

    return System(name, what, lambda lim: timed(lambda: batches(lim), lim))
