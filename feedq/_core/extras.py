"""Optional packages that more than one feedq package loads late.

``zstandard`` (ZSTD compression) is read by the readers and by the CLI's
format detection (``feedq.cli._formats``); both import it here on first
use, so a missing extra gives the same one clear message everywhere.
"""

from __future__ import annotations

from types import ModuleType

from feedq.errors import MissingExtraError

__all__ = ["zstd_module"]


def zstd_module() -> ModuleType:
    """The ``zstandard`` package, imported on first use.

    Raises:
        MissingExtraError: it is not installed (the message names the ``zstd``
            extra; also an ``UnimplementedError``).
    """
    try:
        import zstandard
    except ImportError as exc:
        raise MissingExtraError(
            "ZSTD compression needs the zstandard package, which is not installed: "
            'pip install "feedq[zstd]"',
            name="zstandard",
        ) from exc
    return zstandard
