"""The image extra (``pip install "feedq[image]"``): simplejpeg and Pillow, loaded late.

``import feedq.image`` needs neither; the first decode imports them here, so
a missing package gives one clear :class:`~feedq.errors.MissingExtraError`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from feedq.errors import MissingExtraError

__all__ = ["pil_image", "simplejpeg_module"]


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
