"""Late imports of the optional array libraries (torch, CuPy, TensorFlow).

Nothing here imports an extra at module import time: ``import feedq`` stays
NumPy-only, and the first call that needs an extra imports it or raises one
:class:`~feedq.errors.MissingExtraError` that names the pip extra to install.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from feedq.errors import MissingExtraError

__all__ = ["loaded", "require"]


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
