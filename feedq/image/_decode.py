"""Decoders under TF1's names: JPEG (libjpeg-turbo through simplejpeg), PNG, GIF, BMP.

Pure functions (no threads, no I/O). JPEG goes through simplejpeg, whose
decode releases the GIL, so several feedq threads decode at once; PNG, GIF
and BMP, and the JPEGs simplejpeg cannot take, go through Pillow (whose
decoders release the GIL too). Pixels equal libjpeg-turbo's (Pillow's and
TF's JPEG decoder are libjpeg-turbo as well; ``docs/images.md`` lists the
tolerances where they differ).

Every decoder checks the header first: an image of more than ``max_pixels``
pixels is refused before any pixel is decoded (a decompression bomb).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError, UnimplementedError
from feedq.image._batch import (
    DEFAULT_MAX_PIXELS,
    BadImage,
    ImageBatch,
    OnError,
    as_batch,
    bad,
    one_image,
    run_batch,
)
from feedq.image._extras import jpegcrop, pil_image, simplejpeg_module

__all__ = [
    "decode_and_crop_jpeg",
    "decode_bmp",
    "decode_gif",
    "decode_image",
    "decode_jpeg",
    "decode_png",
    "extract_jpeg_shape",
    "image_format",
]

_DCT_METHODS = ("", "INTEGER_ACCURATE", "INTEGER_FAST")


def image_format(contents: bytes | memoryview) -> str | None:
    """``"jpeg"``, ``"png"``, ``"gif"`` or ``"bmp"`` from the first bytes; None if none."""
    head = bytes(contents[:8])
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:4] in (b"GIF8",):
        return "gif"
    if head[:2] == b"BM":
        return "bmp"
    return None


def check_pixels(height: int, width: int, max_pixels: int | None) -> None:
    """Refuse an image larger than ``max_pixels`` (before decoding it)."""
    if height <= 0 or width <= 0:
        raise BadImage(f"image of {height} x {width} pixels has no pixels")
    if max_pixels is not None and height * width > max_pixels:
        raise BadImage(
            f"image of {height} x {width} = {height * width} pixels exceeds "
            f"max_pixels={max_pixels} (a decompression bomb?)"
        )


def _check_channels(channels: int, allowed: tuple[int, ...]) -> int:
    if channels not in allowed:
        raise InvalidArgumentError(f"channels must be one of {allowed}, got {channels}")
    return int(channels)


def _check_ratio(ratio: int) -> int:
    if ratio not in (1, 2, 4, 8):
        raise InvalidArgumentError(f"ratio must be 1, 2, 4 or 8, got {ratio}")
    return int(ratio)


def _dct(dct_method: str) -> bool:
    if dct_method not in _DCT_METHODS:
        raise InvalidArgumentError(f"dct_method must be one of {_DCT_METHODS}, got {dct_method!r}")
    return dct_method == "INTEGER_FAST"


# ------------------------------------------------------------------- JPEG
def jpeg_header(data: Any, max_pixels: int | None) -> tuple[int, int, str]:
    """(height, width, colorspace) of a JPEG from its header alone."""
    sj = simplejpeg_module()
    if image_format(data) != "jpeg":
        raise BadImage("not a JPEG image (no SOI marker)")
    try:
        h, w, colorspace, _ = sj.decode_jpeg_header(data)
    except ValueError as exc:
        raise bad("invalid JPEG header", exc) from None
    check_pixels(int(h), int(w), max_pixels)
    return int(h), int(w), str(colorspace)


def jpeg_pixels(
    data: Any,
    *,
    channels: int,
    ratio: int = 1,
    fancy_upscaling: bool = True,
    fastdct: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    header: tuple[int, int, str] | None = None,
) -> np.ndarray:
    """One JPEG to a ``[h, w, c]`` uint8 array (``h = ceil(height / ratio)``)."""
    sj = simplejpeg_module()
    h, w, colorspace = header or jpeg_header(data, max_pixels)
    if channels == 0:
        channels = 1 if colorspace == "Gray" else 3
    out_h, out_w = -(-h // ratio), -(-w // ratio)
    kwargs: dict[str, Any] = {
        "colorspace": "GRAY" if channels == 1 else "RGB",
        "fastdct": fastdct,
        "fastupsample": not fancy_upscaling,
    }
    if ratio != 1:
        # The smallest M/8 scale whose output is at least ceil(size / ratio):
        # 8/ratio, libjpeg's own DCT-domain scaling (as TF's scale_denom).
        kwargs.update(min_height=out_h, min_width=out_w)
    try:
        img = sj.decode_jpeg(data, **kwargs)
    except ValueError as exc:
        raise bad("invalid JPEG data", exc) from None
    if img.shape[:2] != (out_h, out_w):  # a tiny image where M/8 rounds the same
        return _pil_jpeg(data, channels, ratio, out_h, out_w)
    if img.ndim == 2:
        img = img[:, :, None]
    return img  # type: ignore[no-any-return]


def _pil_jpeg(data: Any, channels: int, ratio: int, out_h: int, out_w: int) -> np.ndarray:
    # Pillow's draft() scales by 1/2, 1/4, 1/8 in the DCT domain, as TF does.
    Image = pil_image()
    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            w, h = im.size  # draft() picks the scale s with size // s >= the request
            im.draft("L" if channels == 1 else "RGB", (max(1, w // ratio), max(1, h // ratio)))
            arr = np.asarray(im.convert("L" if channels == 1 else "RGB"))
    except (OSError, ValueError, SyntaxError) as exc:
        raise bad("invalid JPEG data", exc) from None
    if arr.shape[:2] != (out_h, out_w):
        raise BadImage(f"cannot scale a {arr.shape[1]} x {arr.shape[0]} JPEG by 1/{ratio}")
    return arr.reshape(out_h, out_w, channels)


def decode_jpeg(
    contents: Any,
    channels: int = 0,
    ratio: int = 1,
    fancy_upscaling: bool = True,
    try_recover_truncated: bool = False,
    acceptable_fraction: float = 1.0,
    dct_method: str = "",
    name: str | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode JPEG images to uint8 ``[height, width, channels]`` (TF1's ``tf.image.decode_jpeg``).

    Args:
        contents: one encoded image (``bytes``), or a batch: a
            :class:`~feedq.readers.RecordBlock`, a list of bytes or a 1-D
            object array.
        channels: 0 (as in the image: 1 for grayscale, else 3), 1 or 3.
        ratio: 1, 2, 4 or 8: scale down by that factor while decoding (in
            the DCT domain: less work, ``ceil(size / ratio)`` pixels).
        fancy_upscaling: smooth chroma upsampling (False is faster).
        try_recover_truncated: unsupported (must be False): a truncated
            image is an error.
        acceptable_fraction: unsupported (must be 1).
        dct_method: ``""`` or ``"INTEGER_ACCURATE"`` (libjpeg's accurate
            integer IDCT, the default), ``"INTEGER_FAST"``.
        name: ignored (TF1's op name).
        max_pixels: refuse images with more pixels (None: no limit).
        on_error: for a batch, ``"raise"`` or ``"skip"`` a bad image.

    Returns:
        For one image a uint8 array; for a batch an
        :class:`~feedq.image.ImageBatch` whose ``images`` is a list.

    Raises:
        InvalidArgumentError: a bad image (not a JPEG, truncated, too many
            pixels), naming its row and key in a batch; a bad argument.
        MissingExtraError: simplejpeg is not installed (the ``image`` extra).
    """
    channels = _check_channels(channels, (0, 1, 3))
    ratio = _check_ratio(ratio)
    fastdct = _dct(dct_method)
    if try_recover_truncated or acceptable_fraction != 1.0:
        raise UnimplementedError("decode_jpeg: try_recover_truncated is not supported")

    def one(data: Any) -> np.ndarray:
        return jpeg_pixels(
            data,
            channels=channels,
            ratio=ratio,
            fancy_upscaling=fancy_upscaling,
            fastdct=fastdct,
            max_pixels=max_pixels,
        )

    return _apply(contents, one, on_error, keys)


def extract_jpeg_shape(
    contents: Any, output_type: Any = np.int32, name: str | None = None
) -> Any:
    """``[height, width, channels]`` of a JPEG from its header alone (TF1's op).

    ``channels`` is the number of components in the file (1 grayscale, 3
    YCbCr/RGB, 4 CMYK/YCCK). A batch gives an ``[n, 3]`` array.

    Raises:
        InvalidArgumentError: not a JPEG (naming the row in a batch).
    """
    comps = {"Gray": 1, "CMYK": 4, "YCCK": 4}

    def one(data: Any) -> np.ndarray:
        h, w, colorspace = jpeg_header(data, None)
        return np.array([h, w, comps.get(colorspace, 3)], dtype=output_type)

    batch = as_batch(contents)
    if batch is None:
        return _single(one, one_image(contents))
    shapes, _, _ = run_batch(batch, lambda i, d: one(d), "raise")
    return np.stack(shapes) if shapes else np.zeros((0, 3), dtype=output_type)


def decode_and_crop_jpeg(
    contents: Any,
    crop_window: Any,
    channels: int = 0,
    ratio: int = 1,
    fancy_upscaling: bool = True,
    try_recover_truncated: bool = False,
    acceptable_fraction: float = 1.0,
    dct_method: str = "",
    name: str | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode the ``crop_window = [y, x, h, w]`` of JPEG images (TF1's op).

    The window is in the pixels of the decoded image (after ``ratio``) and
    must lie inside it. Only the window is decoded when the native cropped
    decoder is built (:data:`~feedq.image.JPEG_CROP`); the pixels are those of
    the full decode's window either way. For a batch, ``crop_window`` is one window for
    every image or an ``[n, 4]`` array of one per image.

    Returns:
        One ``[h, w, channels]`` uint8 array, or an
        :class:`~feedq.image.ImageBatch`.

    Raises:
        InvalidArgumentError: a bad image or a window outside it.
    """
    channels = _check_channels(channels, (0, 1, 3))
    ratio = _check_ratio(ratio)
    fastdct = _dct(dct_method)
    if try_recover_truncated or acceptable_fraction != 1.0:
        raise UnimplementedError("decode_and_crop_jpeg: try_recover_truncated is not supported")
    windows = np.asarray(crop_window, dtype=np.int64)
    if windows.shape[-1:] != (4,) or windows.ndim > 2:
        raise InvalidArgumentError(
            f"crop_window must be [y, x, h, w] (or [n, 4]), got shape {windows.shape}"
        )

    def one(i: int, data: Any) -> np.ndarray:
        y, x, h, w = (int(v) for v in (windows if windows.ndim == 1 else windows[i]))
        native = jpegcrop()
        if native is not None and channels != 1:
            hh, ww, colorspace = jpeg_header(data, max_pixels)
            ih, iw = -(-hh // ratio), -(-ww // ratio)
            if colorspace not in ("Gray", "CMYK", "YCCK") and 0 < h and 0 < w:
                if y < 0 or x < 0 or y + h > ih or x + w > iw:
                    raise BadImage(
                        f"crop window [{y}, {x}, {h}, {w}] is not inside the {ih} x {iw} image"
                    )
                buf = np.empty((h, w, 4), dtype=np.uint8)
                try:
                    native.decode_crop(data, y, x, h, w, ratio, int(fastdct),
                                       int(fancy_upscaling), buf)
                except ValueError as exc:
                    raise bad("invalid JPEG data", exc) from None
                return np.ascontiguousarray(buf[:, :, :3])
        img = jpeg_pixels(
            data,
            channels=channels,
            ratio=ratio,
            fancy_upscaling=fancy_upscaling,
            fastdct=fastdct,
            max_pixels=max_pixels,
        )
        ih, iw = img.shape[:2]
        if h <= 0 or w <= 0 or y < 0 or x < 0 or y + h > ih or x + w > iw:
            raise BadImage(
                f"crop window [{y}, {x}, {h}, {w}] is not inside the {ih} x {iw} image"
            )
        return np.ascontiguousarray(img[y : y + h, x : x + w])

    batch = as_batch(contents, keys)
    if batch is None:
        if windows.ndim != 1:
            raise InvalidArgumentError("one image takes one crop_window [y, x, h, w]")
        return _single(lambda d: one(0, d), one_image(contents))
    if windows.ndim == 2 and windows.shape[0] != len(batch.items):
        raise InvalidArgumentError(
            f"{windows.shape[0]} crop windows for a batch of {len(batch.items)} images"
        )
    images, index, skipped = run_batch(batch, one, on_error)
    return ImageBatch(images, index, skipped)


# ---------------------------------------------------- PNG, GIF, BMP (Pillow)
def _pil_open(data: Any, fmt: str, max_pixels: int | None) -> Any:
    Image = pil_image()
    if image_format(data) != fmt:
        raise BadImage(f"not a {fmt.upper()} image")
    try:
        with warnings.catch_warnings():
            # Our own limit is checked below, from the same header.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(bytes(data)), formats=[fmt.upper()])
    except Image.DecompressionBombError as exc:
        raise bad("image exceeds Pillow's pixel limit", exc) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise bad(f"invalid {fmt.upper()} data", exc) from None
    w, h = im.size
    try:
        check_pixels(h, w, max_pixels)
    except BadImage:
        im.close()
        raise
    return im


def _pil_pixels(im: Any, fmt: str, channels: int) -> np.ndarray:
    """A Pillow image to ``[h, w, c]`` uint8 (``channels`` 0: as stored)."""
    mode = im.mode
    try:
        if channels == 0:
            if mode in ("1", "L", "LA", "RGB", "RGBA"):
                target = "L" if mode == "1" else mode
            elif mode.startswith("I;16") or mode in ("I", "F"):
                target = "I;16"
            elif mode == "P":
                target = "RGBA" if "transparency" in im.info else "RGB"
            else:
                target = "RGB"
        else:
            target = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[channels]
        if target == "I;16" or (channels == 1 and mode.startswith("I;16")):
            # 16-bit grey: the high byte, as TF's uint8 decode (png_set_strip_16).
            arr = (np.asarray(im, dtype=np.uint16) >> 8).astype(np.uint8)
        else:
            arr = np.asarray(im.convert(target) if im.mode != target else im)
    except (OSError, ValueError, SyntaxError) as exc:
        raise bad(f"invalid {fmt.upper()} data", exc) from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return np.ascontiguousarray(arr, dtype=np.uint8)


def _decode_pil(data: Any, fmt: str, channels: int, max_pixels: int | None) -> np.ndarray:
    im = _pil_open(data, fmt, max_pixels)
    with im:
        return _pil_pixels(im, fmt, channels)


def decode_png(
    contents: Any,
    channels: int = 0,
    dtype: Any = np.uint8,
    name: str | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode PNG images to uint8 ``[height, width, channels]`` (TF1's op).

    ``channels`` 0 keeps the file's (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA; a
    palette becomes RGB, or RGBA with transparency); 16-bit samples keep
    their high byte. Only ``dtype=uint8``.

    Raises:
        InvalidArgumentError: a bad image (naming its row and key in a batch).
        UnimplementedError: ``dtype`` other than uint8.
        MissingExtraError: Pillow is not installed (the ``image`` extra).
    """
    channels = _check_channels(channels, (0, 1, 2, 3, 4))
    if np.dtype(dtype) != np.uint8:
        raise UnimplementedError(f"decode_png decodes to uint8 only, not {np.dtype(dtype)}")
    return _apply(contents, lambda d: _decode_pil(d, "png", channels, max_pixels), on_error, keys)


def decode_bmp(
    contents: Any,
    channels: int = 0,
    name: str | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode BMP images to uint8 ``[height, width, channels]`` (TF1's op; 0, 3 or 4)."""
    channels = _check_channels(channels, (0, 3, 4))

    def one(data: Any) -> np.ndarray:
        return _decode_pil(data, "bmp", channels or 3, max_pixels)

    return _apply(contents, one, on_error, keys)


def _gif_frames(data: Any, max_pixels: int | None, first_only: bool) -> np.ndarray:
    im = _pil_open(data, "gif", max_pixels)
    frames: list[np.ndarray] = []
    w, h = im.size
    with im:
        n = 1 if first_only else int(getattr(im, "n_frames", 1))
        if max_pixels is not None and n * w * h > max_pixels:
            raise BadImage(
                f"GIF of {n} frames of {h} x {w} pixels exceeds max_pixels={max_pixels}"
            )
        try:
            for f in range(n):
                im.seek(f)
                frames.append(np.asarray(im.convert("RGB")))
        except (OSError, ValueError, EOFError) as exc:
            raise bad("invalid GIF data", exc) from None
    return np.stack(frames)


def decode_gif(
    contents: Any,
    name: str | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode GIFs to uint8 ``[frames, height, width, 3]`` (TF1's op).

    ``max_pixels`` bounds the pixels of all frames together.
    """
    return _apply(contents, lambda d: _gif_frames(d, max_pixels, False), on_error, keys)


def decode_image(
    contents: Any,
    channels: int | None = None,
    dtype: Any = np.uint8,
    name: str | None = None,
    expand_animations: bool = True,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_error: OnError = "raise",
    keys: Any = None,
) -> Any:
    """Decode JPEG, PNG, GIF or BMP, told apart by their first bytes (TF's op).

    JPEG, PNG and BMP give ``[h, w, c]``; a GIF gives ``[frames, h, w, 3]``,
    or its first frame ``[h, w, 3]`` with ``expand_animations=False``.

    Raises:
        InvalidArgumentError: not one of the four formats, or a bad image.
    """
    ch = 0 if channels is None else int(channels)
    _check_channels(ch, (0, 1, 3, 4))
    if np.dtype(dtype) != np.uint8:
        raise UnimplementedError(f"decode_image decodes to uint8 only, not {np.dtype(dtype)}")

    def one(data: Any) -> np.ndarray:
        fmt = image_format(data)
        if fmt == "jpeg":
            if ch == 4:
                raise BadImage("a JPEG decodes to 1 or 3 channels, not 4")
            return jpeg_pixels(data, channels=ch, max_pixels=max_pixels)
        if fmt == "png":
            return _decode_pil(data, "png", ch, max_pixels)
        if fmt == "bmp":
            if ch == 1:
                raise BadImage("a BMP decodes to 3 or 4 channels, not 1")
            return _decode_pil(data, "bmp", ch or 3, max_pixels)
        if fmt == "gif":
            if ch not in (0, 3):
                raise BadImage(f"a GIF decodes to 3 channels, not {ch}")
            frames = _gif_frames(data, max_pixels, not expand_animations)
            return frames[0] if not expand_animations else frames
        raise BadImage("unknown image format: not JPEG, PNG, GIF or BMP")

    return _apply(contents, one, on_error, keys)


# ---------------------------------------------------------------- helpers
def _single(decode: Any, data: Any) -> Any:
    try:
        return decode(data)
    except BadImage as exc:
        raise InvalidArgumentError(str(exc)) from None


def _apply(contents: Any, decode: Any, on_error: OnError, keys: Any = None) -> Any:
    batch = as_batch(contents, keys)
    if batch is None:
        return _single(decode, one_image(contents))
    images, index, skipped = run_batch(batch, lambda i, d: decode(d), on_error)
    return ImageBatch(images, index, skipped)

