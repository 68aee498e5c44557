"""Image datasets for ``feedq bench`` and ``feedq inspect``: telling one apart,
reading it, and the decode + augmentation a bench reader thread runs.

Four containers are told apart (``detect_images``):

* ``tfrecord``: ``tf.train.Example`` records with an ``image/encoded``
  feature (the TF / ImageNet layout), labels from ``image/class/label``;
* ``tar``: WebDataset-style tar shards (``<key>.jpg`` + ``<key>.cls``, ...),
  the image field the first of jpg / jpeg / png / bmp / gif a sample has,
  labels from ``cls``;
* ``folders``: one root of class folders (``root/<class>/<image>``), labels
  numbered from the sorted folder names (``feedq.image.image_folder``);
* ``files``: image files named one by one or in a flat folder (label 0).

An image dataset is benched as a :class:`~feedq.cli._schema.Schema` of
format ``images`` (components ``image`` uint8 ``[size, size, 3]`` and
``label`` int64) whose ``images`` field is the :class:`ImageSet`; the bench
loop, its statistics and its verdict are those of every other format.
"""

from __future__ import annotations

import logging
import os
import tarfile
import threading
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from feedq.cli._formats import is_stream
from feedq.cli._schema import OnError, Schema
from feedq.errors import InvalidArgumentError
from feedq.image import (
    ImageFolder,
    decode_random_resized_crop,
    decode_resize_center_crop,
    element_seeds,
    image_folder,
    image_format,
)
from feedq.readers import (
    FixedLenFeature,
    RecordBlock,
    TarReader,
    TFRecordReader,
    WholeFileReader,
    parse_example,
)

__all__ = ["AUGMENTS", "ImageDecoder", "ImageSet", "detect_images", "eval_resize", "image_schema",
           "make_image_reader"]

logger = logging.getLogger("feedq.image")

Augment = Literal["train", "eval"]
#: What ``--augment`` accepts.
AUGMENTS = ("train", "eval")
#: Images per reader block (one decode call): 64 images of about 100 KB.
IMAGE_BLOCK = 64
TAR_EXTENSIONS = (".tar", ".tar.gz", ".tgz", ".tar.zst")
IMAGE_FIELDS = ("jpg", "jpeg", "png", "bmp", "gif")
_IMAGE_EXTENSIONS = tuple("." + f for f in IMAGE_FIELDS)
TF_IMAGE = "image/encoded"
TF_LABEL = "image/class/label"


@dataclass
class ImageSet:
    """An image dataset: its container, the files a filename queue takes, and
    where images and labels are in them.

    Attributes:
        container: ``tfrecord``, ``tar``, ``folders`` or ``files``.
        files: what ``string_input_producer`` gets (shards, or image files).
        image_field: the TFRecord feature / tar field holding the image.
        label_field: the label's feature / field (None: no labels, all 0).
        folder: the class-folder tree (``folders``).
        compression: the TFRecord / tar compression, or None.
    """

    container: str
    files: list[str]
    image_field: str | None = None
    label_field: str | None = None
    folder: ImageFolder | None = None
    compression: str | None = None
    root: str = ""
    _labels: dict[bytes, int] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        """A line for the bench table: what was found."""
        n = len(self.files)
        if self.container == "folders":
            assert self.folder is not None
            return f"class folders ({len(self.folder.classes)} classes, labels from the sorted names)"
        if self.container == "files":
            return f"image file{'s' if n != 1 else ''} ({n:,}, no labels: label 0)"
        kind = "TFRecord Examples" if self.container == "tfrecord" else "tar shards"
        label = f", labels {self.label_field}" if self.label_field else ", no labels (label 0)"
        return f"{kind} ({n} file{'s' if n != 1 else ''}), images in {self.image_field}{label}"


def _is_tar(path: str) -> bool:
    name = os.path.basename(path).lower()
    if name.endswith(TAR_EXTENSIONS):
        return True
    try:
        with open(path, "rb") as f:
            f.seek(257)
            return f.read(5) == b"ustar"
    except OSError:
        return False


def _is_image_file(path: str) -> bool:
    if os.path.basename(path).lower().endswith(_IMAGE_EXTENSIONS):
        return True
    try:
        with open(path, "rb") as f:
            return image_format(f.read(8)) is not None
    except OSError:
        return False


def tar_compression(path: str) -> str | None:
    name = path.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "GZIP"
    if name.endswith(".tar.zst"):
        return "ZSTD"
    return None


def tar_samples(path: str) -> Generator[dict[str, bytes], None, None]:
    """A tar shard's samples, streamed: the members sharing a key (the path
    up to the first ``.`` of the base name), as ``{extension: bytes}``."""
    key: str | None = None
    fields: dict[str, bytes] = {}
    with tarfile.open(path, "r|*") as t:
        for member in t:
            if not member.isfile():
                continue
            base = os.path.basename(member.name)
            stem, _, ext = base.partition(".")
            k = os.path.join(os.path.dirname(member.name), stem)
            if k != key:
                if key is not None:
                    yield fields
                key, fields = k, {}
            f = t.extractfile(member)
            if f is not None:
                fields[ext.lower()] = f.read()
    if key is not None:
        yield fields


def tar_fields(path: str) -> tuple[str, str | None]:
    """The image and label fields of a tar shard, from its first sample."""
    if tar_compression(path) == "ZSTD":
        return "jpg", "cls"  # tarfile reads no zstd: the WebDataset defaults
    with closing(tar_samples(path)) as samples:
        exts = list(next(samples, {}))
    image = next((e for e in exts if e in IMAGE_FIELDS), None)
    if image is None:
        raise InvalidArgumentError(f"{path}: its first sample has no image member "
                                   f"({', '.join(IMAGE_FIELDS)}); fields: {exts}")
    return image, ("cls" if "cls" in exts else None)


def detect_images(paths: list[str]) -> ImageSet | None:
    """The image dataset ``paths`` name (as given on the command line), or
    None when they are not one (a TFRecord file is one only when its records
    hold ``image/encoded``: :func:`tfrecord_images` tells after its schema
    is inferred).

    Raises:
        click-free ``InvalidArgumentError``: a mix of images and other files.
    """
    local = [p for p in paths if "://" not in p]
    if len(local) != len(paths) or not paths or any(is_stream(p) for p in paths):
        return None  # a pipe's first bytes would be lost to the reader that comes after
    if len(paths) == 1 and os.path.isdir(paths[0]):
        root = paths[0]
        subdirs = [e for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")]
        if subdirs:
            try:
                folder = image_folder(root)
            except Exception:  # noqa: BLE001 - not a class-folder tree: not images
                return None
            if not folder.filenames:
                return None
            return ImageSet("folders", list(folder.filenames), folder=folder, root=root)
        files = sorted(str(p) for p in Path(root).iterdir() if p.is_file() and not p.name.startswith("."))
    else:
        files = []
        for p in paths:
            if os.path.isdir(p):
                files.extend(sorted(str(x) for x in Path(p).iterdir()
                                    if x.is_file() and not x.name.startswith(".")))
            elif os.path.exists(p):
                files.append(p)
            else:
                return None  # the caller names the missing file
    if not files or any(is_stream(f) for f in files):
        return None
    tars = [_is_tar(f) for f in files]
    if all(tars):
        image, label = tar_fields(files[0])
        return ImageSet("tar", files, image_field=image, label_field=label,
                        compression=tar_compression(files[0]), root=files[0])
    images = [_is_image_file(f) for f in files]
    if all(images):
        return ImageSet("files", files, root=files[0])
    if any(tars) or any(images):
        odd = files[images.index(False)] if any(images) else files[tars.index(False)]
        raise InvalidArgumentError(f"{odd}: not an image or a tar shard, among images / shards; "
                                   "name the image files or shards alone")
    return None


def tfrecord_images(files: list[str], schema: Schema) -> ImageSet | None:
    """An ImageNet-layout TFRecord dataset, from its inferred schema, or None."""
    if schema.fmt != "tfrecord" or TF_IMAGE not in schema.features:
        return None
    label = TF_LABEL if TF_LABEL in schema.features else None
    return ImageSet("tfrecord", files, image_field=TF_IMAGE, label_field=label,
                    compression=schema.compression, root=files[0])


def eval_resize(size: int) -> int:
    """The shorter side resized to before the centre crop: 256 for 224."""
    return int(round(size * 256 / 224))


def image_schema(images: ImageSet, augment: Augment, size: int, seed: int = 0) -> Schema:
    """The bench schema of an image dataset: ``image`` ``[size, size, 3]`` uint8, ``label`` int64."""
    what = (f"train: random resized crop {size} + flip" if augment == "train"
            else f"eval: resize {eval_resize(size)} + centre crop {size}")
    info = {"container": images.container, "augment": augment, "size": size, "seed": seed,
            "dataset": images.describe(), "transform": what}
    return Schema("images", images.compression, ["image", "label"], [np.uint8, np.int64],
                  [[size, size, 3], []], info=info, images=images)


def make_image_reader(schema: Schema, on_error: OnError, name: str | None = None) -> Any:
    """The reader of an image schema's container."""
    images: ImageSet = schema.images
    if images.container == "tfrecord":
        return TFRecordReader(options=images.compression or "", on_error=on_error, name=name)
    if images.container == "tar":
        fields = (images.image_field or "jpg",) + ((images.label_field,) if images.label_field else ())
        return TarReader(fields=fields, compression=images.compression, on_error=on_error, name=name)
    return WholeFileReader(on_error=on_error, name=name)


def _lengths(encoded: Any) -> np.ndarray:
    """Encoded bytes of each image of a RecordBlock or an object column."""
    if isinstance(encoded, RecordBlock):
        return encoded.lengths.astype(np.int64, copy=False)
    return np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))


class ImageDecoder:
    """``decoder(block) -> ([images, labels], encoded bytes per image)``: a
    reader's block of an image schema decoded and augmented in one call
    (``decode_random_resized_crop`` / ``decode_resize_center_crop``), the
    same interface as :class:`feedq.cli._decode.Decoder`.

    Bad images raise ``InvalidArgumentError`` naming file and record, or are
    skipped and counted (``on_error="skip"``). Thread-safe.
    """

    def __init__(self, schema: Schema, on_error: OnError = "raise") -> None:
        self.schema = schema
        self.images: ImageSet = schema.images
        self.on_error = on_error
        self.size = int(schema.info["size"])
        self.augment = schema.info["augment"]
        self.seed = int(schema.info.get("seed", 0))
        self._lock = threading.Lock()
        self._skipped = 0  # guarded by self._lock
        feats = {TF_IMAGE: FixedLenFeature([], "string")}
        if self.images.label_field == TF_LABEL:
            feats[TF_LABEL] = FixedLenFeature([], "int64")
        self._features = feats

    @property
    def skipped(self) -> int:
        """Bad images (and records) skipped so far."""
        with self._lock:
            return self._skipped

    def _count(self, n: int) -> None:
        if n:
            with self._lock:
                self._skipped += n

    def __call__(self, block: Any) -> tuple[list[np.ndarray], np.ndarray]:
        encoded, labels, keys, seeds = self._split(block)
        if len(encoded) == 0:
            return self._empty()
        if self.augment == "train":
            b = decode_random_resized_crop(encoded, self.size, seed=seeds, keys=keys,
                                           on_error=self.on_error)
        else:
            b = decode_resize_center_crop(encoded, self.size, eval_resize(self.size), keys=keys,
                                          on_error=self.on_error)
        self._count(len(b.skipped))
        lengths = _lengths(encoded)[b.index]
        return [b.images, labels[b.index]], lengths

    def _empty(self) -> tuple[list[np.ndarray], np.ndarray]:
        return ([np.empty((0, self.size, self.size, 3), np.uint8), np.empty(0, np.int64)],
                np.empty(0, np.int64))

    def _split(self, block: Any) -> tuple[Any, np.ndarray, Any, np.ndarray]:
        """(encoded images, labels, keys, per-image seeds) of a block."""
        c = self.images.container
        if c == "tfrecord":
            encoded, labels, keys = self._examples(block)
        elif c == "tar":
            encoded = block[self.images.image_field or "jpg"]
            keys = block.keys()
            if self.images.label_field:
                labels = np.array([int(bytes(v).strip() or b"0") for v in
                                   block[self.images.label_field].values().tolist()], dtype=np.int64)
            else:
                labels = np.zeros(len(encoded), np.int64)
        else:
            encoded, keys = block, block.keys()
            if self.images.folder is not None:
                labels = self.images.folder.labels_of(keys)
            else:
                labels = np.zeros(len(block), np.int64)
        seeds = (element_seeds(encoded, self.seed, keys=keys) if len(keys)
                 else np.empty(0, np.uint64))
        return encoded, labels, keys, seeds

    def _examples(self, block: Any) -> tuple[Any, np.ndarray, np.ndarray]:
        keys = block.keys()
        try:
            ex = parse_example(block, self._features)
            return ex[TF_IMAGE], self._labels(ex, len(keys)), keys
        except InvalidArgumentError:
            if self.on_error == "raise" and len(keys) == 1:
                raise
        # One bad record in the block: parse them one by one to name or skip it.
        values = block.values()
        good, encoded, labels = [], [], []
        for i in range(len(values)):
            try:
                ex = parse_example(values[i : i + 1], self._features)
            except InvalidArgumentError as exc:
                where = keys[i].decode("utf-8", "backslashreplace")
                if self.on_error == "raise":
                    raise InvalidArgumentError(f"{where}: {exc}") from None
                logger.warning("skipped %s: %s", where, exc)
                self._count(1)
                continue
            good.append(i)
            encoded.append(ex[TF_IMAGE][0])
            labels.append(int(self._labels(ex, 1)[0]))
        col = np.empty(len(encoded), dtype=object)
        col[:] = encoded
        return col, np.asarray(labels, dtype=np.int64), keys[good]

    def _labels(self, ex: dict[str, Any], n: int) -> np.ndarray:
        if TF_LABEL in ex:
            return np.asarray(ex[TF_LABEL], dtype=np.int64).reshape(n)
        return np.zeros(n, np.int64)
