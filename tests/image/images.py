"""Small JPEG / PNG / GIF / BMP test images, made in memory and seeded."""

from __future__ import annotations

import io

import numpy as np
import pytest

sj = pytest.importorskip("simplejpeg")
Image = pytest.importorskip("PIL.Image")


def pixels(h: int, w: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Smooth gradients plus noise: what a photo's JPEG looks like to a decoder."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w, 1), y * 255 // max(h, 1), (x + y) % 256], -1)
    img = base[:, :, :channels] + rng.integers(0, 60, (h, w, channels))
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg(h: int = 60, w: int = 80, seed: int = 0, sub: str = "420", gray: bool = False,
         progressive: bool = False, quality: int = 90) -> bytes:
    if progressive:
        buf = io.BytesIO()
        Image.fromarray(pixels(h, w, seed)).save(buf, "JPEG", quality=quality, progressive=True)
        return buf.getvalue()
    if gray:
        return bytes(sj.encode_jpeg(pixels(h, w, seed, 1), quality=quality, colorspace="GRAY",
                                    colorsubsampling="Gray"))
    return bytes(sj.encode_jpeg(pixels(h, w, seed), quality=quality, colorsubsampling=sub))


def encoded(fmt: str, h: int = 31, w: int = 17, seed: int = 0, mode: str = "RGB") -> bytes:
    arr = pixels(h, w, seed, 1 if mode == "L" else 3)
    im = Image.fromarray(arr[:, :, 0] if mode == "L" else arr)
    if mode not in ("L", "RGB"):
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt)
    return buf.getvalue()


def with_dimensions(data: bytes, h: int, w: int) -> bytes:
    """The JPEG with its frame header (SOF) claiming ``h`` x ``w`` pixels."""
    b = bytearray(data)
    i = 2
    while i < len(b):
        marker = b[i + 1]
        length = int.from_bytes(b[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            b[i + 5 : i + 7] = h.to_bytes(2, "big")
            b[i + 7 : i + 9] = w.to_bytes(2, "big")
            return bytes(b)
        i += 2 + length
    raise AssertionError("no SOF marker")


def reference(data: bytes, mode: str = "RGB") -> np.ndarray:
    """Pillow's decode (libjpeg-turbo for JPEG)."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert(mode))
