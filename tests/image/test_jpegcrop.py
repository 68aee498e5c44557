"""The native cropped JPEG decoder (feedq/image/_jpegcrop.c) against its twin
(a full decode and the window): identical pixels, hostile input refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedq.cli.datasets import synthetic_jpegs
from feedq.image import _crop, _extras, decode_random_resized_crop, decode_resize_center_crop
from tests.image.images import jpeg, sj, with_dimensions

native = _extras.jpegcrop()
pytestmark = pytest.mark.skipif(native is None, reason="feedq.image._jpegcrop is not built")

IMAGES = ([jpeg(97, 133, seed=s, sub=sub) for s in range(3) for sub in ("444", "422", "420")]
          + [jpeg(64, 80, progressive=True), jpeg(50, 70, gray=True), jpeg(8, 9), jpeg(1, 1)])


def full(data: bytes, r: int) -> np.ndarray:
    h, w, _, _ = sj.decode_jpeg_header(data)
    kw = {} if r == 1 else {"min_height": -(-h // r), "min_width": -(-w // r)}
    return sj.decode_jpeg(data, colorspace="RGBX", **kw)


@pytest.mark.parametrize("index", range(len(IMAGES)))
@pytest.mark.parametrize("r", [1, 2, 4, 8])
def test_windows_equal_the_full_decode(index: int, r: int) -> None:
    data = IMAGES[index]
    ref = full(data, r)
    H, W = ref.shape[:2]
    rng = np.random.default_rng(index * 10 + r)
    windows = [(0, 0, H, W), (H - 1, W - 1, 1, 1)]
    for _ in range(12):
        h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
        windows.append((int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1)), h, w))
    for y, x, h, w in windows:
        out = np.empty((h, w, 4), np.uint8)
        native.decode_crop(data, y, x, h, w, r, 0, 1, out)
        np.testing.assert_array_equal(out[:, :, :3], ref[y : y + h, x : x + w, :3],
                                      err_msg=str((y, x, h, w)))


def test_fused_crops_equal_the_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    items = synthetic_jpegs(12, 4)
    runs = {}
    for name, mod in (("native", native), ("python", None)):
        monkeypatch.setattr(_extras, "_JPEGCROP", mod)
        runs[name] = [
            decode_random_resized_crop(items, 96, seed=3, dct_scaling=True).images,
            decode_random_resized_crop(items, 224, seed=4).images,
            decode_resize_center_crop(items, 64, 80).images,
            decode_resize_center_crop(items, 224, 256).images,
        ]
    assert _crop.jpegcrop is _extras.jpegcrop
    for a, b in zip(runs["native"], runs["python"]):
        np.testing.assert_array_equal(a, b)


def test_bad_windows_and_buffers() -> None:
    data = IMAGES[0]
    small = np.empty(10, np.uint8)
    with pytest.raises(ValueError, match="^output buffer too small$"):
        native.decode_crop(data, 0, 0, 10, 10, 1, 0, 1, small)
    out = np.empty(400 * 400 * 4, np.uint8)
    with pytest.raises(ValueError, match="^window outside the image$"):
        native.decode_crop(data, 90, 0, 10, 10, 1, 0, 1, out)
    with pytest.raises(ValueError, match="^bad window, scale or pixel size$"):
        native.decode_crop(data, 0, 0, 10, 10, 3, 0, 1, out)
    with pytest.raises(ValueError):
        native.decode_crop(data[: len(data) // 2], 0, 0, 90, 100, 1, 0, 1, out)


_SEED = jpeg(40, 56, sub="420")


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), max_size=6),
       dims=st.none() | st.tuples(st.integers(0, 65535), st.integers(0, 65535)),
       window=st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 60), st.integers(1, 60)))
def test_hostile_input_is_refused_never_read_past(cut: float, flips: list[tuple[float, int]],
                                                  dims: tuple[int, int] | None,
                                                  window: tuple[int, int, int, int]) -> None:
    data = bytearray(_SEED if dims is None else with_dimensions(_SEED, *dims))
    for where, bit in flips:
        data[int(where * (len(data) - 1))] ^= 1 << bit
    data = data[: max(1, int(len(data) * cut))] if cut < 0.98 else data
    y, x, h, w = window
    out = np.full(h * w * 4 + 64, 0xAB, np.uint8)
    try:
        native.decode_crop(bytes(data), y, x, h, w, 1, 0, 1, out[: h * w * 4])
    except ValueError:
        pass
    assert (out[h * w * 4 :] == 0xAB).all()  # nothing written past the window


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_file_damaged_below_the_window_is_refused_like_the_twin(damage: str) -> None:
    # A user trial: the native decoder skipped the rows below the window and
    # so decoded a truncated or corrupt file whenever the crop lay above the
    # damage, while the twin's full decode refused it; with on_error="skip"
    # such an image was trained on in some epochs and skipped in others.
    data = bytearray(synthetic_jpegs(1, 1)[0])
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        at = len(data) * 3 // 4  # in the entropy data of the lower rows
        for k in range(50):
            data[at + k] ^= 0x5A
    data = bytes(data)
    h, w = sj.decode_jpeg_header(data)[:2]
    with pytest.raises(ValueError):  # the twin: a full decode
        sj.decode_jpeg(data, colorspace="RGBX", strict=True)
    for y, x, hh, ww in [(0, 0, 16, 16), (0, 0, h // 4, w), (h // 8, w // 2, 8, 8)]:
        out = np.empty((hh, ww, 4), np.uint8)
        with pytest.raises(ValueError):
            native.decode_crop(data, y, x, hh, ww, 1, 0, 1, out)
        # check_tail=0 (verify=False, TF's decode_and_crop_jpeg): decoding
        # stops after the window, so damage below it goes unnoticed, and the
        # window's pixels are those of the intact file.
        if damage == "truncated":
            continue
        intact = full(synthetic_jpegs(1, 1)[0], 1)
        native.decode_crop(data, y, x, hh, ww, 1, 0, 1, out, 4, False)
        np.testing.assert_array_equal(out[..., :3], intact[y : y + hh, x : x + ww, :3])


@pytest.mark.parametrize("index", range(len(IMAGES)))
def test_rgb_windows_equal_the_rgbx_ones(index: int) -> None:
    data = IMAGES[index]
    H, W = sj.decode_jpeg_header(data)[:2]
    y, x, h, w = H // 4, W // 3, max(1, H // 2), max(1, W // 2)
    rgbx = np.empty((h, w, 4), np.uint8)
    rgb = np.full(h * w * 3 + 16, 0xAB, np.uint8)
    native.decode_crop(data, y, x, h, w, 1, 0, 1, rgbx)
    native.decode_crop(data, y, x, h, w, 1, 0, 1, rgb[: h * w * 3], 3)
    np.testing.assert_array_equal(rgb[: h * w * 3].reshape(h, w, 3), rgbx[..., :3])
    assert (rgb[h * w * 3 :] == 0xAB).all()
    with pytest.raises(ValueError, match="too small"):
        native.decode_crop(data, y, x, h, w, 1, 0, 1, rgb[: h * w * 3 - 1], 3)


def test_verify_false_accepts_a_tail_damaged_image_in_the_fused_op() -> None:
    data = bytearray(synthetic_jpegs(1, 1)[0])
    for k in range(50):
        data[len(data) * 3 // 4 + k] ^= 0x5A
    # tiny crops, most of them clear of the damaged rows
    kw = dict(size=16, seed=0, scale=(0.01, 0.011), flip=False, on_error="skip")
    strict = decode_random_resized_crop([bytes(data)] * 32, **kw)  # type: ignore[arg-type]
    loose = decode_random_resized_crop([bytes(data)] * 32, verify=False, **kw)  # type: ignore[arg-type]
    assert len(strict.index) == 0 and len(strict.skipped) == 32
    # accepted wherever the crop's rows decode cleanly (garbled entropy data
    # often decodes without an error until the end of the file is reached)
    assert len(loose.index) > 0 and len(loose.index) + len(loose.skipped) == 32
