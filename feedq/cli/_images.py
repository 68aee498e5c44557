"""Synthetic ImageNet-like JPEGs in the three containers: class folders, TFRecords, tar shards.

Sizes vary around 500 x 375 (both orientations, a few squares and larger
ones), files weigh about 100 KB at quality 90 like ImageNet's, 2/3 are
4:4:4 and the rest 4:2:0, about 4 % grayscale and 1 % progressive. Pixels
are crops of a few textured fields made once, so writing thousands of
images takes seconds. Every container holds the same images with the same
labels: ``folders/<class>/<key>.jpg``, ``tfrecord/train-0000i-of-0000n``
(``tf.train.Example`` with ``image/encoded``, ``image/class/label``,
``image/format``, ``image/height``, ``image/width``: the ImageNet layout)
and ``tar/shard-0000i.tar`` (``<class>/<key>.jpg`` + ``.cls``).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from feedq.errors import MissingExtraError
from feedq.readers import TFRecordWriter, serialize_example

__all__ = ["IMAGE_CONTAINERS", "make_image_dataset", "synthetic_jpegs"]

IMAGE_CONTAINERS = ("folders", "tfrecord", "tar")
_FIELD = 768


def simplejpeg_module() -> Any:
    try:
        import simplejpeg
    except ImportError as exc:
        raise MissingExtraError.for_module("simplejpeg", "writing images") from exc
    return simplejpeg


def pil_image() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingExtraError.for_module("PIL", "writing images") from exc
    return Image


def _fields(rng: np.random.Generator, count: int = 8) -> list[np.ndarray]:
    Image = pil_image()
    out = []
    for _ in range(count):
        g = _FIELD // 40
        base = (rng.random((g, g, 3), dtype=np.float32) * 255).astype(np.uint8)
        arr = np.asarray(
            Image.fromarray(base, "RGB").resize((_FIELD, _FIELD), Image.Resampling.BICUBIC),
            dtype=np.float32,
        ).copy()
        t = _FIELD // 6
        for ch in range(3):
            tex = rng.standard_normal((t, t), dtype=np.float32)
            arr[:, :, ch] += np.asarray(
                Image.fromarray(tex, "F").resize((_FIELD, _FIELD), Image.Resampling.BILINEAR)
            ) * 26
        arr += rng.standard_normal((_FIELD, _FIELD, 3), dtype=np.float32) * 8.5
        out.append(np.clip(arr, 0, 255).astype(np.uint8))
    return out


def _size(rng: np.random.Generator) -> tuple[int, int]:
    u = rng.random()
    if u < 0.7:
        long, short = 500, int(rng.choice([333, 375, 375, 375, 400]))
    elif u < 0.85:
        long = short = int(rng.integers(300, 501))
    else:
        long = int(rng.integers(500, 701))
        short = int(long * rng.uniform(0.6, 0.8))
    return (short, long) if rng.random() < 0.75 else (long, short)


def synthetic_jpegs(n: int, seed: int = 0) -> list[bytes]:
    """``n`` ImageNet-like JPEGs (see the module docstring), reproducible from ``seed``."""
    sj = simplejpeg_module()
    Image = pil_image()
    rng = np.random.default_rng(seed)
    fields = _fields(rng)
    out = []
    for _ in range(n):
        h, w = _size(rng)
        f = fields[int(rng.integers(len(fields)))]
        if h > _FIELD or w > _FIELD:  # pragma: no cover - sizes stay within a field
            h, w = min(h, _FIELD), min(w, _FIELD)
        y = int(rng.integers(0, _FIELD - h + 1))
        x = int(rng.integers(0, _FIELD - w + 1))
        tint = rng.uniform(0.7, 1.3, size=3).astype(np.float32)
        pix = np.clip(f[y : y + h, x : x + w] * tint, 0, 255).astype(np.uint8)
        kind = rng.random()
        if kind < 0.04:
            gray = np.ascontiguousarray(pix.mean(axis=2, keepdims=True).astype(np.uint8))
            out.append(sj.encode_jpeg(gray, quality=90, colorspace="GRAY", colorsubsampling="Gray"))
        elif kind < 0.05:
            buf = io.BytesIO()
            Image.fromarray(pix).save(buf, "JPEG", quality=90, progressive=True)
            out.append(buf.getvalue())
        else:
            sub = "444" if rng.random() < 0.65 else "420"
            out.append(sj.encode_jpeg(np.ascontiguousarray(pix), quality=90, colorsubsampling=sub))
    return out


def make_image_dataset(
    folder: str | os.PathLike[str],
    images: int,
    *,
    classes: int = 10,
    shards: int = 4,
    seed: int = 0,
    containers: tuple[str, ...] = IMAGE_CONTAINERS,
    overwrite: bool = False,
) -> dict[str, list[str]]:
    """Write ``images`` synthetic JPEGs with labels into each container under ``folder``.

    Image ``i`` has label ``i % classes`` and key ``img-<i>``; ``shards``
    TFRecord files and tar shards hold consecutive images.

    Returns:
        container -> the files written (for ``folders``: the images).

    Raises:
        FileExistsError: a container's folder exists (``overwrite=False``).
        ValueError: negative counts or an unknown container.
    """
    if images < 0 or classes < 1 or shards < 1:
        raise ValueError("images must be >= 0, classes and shards >= 1")
    for c in containers:
        if c not in IMAGE_CONTAINERS:
            raise ValueError(f"unknown container {c!r}; choose from {', '.join(IMAGE_CONTAINERS)}")
    root = Path(folder)
    for c in containers:
        if (root / c).exists():
            if not overwrite:
                raise FileExistsError(f"{root / c} exists")
            shutil.rmtree(root / c)
    jpegs = synthetic_jpegs(images, seed)
    labels = [i % classes for i in range(images)]
    names = [f"class-{c:03d}" for c in range(classes)]
    per = [images // shards + (1 if s < images % shards else 0) for s in range(shards)]
    bounds = np.concatenate([[0], np.cumsum(per)]).astype(int).tolist()
    out: dict[str, list[str]] = {}
    if "folders" in containers:
        paths = []
        for c in names:
            (root / "folders" / c).mkdir(parents=True)
        for i, data in enumerate(jpegs):
            p = root / "folders" / names[labels[i]] / f"img-{i:06d}.jpg"
            p.write_bytes(data)
            paths.append(str(p))
        out["folders"] = paths
    if "tfrecord" in containers:
        (root / "tfrecord").mkdir(parents=True)
        sj = simplejpeg_module()
        paths = []
        for s in range(shards):
            p = root / "tfrecord" / f"train-{s:05d}-of-{shards:05d}"
            with TFRecordWriter(p) as w:
                for i in range(bounds[s], bounds[s + 1]):
                    h, wd, _, _ = sj.decode_jpeg_header(jpegs[i])
                    w.write(serialize_example({
                        "image/encoded": jpegs[i],
                        "image/class/label": labels[i],
                        "image/format": b"JPEG",
                        "image/height": int(h),
                        "image/width": int(wd),
                    }))
            paths.append(str(p))
        out["tfrecord"] = paths
    if "tar" in containers:
        (root / "tar").mkdir(parents=True)
        paths = []
        for s in range(shards):
            p = root / "tar" / f"shard-{s:05d}.tar"
            with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
                for i in range(bounds[s], bounds[s + 1]):
                    key = f"{names[labels[i]]}/img-{i:06d}"
                    for ext, data in (("jpg", jpegs[i]), ("cls", b"%d" % labels[i])):
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size = len(data)
                        info.mtime = 0
                        t.addfile(info, io.BytesIO(data))
            paths.append(str(p))
        out["tar"] = paths
    return out
