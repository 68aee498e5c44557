"""Build of feedq's optional C extensions.

* feedq/_native/_core.c: the native core (``feedq._native.CORE`` says
  whether it is in use);
* feedq/image/_jpegcrop.c: cropped JPEG decoding on libjpeg-turbo (built
  only where its headers are installed, e.g. ``libjpeg-turbo8-dev`` or
  ``libjpeg62-turbo-dev``; ``feedq.image.JPEG_CROP`` says whether it is in use).

Everything else about the package is in pyproject.toml. Both extensions are
optional: when one does not compile (no compiler, no libjpeg headers, an
unusual platform), the install goes on and feedq uses the pure-Python twin.
In a checkout: ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("feedq._native._core", ["feedq/_native/_core.c"], optional=True),
        Extension("feedq.image._jpegcrop", ["feedq/image/_jpegcrop.c"], libraries=["jpeg"],
                  optional=True),
    ],
)
