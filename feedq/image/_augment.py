"""TF1's image ops over decoded arrays: crops, flips, resizes, standardisation.

Each takes one image ``[h, w, c]`` or a batch ``[n, h, w, c]`` (NumPy) and
works on the whole batch at once; the resizes are two matrix products per
batch (BLAS, outside the GIL). The random ops take a ``seed`` and are
reproducible with it (their draws are feedq's, not TF's: the same seed does
not give TF's numbers, the same distribution does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError, UnimplementedError

__all__ = [
    "ResizeMethod",
    "central_crop",
    "normalize",
    "per_image_standardization",
    "random_flip_left_right",
    "random_flip_up_down",
    "resize",
    "resize_images",
    "sample_distorted_bounding_box",
]


class ResizeMethod:
    """TF1's ``tf.image.ResizeMethod`` values (and TF2's names for :func:`resize`)."""

    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _rng(seed: Any) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


# ------------------------------------------------- sample_distorted_bounding_box
def _random_crop(
    rng: np.random.Generator,
    width: int,
    height: int,
    min_area_frac: float,
    max_area_frac: float,
    aspect: float,
) -> tuple[int, int, int, int] | None:
    """TF's ``GenerateRandomCrop``: (x, y, w, h) or None (the attempt failed)."""
    min_area = min_area_frac * width * height
    max_area = max_area_frac * width * height
    min_h = int(np.rint(math.sqrt(min_area / aspect)))
    max_h = int(np.rint(math.sqrt(max_area / aspect)))
    if int(np.rint(max_h * aspect)) > width:
        # The largest max_h with round(max_h * aspect) <= width.
        max_h = int((width + 0.5 - 1e-7) / aspect)
        if int(np.rint(max_h * aspect)) > width:
            max_h -= 1
    max_h = min(max_h, height)
    min_h = min(min_h, max_h)
    h = min_h
    if min_h < max_h:
        h = min_h + int(rng.integers(0, max_h - min_h + 1))
    w = int(np.rint(h * aspect))
    area = w * h
    if area < min_area:
        h += 1
        w = int(np.rint(h * aspect))
        area = w * h
    if area > max_area:
        h -= 1
        w = int(np.rint(h * aspect))
        area = w * h
    if area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    y = int(rng.integers(0, height - h)) if h < height else 0
    x = int(rng.integers(0, width - w)) if w < width else 0
    return x, y, w, h


def _covers(
    crop: tuple[int, int, int, int], boxes: list[tuple[int, int, int, int]], min_covered: float
) -> bool:
    # TF's SatisfiesOverlapConstraints: some box with a positive area is at
    # least min_covered inside the crop.
    cx, cy, cw, ch = crop
    for x0, y0, x1, y1 in boxes:
        area = (x1 - x0) * (y1 - y0)
        if area <= 0:
            continue
        iw = min(cx + cw, x1) - max(cx, x0)
        ih = min(cy + ch, y1) - max(cy, y0)
        inter = max(iw, 0) * max(ih, 0)
        if inter / area >= min_covered:
            return True
    return False


def sample_distorted_bounding_box(
    image_size: Any,
    bounding_boxes: Any,
    seed: Any = None,
    seed2: int | None = None,
    min_object_covered: float = 0.1,
    aspect_ratio_range: Sequence[float] | None = None,
    area_range: Sequence[float] | None = None,
    max_attempts: int | None = None,
    use_image_if_no_bounding_boxes: bool | None = None,
    name: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random crop that covers part of the objects (TF1's ``tf.image.sample_distorted_bounding_box``).

    TF's algorithm: up to ``max_attempts`` draws of an aspect ratio
    (uniform in ``aspect_ratio_range``) and a height (uniform between the
    heights that give an area fraction in ``area_range``), placed uniformly;
    the first crop that holds at least ``min_object_covered`` of some box
    wins; when none does, the whole image.

    Args:
        image_size: ``[height, width, channels]``.
        bounding_boxes: ``[batch, N, 4]`` float boxes ``[ymin, xmin, ymax,
            xmax]`` in ``[0, 1]``.
        seed, seed2: seed the draws (feedq's generator: reproducible, not
            TF's numbers); ``seed`` may also be a ``numpy.random.Generator``.
        min_object_covered: the fraction of a box the crop must hold.
        aspect_ratio_range: width / height range (default ``(0.75, 1.33)``).
        area_range: crop area fraction range (default ``(0.05, 1.0)``).
        max_attempts: draws before falling back to the whole image (100).
        use_image_if_no_bounding_boxes: with no boxes, use the whole image as
            the box (else an error).
        name: ignored.

    Returns:
        ``(begin, size, bboxes)``: int32 ``[y, x, 0]`` and ``[h, w, -1]`` for
        a slice of the image, and the crop as a float32 ``[1, 1, 4]`` box.

    Raises:
        InvalidArgumentError: bad ranges, or no boxes without
            ``use_image_if_no_bounding_boxes``.
    """
    size = np.asarray(image_size).reshape(-1)
    if size.shape[0] != 3:
        raise InvalidArgumentError(f"image_size must have 3 elements, got {size.shape[0]}")
    height, width = int(size[0]), int(size[1])
    if height <= 0 or width <= 0:
        raise InvalidArgumentError(f"image_size must be positive, got {size.tolist()}")
    aspect = tuple(aspect_ratio_range) if aspect_ratio_range is not None else (0.75, 1.33)
    area = tuple(area_range) if area_range is not None else (0.05, 1.0)
    attempts = 100 if max_attempts is None else int(max_attempts)
    if len(aspect) != 2 or not 0 < aspect[0] <= aspect[1]:
        raise InvalidArgumentError(f"aspect_ratio_range must be 0 < lo <= hi, got {aspect}")
    if len(area) != 2 or not 0 < area[0] <= area[1] <= 1:
        raise InvalidArgumentError(f"area_range must be 0 < lo <= hi <= 1, got {area}")
    if attempts < 1:
        raise InvalidArgumentError(f"max_attempts must be >= 1, got {attempts}")
    if not 0 <= min_object_covered:
        raise InvalidArgumentError(f"min_object_covered must be >= 0, got {min_object_covered}")
    raw = np.asarray(bounding_boxes, dtype=np.float64)
    if raw.size and (raw.ndim != 3 or raw.shape[-1] != 4):
        raise InvalidArgumentError(
            f"bounding_boxes must be [batch, N, 4], got shape {raw.shape}"
        )
    boxes = [
        (int(b[1] * width), int(b[0] * height), int(b[3] * width), int(b[2] * height))
        for b in raw.reshape(-1, 4)
    ]
    if not boxes:
        if not use_image_if_no_bounding_boxes:
            raise InvalidArgumentError(
                "No bounding boxes provided as input. One must enable "
                "use_image_if_no_bounding_boxes if you wish to not provide any bounding boxes."
            )
        boxes = [(0, 0, width, height)]
    rng = _rng(seed if seed2 is None or isinstance(seed, np.random.Generator) else [seed, seed2])
    crop = (0, 0, width, height)
    for _ in range(attempts):
        ratio = rng.random() * (aspect[1] - aspect[0]) + aspect[0]
        cand = _random_crop(rng, width, height, area[0], area[1], ratio)
        if cand is not None and _covers(cand, boxes, min_object_covered):
            crop = cand
            break
    x, y, w, h = crop
    begin = np.array([y, x, 0], dtype=np.int32)
    out_size = np.array([h, w, -1], dtype=np.int32)
    bbox = np.array(
        [[[y / height, x / width, (y + h) / height, (x + w) / width]]], dtype=np.float32
    )
    return begin, out_size, bbox


# ------------------------------------------------------------------- flips
def _batched(image: Any) -> tuple[np.ndarray, bool]:
    arr = np.asarray(image)
    if arr.ndim == 3:
        return arr[None], True
    if arr.ndim == 4:
        return arr, False
    raise InvalidArgumentError(f"image must be [h, w, c] or [n, h, w, c], got shape {arr.shape}")


def _random_flip(image: Any, seed: Any, axis: int) -> np.ndarray:
    batch, single = _batched(image)
    flip = _rng(seed).random(batch.shape[0]) < 0.5
    out = batch.copy()
    out[flip] = np.flip(batch[flip], axis=axis)
    return out[0] if single else out


def random_flip_left_right(image: Any, seed: Any = None) -> np.ndarray:
    """Flip each image left-right with probability 1/2 (one draw per image of a batch)."""
    return _random_flip(image, seed, 2)


def random_flip_up_down(image: Any, seed: Any = None) -> np.ndarray:
    """Flip each image upside down with probability 1/2 (one draw per image of a batch)."""
    return _random_flip(image, seed, 1)


# ------------------------------------------------------------------- crops
def central_crop(image: Any, central_fraction: float) -> np.ndarray:
    """The central ``central_fraction`` of each side (TF's ``tf.image.central_crop``).

    The crop starts at ``int((size - size * central_fraction) / 2)`` and is
    symmetric, as TF's. Returns a view.
    """
    if not 0.0 < central_fraction <= 1.0:
        raise InvalidArgumentError(f"central_fraction must be within (0, 1], got {central_fraction}")
    batch, single = _batched(image)
    if central_fraction == 1.0:
        return batch[0] if single else batch
    h, w = batch.shape[1:3]
    y0 = int((h - h * central_fraction) / 2)
    x0 = int((w - w * central_fraction) / 2)
    out = batch[:, y0 : h - y0, x0 : w - x0]
    return out[0] if single else out


def per_image_standardization(image: Any) -> np.ndarray:
    """``(x - mean) / max(stddev, 1 / sqrt(N))`` per image, float32 (TF's op)."""
    batch, single = _batched(image)
    x = batch.astype(np.float32)
    n = x[0].size
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    std = x.std(axis=(1, 2, 3), keepdims=True)
    out: np.ndarray = (x - mean) / np.maximum(std, np.float32(1.0 / math.sqrt(n)))
    return out[0] if single else out


def normalize(
    images: Any,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    scale: float = 1.0 / 255.0,
    data_format: str = "NHWC",
    dtype: Any = np.float32,
) -> np.ndarray:
    """``(x * scale - mean) / std`` per channel (torchvision's ``ToTensor`` + ``Normalize``).

    Args:
        images: ``[n, h, w, c]`` (or one ``[h, w, c]``) uint8 images.
        mean, std: per channel, on the scaled values (ImageNet's
            ``(0.485, 0.456, 0.406)``, ``(0.229, 0.224, 0.225)``).
        scale: applied first (1/255: uint8 to [0, 1]).
        data_format: ``"NHWC"``, or ``"NCHW"`` for torch.
        dtype: float32 or float16.
    """
    if data_format not in ("NHWC", "NCHW"):
        raise InvalidArgumentError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    batch, single = _batched(images)
    m = np.asarray(mean, dtype=np.float32)
    s = np.asarray(std, dtype=np.float32)
    if m.shape != (batch.shape[3],) or s.shape != m.shape:
        raise InvalidArgumentError(
            f"mean and std need {batch.shape[3]} values, got {m.shape} and {s.shape}"
        )
    out = (batch.astype(np.float32) * np.float32(scale) - m) / s
    if data_format == "NCHW":
        out = np.ascontiguousarray(out.transpose(0, 3, 1, 2))
    out = out.astype(dtype, copy=False)
    return out[0] if single else out


# ----------------------------------------------------------------- resizes
def _weights_legacy(n_in: int, n_out: int, align_corners: bool, nearest: bool) -> np.ndarray:
    """TF1's ResizeBilinear / ResizeNearestNeighbor (no half-pixel centres) as a matrix."""
    if align_corners and n_out > 1:
        scale = (n_in - 1) / (n_out - 1)
    else:
        scale = n_in / n_out
    src = np.arange(n_out, dtype=np.float64) * scale
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    if nearest:
        idx = np.rint(src) if align_corners else np.floor(src)
        m[rows, np.minimum(idx.astype(np.int64), n_in - 1)] = 1.0
        return m
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    np.add.at(m, (rows, lo), 1.0 - frac)
    np.add.at(m, (rows, hi), frac)
    return m


def _weights_half_pixel(n_in: int, n_out: int, method: str, antialias: bool) -> np.ndarray:
    """TF2's ``tf.image.resize`` (half-pixel centres) as an ``[n_out, n_in]`` matrix."""
    scale = n_in / n_out
    centers = (np.arange(n_out, dtype=np.float64) + 0.5) * scale
    if method == "nearest":
        m = np.zeros((n_out, n_in), dtype=np.float64)
        idx = np.minimum(np.floor(centers).astype(np.int64), n_in - 1)
        m[np.arange(n_out), idx] = 1.0
        return m
    # Triangle kernel; widened by the scale when shrinking with antialias
    # (TF's scale_and_translate), weights renormalised inside the image.
    support = max(scale, 1.0) if antialias else 1.0
    pix = np.arange(n_in, dtype=np.float64) + 0.5
    if not antialias:
        # Plain bilinear clamps the sample point into the image.
        centers = np.clip(centers, 0.5, n_in - 0.5)
    m = np.maximum(0.0, 1.0 - np.abs(pix[None, :] - centers[:, None]) / support)
    total = m.sum(axis=1, keepdims=True)
    return m / np.where(total == 0, 1.0, total)


def _apply_weights(batch: np.ndarray, wy: np.ndarray, wx: np.ndarray) -> np.ndarray:
    x = batch.astype(np.float32)
    # [oh, h] x [n, h, w, c] -> [n, oh, w, c], then over w: two BLAS products.
    t = np.einsum("oh,nhwc->nowc", wy.astype(np.float32), x, optimize=True)
    out: np.ndarray = np.einsum("pw,nowc->nopc", wx.astype(np.float32), t, optimize=True)
    return out


def _target(size: Any, h: int, w: int, preserve_aspect_ratio: bool) -> tuple[int, int]:
    th, tw = (int(v) for v in np.asarray(size).reshape(-1))
    if th <= 0 or tw <= 0:
        raise InvalidArgumentError(f"size must be positive, got {[th, tw]}")
    if preserve_aspect_ratio:
        f = min(th / h, tw / w)
        th, tw = max(1, int(round(h * f))), max(1, int(round(w * f)))
    return th, tw


def resize_images(
    images: Any,
    size: Any,
    method: int = ResizeMethod.BILINEAR,
    align_corners: bool = False,
    preserve_aspect_ratio: bool = False,
    name: str | None = None,
) -> np.ndarray:
    """TF1's ``tf.image.resize_images``: bilinear or nearest, TF1's pixel grid.

    TF1's grid maps output pixel ``i`` to input ``i * in / out`` (corners
    aligned with ``align_corners``), not to pixel centres as
    :func:`resize` does. Bilinear returns float32, nearest the input dtype.

    Raises:
        UnimplementedError: ``BICUBIC`` or ``AREA``.
    """
    batch, single = _batched(images)
    if method not in (ResizeMethod.BILINEAR, ResizeMethod.NEAREST_NEIGHBOR):
        raise UnimplementedError("resize_images supports BILINEAR and NEAREST_NEIGHBOR only")
    h, w = batch.shape[1:3]
    th, tw = _target(size, h, w, preserve_aspect_ratio)
    nearest = method == ResizeMethod.NEAREST_NEIGHBOR
    wy = _weights_legacy(h, th, align_corners, nearest)
    wx = _weights_legacy(w, tw, align_corners, nearest)
    out = _apply_weights(batch, wy, wx)
    if nearest:
        out = out.astype(batch.dtype)
    return out[0] if single else out


def resize(
    images: Any,
    size: Any,
    method: str = "bilinear",
    preserve_aspect_ratio: bool = False,
    antialias: bool = False,
    name: str | None = None,
) -> np.ndarray:
    """TF2's ``tf.image.resize`` (half-pixel centres): ``"bilinear"`` or ``"nearest"``.

    ``antialias=True`` widens the bilinear (triangle) kernel when shrinking,
    as TF does. Bilinear returns float32, nearest the input dtype.

    Raises:
        UnimplementedError: another method.
    """
    batch, single = _batched(images)
    if method not in ("bilinear", "nearest"):
        raise UnimplementedError(f"resize supports 'bilinear' and 'nearest', not {method!r}")
    h, w = batch.shape[1:3]
    th, tw = _target(size, h, w, preserve_aspect_ratio)
    wy = _weights_half_pixel(h, th, method, antialias)
    wx = _weights_half_pixel(w, tw, method, antialias)
    out = _apply_weights(batch, wy, wx)
    if method == "nearest":
        out = out.astype(batch.dtype)
    return out[0] if single else out
