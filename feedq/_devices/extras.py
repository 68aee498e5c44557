"""Late imports of the optional array libraries (torch, CuPy, TensorFlow).

Nothing here imports an extra at module import time: ``import feedq`` stays
NumPy-only, and the first call that needs an extra imports it or raises one
:class:`MissingExtraError` that names the pip extra to install.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from feedq.errors import FailedPreconditionError

__all__ = ["MissingExtraError", "loaded", "require"]

# module name -> (pip extra, what the user asked for it)
_EXTRAS = {
    "torch": "torch",
    "cupy": "cupy",
    "tensorflow": "tf",
}


class MissingExtraError(FailedPreconditionError, ImportError):
    """An optional dependency (an "extra") is not installed.

    Raised on first use of a feature that needs torch, CuPy or TensorFlow when
    that library cannot be imported; the message names the ``pip install``
    command. Also an ``ImportError``, so ``except ImportError`` catches it.
    Not raised at ``import feedq``.
    """

    @classmethod
    def for_module(cls, module: str, feature: str) -> MissingExtraError:
        """The error for ``feature`` needing ``module``, naming its pip extra.

        For scripts that import an extra themselves::

            try:
                import torch
            except ImportError:
                sys.exit(str(feedq.MissingExtraError.for_module("torch", "this script")))

        Args:
            module: ``"torch"``, ``"cupy"``, ``"tensorflow"`` (or another module).
            feature: what needs it, for the message.
        """
        extra = _EXTRAS.get(module, module)
        return cls(f"{feature} needs {module}, which is not installed: "
                   f'pip install "feedq[{extra}]"')


def require(module: str, feature: str) -> ModuleType:
    """Imports ``module`` or raises :class:`MissingExtraError` naming its extra.

    Args:
        module: ``"torch"``, ``"cupy"`` or ``"tensorflow"``.
        feature: what needs it, for the message (e.g. ``"DeviceFeeder(output='torch')"``).

    Raises:
        MissingExtraError: the module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError.for_module(module, feature) from exc


def loaded(module: str) -> ModuleType | None:
    """The module if something already imported it, else ``None`` (never imports)."""
    return sys.modules.get(module)
