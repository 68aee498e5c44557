"""The image extra (``pip install "feedq[image]"``): simplejpeg and Pillow, loaded late.

``import feedq.image`` needs neither; the first decode imports them here, so
a missing package gives one clear :class:`~feedq.errors.MissingExtraError`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from feedq.errors import MissingExtraError

__all__ = ["JPEG_CROP", "jpegcrop", "pil_image", "simplejpeg_module"]


def simplejpeg_module() -> ModuleType:
    """``simplejpeg`` (libjpeg-turbo, decodes with the GIL released).

    Raises:
        MissingExtraError: it is not installed (names the ``image`` extra).
    """
    try:
        return importlib.import_module("simplejpeg")
    except ImportError as exc:
        raise MissingExtraError.for_module("simplejpeg", "JPEG decoding") from exc


def pil_image() -> ModuleType:
    """``PIL.Image`` (Pillow: PNG, GIF, BMP, resizing, and JPEG fallbacks).

    Raises:
        MissingExtraError: it is not installed (names the ``image`` extra).
    """
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingExtraError.for_module("PIL", "image decoding and resizing") from exc
    return Image


def _load_jpegcrop() -> Any:
    if os.environ.get("FEEDQ_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module("feedq.image._jpegcrop")
    except ImportError:
        return None


_JPEGCROP = _load_jpegcrop()
#: ``"native"`` when JPEG windows are decoded by the compiled cropped decoder
#: (``feedq/image/_jpegcrop.c`` on libjpeg-turbo: rows outside a window are
#: only entropy-decoded, columns beside it never inverse-transformed), ``"python"``
#: when by a full decode (simplejpeg) and a view of the window: the
#: extension is not built, or ``FEEDQ_PURE_PYTHON=1``. Same pixels either way.
JPEG_CROP = "python" if _JPEGCROP is None else "native"


def jpegcrop() -> Any:
    """The native cropped JPEG decoder module, or None (see :data:`JPEG_CROP`)."""
    return _JPEGCROP
