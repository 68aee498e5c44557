"""The fused batch crops: decode + random-resized-crop + flip (train), resize + centre crop (eval).

One call per batch: each image's header is read first, its crop drawn from
its own seeded generator, then only what the crop needs is decoded (at 1/2,
1/4 or 1/8 scale in the DCT domain when the crop is at least that many
times the output) and resampled straight into the output size with
Pillow's antialiased bilinear filter (torchvision's crop-then-resize of PIL
images).

Two resamplers, chosen once (:data:`RESAMPLE`): with feedq's native core
built, its ``resample_bilinear`` reads the decoded RGB window in place and
writes each image straight into its row of the batch, the flip folded into
that write (one copy of each output pixel, the GIL released). Without it,
Pillow resamples the RGBX window (handed over without a copy) and the flip
and RGB packing are two more copies. Both compute Pillow 13's arithmetic,
so both give torchvision's pixels exactly.

Seeds: the crop and flip of an image depend on ``seed``, ``epoch`` and the
image's identity only -- its key for a reader's block, its row for a list --
never on which thread decodes it or when, so a resumed pipeline makes the
same crops.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedq import _native
from feedq.errors import InvalidArgumentError
from feedq.image._batch import (
    DEFAULT_MAX_PIXELS,
    BadImage,
    ImageBatch,
    OnError,
    as_batch,
    bad,
    run_batch,
)
from feedq.image._decode import _decode_pil, image_format, jpeg_header
from feedq.image._extras import jpegcrop, pil_image, simplejpeg_module

__all__ = [
    "RESAMPLE",
    "decode_random_resized_crop",
    "decode_resize_center_crop",
    "element_seeds",
    "random_resized_crop_params",
]


#: ``"native"`` (feedq's native core resamples into the batch) or
#: ``"pillow"`` (the native core is not built or ``FEEDQ_PURE_PYTHON`` is
#: set: Pillow resamples). The same pixels either way.
RESAMPLE: str = "native" if _native.CORE == "native" else "pillow"


def element_seeds(contents: Any, seed: int, epoch: int = 0, keys: Any = None) -> np.ndarray:
    """One uint64 seed per image of a batch, from ``seed``, ``epoch`` and its identity.

    The identity is the record's key for a :class:`~feedq.readers.RecordBlock`
    (so the same record gets the same seed whatever block it arrives in), or
    ``keys`` when given (e.g. ``block.keys()`` of the block a column of
    images was parsed from), else its row for a list or array. Pass
    ``epoch`` to draw new crops each epoch.
    """
    batch = as_batch(contents, keys)
    if batch is None:
        raise InvalidArgumentError("element_seeds takes a batch of images")
    n = len(batch.items)
    if batch.keys is not None:
        idents = [bytes(k) for k in batch.keys()]
    else:
        idents = [b"%d" % i for i in range(n)]
    prefix = b"%d:%d:" % (int(seed), int(epoch))
    return np.array(
        [int.from_bytes(hashlib.blake2b(prefix + k, digest_size=8).digest(), "little")
         for k in idents],
        dtype=np.uint64,
    )


def random_resized_crop_params(
    height: int,
    width: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random crop, torchvision's ``RandomResizedCrop.get_params``.

    Up to ``attempts`` draws of an area fraction in ``scale`` and a
    log-uniform aspect ratio in ``ratio``; a draw that fits is placed
    uniformly. When none fits: the centred crop of the whole image clamped
    to the ratio range.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(attempts):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _size2(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    h, w = (int(v) for v in size)
    return h, w


class _Source:
    """One image: its header read, then decoded only as far as a crop needs.

    JPEG windows come from the native cropped decoder when it is built
    (:data:`~feedq.image.JPEG_CROP` ``== "native"``: rows outside the window
    are only entropy-decoded -- those below it not at all unless ``verify``
    -- columns beside it never inverse-transformed), else
    from a full decode (simplejpeg) and a strided view of the window: the
    same pixels either way. PNG and BMP are decoded whole (Pillow).
    """

    def __init__(self, data: Any, max_pixels: int | None, verify: bool = True) -> None:
        self.data = data
        self.verify = verify
        fmt = image_format(data)
        self.jpeg = fmt == "jpeg"
        self.pixels: np.ndarray | None = None
        self.cmyk = False
        if self.jpeg:
            self.height, self.width, colorspace = jpeg_header(data, max_pixels)
            self.cmyk = colorspace in ("CMYK", "YCCK")
        elif fmt in ("png", "bmp"):
            self.pixels = _decode_pil(data, fmt, 3, max_pixels)
            self.height, self.width = self.pixels.shape[:2]
        elif fmt == "gif":  # frames: the fused transforms make one image per input
            raise BadImage("a GIF: the fused transforms take JPEG, PNG or BMP "
                           "(decode_gif / decode_image decode GIFs)")
        else:
            raise BadImage("unknown image format: not JPEG, PNG or BMP")

    def _full(self, r: int, channels: int = 4) -> tuple[np.ndarray, np.ndarray]:
        """The JPEG's RGBX (or RGB: ``channels=3``) pixels at scale ``1/r``
        (simplejpeg) and the flat buffer holding them, one row longer than
        the image, so that a window of the last rows can be mapped with the
        image's stride."""
        sj = simplejpeg_module()
        sh, sw = -(-self.height // r), -(-self.width // r)
        buf = np.empty((sh + 1) * sw * channels, dtype=np.uint8)
        kwargs: dict[str, Any] = {"colorspace": "RGBX" if channels == 4 else "RGB", "buffer": buf}
        if r > 1:
            kwargs.update(min_height=sh, min_width=sw)
        try:
            pix: np.ndarray = sj.decode_jpeg(self.data, **kwargs)
        except ValueError as exc:
            raise bad("invalid JPEG data", exc) from None
        if not np.shares_memory(pix, buf):  # pragma: no cover - simplejpeg always fills buffer
            buf[: pix.size] = pix.reshape(-1)
        return pix, buf

    def scaled(self, r: int) -> tuple[int, int]:
        """The image's size at scale ``1/r`` (libjpeg's ``ceil(size / r)``)."""
        return -(-self.height // r), -(-self.width // r)

    def window(self, r: int, y: int, x: int, h: int, w: int) -> Any:
        """Rows ``[y, y + h)``, columns ``[x, x + w)`` of the image at scale
        ``1/r`` as an RGBX Pillow image (no copy of the decoded pixels)."""
        Image = pil_image()
        if self.pixels is not None:
            return Image.fromarray(self.pixels[y : y + h, x : x + w])
        native = jpegcrop()
        if native is not None and not self.cmyk:
            buf = np.empty(h * w * 4, dtype=np.uint8)
            try:
                native.decode_crop(self.data, y, x, h, w, r, 0, 1, buf)
            except ValueError as exc:
                raise bad("invalid JPEG data", exc) from None
            return Image.frombuffer("RGBX", (w, h), buf, "raw", "RGBX", 0, 1)
        pix, flat = self._full(r)
        sh, sw = pix.shape[:2]
        if (sh, sw) != self.scaled(r):  # pragma: no cover - M/8 rounding on a tiny image
            raise BadImage(f"cannot scale a {self.width} x {self.height} JPEG by 1/{r}")
        view = memoryview(flat.data)[(y * sw + x) * 4 :]
        return Image.frombuffer("RGBX", (w, h), view, "raw", "RGBX", sw * 4, 1)

    def rgb_window(self, r: int, y: int, x: int, h: int, w: int) -> tuple[np.ndarray, int]:
        """Rows ``[y, y + h)``, columns ``[x, x + w)`` of the image at scale
        ``1/r`` as RGB pixels in place: ``(flat, row_stride)``, pixel ``(i,
        j)`` at ``flat[i * row_stride + 3 * j]`` (a view into the decoded
        image, or the cropped decoder's own window)."""
        if self.pixels is not None:
            pix = np.ascontiguousarray(self.pixels)
            sw = pix.shape[1]
            return pix.reshape(-1)[(y * sw + x) * 3 :], sw * 3
        native = jpegcrop()
        if native is not None and not self.cmyk:
            buf = np.empty(h * w * 3, dtype=np.uint8)
            try:
                native.decode_crop(self.data, y, x, h, w, r, 0, 1, buf, 3, self.verify)
            except ValueError as exc:
                raise bad("invalid JPEG data", exc) from None
            return buf, w * 3
        pix, flat = self._full(r, channels=3)
        sh, sw = pix.shape[:2]
        if (sh, sw) != self.scaled(r):  # pragma: no cover - M/8 rounding on a tiny image
            raise BadImage(f"cannot scale a {self.width} x {self.height} JPEG by 1/{r}")
        return flat[(y * sw + x) * 3 :], sw * 3

    def crop_resize_into(
        self, top: int, left: int, h: int, w: int, out: np.ndarray, flip: bool, dct_scaling: bool
    ) -> None:
        """:meth:`crop_resize` written into ``out`` (``[oh, ow, 3]``) by the
        native resampler, mirrored when ``flip``."""
        out_hw = (out.shape[0], out.shape[1])
        r = self._scale(w, h, out_hw, dct_scaling)
        if r == 1:
            flat, stride = self.rgb_window(1, top, left, h, w)
            _native.resample_bilinear(flat, (h, w), stride, 3, (0.0, 0.0, w, h), out, flip)
        else:
            self.box_resize_into((left, top, left + w, top + h), out, r, flip)

    def box_resize_into(
        self, box: tuple[float, float, float, float], out: np.ndarray, r: int, flip: bool = False
    ) -> None:
        """:meth:`box_resize` written into ``out`` by the native resampler."""
        (x0, y0, x1, y1), rel = self._support_window(box, (out.shape[0], out.shape[1]), r)
        flat, stride = self.rgb_window(r, y0, x0, y1 - y0, x1 - x0)
        _native.resample_bilinear(flat, (y1 - y0, x1 - x0), stride, 3, rel, out, flip)

    def _support_window(
        self, box: tuple[float, float, float, float], out_hw: tuple[int, int], r: int
    ) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]]:
        """The window ``(x0, y0, x1, y1)`` of the image at scale ``1/r`` that
        resampling ``box`` (in the full image's pixels) to ``out_hw`` reads --
        the box and its filter support (Pillow's bilinear reaches max(1,
        scale) pixels out), clipped to the image -- and the box relative to it."""
        oh, ow = out_hw
        sh, sw = self.scaled(r)
        fx, fy = sw / self.width, sh / self.height
        b = (box[0] * fx, box[1] * fy, box[2] * fx, box[3] * fy)
        mx = int(math.ceil(max(1.0, (b[2] - b[0]) / ow))) + 1
        my = int(math.ceil(max(1.0, (b[3] - b[1]) / oh))) + 1
        x0, y0 = max(0, int(b[0]) - mx), max(0, int(b[1]) - my)
        x1, y1 = min(sw, int(math.ceil(b[2])) + mx), min(sh, int(math.ceil(b[3])) + my)
        return (x0, y0, x1, y1), (b[0] - x0, b[1] - y0, b[2] - x0, b[3] - y0)

    def _scale(self, crop_w: float, crop_h: float, out_hw: tuple[int, int], dct: bool) -> int:
        if dct and self.jpeg and min(self.height, self.width) >= 16:
            for r in (8, 4, 2):
                if crop_w >= r * out_hw[1] and crop_h >= r * out_hw[0]:
                    return r
        return 1

    def crop_resize(
        self, top: int, left: int, h: int, w: int, out_hw: tuple[int, int], dct_scaling: bool
    ) -> Any:
        """Crop, then resample the crop to ``out_hw`` (torchvision's ``resized_crop``)."""
        Image = pil_image()
        oh, ow = out_hw
        r = self._scale(w, h, out_hw, dct_scaling)
        if r == 1:
            return self.window(1, top, left, h, w).resize((ow, oh), Image.Resampling.BILINEAR)
        # Scaled: resample the crop's box of the smaller image (float
        # coordinates keep the crop's geometry exact).
        return self.box_resize((left, top, left + w, top + h), out_hw, r)

    def box_resize(
        self, box: tuple[float, float, float, float], out_hw: tuple[int, int], r: int
    ) -> Any:
        """Resample ``box = (left, top, right, bottom)`` (in the image's pixels)
        to ``out_hw``, from the image decoded at scale ``1/r``."""
        Image = pil_image()
        oh, ow = out_hw
        (x0, y0, x1, y1), rel = self._support_window(box, out_hw, r)
        im = self.window(r, y0, x0, y1 - y0, x1 - x0)
        return im.resize((ow, oh), Image.Resampling.BILINEAR, box=rel)


def decode_random_resized_crop(
    contents: Any,
    size: int | Sequence[int] = 224,
    *,
    seed: int | np.ndarray = 0,
    epoch: int = 0,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    attempts: int = 10,
    flip: bool = True,
    dct_scaling: bool = True,
    verify: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> ImageBatch:
    """Train augmentation, fused: decode, random resized crop, random flip → uint8 batch.

    torchvision's ``RandomResizedCrop(size)`` (its defaults: ``scale``,
    ``ratio``, 10 ``attempts``, centred fallback; bilinear, antialiased)
    followed by ``RandomHorizontalFlip()``, for a whole batch in one call.

    Args:
        contents: a batch of encoded images (RecordBlock, list, object array).
        size: output ``h = w`` or ``(h, w)``.
        seed: base seed (mixed with ``epoch`` and each image's identity,
            see :func:`element_seeds`), or a ``[n]`` array of per-image seeds.
        epoch: mixed into the seeds: new crops each epoch, the same on a rerun.
        scale, ratio, attempts: torchvision's crop parameters.
        flip: flip each image left-right with probability 1/2.
        dct_scaling: decode at 1/2, 1/4 or 1/8 scale when the crop is at
            least that many times ``size`` (less work; pixels within the
            documented tolerance of a full decode).
        verify: check a JPEG's data to its end (the default), so an image
            damaged anywhere is refused whatever its crop. ``False`` stops
            decoding after the crop's last row, as TF's
            ``decode_and_crop_jpeg`` does: less work (the rows below the
            crop are not even entropy-decoded), but damage below the crop
            goes unnoticed: a truncated image is refused only in the epochs
            whose crop reaches the cut, and corrupt data (bit flips) is
            detected only at the next marker, after the crop, so a crop
            that reaches it is decoded wrong, not refused. Applies to the
            native cropped decoder (:data:`~feedq.image.JPEG_CROP`); the
            full decode without it always checks.
        max_pixels: refuse images with more pixels.
        on_error: ``"raise"`` or ``"skip"`` a bad image.

    Returns:
        An :class:`~feedq.image.ImageBatch` with ``images`` ``[k, h, w, 3]`` uint8.

    Raises:
        InvalidArgumentError: a bad image (naming its row and key) or argument.
    """
    out_hw = _size2(size)
    if not (0 < scale[0] <= scale[1]) or not (0 < ratio[0] <= ratio[1]):
        raise InvalidArgumentError(f"bad scale {scale} or ratio {ratio}")
    batch = as_batch(contents, keys)
    if batch is None:
        raise InvalidArgumentError("decode_random_resized_crop takes a batch of images")
    seeds = _seeds(contents, seed, epoch, len(batch.items))
    out = np.empty((len(batch.items), *out_hw, 3), dtype=np.uint8)
    done = 0

    def one(i: int, data: Any) -> None:
        nonlocal done
        src = _Source(data, max_pixels, verify)
        rng = np.random.default_rng(int(seeds[i]))
        top, left, h, w = random_resized_crop_params(
            src.height, src.width, rng, scale, ratio, attempts
        )
        flipped = flip and bool(rng.random() < 0.5)
        if RESAMPLE == "native":
            src.crop_resize_into(top, left, h, w, out[done], flipped, dct_scaling)
        else:
            im = src.crop_resize(top, left, h, w, out_hw, dct_scaling)
            if flipped:
                im = im.transpose(pil_image().Transpose.FLIP_LEFT_RIGHT)
            out[done] = _rgb(im, out_hw)
        done += 1

    _, index, skipped = run_batch(batch, one, on_error)
    return ImageBatch(out[:done], index, skipped)


def decode_resize_center_crop(
    contents: Any,
    size: int | Sequence[int] = 224,
    resize_size: int = 256,
    *,
    dct_scaling: bool = True,
    verify: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> ImageBatch:
    """Eval transform, fused: resize the shorter side to ``resize_size``, centre crop ``size``.

    torchvision's ``Resize(resize_size)`` + ``CenterCrop(size)`` on PIL
    images, computed as one resample of the crop's source box (the same
    output pixels as resizing the whole image, then cropping, within one
    level). ``verify``: as for :func:`decode_random_resized_crop`.

    Returns:
        An :class:`~feedq.image.ImageBatch` with ``images`` ``[k, h, w, 3]`` uint8.
    """
    out_hw = _size2(size)
    batch = as_batch(contents, keys)
    if batch is None:
        raise InvalidArgumentError("decode_resize_center_crop takes a batch of images")
    out = np.empty((len(batch.items), *out_hw, 3), dtype=np.uint8)
    done = 0

    def one(i: int, data: Any) -> None:
        nonlocal done
        src = _Source(data, max_pixels, verify)
        h, w = src.height, src.width
        if h <= w:
            nh, nw = resize_size, int(resize_size * w / h)
        else:
            nh, nw = int(resize_size * h / w), resize_size
        oh, ow = out_hw
        if oh > nh or ow > nw:
            raise BadImage(f"resized {nh} x {nw} image is smaller than the {oh} x {ow} crop")
        top = int(round((nh - oh) / 2.0))
        left = int(round((nw - ow) / 2.0))
        sx, sy = w / nw, h / nh
        box = (left * sx, top * sy, (left + ow) * sx, (top + oh) * sy)
        r = src._scale(box[2] - box[0], box[3] - box[1], out_hw, dct_scaling)
        if RESAMPLE == "native":
            src.box_resize_into(box, out[done], r)
        else:
            out[done] = _rgb(src.box_resize(box, out_hw, r), out_hw)
        done += 1

    _, index, skipped = run_batch(batch, one, on_error)
    return ImageBatch(out[:done], index, skipped)


def _rgb(im: Any, out_hw: tuple[int, int]) -> np.ndarray:
    """A resampled image's RGB bytes (Pillow packs RGBX to RGB in C; NumPy's
    strided copy of an RGBX array's first 3 channels is ten times slower)."""
    return np.frombuffer(im.tobytes("raw", "RGB"), dtype=np.uint8).reshape(*out_hw, 3)


def _seeds(contents: Any, seed: int | np.ndarray, epoch: int, n: int) -> np.ndarray:
    if isinstance(seed, (int, np.integer)):
        return element_seeds(contents, int(seed), epoch)
    seeds = np.asarray(seed)
    if seeds.shape != (n,):
        raise InvalidArgumentError(f"seed must be an int or [{n}] per-image seeds, got {seeds.shape}")
    return seeds.astype(np.uint64)
