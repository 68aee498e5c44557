"""Build of feedq's optional C core (feedq/_native/_core.c).

Everything else about the package is in pyproject.toml. The extension is
optional: when it does not compile (no compiler, an unusual platform), the
install goes on and feedq uses its pure-Python twin (``feedq._native.CORE``
says which). In a checkout: ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("feedq._native._core", ["feedq/_native/_core.c"], optional=True),
    ],
)
