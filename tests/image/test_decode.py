"""feedq.image decoders: pixels equal libjpeg-turbo's (Pillow) and TF's; batches; bad images."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedq.errors import InvalidArgumentError, UnimplementedError
from feedq.image import (
    ImageBatch,
    decode_and_crop_jpeg,
    decode_bmp,
    decode_gif,
    decode_image,
    decode_jpeg,
    decode_png,
    extract_jpeg_shape,
    image_format,
)
from feedq.readers import RecordBlock
from tests.image.images import encoded, jpeg, reference, with_dimensions

SUBSAMPLINGS = ["444", "422", "420"]


def block_of(items: list[bytes], name: bytes = b"shard.tfrecord") -> RecordBlock:
    """A reader's block: the records back to back in one buffer."""
    lengths = np.array([len(x) for x in items], dtype=np.int64)
    ends = np.cumsum(lengths)
    return RecordBlock(name, b"".join(items), ends - lengths, ends,
                       np.arange(len(items), dtype=np.int64) * 10)


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


# ------------------------------------------------------------ reference pixels
@pytest.mark.parametrize("sub", SUBSAMPLINGS)
def test_decode_jpeg_equals_pillow_exactly(sub: str) -> None:
    data = jpeg(75, 101, seed=1, sub=sub)
    out = decode_jpeg(data)
    assert out.dtype == np.uint8 and out.shape == (75, 101, 3)
    np.testing.assert_array_equal(out, reference(data))


def test_grayscale_and_progressive_jpegs_equal_pillow() -> None:
    gray = jpeg(40, 50, gray=True)
    assert decode_jpeg(gray).shape == (40, 50, 1)
    np.testing.assert_array_equal(decode_jpeg(gray)[:, :, 0], reference(gray, "L"))
    # channels=3 of a grey image repeats the grey plane (libjpeg's conversion)
    rgb = decode_jpeg(gray, channels=3)
    np.testing.assert_array_equal(rgb, np.repeat(reference(gray, "L")[:, :, None], 3, axis=2))
    prog = jpeg(64, 48, progressive=True)
    np.testing.assert_array_equal(decode_jpeg(prog), reference(prog))


@pytest.mark.parametrize("ratio", [2, 4, 8])
def test_dct_ratio_equals_pillow_draft(ratio: int) -> None:
    import io

    from PIL import Image

    data = jpeg(203, 301, seed=2, sub="420")
    out = decode_jpeg(data, ratio=ratio)
    assert out.shape == (-(-203 // ratio), -(-301 // ratio), 3)
    with Image.open(io.BytesIO(data)) as im:
        im.draft("RGB", (301 // ratio, 203 // ratio))
        np.testing.assert_array_equal(out, np.asarray(im.convert("RGB")))


@pytest.mark.parametrize("sub", SUBSAMPLINGS)
@pytest.mark.parametrize("ratio", [1, 2, 4])
@pytest.mark.parametrize("dct", ["INTEGER_ACCURATE", "INTEGER_FAST"])
def test_decode_jpeg_equals_tf(tf, sub: str, ratio: int, dct: str) -> None:
    data = jpeg(90, 120, seed=3, sub=sub)
    want = tf.io.decode_jpeg(data, ratio=ratio, dct_method=dct).numpy()
    np.testing.assert_array_equal(decode_jpeg(data, ratio=ratio, dct_method=dct), want)
    want1 = tf.io.decode_jpeg(data, channels=1, dct_method=dct).numpy()
    np.testing.assert_array_equal(decode_jpeg(data, channels=1, dct_method=dct), want1)


def test_extract_jpeg_shape_equals_tf(tf) -> None:
    for data in (jpeg(33, 44), jpeg(20, 30, gray=True)):
        np.testing.assert_array_equal(extract_jpeg_shape(data), tf.io.extract_jpeg_shape(data).numpy())
    assert extract_jpeg_shape(jpeg(33, 44)).dtype == np.int32
    batch = [jpeg(10, 20), jpeg(30, 40, gray=True)]
    np.testing.assert_array_equal(extract_jpeg_shape(batch), [[10, 20, 3], [30, 40, 1]])


def test_decode_and_crop_jpeg(tf) -> None:
    data = jpeg(90, 120, seed=4, sub="444")
    window = [10, 20, 50, 60]
    out = decode_and_crop_jpeg(data, window, dct_method="INTEGER_ACCURATE")
    np.testing.assert_array_equal(
        out, tf.io.decode_and_crop_jpeg(data, window, dct_method="INTEGER_ACCURATE").numpy()
    )
    # Subsampled: the window of the full decode (TF's crop-in-decode
    # differs from its own full decode at the window's edges).
    data = jpeg(90, 120, seed=4, sub="420")
    np.testing.assert_array_equal(decode_and_crop_jpeg(data, window), reference(data)[10:60, 20:80])
    with pytest.raises(InvalidArgumentError, match=r"^crop window \[80, 0, 20, 10\] is not inside the 90 x 120 image$"):
        decode_and_crop_jpeg(data, [80, 0, 20, 10])


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "GIF"])
def test_decode_image_other_formats_equal_tf(tf, fmt: str) -> None:
    data = encoded(fmt)
    want = tf.io.decode_image(data).numpy()
    got = decode_image(data)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_png_modes_and_channels(tf) -> None:
    for mode in ("L", "RGB", "RGBA", "LA", "P"):
        data = encoded("PNG", mode=mode)
        np.testing.assert_array_equal(decode_png(data), tf.io.decode_png(data).numpy(), err_msg=mode)
    data = encoded("PNG", mode="RGBA")
    np.testing.assert_array_equal(decode_png(data, channels=3), tf.io.decode_png(data, channels=3).numpy())
    # grey from colour: Pillow's and libpng's weights round differently by at most 1
    diff = decode_png(encoded("PNG"), channels=1).astype(int) - tf.io.decode_png(encoded("PNG"), channels=1).numpy()
    assert np.abs(diff).max() <= 1
    with pytest.raises(UnimplementedError):
        decode_png(data, dtype=np.uint16)


def test_bmp_gif_shapes() -> None:
    assert decode_bmp(encoded("BMP")).shape == (31, 17, 3)
    assert decode_gif(encoded("GIF")).shape == (1, 31, 17, 3)
    assert decode_image(encoded("GIF"), expand_animations=False).shape == (31, 17, 3)
    assert [image_format(encoded(f)) for f in ("PNG", "BMP", "GIF")] == ["png", "bmp", "gif"]
    assert image_format(jpeg()) == "jpeg" and image_format(b"hello") is None


# ----------------------------------------------------------------- batches
def test_batch_inputs_give_the_same_pixels_as_single_calls() -> None:
    items = [jpeg(30 + i, 40, seed=i, sub=SUBSAMPLINGS[i % 3]) for i in range(5)]
    singles = [decode_jpeg(x) for x in items]
    obj = np.empty(5, dtype=object)
    obj[:] = items
    for contents in (items, tuple(items), obj, block_of(items)):
        batch = decode_jpeg(contents)
        assert isinstance(batch, ImageBatch) and len(batch) == 5
        np.testing.assert_array_equal(batch.index, np.arange(5))
        for a, b in zip(batch.images, singles):
            np.testing.assert_array_equal(a, b)
    assert len(decode_image([])) == 0


def test_bad_image_in_a_block_is_named_by_key() -> None:
    items = [jpeg(), b"not an image", jpeg()]
    with pytest.raises(InvalidArgumentError, match=r"^image 1 of the batch \(shard.tfrecord:10\): not a JPEG image \(no SOI marker\)$"):
        decode_jpeg(block_of(items))
    with pytest.raises(InvalidArgumentError, match=r"^image 1 of the batch: unknown image format"):
        decode_image(items)


def test_skip_leaves_bad_images_out_and_lists_them(caplog: pytest.LogCaptureFixture) -> None:
    good = jpeg()
    items = [good, jpeg()[:200], good, b"", with_dimensions(good, 30000, 30000)]
    batch = decode_image(block_of(items), on_error="skip")
    np.testing.assert_array_equal(batch.index, [0, 2])
    assert [s.index for s in batch.skipped] == [1, 3, 4]
    assert [s.key for s in batch.skipped] == [b"shard.tfrecord:10", b"shard.tfrecord:30", b"shard.tfrecord:40"]
    assert "exceeds max_pixels=89478485" in batch.skipped[2].message
    assert len(batch.images) == 2 and all(i.shape == (60, 80, 3) for i in batch.images)
    assert sum("skipped image" in r.message for r in caplog.records) == 3


def test_pixel_limit_refuses_before_decoding() -> None:
    import tracemalloc

    bomb = with_dimensions(jpeg(), 60000, 60000)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match=r"^image of 60000 x 60000 = 3600000000 pixels exceeds max_pixels=89478485"):
            decode_jpeg(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(InvalidArgumentError, match=r"exceeds max_pixels=100 "):
        decode_png(encoded("PNG"), max_pixels=100)
    assert decode_jpeg(jpeg(), max_pixels=None).shape == (60, 80, 3)


def test_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^ratio must be 1, 2, 4 or 8, got 3$"):
        decode_jpeg(jpeg(), ratio=3)
    with pytest.raises(InvalidArgumentError, match=r"^channels must be one of \(0, 1, 3\), got 4$"):
        decode_jpeg(jpeg(), channels=4)
    with pytest.raises(InvalidArgumentError, match=r"^dct_method must be one of"):
        decode_jpeg(jpeg(), dct_method="FLOAT")
    with pytest.raises(UnimplementedError):
        decode_jpeg(jpeg(), try_recover_truncated=True)
    with pytest.raises(ValueError, match=r"^on_error must be"):
        decode_jpeg([jpeg()], on_error="ignore")  # type: ignore[arg-type]


def test_cmyk_jpeg_decodes_to_rgb_like_tf(tf) -> None:
    data = encoded("JPEG", 20, 30, mode="CMYK")
    got = decode_jpeg(data)
    want = tf.io.decode_jpeg(data).numpy()
    assert got.shape == want.shape == (20, 30, 3)
    # libjpeg-turbo's CMYK->RGB and TF's own conversion round differently
    assert np.abs(got.astype(int) - want).max() <= 8


# ---------------------------------------------------------- hostile images
_SEEDS = [jpeg(24, 32, sub="420"), jpeg(16, 16, progressive=True), encoded("PNG", 12, 9),
          encoded("GIF", 8, 8), encoded("BMP", 8, 8)]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(_SEEDS) - 1), cut=st.floats(0, 1),
       flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), max_size=6),
       dims=st.none() | st.tuples(st.integers(0, 65535), st.integers(0, 65535)))
def test_hostile_images_give_named_errors_or_pixels(which: int, cut: float,
                                                    flips: list[tuple[float, int]],
                                                    dims: tuple[int, int] | None) -> None:
    data = bytearray(_SEEDS[which])
    if dims is not None and which < 2:
        data = bytearray(with_dimensions(bytes(data), *dims))
    for where, bit in flips:
        data[int(where * (len(data) - 1))] ^= 1 << bit
    data = data[: max(1, int(len(data) * cut))] if cut < 0.98 else data
    batch = decode_image([bytes(data)], on_error="skip", max_pixels=1 << 22)
    assert len(batch) + len(batch.skipped) == 1
    if len(batch):
        img = batch.images[0]
        assert img.dtype == np.uint8 and img.ndim in (3, 4) and img.size <= 4 << 22
    else:
        assert batch.skipped[0].message


# ------------------------------------------------------------- the GIL
@pytest.mark.timeout(60)
def test_jpeg_decode_releases_the_gil() -> None:
    """A Python thread keeps counting while a batch decodes; it does not while
    a C call that holds the GIL (list.sort) runs: the control, same run."""
    big = [jpeg(900, 1200, seed=s, sub="444") for s in range(3)]
    rng = np.random.default_rng(0)
    data = rng.random(1_500_000).tolist()

    def ticks_during(work) -> tuple[int, float]:
        import time

        stop = threading.Event()
        started = threading.Event()
        count = [0]

        def tick() -> None:
            started.set()
            while not stop.is_set():
                count[0] += 1

        t = threading.Thread(target=tick, name="feedq-test-ticker")
        t.start()
        started.wait(10)
        c0 = count[0]
        t0 = time.perf_counter()
        work()
        dt = time.perf_counter() - t0
        c1 = count[0]
        stop.set()
        t.join(10)
        assert not t.is_alive()
        return c1 - c0, dt

    old = __import__("sys").getswitchinterval()
    __import__("sys").setswitchinterval(0.0005)
    try:
        held, held_s = ticks_during(lambda: sorted(data))
        freed, freed_s = ticks_during(lambda: decode_jpeg(big * 3))
    finally:
        __import__("sys").setswitchinterval(old)
    held_rate, freed_rate = held / held_s, freed / freed_s
    assert freed > 1000, (freed, freed_s)
    assert freed_rate > 5 * held_rate, (freed_rate, held_rate)


def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from feedq.errors import MissingExtraError

    jpg, png = jpeg(), encoded("PNG")
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(MissingExtraError, match=r'^JPEG decoding needs simplejpeg, which is not installed: pip install "feedq\[image\]"$'):
        decode_jpeg(jpg)
    with pytest.raises(MissingExtraError, match=r'^image decoding and resizing needs PIL, which is not installed: pip install "feedq\[image\]"$'):
        decode_png(png)
