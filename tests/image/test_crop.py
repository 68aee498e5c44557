"""The fused batch crops: torchvision's parameters, the reference pixels, per-image seeds."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import feedq.image._crop as crop_module
from feedq.cli.datasets import synthetic_jpegs
from feedq.errors import InvalidArgumentError
from feedq.image import (
    decode_random_resized_crop,
    decode_resize_center_crop,
    element_seeds,
    random_resized_crop_params,
)
from tests.image.images import Image, encoded, jpeg, reference
from tests.image.test_decode import block_of


def test_params_follow_torchvisions_distribution() -> None:
    """10,000 draws on a 375 x 500 image: area fraction uniform in [0.08, 1]
    and log-aspect uniform in [log 3/4, log 4/3] among the accepted draws
    (torchvision's rejection sampler), every crop inside the image."""
    rng = np.random.default_rng(0)
    areas, logs = [], []
    for _ in range(10_000):
        top, left, h, w = random_resized_crop_params(375, 500, rng)
        assert 0 <= top and 0 <= left and top + h <= 375 and left + w <= 500
        areas.append(h * w / (375 * 500))
        logs.append(math.log(w / h))
    a, lg = np.array(areas), np.array(logs)
    # rounding to whole pixels widens the ranges by a pixel's worth
    assert a.min() >= 0.075 and a.max() <= 1.0
    assert lg.min() >= math.log(3 / 4) - 0.02 and lg.max() <= math.log(4 / 3) + 0.02
    # Large crops are rejected more (they fit less often): mean area below 0.54.
    assert 0.40 < a.mean() < 0.54
    # Small crops always fit: their log-aspects are uniform (KS vs uniform, 0.1 %).
    small = np.sort(lg[a < 0.3])
    lo, hi = math.log(3 / 4), math.log(4 / 3)
    cdf = (small - lo) / (hi - lo)
    emp = np.arange(1, len(small) + 1) / len(small)
    assert np.abs(emp - cdf).max() < 1.95 / math.sqrt(len(small)) + 0.01


def test_params_fall_back_to_the_centre() -> None:
    class Never:  # every draw too large to fit
        def uniform(self, lo: float, hi: float) -> float:
            return hi if lo > 0 else hi

        def integers(self, lo: int, hi: int) -> int:  # pragma: no cover - never reached
            raise AssertionError

    # scale (2, 2): twice the image's area never fits: torchvision's fallback
    assert random_resized_crop_params(100, 1000, Never(), scale=(2, 2)) == (0, 433, 100, 133)  # type: ignore[arg-type]
    assert random_resized_crop_params(1000, 100, Never(), scale=(2, 2)) == (433, 0, 133, 100)  # type: ignore[arg-type]
    assert random_resized_crop_params(100, 110, Never(), scale=(2, 2)) == (0, 0, 100, 110)  # type: ignore[arg-type]


def _expected(data: bytes, seed: int, size: int = 64) -> np.ndarray:
    """torchvision's RandomResizedCrop + RandomHorizontalFlip on the PIL image, step by step."""
    img = reference(data)
    rng = np.random.default_rng(seed)
    top, left, h, w = random_resized_crop_params(img.shape[0], img.shape[1], rng)
    flip = rng.random() < 0.5
    out = np.asarray(Image.fromarray(img).crop((left, top, left + w, top + h))
                     .resize((size, size), Image.Resampling.BILINEAR))
    return out[:, ::-1] if flip else out


RESAMPLERS = ["pillow", pytest.param("native", marks=pytest.mark.skipif(
    crop_module.RESAMPLE != "native", reason="the native core is not built"))]


@pytest.mark.parametrize("resample", RESAMPLERS)
def test_train_crop_equals_crop_then_resize_then_flip(
    resample: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both resamplers give torchvision's pixels exactly (the native one
    computes Pillow 13's arithmetic in Pillow's pass order)."""
    monkeypatch.setattr(crop_module, "RESAMPLE", resample)
    items = [jpeg(90 + 7 * i, 120 - 5 * i, seed=i, sub=("444", "420")[i % 2]) for i in range(6)]
    items.append(jpeg(50, 70, gray=True))
    items.append(encoded("PNG", 80, 60))
    items += [jpeg(300 + 11 * i, 200 + 13 * i, seed=10 + i) for i in range(4)]  # downscaled crops
    block = block_of(items)
    batch = decode_random_resized_crop(block, 64, seed=3, dct_scaling=False)
    assert batch.images.shape == (len(items), 64, 64, 3) and batch.images.dtype == np.uint8
    seeds = element_seeds(block, 3)
    for i, data in enumerate(items):
        np.testing.assert_array_equal(batch.images[i], _expected(data, int(seeds[i])), err_msg=str(i))


def test_dct_scaling_stays_within_tolerance() -> None:
    """A crop at least twice the output decodes at 1/2 (or less): against
    the full decode, mean difference under 2 levels, 99 % of values within
    10, none off by more than 40 (docs/images.md)."""
    items = [jpeg(600, 800, seed=s, sub="420") for s in range(4)] + synthetic_jpegs(4, 1)
    kw = dict(size=96, seed=1, scale=(0.5, 1.0))
    fast = decode_random_resized_crop(items, dct_scaling=True, **kw).images.astype(int)
    full = decode_random_resized_crop(items, dct_scaling=False, **kw).images.astype(int)
    diff = np.abs(fast - full)
    assert 0 < diff.mean() < 2.0 and np.percentile(diff, 99) <= 10 and diff.max() <= 40


def test_same_seed_same_crops_whatever_the_split_or_thread() -> None:
    items = [jpeg(60, 80, seed=s) for s in range(8)]
    block = block_of(items)
    whole = decode_random_resized_crop(block, 32, seed=11, epoch=2).images
    halves: dict[int, np.ndarray] = {}

    def run(part: int) -> None:
        sub = block_of(items[part * 4 : part * 4 + 4])
        # the same records (same keys) in another block
        sub = type(sub)(sub.work_unit, sub.data, sub.starts, sub.ends, block.key_ids[part * 4 : part * 4 + 4])
        halves[part] = decode_random_resized_crop(sub, 32, seed=11, epoch=2).images

    threads = [threading.Thread(target=run, args=(p,), name=f"feedq-test-{p}") for p in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    np.testing.assert_array_equal(np.concatenate([halves[0], halves[1]]), whole)
    other = decode_random_resized_crop(block, 32, seed=11, epoch=3).images
    assert not np.array_equal(other, whole)
    per_image = decode_random_resized_crop(items, 32, seed=element_seeds(block, 11, 2)).images
    np.testing.assert_array_equal(per_image, whole)


@pytest.mark.parametrize("resample", RESAMPLERS)
def test_eval_equals_resize_then_centre_crop(resample: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crop_module, "RESAMPLE", resample)
    items = [jpeg(300, 400, seed=1), jpeg(400, 300, seed=2, sub="444"), jpeg(256, 256, seed=3)]
    batch = decode_resize_center_crop(items, 224, 256)
    assert batch.images.shape == (3, 224, 224, 3)
    for i, data in enumerate(items):
        im = Image.fromarray(reference(data))
        w, h = im.size
        nh, nw = (256, int(256 * w / h)) if h <= w else (int(256 * h / w), 256)
        small = np.asarray(im.resize((nw, nh), Image.Resampling.BILINEAR))
        top, left = int(round((nh - 224) / 2)), int(round((nw - 224) / 2))
        want = small[top : top + 224, left : left + 224].astype(int)
        diff = np.abs(batch.images[i].astype(int) - want)
        # one resample of the crop's box: Pillow's fixed-point weights round
        # differently from the whole image's resample by at most one level
        assert diff.max() <= 1 and diff.mean() < 0.5, (i, diff.max(), diff.mean())


def test_bad_images_are_named_or_skipped() -> None:
    items = [jpeg(), b"\xff\xd8\xff garbage", jpeg(), b"GIF89a"]
    with pytest.raises(InvalidArgumentError, match=r"^image 1 of the batch \(shard.tfrecord:10\): invalid JPEG header"):
        decode_random_resized_crop(block_of(items), 32)
    batch = decode_random_resized_crop(block_of(items), 32, on_error="skip")
    np.testing.assert_array_equal(batch.index, [0, 2])
    assert batch.images.shape == (2, 32, 32, 3)
    assert [s.index for s in batch.skipped] == [1, 3]
    assert batch.skipped[1].message.startswith("a GIF: the fused transforms take JPEG, PNG or BMP")
    ev = decode_resize_center_crop(items, 32, 40, on_error="skip")
    np.testing.assert_array_equal(ev.index, [0, 2])
    with pytest.raises(InvalidArgumentError, match=r"^decode_random_resized_crop takes a batch"):
        decode_random_resized_crop(jpeg(), 32)
    with pytest.raises(InvalidArgumentError, match=r"^seed must be an int or \[4\] per-image seeds"):
        decode_random_resized_crop(items, 32, seed=np.zeros(3, np.uint64))
