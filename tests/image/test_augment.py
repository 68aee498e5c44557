"""TF1's image ops against TF itself; sample_distorted_bounding_box's distribution."""

from __future__ import annotations

import numpy as np
import pytest

from feedq.errors import InvalidArgumentError, UnimplementedError
from feedq.image import (
    ResizeMethod,
    central_crop,
    normalize,
    per_image_standardization,
    random_flip_left_right,
    random_flip_up_down,
    resize,
    resize_images,
    sample_distorted_bounding_box,
)


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (2, 37, 53, 3)).astype(np.float32)


@pytest.mark.parametrize("size", [(20, 30), (80, 90), (37, 17)])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_equals_tf(tf, images: np.ndarray, size: tuple[int, int], antialias: bool) -> None:
    want = tf.image.resize(images, size, antialias=antialias).numpy()
    got = resize(images, size, antialias=antialias)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=2e-3)
    want = tf.image.resize(images, size, method="nearest").numpy()
    np.testing.assert_array_equal(resize(images, size, method="nearest"), want)


@pytest.mark.parametrize("align_corners", [False, True])
def test_resize_images_equals_tf1(tf, images: np.ndarray, align_corners: bool) -> None:
    v1 = tf.compat.v1.image
    np.testing.assert_allclose(
        resize_images(images, (20, 30), align_corners=align_corners),
        v1.resize_bilinear(images, (20, 30), align_corners=align_corners).numpy(), atol=2e-3)
    np.testing.assert_array_equal(
        resize_images(images, (20, 70), ResizeMethod.NEAREST_NEIGHBOR, align_corners=align_corners),
        v1.resize_nearest_neighbor(images, (20, 70), align_corners=align_corners).numpy())
    one = resize_images(images[0], (10, 10), preserve_aspect_ratio=True)
    assert one.shape == tuple(tf.image.resize(images[0], (10, 10), preserve_aspect_ratio=True).shape)
    with pytest.raises(UnimplementedError):
        resize_images(images, (4, 4), ResizeMethod.BICUBIC)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.33, 0.9])
def test_central_crop_equals_tf(tf, images: np.ndarray, fraction: float) -> None:
    np.testing.assert_array_equal(central_crop(images[0], fraction),
                                  tf.image.central_crop(images[0], fraction).numpy())
    np.testing.assert_array_equal(central_crop(images, fraction),
                                  tf.image.central_crop(images, fraction).numpy())
    with pytest.raises(InvalidArgumentError):
        central_crop(images, 0.0)


def test_per_image_standardization_equals_tf(tf, images: np.ndarray) -> None:
    np.testing.assert_allclose(per_image_standardization(images),
                               tf.image.per_image_standardization(images).numpy(), atol=1e-5)
    flat = np.full((4, 4, 3), 7, dtype=np.uint8)  # stddev 0: divided by 1/sqrt(N)
    np.testing.assert_array_equal(per_image_standardization(flat), np.zeros((4, 4, 3), np.float32))


def test_normalize_layouts() -> None:
    x = np.random.default_rng(1).integers(0, 256, (2, 4, 5, 3), dtype=np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    want = (x / 255.0 - np.array(mean)) / np.array(std)
    np.testing.assert_allclose(normalize(x, mean, std), want, rtol=1e-5, atol=1e-5)
    nchw = normalize(x, mean, std, data_format="NCHW", dtype=np.float16)
    assert nchw.shape == (2, 3, 4, 5) and nchw.dtype == np.float16
    np.testing.assert_allclose(nchw, want.transpose(0, 3, 1, 2), atol=1e-2)
    with pytest.raises(InvalidArgumentError):
        normalize(x, (0.5,), (0.5,))


def test_random_flips_are_seeded_and_per_image() -> None:
    x = np.random.default_rng(2).integers(0, 256, (64, 3, 4, 1), dtype=np.uint8)
    a = random_flip_left_right(x, seed=5)
    np.testing.assert_array_equal(a, random_flip_left_right(x, seed=5))
    flipped = [bool(np.array_equal(a[i], x[i, :, ::-1])) and not np.array_equal(a[i], x[i]) for i in range(64)]
    kept = [bool(np.array_equal(a[i], x[i])) for i in range(64)]
    assert all(f or k for f, k in zip(flipped, kept))
    assert 16 < sum(flipped) < 48  # 64 fair coins, seeded
    b = random_flip_up_down(x[0], seed=1)
    assert np.array_equal(b, x[0]) or np.array_equal(b, x[0, ::-1])


# --------------------------------------------- sample_distorted_bounding_box
def _check_crop(begin, size, bbox, h, w, area_range, aspect_range) -> tuple[float, float]:
    y, x, _ = begin.tolist()
    ch, cw, last = size.tolist()
    assert last == -1 and begin[2] == 0
    assert 0 <= y and 0 <= x and y + ch <= h and x + cw <= w
    np.testing.assert_allclose(bbox[0, 0], [y / h, x / w, (y + ch) / h, (x + cw) / w], rtol=1e-6)
    return ch * cw / (h * w), cw / ch


def test_sample_distorted_bounding_box_tf_cases() -> None:
    # TF's own test: a 40 x 50 image, one box, min_object_covered 0.1..0.5
    h, w = 40, 50
    box = np.array([[[0.1, 0.2, 0.6, 0.9]]], dtype=np.float32)
    for min_covered in (0.1, 0.5):
        for seed in range(50):
            begin, size, bbox = sample_distorted_bounding_box(
                [h, w, 3], box, seed=seed, min_object_covered=min_covered,
                aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0))
            area, aspect = _check_crop(begin, size, bbox, h, w, (0.05, 1), (0.75, 1.33))
            if (size[:2] != [h, w]).any():  # a sampled crop, not the fallback
                y, x = begin[:2]
                ch, cw = size[:2]
                bx0, by0, bx1, by1 = int(0.2 * w), int(0.1 * h), int(0.9 * w), int(0.6 * h)
                inter = max(0, min(x + cw, bx1) - max(x, bx0)) * max(0, min(y + ch, by1) - max(y, by0))
                assert inter / ((bx1 - bx0) * (by1 - by0)) >= min_covered
                assert 0.05 <= area <= 1.0
    with pytest.raises(InvalidArgumentError, match=r"^No bounding boxes provided as input"):
        sample_distorted_bounding_box([h, w, 3], np.zeros((1, 0, 4), np.float32))
    begin, size, _ = sample_distorted_bounding_box(
        [h, w, 3], np.zeros((1, 0, 4), np.float32), seed=1, use_image_if_no_bounding_boxes=True,
        min_object_covered=1.0)
    np.testing.assert_array_equal(size[:2], [h, w])  # only the whole image covers all of it


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


@pytest.mark.timeout(120)
def test_sample_distorted_bounding_box_matches_tfs_distribution(tf) -> None:
    """Area fraction and aspect of 400 crops, ours vs TF's op (fixed seeds):
    the two-sample Kolmogorov-Smirnov distance stays below the 0.1 % critical value."""
    h, w, n = 375, 500, 400
    boxes = np.array([[[0.0, 0.0, 1.0, 1.0]]], dtype=np.float32)
    kw = dict(min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33), area_range=(0.08, 1.0),
              max_attempts=100)
    ours, theirs = [], []
    for seed in range(n):
        b, s, bb = sample_distorted_bounding_box([h, w, 3], boxes, seed=seed, **kw)
        ours.append(_check_crop(b, s, bb, h, w, (0.08, 1), (0.75, 1.33)))
        tb, ts, _ = tf.compat.v1.image.sample_distorted_bounding_box(
            [h, w, 3], boxes, seed=7, seed2=seed, **kw)
        theirs.append((ts[0].numpy() * ts[1].numpy() / (h * w), ts[1].numpy() / ts[0].numpy()))
    o, t = np.array(ours), np.array(theirs)
    critical = 1.95 * np.sqrt(2 / n)
    assert _ks(o[:, 0], t[:, 0]) < critical
    assert _ks(o[:, 1], t[:, 1]) < critical
