"""Encoded images in (one, or a block), decoded images out, with the bad-image policy.

Every decoder takes one encoded image (``bytes``) or a batch of them: a
:class:`~feedq.readers.RecordBlock` (the records stay in the reader's buffer:
each image is a ``memoryview`` of it, no copy), a list or tuple of bytes, or
a NumPy object column (``parse_example``'s ``image/encoded``). A batch gives
an :class:`ImageBatch`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers import RecordBlock

__all__ = ["BadImage", "ImageBatch", "OnError", "SkippedImage", "as_batch", "run_batch"]

logger = logging.getLogger("feedq.image")

OnError = Literal["raise", "skip"]

#: Pillow's own default limit (``PIL.Image.MAX_IMAGE_PIXELS``): larger images
#: are refused before any pixel is decoded (a decompression bomb).
DEFAULT_MAX_PIXELS = 89_478_485

T = TypeVar("T")


class BadImage(Exception):
    """Internal: one image cannot be decoded (the message says why)."""


@dataclass(frozen=True)
class SkippedImage:
    """An image left out under ``on_error="skip"``.

    Attributes:
        index: its row in the input batch.
        key: the record's key (``b"file:3"`` for a reader's block), or None.
        message: why it was left out.
    """

    index: int
    key: bytes | None
    message: str


@dataclass(frozen=True, eq=False)
class ImageBatch:
    """The decoded images of one batch.

    Attributes:
        images: a ``[k, H, W, C]`` uint8 array when every image has one
            shape (the fused crops, or ``decode_*(..., size=...)``), else a
            list of ``k`` arrays ``[h, w, c]``.
        index: int64 ``[k]``: the row of the input each image comes from
            (``arange(n)`` unless images were skipped): ``labels[batch.index]``
            keeps labels aligned.
        skipped: the images left out under ``on_error="skip"``, in order.
    """

    images: Any
    index: np.ndarray
    skipped: tuple[SkippedImage, ...] = ()

    def __len__(self) -> int:
        return int(self.index.shape[0])


@dataclass(frozen=True)
class _Batch:
    items: Sequence[Any]  # bytes-like, one per image
    keys: Callable[[], np.ndarray] | None  # the records' keys, made on demand


def as_batch(contents: Any, keys: Any = None) -> _Batch | None:
    """The images of a batch, or None when ``contents`` is one image.

    ``keys`` (one per image, e.g. ``block.keys()`` of the TFRecord block a
    column of encoded images was parsed from) name the images in errors and
    seed their crops; a RecordBlock brings its own.
    """
    if isinstance(contents, (bytes, bytearray, memoryview, np.bytes_)):
        return None
    if isinstance(contents, np.ndarray) and contents.ndim == 0:
        return None
    if keys is not None:
        inner = as_batch(contents)
        if inner is None:
            raise InvalidArgumentError("keys= names the images of a batch, not one image")
        given = np.empty(len(np.asarray(keys, dtype=object).reshape(-1)), dtype=object)
        given[:] = [k.encode() if isinstance(k, str) else bytes(k)
                    for k in np.asarray(keys, dtype=object).reshape(-1).tolist()]
        if given.shape[0] != len(inner.items):
            raise InvalidArgumentError(
                f"keys= has {given.shape[0]} keys for a batch of {len(inner.items)} images"
            )
        return _Batch(inner.items, lambda: given)
    if isinstance(contents, RecordBlock):
        view = memoryview(contents.data)
        items = [view[s:e] for s, e in zip(contents.starts.tolist(), contents.ends.tolist())]
        return _Batch(items, contents.keys)
    if isinstance(contents, np.ndarray):
        if contents.ndim != 1:
            raise InvalidArgumentError(
                f"a batch of encoded images must be 1-D, got shape {contents.shape}"
            )
        return _Batch(list(contents.tolist()), None)
    if isinstance(contents, (list, tuple)):
        return _Batch(list(contents), None)
    raise TypeError(
        "contents must be bytes, a RecordBlock, a list of bytes or a 1-D object array, "
        f"got {type(contents).__name__}"
    )


def one_image(contents: Any) -> Any:
    """The bytes-like of a single image (a 0-d array gives its item)."""
    if isinstance(contents, np.ndarray):
        contents = contents.item()
    if isinstance(contents, str):
        raise TypeError("encoded image must be bytes, not str")
    return contents


def describe(batch: _Batch, i: int) -> tuple[bytes | None, str]:
    """The key of image ``i`` and how an error names it."""
    if batch.keys is None:
        return None, f"image {i} of the batch"
    key = bytes(batch.keys()[i])
    return key, f"image {i} of the batch ({key.decode('utf-8', 'backslashreplace')})"


def run_batch(
    batch: _Batch, decode: Callable[[int, Any], T], on_error: OnError
) -> tuple[list[T], np.ndarray, tuple[SkippedImage, ...]]:
    """``decode(i, item)`` for each image: results, their rows, the skipped.

    A :class:`BadImage` raises :class:`InvalidArgumentError` naming the image
    (its row and key), or with ``on_error="skip"`` is logged on the
    ``feedq.image`` logger and left out.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    out: list[T] = []
    rows: list[int] = []
    skipped: list[SkippedImage] = []
    for i, item in enumerate(batch.items):
        try:
            out.append(decode(i, item))
        except BadImage as exc:
            key, where = describe(batch, i)
            if on_error == "raise":
                raise InvalidArgumentError(f"{where}: {exc}") from None
            logger.warning("skipped %s: %s", where, exc)
            skipped.append(SkippedImage(i, key, str(exc)))
            continue
        rows.append(i)
    return out, np.asarray(rows, dtype=np.int64), tuple(skipped)


def bad(message: str, cause: BaseException | None = None) -> BadImage:
    """A :class:`BadImage` whose message adds the codec's own words."""
    if cause is not None and str(cause):
        message = f"{message} ({cause})"
    return BadImage(message)
