"""Images: decoders under TF1's names, the standard augmentations, fused batch crops.

Decoders take one encoded image or a batch (a reader's
:class:`~feedq.readers.RecordBlock`, a list of bytes, an object column) and
give arrays, or an :class:`ImageBatch` for a batch; a bad image raises
``InvalidArgumentError`` naming its row and key, or is skipped and listed
with ``on_error="skip"``. JPEG decoding is libjpeg-turbo's (simplejpeg),
with the GIL released; PNG, GIF and BMP are Pillow's. Both come with the
``image`` extra (``pip install "feedq[image]"``); without it the first
decode raises ``MissingExtraError``.

The fused batch crops are the fast path of a training input pipeline::

    block = reader.read_block(filename_queue, 256)
    batch = feedq.image.decode_random_resized_crop(block, 224, seed=7, epoch=epoch)
    batch.images            # [k, 224, 224, 3] uint8
    batch.index             # rows of the block they come from

Normalisation can wait for the device: :class:`ToDeviceFloat` is the
``device_transform=`` of a :class:`~feedq.devices.DeviceFeeder`, so host
memory and the copy to the device stay uint8.

See ``docs/images.md``.
"""

from __future__ import annotations

from feedq.image._augment import (
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
from feedq.image._batch import DEFAULT_MAX_PIXELS, ImageBatch, SkippedImage
from feedq.image._crop import (
    RESAMPLE,
    decode_random_resized_crop,
    decode_resize_center_crop,
    element_seeds,
    random_resized_crop_params,
)
from feedq.image._decode import (
    decode_and_crop_jpeg,
    decode_bmp,
    decode_gif,
    decode_image,
    decode_jpeg,
    decode_png,
    extract_jpeg_shape,
    image_format,
)
from feedq.image._extras import JPEG_CROP
from feedq.image._folders import ImageFolder, image_folder
from feedq.image._todevice import ToDeviceFloat

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ImageBatch",
    "ImageFolder",
    "JPEG_CROP",
    "RESAMPLE",
    "ResizeMethod",
    "SkippedImage",
    "ToDeviceFloat",
    "central_crop",
    "decode_and_crop_jpeg",
    "decode_bmp",
    "decode_gif",
    "decode_image",
    "decode_jpeg",
    "decode_png",
    "decode_random_resized_crop",
    "decode_resize_center_crop",
    "element_seeds",
    "extract_jpeg_shape",
    "image_folder",
    "image_format",
    "normalize",
    "per_image_standardization",
    "random_flip_left_right",
    "random_flip_up_down",
    "random_resized_crop_params",
    "resize",
    "resize_images",
    "sample_distorted_bounding_box",
]

for _name in __all__:
    _obj = globals()[_name]
    try:
        _obj.__module__ = __name__
    except (AttributeError, TypeError):
        pass
del _name, _obj
